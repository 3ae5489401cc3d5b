#!/usr/bin/env bash
# One-sided range reads, as a Markdown section on stdout (`make bench` puts it in
# bench/results.md): 1 MiB and 64 KiB ranges at random offsets of a 256 MiB value, one-sided
# vs HTTP, for several block sizes; and what the block table costs at ingest (PUT 1 MiB
# with and without it, rounds alternating between two gateways). Release builds, loopback.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-5}
./scripts/setup.sh --bench # what the benchmarks compare with, when missing
cargo build --release --locked -p rasa-gateway -p rasa-client --bins --examples >/dev/null 2>&1
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT
start() { # name block-size → the gateway's URL in $url, its pid in $pid
  "$PWD/target/release/rasa-gateway" --listen 127.0.0.1:0 --memory 2GiB --max-object-size 512MiB \
    --fast-path on --block-size "$2" >"$tmp/$1.out" 2>"$tmp/$1.err" &
  pid=$!; pids+=($pid)
  while ! grep -q listening "$tmp/$1.out"; do
    kill -0 "$pid" 2>/dev/null || { echo "bench: the gateway did not start: $(cat "$tmp/$1.err")" >&2; exit 1; }
    sleep 0.05
  done
  url=$(sed -n 's/.*listening on //p' "$tmp/$1.out")
}
head -c 268435456 /dev/urandom >"$tmp/big"
head -c 1048576 /dev/urandom >"$tmp/1m"
bench="$PWD/target/release/examples/range_bench"
rows=""
for bs in 16KiB 64KiB 256KiB 1MiB; do
  start "gw-$bs" "$bs"; gw=$url
  curl -sf -T "$tmp/big" "$gw/v1/objects/big" >/dev/null
  if [ "$bs" = 64KiB ]; then rows+=$("$bench" "$gw" big "$bs")$'\n'
  else rows+=$("$bench" "$gw" big "$bs" fabric-only)$'\n'; fi
  kill "$pid"; wait "$pid" 2>/dev/null || true
done

# Ingest: the same PUTs into a gateway with the table (the default) and one without.
cat >"$tmp/put.lua" <<LUA
wrk.method = "PUT"
local f = io.open("$tmp/1m", "rb"); wrk.body = f:read("*a"); f:close()
LUA
start with 64KiB; with=$url
start without 0; without=$url
put() { wrk -t2 -c8 -d"${SECS}s" -s "$tmp/put.lua" "$1/v1/objects/put" | awk '/Requests\/sec/ {print $2}'; }
w=(); wo=()
for _ in $(seq "$ROUNDS"); do w+=("$(put "$with")"); wo+=("$(put "$without")"); done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
mw=$(median "${w[@]}"); mwo=$(median "${wo[@]}")

echo "## Range reads (\`bench/ranges.sh\`)"
echo
echo "A 256 MiB value; ranges at random offsets, one at a time through \`Client::get_range\`"
echo "(\`target/release/examples/range_bench\`): one-sided reads fetch the header, the covering"
echo "blocks and their table entries together and check every block; HTTP range GETs are not"
echo "checked (the frame checksum covers the whole value). 64 KiB ranges: 640 reads; 1 MiB: 200."
echo
echo "| block size | range | path | p50 | p99 | throughput |"
echo "| --- | --- | --- | --- | --- | --- |"
printf '%s' "$rows"
echo
echo "Ingest cost of the table (\`wrk -t2 -c8 -d${SECS}s\` PUT 1 MiB, median of $ROUNDS rounds alternating"
printf 'between the gateways): with 64 KiB blocks %.0f MB/s, without a table (`--block-size 0`) %.0f MB/s (%.2fx).\n' \
  "$(echo "$mw*1.048576" | bc -l)" "$(echo "$mwo*1.048576" | bc -l)" "$(echo "$mw/$mwo" | bc -l)"
