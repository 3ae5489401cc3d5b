#!/usr/bin/env bash
# `make bench`: Rasa next to what users would otherwise pick, in one run on this machine,
# and bench/results.md with the table. Release builds, loopback, wrk as load generator.
# Rounds: each figure is the median of $ROUNDS runs of $SECS seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-5}
./scripts/setup.sh --bench # what the benchmarks compare with, when missing
cargo build --release --locked -p rasa-gateway -p rasa-cli -p rasa-client --bins --examples >/dev/null
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
# wrk output → numbers: requests/s, bytes/s, p50 and p99 in microseconds.
wrk_run() { # url conns [script]
  local extra=(); [ -n "${3:-}" ] && extra=(-s "$3")
  wrk -t2 -c"$2" -d"${SECS}s" --latency "${extra[@]}" "$1" | python3 -c '
import sys,re
t=sys.stdin.read()
def dur(s):
    v=float(re.match(r"[\d.]+",s).group()); u=s[len(re.match(r"[\d.]+",s).group()):]
    return v*{"us":1,"ms":1e3,"s":1e6}[u]
def size(s):
    v=float(re.match(r"[\d.]+",s).group()); u=s[len(re.match(r"[\d.]+",s).group()):]
    return v*{"B":1,"KB":1024,"MB":1024**2,"GB":1024**3}[u]
rps=float(re.search(r"Requests/sec:\s+([\d.]+)",t).group(1))
bps=size(re.search(r"Transfer/sec:\s+(\S+)",t).group(1))
p50=dur(re.search(r"^\s*50%\s+(\S+)",t,re.M).group(1)); p99=dur(re.search(r"^\s*99%\s+(\S+)",t,re.M).group(1))
bad=re.search(r"Non-2xx or 3xx responses: (\d+)",t)
print(rps,bps,p50,p99,bad.group(1) if bad else 0)'
}
rounds() { # url conns [script] → medians "rps bps p50 p99 non2xx"
  local out=(); for _ in $(seq "$ROUNDS"); do out+=("$(wrk_run "$@")"); done
  for col in 1 2 3 4 5; do printf '%s\n' "${out[@]}" | awk -v c=$col '{print $c}' | median; done | paste -sd' '
}

# --- data
mkdir -p "$tmp/www"; chmod 755 "$tmp" "$tmp/www"
head -c 1024 /dev/urandom >"$tmp/www/1k"; head -c 1048576 /dev/urandom >"$tmp/www/1m"; chmod 644 "$tmp/www/"*

# --- Rasa (fast path on, as deployed)
"$PWD/target/release/rasa-gateway" --listen 127.0.0.1:0 --memory 16GiB --max-object-size 512MiB >"$tmp/rasa.out" 2>"$tmp/rasa.err" &
rasa_pid=$!; pids+=($rasa_pid)
while ! grep -q listening "$tmp/rasa.out"; do sleep 0.05; done
rasa=$(sed -n 's/.*listening on //p' "$tmp/rasa.out")
rasa_idle_rss=$(awk '/VmRSS/ {printf "%.0f", $2/1024}' "/proc/$rasa_pid/status")
curl -sf -T "$tmp/www/1k" "$rasa/v1/objects/bench/1k" >/dev/null
curl -sf -T "$tmp/www/1m" "$rasa/v1/objects/bench/1m" >/dev/null

# --- nginx on the same files
port=$(free_port)
sed -e "s#@TMP@#$tmp#g" -e "s#@PORT@#$port#g" -e "s#@WORKERS@#$(nproc)#g" bench/nginx.conf.in >"$tmp/nginx.conf"
nginx -c "$tmp/nginx.conf" -p "$tmp" &
pids+=($!)
until curl -sf "http://127.0.0.1:$port/1k" >/dev/null; do sleep 0.05; done
nginx_url="http://127.0.0.1:$port"

echo "GET 1 KiB..." >&2
r1k=$(rounds "$rasa/v1/objects/bench/1k" 64); n1k=$(rounds "$nginx_url/1k" 64)
echo "GET 1 MiB..." >&2
r1m=$(rounds "$rasa/v1/objects/bench/1m" 16); n1m=$(rounds "$nginx_url/1m" 16)

