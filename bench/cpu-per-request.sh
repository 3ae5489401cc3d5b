#!/usr/bin/env bash
# Gateway CPU time per small GET, for comparing builds on a noisy machine: each binary
# serves one 1 KiB value; rounds of `wrk -t2 -c64 -d3s` run against each in turn, and
# the gateway's own CPU time (utime+stime from /proc) is divided by the requests served.
# Usage: bench/cpu-per-request.sh BIN [BIN...]   (prints µs per request, a row per round;
# the minimum of a column is the least disturbed figure)
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 BIN [BIN...]" >&2; exit 2; }
command -v wrk >/dev/null || { echo "needs wrk (make bench installs it)" >&2; exit 1; }
tmp=$(mktemp -d)
pids=(); ports=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$tmp"' EXIT
head -c 1024 /dev/urandom >"$tmp/1k"
for i in $(seq 0 $(($# - 1))); do
  bin=${*:$((i + 1)):1}
  RUST_LOG=warn "$bin" --listen 127.0.0.1:0 --fast-path off >"$tmp/out$i" 2>/dev/null &
  pids+=($!)
  for _ in $(seq 200); do grep -q listening "$tmp/out$i" 2>/dev/null && break; sleep 0.05; done
  url=$(sed -n 's/.*listening on //p' "$tmp/out$i")
  ports+=("$url")
  curl -s -o /dev/null -T "$tmp/1k" "$url/v1/objects/k"
done
tck=$(getconf CLK_TCK)
echo "$*" | tr ' ' '\t'
for _ in 1 2 3 4 5; do
  for i in $(seq 0 $(($# - 1))); do
    pid=${pids[$i]}
    t0=$(awk '{print $14+$15}' "/proc/$pid/stat")
    n=$(wrk -t2 -c64 -d3s "${ports[$i]}/v1/objects/k" | awk '/requests in/{print $1}')
    t1=$(awk '{print $14+$15}' "/proc/$pid/stat")
    python3 -c "print(f'{($t1-$t0)/$tck/$n*1e6:.2f}', end='\t')"
  done
  echo
done
