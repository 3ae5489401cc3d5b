#!/usr/bin/env bash
# Cold reads: Rasa in front of a bucket next to Varnish in front of the same bucket, and
# straight from the bucket, same run. s3s-fs (anonymous, so Varnish can reach it) serves
# the objects; each figure is the median first-byte and total time (`curl -w`) of distinct
# objects, each read once cold, then once warm from each cache.
# Prints a Markdown section; `make bench` includes it in bench/results.md.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh --bench # what the benchmarks compare with, when missing
cargo build -q --release --locked -p rasa-gateway --bins >&2
SMALL=${SMALL:-15} # 1 MiB objects
LARGE=${LARGE:-3}  # 200 MiB objects
tmp=$(mktemp -d)
chmod 755 "$tmp"
pids=()
trap 'kill ${pids[@]+"${pids[@]}"} 2>/dev/null || true; rm -rf "$tmp"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
first_line() { timeout 30 sed -n "/$2/{s/.*$2//p;q}" <(tail -F "$1"); }

mkdir -p "$tmp/s3/bkt"
for i in $(seq "$SMALL"); do head -c $((1 << 20)) /dev/urandom >"$tmp/s3/bkt/s$i"; done
for i in $(seq "$LARGE"); do head -c $((200 << 20)) /dev/urandom >"$tmp/s3/bkt/l$i"; done
head -c 1024 /dev/urandom >"$tmp/s3/bkt/k1"
head -c $((1 << 20)) /dev/urandom >"$tmp/s3/bkt/herd-rasa"
cp "$tmp/s3/bkt/herd-rasa" "$tmp/s3/bkt/herd-varnish"
NO_COLOR=1 RUST_LOG=s3s_fs=info s3s-fs --host 127.0.0.1 --port 0 "$tmp/s3" >"$tmp/s3s.out" 2>/dev/null &
pids+=($!)
s3s=$(first_line "$tmp/s3s.out" "server is running at ")
[ -n "$s3s" ] || { echo "bench/cold: s3s-fs did not start" >&2; exit 1; }
s3port=${s3s##*:}

target/release/rasa-gateway --listen 127.0.0.1:0 --origin s3://bkt/ --s3-endpoint "$s3s" --s3-anonymous \
  --memory 4GiB --max-object-size 256MiB --fast-path off >"$tmp/rasa.out" 2>/dev/null &
pids+=($!)
rasa=$(first_line "$tmp/rasa.out" "listening on ")
[ -n "$rasa" ] || { echo "bench/cold: the gateway did not start" >&2; exit 1; }

# Varnish 7 streams a miss to its client as it arrives (do_stream, the default).
vport=$(free_port)
cat >"$tmp/rasa.vcl" <<EOF
vcl 4.1;
backend s3 { .host = "127.0.0.1"; .port = "$s3port"; .between_bytes_timeout = 60s; }
sub vcl_backend_response { set beresp.ttl = 1h; set beresp.do_stream = true; }
EOF
varnishd -n "$tmp/varnish" -a "127.0.0.1:$vport" -f "$tmp/rasa.vcl" -s malloc,4G -F >"$tmp/varnish.out" 2>&1 &
pids+=($!)
varnish="http://127.0.0.1:$vport"
for _ in $(seq 300); do curl -sf -o /dev/null "$varnish/bkt/s1" && break; sleep 0.1; done
curl -sf -o /dev/null "$rasa/v1/objects/s1" # s1 is warmed in both; the cold rows skip it

timed() { curl -sf -o /dev/null -w '%{time_starttransfer} %{time_total}\n' "$1"; }
# Median first byte and total of GETs of URL-PREFIX + each key, in ms.
figures() { # url-prefix keys...
  local prefix=$1; shift
  local out=()
  for k in "$@"; do out+=("$(timed "$prefix$k")"); done
  local fb tt
  fb=$(printf '%s\n' "${out[@]}" | awk '{print $1*1000}' | median)
  tt=$(printf '%s\n' "${out[@]}" | awk '{print $2*1000}' | median)
  printf '%.1f ms / %.1f ms' "$fb" "$tt"
}
small=(); for i in $(seq 2 "$SMALL"); do small+=("s$i"); done
large=(); for i in $(seq "$LARGE"); do large+=("l$i"); done
row() { # label keys...
  local label=$1; shift
  local direct rc vc rw vw
  direct=$(figures "$s3s/bkt/" "$@")
  rc=$(figures "$rasa/v1/objects/" "$@")
  vc=$(figures "$varnish/bkt/" "$@")
  rw=$(figures "$rasa/v1/objects/" "$@")
  vw=$(figures "$varnish/bkt/" "$@")
  echo "| $label | $rc | $vc | $direct | $rw | $vw |"
}
r_small=$(row "1 MiB (median of $((SMALL - 1)))" "${small[@]}")
r_large=$(row "200 MiB (median of $LARGE)" "${large[@]}")

# Hits: wrk against each cache, warm (1 KiB with 64 connections, 1 MiB with 16).
SECS=${SECS:-5}
curl -sf -o /dev/null "$rasa/v1/objects/k1"; curl -sf -o /dev/null "$varnish/bkt/k1"
rasa_pid=${pids[1]}
varnish_pids="${pids[2]} $(pgrep -P "${pids[2]}" | paste -sd' ')" # the manager and its cache process
ticks() { local t=0; for p in "$@"; do t=$((t + $(awk '{print $14+$15}' "/proc/$p/stat"))); done; echo $t; }
hits() { # url connections pids... → "req/s p50_us p99_us µs-of-the-pids'-CPU-per-request"
  local url=$1 conns=$2 t0 t1 out
  shift 2
  t0=$(ticks "$@")
  out=$(wrk -t2 -c"$conns" -d"${SECS}s" --latency "$url")
  t1=$(ticks "$@")
  echo "$out" | python3 -c '
import sys,re
t=sys.stdin.read()
ticks, hz = int(sys.argv[1]), int(sys.argv[2])
def us(s):
    v=float(re.match(r"[\d.]+",s).group()); return v*{"us":1,"ms":1e3,"s":1e6}[s[len(re.match(r"[\d.]+",s).group()):]]
try:
    n=int(re.search(r"(\d+) requests in",t).group(1))
    print(float(re.search(r"Requests/sec:\s+([\d.]+)",t).group(1)), us(re.search(r"^\s*50%\s+(\S+)",t,re.M).group(1)), us(re.search(r"^\s*99%\s+(\S+)",t,re.M).group(1)), ticks/hz/n*1e6)
except (AttributeError, KeyError, ZeroDivisionError):
    sys.exit("bench/cold: wrk printed no figures:\n" + t)' "$((t1 - t0))" "$(getconf CLK_TCK)"
}
hit_row() { # label rasa-url varnish-url connections [figure] → medians of $ROUNDS interleaved rounds
  local rasa_runs=() varnish_runs=() r v
  for i in $(seq "${ROUNDS:-3}"); do
    # Who goes first alternates: no server always gets the machine as the other left it.
    if [ $((i % 2)) -eq 1 ]; then r=$(hits "$2" "$4" "$rasa_pid") || exit 1; fi
    # shellcheck disable=SC2086 # a pid per word
    v=$(hits "$3" "$4" $varnish_pids) || exit 1
    if [ $((i % 2)) -eq 0 ]; then r=$(hits "$2" "$4" "$rasa_pid") || exit 1; fi
    rasa_runs+=("$r"); varnish_runs+=("$v")
    # Each round's ratio, for bench/reads.sh's summary.
    if [ -n "${5:-}" ] && [ -n "${FIGURES:-}" ]; then
      echo "$5 $(echo "${r%% *}/${v%% *}" | bc -l)" >>"$FIGURES"
    fi
  done
  col() { local c=$1; shift; printf '%s\n' "$@" | awk -v c="$c" '{print $c}' | median; }
  read -r rr rp50 rp99 rcpu <<<"$(for c in 1 2 3 4; do col $c "${rasa_runs[@]}"; done | paste -sd' ')"
  read -r vr vp50 vp99 vcpu <<<"$(for c in 1 2 3 4; do col $c "${varnish_runs[@]}"; done | paste -sd' ')"
  printf '| %s | %.0f req/s, p50 %.0f µs, p99 %.0f µs, CPU %.1f µs a request | %.0f req/s, p50 %.0f µs, p99 %.0f µs, CPU %.1f µs a request | %.2f |\n' \
    "$1" "$rr" "$rp50" "$rp99" "$rcpu" "$vr" "$vp50" "$vp99" "$vcpu" "$(echo "$rr/$vr" | bc -l)"
}
h_small=$(hit_row "1 KiB, 64 connections" "$rasa/v1/objects/k1" "$varnish/bkt/k1" 64)
h_large=$(hit_row "1 MiB, 16 connections" "$rasa/v1/objects/s1" "$varnish/bkt/s1" 16 hit1m)

# A herd: 50 concurrent cold requests of one object through each; origin GETs counted by
# each cache (Rasa's rasa_origin_fetches_total, Varnish's MAIN.backend_req).
rasa_fetches() { curl -sf "$rasa/metrics" | awk '/^rasa_origin_fetches_total / {print $2}'; }
varnish_fetches() { varnishstat -n "$tmp/varnish" -1 -f MAIN.backend_req | awk '{print $2}'; }
herd() { # url → wall ms; every answer must be a 200 of the whole object
  local start end
  start=$(date +%s%N)
  for _ in $(seq 50); do curl -sf -o /dev/null -w '%{http_code} %{size_download}\n' "$1" >>"$tmp/herd.codes" & done
  wait
  end=$(date +%s%N)
  echo $(( (end - start) / 1000000 ))
}
: >"$tmp/herd.codes"
r0=$(rasa_fetches); r_ms=$(herd "$rasa/v1/objects/herd-rasa"); r1=$(rasa_fetches)
v0=$(varnish_fetches); v_ms=$(herd "$varnish/bkt/herd-varnish"); v1=$(varnish_fetches)
bad=$(grep -vc "^200 1048576$" "$tmp/herd.codes" || true)
[ "$bad" = 0 ] || { echo "bench/cold: $bad herd answers were not the whole object" >&2; exit 1; }

echo "## Cold reads: Rasa vs Varnish in front of the same bucket"
echo
echo "s3s-fs (anonymous) serving a directory; Rasa \`--origin s3://bkt/ --s3-anonymous\`; Varnish $(varnishd -V 2>&1 | sed -n 's/.*(varnish-\([^ ]*\) .*/\1/p') with \`do_stream\` and \`malloc,4G\`. Each object read once cold, then once warm, through each; first byte / total (\`curl -w\`)."
echo
echo "| object | Rasa cold | Varnish cold | straight from s3s-fs | Rasa warm | Varnish warm |"
echo "| --- | --- | --- | --- | --- | --- |"
echo "$r_small"
echo "$r_large"
echo
echo "s3s-fs reads a whole file to compute its MD5 ETag before it sends the first byte, so every cold first byte here waits for that, through both caches alike."
echo
echo "Hits (\`wrk -t2 -d${SECS}s --latency\`, warm; medians of ${ROUNDS:-3} rounds, Rasa and Varnish in turn, the order alternating; CPU: the server's processes, \`/proc/PID/stat\` over each run):"
echo
echo "| value | Rasa | Varnish | Rasa/Varnish (req/s) |"
echo "| --- | --- | --- | --- |"
echo "$h_small"
echo "$h_large"
echo
echo "A herd: 50 concurrent cold GETs of one 1 MiB object through each cache (all 200s with the whole object): Rasa fetched it from the origin $(printf '%.0f' "$(echo "$r1-$r0" | bc -l)") time(s) in $r_ms ms, Varnish $(printf '%.0f' "$(echo "$v1-$v0" | bc -l)") time(s) in $v_ms ms."
