#!/usr/bin/env bash
# Fast path vs HTTP via the SDK (release builds), plus the gateway's idle CPU with the
# fabric progress thread running. Usage: bench/fastpath.sh [provider]   (make bench)
set -euo pipefail
cd "$(dirname "$0")/.."
provider=${1:-tcp;ofi_rxm}
cargo build --release --locked -p rasa-gateway -p rasa-client --examples --bins >/dev/null 2>&1 || \
  cargo build --release --locked -p rasa-gateway -p rasa-client --examples --bins
tmp=$(mktemp -d)
target/release/rasa-gateway --listen 127.0.0.1:0 --fast-path on --fabric-provider "$provider" \
  --memory 4GiB >"$tmp/out" 2>"$tmp/err" &
pid=$!
trap 'kill $pid 2>/dev/null; rm -rf "$tmp"' EXIT
while ! grep -q listening "$tmp/out"; do sleep 0.05; done
url=$(sed -n 's/.*listening on //p' "$tmp/out")

ticks() { awk '{print $14+$15}' "/proc/$pid/stat"; }
t0=$(ticks); sleep 10; t1=$(ticks)
echo "gateway idle CPU over 10 s with the progress thread ($provider): $(( (t1 - t0) * 10 )) ms of CPU ($(awk "BEGIN{print ($t1-$t0)/10}") %)"
echo "## target/release/examples/fastpath_bench $url $pid"
target/release/examples/fastpath_bench "$url" "$pid"
