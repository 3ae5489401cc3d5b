#!/usr/bin/env bash
# The disk tier (`--disk`), as a Markdown section on stdout (`make bench` puts it in
# bench/results.md): 1 MiB disk-tier hits next to nginx serving the same bytes from files;
# restart to serving with DISK_SMALL small values and with DISK_BIG_GIB GiB of 1 MiB
# values on disk, page cache warm and dropped; index memory per value on disk.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-5}
DISK_SMALL=${DISK_SMALL:-1000000}
DISK_BIG_GIB=${DISK_BIG_GIB:-20}
./scripts/setup.sh --bench # wrk and nginx, when missing
cargo build --release --locked -p rasa-gateway --bins >/dev/null 2>&1
tmp=$(mktemp -d -p "${DISK_BENCH_DIR:-/var/tmp}")
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
metric() { curl -sf "$1/metrics" | awk -v n="$2" '$1 == n {print $2}'; }
gw_bin="$PWD/target/release/rasa-gateway"
# Starts a gateway (args...): its URL in $gw once it listens, its pid in $gw_pid, the
# seconds from exec to the listening line in $took.
start() {
  local out="$tmp/gw.$RANDOM" t0; t0=$(date +%s.%N)
  "$gw_bin" --listen 127.0.0.1:0 "$@" >"$out" 2>"$out.err" &
  gw_pid=$!; pids+=("$gw_pid")
  until grep -q listening "$out"; do
    kill -0 "$gw_pid" 2>/dev/null || { cat "$out.err" >&2; exit 1; }
    sleep 0.005
  done
  took=$(echo "$(date +%s.%N) - $t0" | bc -l)
  gw=$(sed -n 's/.*listening on //p' "$out")
}
stop() { kill -TERM "$1"; while kill -0 "$1" 2>/dev/null; do sleep 0.05; done; }
# PUTs at least N values of SIZE bytes as keys PREFIX-<thread>-<n> with wrk (2 threads,
# 8 connections), stopped once the gateway has stored N more versions.
load() { # url prefix n size
  head -c "$4" /dev/urandom >"$tmp/putbody"
  cat >"$tmp/load.lua" <<LUA
local counter = 0
function setup(t) counter = counter + 1; t:set("id", counter) end
local n = 0
function init() local f = io.open("$tmp/putbody", "rb"); wrk.body = f:read("*a"); f:close(); wrk.method = "PUT" end
function request() n = n + 1; return wrk.format(nil, "/v1/objects/$2-" .. id .. "-" .. n) end
LUA
  local before; before=$(metric "$1" rasa_versions_stored_total); before=${before%.*}
  wrk -t2 -c8 -d3600s -s "$tmp/load.lua" "$1" >/dev/null &
  local wrk_pid=$!
  until [ "$(metric "$1" rasa_versions_stored_total | cut -d. -f1)" -ge $(( before + $3 )) ]; do sleep 0.1; done
  kill "$wrk_pid"; wait "$wrk_pid" 2>/dev/null || true
}
wrk_rps() { # url script
  local out=()
  for _ in $(seq "$ROUNDS"); do
    out+=("$(wrk -t2 -c16 -d"${SECS}s" -s "$2" "$1" | awk '/Requests\/sec/ {print $2} /Non-2xx/ {print "bad", $NF > "/dev/stderr"}')")
  done
  printf '%s\n' "${out[@]}" | median
}

echo "disk tier: hits vs nginx..." >&2
# --- 1 MiB disk-tier hits next to nginx: 128 values of 1 MiB, memory holding none of them.
mkdir -p "$tmp/www" "$tmp/hits"; chmod 755 "$tmp" "$tmp/www"
start --memory 32MiB --arena-size 4MiB --max-object-size 2MiB --lease 1s --lease-grace 100ms \
  --disk "$tmp/hits" --disk-size 2GiB --disk-admit never
hits_pid=$gw_pid
for i in $(seq 1 128); do head -c 1048576 /dev/urandom >"$tmp/www/$i"; done
chmod 644 "$tmp/www/"*
for i in $(seq 1 128); do curl -sf -T "$tmp/www/$i" "$gw/v1/objects/d/$i" >/dev/null; done
# Push the last of them out of memory too.
for i in $(seq 1 64); do curl -sf -T "$tmp/www/1" "$gw/v1/objects/filler/$i" >/dev/null; done
cat >"$tmp/rotate.lua" <<'LUA'
local i = 0
request = function() i = i % 128 + 1; return wrk.format("GET", PREFIX .. i) end
LUA
sed 's#PREFIX#"/v1/objects/d/"#' "$tmp/rotate.lua" >"$tmp/rasa.lua"
sed 's#PREFIX#"/"#' "$tmp/rotate.lua" >"$tmp/nginx.lua"
cmp -s <(curl -sf "$gw/v1/objects/d/7") "$tmp/www/7" || { echo "bench: the disk tier served other bytes" >&2; exit 1; }
port=$(free_port)
sed -e "s#@TMP@#$tmp#g" -e "s#@PORT@#$port#g" -e "s#@WORKERS@#$(nproc)#g" bench/nginx.conf.in >"$tmp/nginx.conf"
nginx -c "$tmp/nginx.conf" -p "$tmp" &
pids+=($!)
until curl -sf "http://127.0.0.1:$port/1" >/dev/null; do sleep 0.05; done
mem_before=$(metric "$gw" rasa_disk_hits_total)
rasa_rps=$(wrk_rps "$gw" "$tmp/rasa.lua")
nginx_rps=$(wrk_rps "http://127.0.0.1:$port" "$tmp/nginx.lua")
disk_hits=$(( $(metric "$gw" rasa_disk_hits_total | cut -d. -f1) - ${mem_before%.*} ))
stop "$hits_pid"