echo "PUT 1 MiB..." >&2
cat >"$tmp/put.lua" <<LUA
wrk.method = "PUT"
local f = io.open("$tmp/www/1m", "rb"); wrk.body = f:read("*a"); f:close()
LUA
put=$(rounds "$rasa/v1/objects/bench/put" 8 "$tmp/put.lua")
# Steady state: a budget in use, arenas recycled (their pages resident), as in a cache
# that has run for a while; short leases so that memory comes back within the run.
"$PWD/target/release/rasa-gateway" --listen 127.0.0.1:0 --memory 2GiB --lease 1s --lease-grace 200ms \
  >"$tmp/steady.out" 2>"$tmp/steady.err" &
steady_pid=$!; pids+=($steady_pid)
while ! grep -q listening "$tmp/steady.out"; do sleep 0.05; done
steady=$(sed -n 's/.*listening on //p' "$tmp/steady.out")
wrk_run "$steady/v1/objects/bench/put" 8 "$tmp/put.lua" >/dev/null # fill the budget
put_steady=$(rounds "$steady/v1/objects/bench/put" 8 "$tmp/put.lua")
recycled=$(curl -sf "$steady/metrics" | awk '/^rasa_arenas_recycled_total/ {print $2}')
kill "$steady_pid"
sha=$(cargo bench -q --locked -p rasa-fastpath --bench checksums 2>/dev/null | tee "$tmp/checksums.txt" | awk '/sha256 1 MiB/ {print $4}')
xxh=$(awk '/xxh3-64 frame checksum 1 MiB/ {print $6}' "$tmp/checksums.txt")

echo "fast path vs HTTP via the SDK..." >&2
idle0=$(awk '{print $14+$15}' /proc/$rasa_pid/stat); sleep 5; idle1=$(awk '{print $14+$15}' /proc/$rasa_pid/stat)
"$PWD/target/release/examples/fastpath_bench" "$rasa" "$rasa_pid" >"$tmp/fastpath.md"
echo "concurrent reads through one client..." >&2
"$PWD/target/release/examples/concurrency_bench" "$rasa" "$rasa_pid" >"$tmp/concurrency.md"
RASA_BENCH_ENDPOINTS=1 "$PWD/target/release/examples/concurrency_bench" "$rasa" "$rasa_pid" \
  | grep one-sided >"$tmp/concurrency1.md"
rasa_peak_rss=$(awk '/VmHWM/ {printf "%.0f", $2/1024}' "/proc/$rasa_pid/status")
echo "large reads under provider settings..." >&2
./bench/tail.sh >"$tmp/tail.md"

