#!/usr/bin/env bash
# The Python SDK next to the Rust SDK and to Python over plain HTTP (bench/python_bench.py),
# release builds, one gateway with the fast path on (tcp;ofi_rxm on loopback). Prints a
# Markdown section; `make bench` includes it in bench/results.md. The gateway serves
# `tcp;ofi_rxm` and `shm` at once: the Python client on its host reads over shm, a second
# one asks for tcp.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q --release --locked -p rasa-gateway -p rasa-client --example get_into_bench >&2
./scripts/python.sh --release >&2
tmp=$(mktemp -d)
target/release/rasa-gateway --listen 127.0.0.1:0 --memory 2GiB --fast-path on \
  --fabric-provider 'tcp;ofi_rxm,shm' >"$tmp/out" 2>"$tmp/err" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$tmp"' EXIT
# The gateway's first line says it listens; read it as it comes (no polling).
url=$(timeout 30 sed -n '/listening on /{s/.*listening on //p;q}' <(tail -f "$tmp/out"))
[ -n "$url" ] || { echo "bench/python: the gateway did not start:" >&2; cat "$tmp/err" >&2; exit 1; }
echo "## Python SDK: get_into, one read at a time into a reused buffer (\`bench/python.sh\`)"
echo
echo "rasa_client built with \`maturin develop --release\`; the Rust SDK's figures from \`client-sdk/examples/get_into_bench.rs\`, same gateway, same run."
echo
.venv/bin/python bench/python_bench.py "$url" target/release/examples/get_into_bench
