#!/usr/bin/env bash
# HTTP figures for the gateway (release build), on loopback with wrk:
#   GET hit of a 1 KiB value (req/s), GET hit of a 1 MiB value (GB/s), PUT of 1 MiB (MB/s).
# Usage: bench/http.sh [seconds per run]   (make bench)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
command -v wrk >/dev/null || { echo "bench: installing wrk" >&2; apt-get install -y -qq wrk >/dev/null; }
bin=target/release/rasa-gateway
[ -x "$bin" ] || cargo build --release --locked -p rasa-gateway

tmp=$(mktemp -d)
# Every PUT is a new version and nothing is reclaimed yet, so give the PUT run room.
"$bin" --listen 127.0.0.1:0 --memory 16GiB --max-object-size 2MiB >"$tmp/out" 2>"$tmp/err" &
pid=$!
trap 'kill $pid 2>/dev/null; rm -rf "$tmp"' EXIT
while ! grep -q listening "$tmp/out"; do sleep 0.05; done
url=$(sed -n 's/.*listening on //p' "$tmp/out")

head -c 1024 /dev/urandom >"$tmp/1k"
head -c 1048576 /dev/urandom >"$tmp/1m"
curl -sf -T "$tmp/1k" "$url/v1/objects/bench/1k" >/dev/null
curl -sf -T "$tmp/1m" "$url/v1/objects/bench/1m" >/dev/null

cat >"$tmp/put.lua" <<LUA
wrk.method = "PUT"
local f = io.open("$tmp/1m", "rb"); wrk.body = f:read("*a"); f:close()
wrk.headers["Content-Type"] = "application/octet-stream"
LUA

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "## GET 1 KiB: wrk -t2 -c64 -d${secs}s $url/v1/objects/bench/1k"
wrk -t2 -c64 -d"${secs}s" --latency "$url/v1/objects/bench/1k" | grep -E "Requests/sec|Transfer/sec|50%|99%|Non-2xx"
echo "## GET 1 MiB: wrk -t2 -c16 -d${secs}s $url/v1/objects/bench/1m"
wrk -t2 -c16 -d"${secs}s" --latency "$url/v1/objects/bench/1m" | grep -E "Requests/sec|Transfer/sec|50%|99%|Non-2xx"
echo "## PUT 1 MiB: wrk -t2 -c8 -d${secs}s -s put.lua $url/v1/objects/bench/put"
wrk -t2 -c8 -d"${secs}s" --latency -s "$tmp/put.lua" "$url/v1/objects/bench/put" | grep -E "Requests/sec|50%|99%|Non-2xx"
echo "(PUT MB/s = Requests/sec x 1.048576)"