echo "cold misses via s3s-fs..." >&2
cold=""
if command -v s3s-fs >/dev/null; then
  mkdir -p "$tmp/s3/bucket/cold"
  for i in $(seq 1 30); do head -c 1048576 /dev/urandom >"$tmp/s3/bucket/cold/$i"; done
  RUST_LOG=s3s_fs=info NO_COLOR=1 s3s-fs --host 127.0.0.1 --port 0 --access-key bench --secret-key bench-secret \
    "$tmp/s3" >"$tmp/s3.out" 2>&1 &
  pids+=($!)
  while ! grep -q "server is running at" "$tmp/s3.out"; do sleep 0.05; done
  s3=$(sed -n 's/.*server is running at //p' "$tmp/s3.out" | tr -d '\r' | awk '{print $1}')
  AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench-secret "$PWD/target/release/rasa-gateway" --listen 127.0.0.1:0 \
    --origin s3://bucket/cold --s3-endpoint "$s3" --fast-path off >"$tmp/rc.out" 2>"$tmp/rc.err" &
  pids+=($!)
  while ! grep -q listening "$tmp/rc.out"; do sleep 0.05; done
  rc=$(sed -n 's/.*listening on //p' "$tmp/rc.out")
  timed() { curl -sf -o /dev/null -w '%{time_total}\n' "$@" || { echo "bench: GET $* failed" >&2; exit 1; }; }
  direct=$(for i in $(seq 1 30); do timed -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" --aws-sigv4 "aws:amz:us-east-1:s3" --user bench:bench-secret "$s3/bucket/cold/$i"; done | median)
  miss=$(for i in $(seq 1 30); do timed "$rc/v1/objects/$i"; done | median)
  hit=$(for i in $(seq 1 30); do timed "$rc/v1/objects/$i"; done | median)
  cold=$(printf '| 1 MiB cold miss through Rasa | %.0f µs |\n| 1 MiB direct GET from s3s-fs | %.0f µs |\n| 1 MiB hit after the miss | %.0f µs |\n| miss / direct | %.2fx |' \
    "$(echo "$miss*1000000" | bc -l)" "$(echo "$direct*1000000" | bc -l)" "$(echo "$hit*1000000" | bc -l)" "$(echo "$miss/$direct" | bc -l)")
fi

echo "reads next to nginx, Varnish and memcached, the cluster's forwarding..." >&2
reads=$(SECS=$SECS ROUNDS=$ROUNDS ./bench/reads.sh)
echo "large values and start-up..." >&2
large=$(ROUNDS=$ROUNDS ./bench/large.sh)
echo "range reads..." >&2
ranges=$(SECS=$SECS ROUNDS=$ROUNDS ./bench/ranges.sh)
echo "python SDK..." >&2
python=$(./bench/python.sh)
echo "writes next to redis..." >&2
writes=$(./bench/writes.sh)
echo "next to Mooncake Store (one-sided writes)..." >&2
mooncake=$(./bench/mooncake.sh)
echo "inference engines (LMCache's L2 through each backend)..." >&2
engines=$(./bench/engines.sh)
echo "LMCache's own L2 benchmark (lmcache bench l2)..." >&2
lmcache_l2=$(./bench/lmcache_l2.sh)
echo "SGLang HiCache's L3..." >&2
sglang=$(./bench/sglang.sh)
echo "NIXL (Rasa's plugin and the OBJ route)..." >&2
nixl=$(ROUNDS=$ROUNDS ./bench/nixl.sh)
echo "model weights..." >&2
weights=$(./bench/weights.sh)
echo "S3 listener..." >&2
s3front=$(./bench/s3-front.sh)
echo "namespaces on and off..." >&2
namespaces=$(./bench/namespaces.sh)
echo "one-sided reads over shm..." >&2
shm=$(./bench/shm.sh)
echo "a fleet loading one checkpoint with replicas (network namespaces, tc)..." >&2
replicas=$(./bench/replicas.sh)
echo "disk tier (writes ${DISK_BIG_GIB:-20} GiB under /var/tmp)..." >&2
disk=$(SECS=$SECS ROUNDS=$ROUNDS ./bench/disk.sh)

row() { # name rasa nginx
  read -r rr rb rp50 rp99 rbad <<<"$2"; read -r nr nb np50 np99 nbad <<<"$3"
  printf '| %s | %.0f req/s, %.2f GB/s, p50 %.0f µs, p99 %.0f µs | %.0f req/s, %.2f GB/s, p50 %.0f µs, p99 %.0f µs | %.2f |\n' \
    "$1" "$rr" "$(echo "$rb/1000000000" | bc -l)" "$rp50" "$rp99" "$nr" "$(echo "$nb/1000000000" | bc -l)" "$np50" "$np99" "$(echo "$rr/$nr" | bc -l)"
}
read -r pr pb pp50 pp99 pbad <<<"$put"
read -r sr sb sp50 sp99 sbad <<<"$put_steady"
{
  echo "# Rasa benchmarks"
  echo
  echo "Generated by \`make bench\` on $(date -u +%Y-%m-%d) — $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(free -g | awk '/Mem:/ {print $2}') GiB."
  echo "Loopback; load generator and servers share the machine. Medians of $ROUNDS rounds of ${SECS}s; ratios from the same run."
  echo
  echo "$reads"
  echo
  echo "## GET hit: Rasa vs nginx serving the same bytes from files"
  echo
  echo "\`wrk -t2 -c64 -d${SECS}s --latency URL\` (1 KiB), \`-c16\` (1 MiB); nginx $(nginx -v 2>&1 | sed 's/.*nginx\///'), sendfile on, $(nproc) workers."
  echo
  echo "| value | Rasa | nginx | Rasa/nginx (req/s) |"
  echo "| --- | --- | --- | --- |"
  row "1 KiB" "$r1k" "$n1k"
  row "1 MiB" "$r1m" "$n1m"
  echo
  echo "Where a 1 KiB GET's time goes (2026-12-03): the kernel more than half (one \`recvfrom\` and one \`writev\` a request, \`strace -c\`; about half of the kernel's share is waking wrk and switching to it inside our \`writev\`, which nginx pays alike); the gateway's user space (its instructions a request counted by callgrind, \`bench/instructions.sh\`, in the section above) spread over hyper, tokio, axum's routing and the handler. Removed over time: the per-request clone of a dozen \`Arc\`s of state (one now), metric labels built and hashed per request (handles cached per thread), hex strings formatted for ETag, version and checksum headers, glibc's malloc (~13 % of the gateway's CPU before) for jemalloc; then (issue #50, 47.1k to 35.1k instructions and 70 to 38 allocations a request) router-wide layers given to \`Router::layer\` (each boxed every route again, and a request cloned the boxes one inside the other) moved outside the router as one concrete stack, the edge and the request slots as tower layers with named futures instead of \`from_fn\` and \`HandleError\` + \`LoadShed\` + \`GlobalConcurrencyLimit\`, and no entity tag spelled out for a read without a condition. The same run's nginx figure and both servers' CPU per request are in the section above (\`bench/reads.sh\`)."
  echo
  echo "## PUT 1 MiB"
  echo
  echo "\`wrk -t2 -c8 -d${SECS}s -s put.lua\`, to one key (each PUT a new version):"
  echo
  echo "| memory | req/s | MB/s | p50 | p99 | non-2xx |"
  echo "| --- | --- | --- | --- | --- | --- |"
  printf '| steady state: `--memory 2GiB --lease 1s`, arenas recycled (%s by the end) | %.0f | **%.0f** | %.0f µs | %.0f µs | %s |\n' \
    "$recycled" "$sr" "$(echo "$sr*1.048576" | bc -l)" "$sp50" "$sp99" "$sbad"
  printf '| first fill: `--memory 16GiB`, every PUT in memory never touched before | %.0f | %.0f | %.0f µs | %.0f µs | %s |\n' \
    "$pr" "$(echo "$pr*1.048576" | bc -l)" "$pp50" "$pp99" "$pbad"
  echo
  echo "A first fill pays for the kernel zeroing each page on first touch (half of the gateway's samples under \`perf record\`; on this VM fresh memory is first written at ~1.3 GB/s); recycled arenas keep their pages."
  echo "Ceiling, same run, one core (\`cargo bench -p rasa-fastpath --bench checksums\`): SHA-256 $sha GB/s, XXH3-64 frame checksum $xxh GB/s."
  echo
  echo "## One-sided reads vs HTTP GET, through the SDK (\`target/release/examples/fastpath_bench\`)"
  echo
  echo "Gateway idle CPU with the progress thread running: $(( (idle1 - idle0) * 10 )) ms over 5 s."
  echo
  cat "$tmp/fastpath.md"
  echo
  echo "## Concurrent reads through one SDK client (\`target/release/examples/concurrency_bench\`)"
  echo
  echo "N tasks share one \`Client\` and read the same value with \`get\`; one-sided reads run on the client's fabric endpoints (default 4; the last rows: the same with one endpoint, as before reads could overlap)."
  echo
  cat "$tmp/concurrency.md" "$tmp/concurrency1.md"
  echo
  echo "On this 2-core machine the gateway, its progress thread and the readers share two cores, and \`tcp;ofi_rxm\` moves the bytes over loopback TCP as HTTP does: runs move these figures by up to 2x (three runs of the 1 MiB, 4- and 16-reader one-sided rows: 3.6–4.9 GB/s with 4 endpoints, 1.9–3.7 GB/s with one; 16 endpoints did no better than 4)."
  echo
  echo "Gateway memory: idle (fast path open, two values stored) $rasa_idle_rss MiB of RSS; peak after the wrk runs, the PUT load and both tables above $rasa_peak_rss MiB (\`VmHWM\`)."
  echo
  echo "## Large one-sided reads under provider settings (\`bench/tail.sh\`)"
  echo
  echo "Reads land in registered memory (\`Reader::read_landing\`: no copy, no allocation), one at a time; a gateway and a reader started with each setting, two rounds alternating."
  echo
  cat "$tmp/tail.md"
  echo
  echo "## Cold misses via s3s-fs (medians of 30 \`curl\` GETs of distinct 1 MiB objects; direct GETs signed with \`curl --aws-sigv4\`)"
  echo
  if [ -n "$cold" ]; then echo "| | latency |"; echo "| --- | --- |"; echo "$cold"; else echo "s3s-fs not installed (make test installs it)."; fi
  echo
  echo "$large"
  echo
  echo "$ranges"
  echo
  echo "$python"
  echo
  echo "$writes"
  echo
  echo "$mooncake"
  echo
  echo "$engines"
  echo
  echo "$lmcache_l2"
  echo
  echo "$sglang"
  echo
  echo "$nixl"
  echo
  echo "$weights"
  echo
  echo "$s3front"
  echo
  echo "$namespaces"
  echo
  echo "$shm"
  echo
  echo "$replicas"
  echo
  echo "$disk"
} >bench/results.md
cat bench/results.md
