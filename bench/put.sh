#!/usr/bin/env bash
# PUT throughput of gateway builds side by side, for costs that only show under load (a
# copy per upload, a check per request): each binary runs with the fast path on
# (tcp;ofi_rxm, as arenas are then registered); rounds of `wrk -t2 -c16 -d3s` PUT bodies
# of each size over 1,000 keys (leases of 1 s, so replaced versions are reclaimed and
# memory never fills) against each binary in turn, and req/s is printed per round.
# Usage: bench/put.sh BIN [BIN...]   (a column per binary, a row per size and round; the
# maximum of a column is the least disturbed figure)
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 BIN [BIN...]" >&2; exit 2; }
command -v wrk >/dev/null || { echo "needs wrk (make bench installs it)" >&2; exit 1; }
tmp=$(mktemp -d)
pids=(); urls=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$tmp"' EXIT
for i in $(seq 0 $(($# - 1))); do
  bin=${*:$((i + 1)):1}
  RUST_LOG=warn "$bin" --listen 127.0.0.1:0 --fast-path on --fabric-provider 'tcp;ofi_rxm' \
    --memory 4GiB --lease 1s --lease-grace 200ms >"$tmp/out$i" 2>/dev/null &
  pids+=($!)
  for _ in $(seq 200); do grep -q listening "$tmp/out$i" 2>/dev/null && break; sleep 0.05; done
  urls+=("$(sed -n 's/.*listening on //p' "$tmp/out$i")")
done
for size in 4096 1048576; do
  head -c "$size" /dev/urandom >"$tmp/body"
  cat >"$tmp/put.lua" <<LUA
local f = io.open("$tmp/body", "rb"); local body = f:read("*a"); f:close()
local n = 0
request = function()
  n = n + 1
  return wrk.format("PUT", string.format("/v1/objects/bench/%d", n % 1000), nil, body)
end
LUA
  echo "PUT $size bytes, req/s: $*" | tr ' ' '\t'
  for _ in 1 2 3; do
    for i in $(seq 0 $(($# - 1))); do
      wrk -t2 -c16 -d3s -s "$tmp/put.lua" "${urls[$i]}" | awk '/Requests\/sec/{printf "%s\t", $2}'
    done
    echo
  done
done