echo "disk tier: restart with $DISK_SMALL small values..." >&2
# --- Restart with many small values: memory holds few, the rest spilled; a clean stop
# writes down what memory held, so all are on disk.
small_dir="$tmp/small"
start --memory 256MiB --arena-size 16MiB --max-object-size 1MiB --lease 1s --lease-grace 100ms --disk "$small_dir" --disk-size 4GiB
idle_rss=$(awk '/VmRSS/ {print $2}' "/proc/$gw_pid/status")
t0=$(date +%s.%N)
load "$gw" s "$DISK_SMALL" 100
small_load_s=$(echo "$(date +%s.%N) - $t0" | bc -l)
stop "$gw_pid"
start --memory 256MiB --arena-size 16MiB --max-object-size 1MiB --disk "$small_dir" --disk-size 4GiB; small_start=$took
small_values=$(metric "$gw" rasa_disk_recovered_values)
small_recovery=$(metric "$gw" rasa_disk_recovery_seconds)
small_index=$(metric "$gw" rasa_disk_index_bytes)
small_bytes=$(metric "$gw" rasa_disk_bytes)
small_rss=$(awk '/VmRSS/ {print $2}' "/proc/$gw_pid/status")
curl -sf -o /dev/null "$gw/v1/objects/s-1-100" || { echo "bench: a recovered small value is missing" >&2; exit 1; }
stop "$gw_pid"
sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null && cold_ok=1 || cold_ok=0
start --memory 256MiB --arena-size 16MiB --max-object-size 1MiB --disk "$small_dir" --disk-size 4GiB; small_cold=$took
stop "$gw_pid"
rm -rf "$small_dir"

echo "disk tier: restart with $DISK_BIG_GIB GiB of 1 MiB values..." >&2
# --- Restart with DISK_BIG_GIB GiB of 1 MiB values.
big_dir="$tmp/big"
big_n=$(( DISK_BIG_GIB * 1024 ))
start --memory 1GiB --lease 1s --lease-grace 100ms --disk "$big_dir" --disk-size $(( DISK_BIG_GIB + 2 ))GiB
t0=$(date +%s.%N)
load "$gw" b "$big_n" 1048576
big_load_s=$(echo "$(date +%s.%N) - $t0" | bc -l)
stop "$gw_pid"
start --memory 1GiB --disk "$big_dir" --disk-size $(( DISK_BIG_GIB + 2 ))GiB; big_warm=$took
big_values=$(metric "$gw" rasa_disk_recovered_values)
big_recovery=$(metric "$gw" rasa_disk_recovery_seconds)
big_bytes=$(metric "$gw" rasa_disk_bytes)
stop "$gw_pid"
sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
start --memory 1GiB --disk "$big_dir" --disk-size $(( DISK_BIG_GIB + 2 ))GiB; big_cold=$took
curl -sf -o /dev/null "$gw/v1/objects/b-1-100" || { echo "bench: a recovered 1 MiB value is missing" >&2; exit 1; }
stop "$gw_pid"

f() { printf '%.*f' "$1" "$2"; }
echo "## Disk tier (\`bench/disk.sh\`)"
echo
echo "1 MiB values served from the disk tier (\`--disk-admit never\`: every GET reads its record, validates it and sends it; 128 values, none in memory) next to nginx serving the same 128 files (\`sendfile\`); \`wrk -t2 -c16\`, median of $ROUNDS runs of $SECS s. The page cache was warm (the values were just written): both read memory, not the device."
echo
echo "| server | req/s | / nginx |"
echo "| --- | --- | --- |"
echo "| nginx 1.22, files | $(f 0 "$nginx_rps") | 1.00x |"
echo "| Rasa, disk-tier hits ($disk_hits counted by \`rasa_disk_hits_total\`) | $(f 0 "$rasa_rps") | $(f 2 "$(echo "$rasa_rps / $nginx_rps" | bc -l)")x |"
echo
echo "Restart to serving (exec to the listening line, recovery validating every record included):"
echo
echo "| on disk | written in | restart, page cache warm | restart, page cache dropped | recovery alone (warm) |"
echo "| --- | --- | --- | --- | --- |"
echo "| $(f 0 "$small_values") values of 100 B ($(( ${small_bytes%.*} >> 20 )) MiB of segments) | $(f 1 "$small_load_s") s | $(f 2 "$small_start") s | $( [ "$cold_ok" = 1 ] && f 2 "$small_cold" || echo n/a) s | $(f 2 "$small_recovery") s |"
echo "| $(f 0 "$big_values") values of 1 MiB ($(( ${big_bytes%.*} >> 30 )) GiB) | $(f 1 "$big_load_s") s | $(f 2 "$big_warm") s | $( [ "$cold_ok" = 1 ] && f 2 "$big_cold" || echo n/a) s | $(f 2 "$big_recovery") s |"
echo
echo "Memory per value on disk: the index holds $(f 1 "$(echo "$small_index / $small_values" | bc -l)") B a value ($(( ${small_index%.*} >> 20 )) MiB for $(f 0 "$small_values") values: 16 B of entry, the 8-byte key hash and the hash table's control byte and spare capacity); the gateway's RSS after recovering them was $(( (small_rss - idle_rss) >> 10 )) MiB above an idle gateway's."
