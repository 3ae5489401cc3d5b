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
trap 'kill ${pids[@]+"${pids[@]}"} 2>/dev/null; rm -rf "$tmp"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
first_line() { timeout 30 sed -n "/$2/{s/.*$2//p;q}" <(tail -f "$1"); }

mkdir -p "$tmp/s3/bkt"
for i in $(seq "$SMALL"); do head -c $((1 << 20)) /dev/urandom >"$tmp/s3/bkt/s$i"; done
for i in $(seq "$LARGE"); do head -c $((200 << 20)) /dev/urandom >"$tmp/s3/bkt/l$i"; done
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
