#!/usr/bin/env bash
# Large one-sided reads under libfabric provider settings (`make bench`; or alone:
# bench/tail.sh > out.md). For each setting, a gateway and a reader started with it: 200
# reads of 16 MiB and 1000 of 1 MiB, one at a time, landing in registered memory
# (client-sdk/examples/tail_bench.rs), and the gateway's RSS before and after. Two rounds,
# settings alternating, so that the machine's drift hits all of them alike.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q --release --locked -p rasa-gateway -p rasa-client --example tail_bench
tmp=$(mktemp -d)
gw=
cleanup() { [ -n "$gw" ] && kill "$gw" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
rss() { awk '/VmRSS/ {printf "%.0f", $2/1024}' "/proc/$1/status"; }
settings=(
  "(Rasa's defaults)"
  "FI_TCP_ZEROCOPY_SIZE=65536"
  "FI_OFI_RXM_COMP_PER_PROGRESS=64"
  "FI_TCP_STAGING_SBUF_SIZE=0 FI_TCP_PREFETCH_RBUF_SIZE=0"
  "FI_OFI_RXM_ENABLE_DIRECT_SEND=1"
  "FI_OFI_RXM_BUFFER_SIZE=4096"
)
echo "| setting (gateway and reader) | round | 16 MiB p50 / p99 / max | 16 MiB GB/s | 1 MiB p50 / p99 | gateway RSS idle → after |"
echo "| --- | --- | --- | --- | --- | --- |"
for round in 1 2; do
  for s in "${settings[@]}"; do
    vars=(); [[ $s == FI_* ]] && read -ra vars <<<"$s"
    env "${vars[@]}" ./target/release/rasa-gateway --listen 127.0.0.1:0 --memory 1GiB \
      --max-object-size 32MiB --fast-path on >"$tmp/out" 2>"$tmp/err" &
    gw=$!
    until grep -q listening "$tmp/out"; do
      kill -0 "$gw" 2>/dev/null || { cat "$tmp/err" >&2; exit 1; }
      sleep 0.05
    done
    url=$(sed -n 's/.*listening on //p' "$tmp/out")
    idle=$(rss "$gw")
    read -r a50 _ a99 amax agbps < <(env "${vars[@]}" ./target/release/examples/tail_bench "$url" 16 200)
    read -r b50 _ b99 _ _ < <(env "${vars[@]}" ./target/release/examples/tail_bench "$url" 1 1000)
    after=$(rss "$gw")
    kill "$gw"; wait "$gw" 2>/dev/null || true; gw=
    echo "| \`$s\` | $round | $a50 / $a99 / $amax µs | $agbps | $b50 / $b99 µs | $idle → $after MiB |"
  done
done
