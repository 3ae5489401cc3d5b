#!/usr/bin/env bash
# NIXL's agent against Rasa (issue 64): Rasa's own NIXL plugin (libplugin_RASA.so, release
# build) over shm, over tcp;ofi_rxm and over HTTP, and NIXL's OBJ plugin through the S3
# listener, each route in a process of its own (bench/nixl_bench.py) against one release
# gateway, one run. Prints Markdown; `make bench` puts it in bench/results.md.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q --release --locked -p rasa-gateway --bins >&2
./scripts/engines.sh >&2
./scripts/nixl-plugin.sh --release >&2
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT
read -r key_id secret < <(target/release/rasa-gateway s3-key new bench --scopes read,write --file "$tmp/keys")
start() { # start NAME PROVIDER: a gateway; its URL and S3 address in $tmp/NAME.url, .s3
  RUST_LOG=warn target/release/rasa-gateway --listen 127.0.0.1:0 --memory 6GiB --max-object-size 64MiB \
    --fast-path on --fabric-provider "$2" --s3-listen 127.0.0.1:0 --s3-bucket data \
    --s3-credentials-file "$tmp/keys" >"$tmp/$1.out" 2>"$tmp/$1.err" &
  pids+=($!)
  timeout 30 sed -n '/ S3 on /{s/.* S3 on http:\/\///p;q}' <(tail -F "$tmp/$1.out") >"$tmp/$1.s3" || true
  sed -n '1{s/.*listening on //p}' "$tmp/$1.out" >"$tmp/$1.url"
  [ -s "$tmp/$1.s3" ] || { echo "bench/nixl: the gateway did not start:" >&2; cat "$tmp/$1.err" >&2; exit 1; }
}
start shm 'tcp;ofi_rxm,shm'
start tcp 'tcp;ofi_rxm'
# NIXL's agent logs INFO lines to standard output: only the table's rows are kept.
py() { PYTHONWARNINGS=ignore "$@" | grep '^|'; }
rounds=${ROUNDS:-5}
echo "## NIXL's agent against Rasa (\`bench/nixl.sh\`)"
echo
echo "GB/s, medians of $rounds rounds, one run; each batch one NIXL transfer, every read checked byte-exact."
echo
echo "| route | write 16 × 16 MiB | read 16 × 16 MiB | write 256 × 64 KiB | read 256 × 64 KiB |"
echo "| --- | --- | --- | --- | --- |"
NIXL_PLUGIN_DIR=target/release/nixl py target/engines-venv/bin/python bench/nixl_bench.py rasa "$(cat "$tmp/shm.url")" required "$rounds" "RASA plugin, shm"
NIXL_PLUGIN_DIR=target/release/nixl py target/engines-venv/bin/python bench/nixl_bench.py rasa "$(cat "$tmp/tcp.url")" required "$rounds" "RASA plugin, tcp;ofi_rxm"
NIXL_PLUGIN_DIR=target/release/nixl py target/engines-venv/bin/python bench/nixl_bench.py rasa "$(cat "$tmp/shm.url")" off "$rounds" "RASA plugin, HTTP"
py target/engines-venv/bin/python bench/nixl_bench.py obj "$(cat "$tmp/shm.s3")" "$key_id:$secret" "$rounds" "OBJ plugin, S3 listener"
