#!/usr/bin/env bash
# Model weights (issue 48), in one run: bench/weights_bench.py against a release gateway
# serving both fast paths and reading through from s3s-fs (an S3 server over a directory
# under /var/tmp, which also holds the files the local-disk rows read). Prints Markdown;
# `make bench` puts it in bench/results.md.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q --release --locked -p rasa-gateway --bins >&2
./scripts/python.sh --release >&2
.venv/bin/pip install -q --disable-pip-version-check -r bench/requirements-python.txt >&2
tmp=$(mktemp -d)
work=$(mktemp -d /var/tmp/rasa-weights-bench.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp" "$work"; }
trap cleanup EXIT
mkdir -p "$work/s3/weights"
NO_COLOR=1 RUST_LOG=s3s_fs=info s3s-fs --host 127.0.0.1 --port 0 "$work/s3" >"$tmp/s3s.out" 2>/dev/null &
pids+=($!)
# Each server prints its address once it listens; wait for those lines (bounded).
first_line() { timeout 30 sed -n "/$2/{s/.*$2//p;q}" <(tail -F "$1"); }
s3=$(first_line "$tmp/s3s.out" "server is running at ") || true
[ -n "$s3" ] || { echo "bench/weights: s3s-fs did not start" >&2; exit 1; }
RUST_LOG=warn target/release/rasa-gateway --listen 127.0.0.1:0 --memory 3GiB --max-object-size 512MiB \
  --fast-path on --fabric-provider 'tcp;ofi_rxm,shm' \
  --origin s3://weights/ --s3-endpoint "$s3" --s3-anonymous >"$tmp/gw.out" 2>"$tmp/gw.err" &
pids+=($!)
url=$(first_line "$tmp/gw.out" "listening on ") || true
[ -n "$url" ] || { echo "bench/weights: the gateway did not start:" >&2; cat "$tmp/gw.err" >&2; exit 1; }
.venv/bin/python bench/weights_bench.py "$url" "$s3" "$work/s3/weights"
