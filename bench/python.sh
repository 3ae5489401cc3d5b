#!/usr/bin/env bash
# The Python SDK next to the Rust SDK and to Python over plain HTTP (bench/python_bench.py),
# release builds, one gateway with the fast path on (tcp;ofi_rxm on loopback). Prints a
# Markdown section; `make bench` includes it in bench/results.md. The gateway serves
# `tcp;ofi_rxm` and `shm` at once: the Python client on its host reads over shm, a second
# one asks for tcp.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q --release --locked --workspace --bins >&2
cargo build -q --release --locked -p rasa-client --example get_into_bench >&2
./scripts/python.sh --release >&2
# s3fs, for pandas through the S3 listener (the bench's only extra).
.venv/bin/pip install -q --disable-pip-version-check -r bench/requirements-python.txt >&2
tmp=$(mktemp -d)
target/release/rasa-gateway s3-key new bench --scopes read,write --file "$tmp/keys" >"$tmp/key" 2>/dev/null
read -r s3_key s3_secret <"$tmp/key"
target/release/rasa-gateway --listen 127.0.0.1:0 --memory 2GiB --fast-path on \
  --fabric-provider 'tcp;ofi_rxm,shm' --s3-listen 127.0.0.1:0 --s3-bucket bench \
  --s3-credentials-file "$tmp/keys" >"$tmp/out" 2>"$tmp/err" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$tmp"' EXIT
# The gateway's first line says it listens; read it as it comes (no polling).
url=$(timeout 30 sed -n '/listening on /{s/.*listening on //p;q}' <(tail -F "$tmp/out"))
[ -n "$url" ] || { echo "bench/python: the gateway did not start:" >&2; cat "$tmp/err" >&2; exit 1; }
echo "## Python SDK: get_into, one read at a time into a reused buffer (\`bench/python.sh\`)"
echo
echo "rasa_client built with \`maturin develop --release\`; the Rust SDK's figures from \`client-sdk/examples/get_into_bench.rs\`, same gateway, same run."
echo
s3=$(timeout 30 sed -n '/S3 on /{s/.*S3 on //p;q}' <(tail -F "$tmp/out"))
.venv/bin/python bench/python_bench.py "$url" target/release/examples/get_into_bench "$s3" "$s3_key" "$s3_secret"
