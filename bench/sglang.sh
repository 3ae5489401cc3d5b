#!/usr/bin/env bash
# SGLang HiCache's L3 through Rasa over shm (issue 64): bench/sglang_bench.py in the
# engines' virtualenv (scripts/engines.sh), rasa_client built --release into it, against a
# release gateway. Prints Markdown; `make bench` puts it in bench/results.md.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q --release --locked -p rasa-gateway --bins >&2
./scripts/engines.sh >&2
VIRTUAL_ENV="$PWD/target/engines-venv" target/engines-venv/bin/maturin develop -q --release --locked -m python/Cargo.toml >&2
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT
RUST_LOG=warn target/release/rasa-gateway --listen 127.0.0.1:0 --memory 8GiB --max-object-size 64MiB \
  --fast-path on --fabric-provider 'tcp;ofi_rxm,shm' >"$tmp/gw.out" 2>"$tmp/gw.err" &
pids+=($!)
url=$(timeout 30 sed -n '/listening on /{s/.*listening on //p;q}' <(tail -F "$tmp/gw.out")) || true
[ -n "$url" ] || { echo "bench/sglang: the gateway did not start:" >&2; cat "$tmp/gw.err" >&2; exit 1; }
echo "## SGLang HiCache's L3 through Rasa (\`bench/sglang.sh\`)"
echo
PYTHONWARNINGS=ignore target/engines-venv/bin/python bench/sglang_bench.py "$url" "${ROUNDS:-5}"
