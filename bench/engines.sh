#!/usr/bin/env bash
# LMCache's L2 through Rasa (shm, tcp;ofi_rxm, HTTP) next to LMCache's own local-directory
# and redis backends, in one run (issue 47): bench/engines_bench.py in the engines'
# virtualenv (scripts/engines.sh), rasa_client built --release into it, against a release
# gateway serving both fast paths, a directory under /var/tmp and a redis-server.
# Prints Markdown; `make bench` puts it in bench/results.md.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q --release --locked -p rasa-gateway --bins >&2
./scripts/engines.sh >&2
VIRTUAL_ENV="$PWD/target/engines-venv" target/engines-venv/bin/maturin develop -q --release --locked -m python/Cargo.toml >&2
tmp=$(mktemp -d)
fs=$(mktemp -d /var/tmp/rasa-engines-bench.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp" "$fs"; }
trap cleanup EXIT
RUST_LOG=warn target/release/rasa-gateway --listen 127.0.0.1:0 --memory 8GiB --lease 2s --max-object-size 64MiB \
  --fast-path on --fabric-provider 'tcp;ofi_rxm,shm' >"$tmp/gw.out" 2>"$tmp/gw.err" &
pids+=($!)
url=$(timeout 30 sed -n '/listening on /{s/.*listening on //p;q}' <(tail -F "$tmp/gw.out")) || true
[ -n "$url" ] || { echo "bench/engines: the gateway did not start:" >&2; cat "$tmp/gw.err" >&2; exit 1; }
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --save '' --appendonly no --daemonize no >"$tmp/redis.out" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done
redis-cli -p "$port" ping >/dev/null || { echo "bench/engines: redis-server did not start" >&2; exit 1; }
target/engines-venv/bin/python bench/engines_bench.py --gateway "$url" --fs "$fs" --redis "127.0.0.1:$port"
