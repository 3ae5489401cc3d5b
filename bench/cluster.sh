#!/usr/bin/env bash
# The cluster's figures, as a Markdown section on stdout (`make bench` puts it in
# bench/results.md): keys moved on leave/join and the cost of placement (simulated,
# `cargo run --example placement`), and GETs sent to the key's owner vs to another member
# that forwards it (three release gateways on a real etcd, wrk): 1 KiB and 1 MiB one
# request at a time, 1 KiB with 32 connections, with each member's CPU per request; then the
# same with near copies (--cluster-near-cache).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${SECS:-5}
ROUNDS=${ROUNDS:-3}
./scripts/setup.sh --bench # what the benchmarks compare with, when missing
cargo build --release --locked -p rasa-gateway --bins -p rasa-openapi --examples >/dev/null 2>&1
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
wrk_run() { # url connections → "rps p50_us"
  wrk -t1 -c"$2" -d"${SECS}s" --latency "$1" | python3 -c '
import sys,re
t=sys.stdin.read()
def dur(s):
    v=float(re.match(r"[\d.]+",s).group()); u=s[len(re.match(r"[\d.]+",s).group()):]
    return v*{"us":1,"ms":1e3,"s":1e6}[u]
bad=re.search(r"Non-2xx or 3xx responses: (\d+)",t)
assert not bad, "non-2xx answers"
print(float(re.search(r"Requests/sec:\s+([\d.]+)",t).group(1)), dur(re.search(r"^\s*50%\s+(\S+)",t,re.M).group(1)))'
}
ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
tck=$(getconf CLK_TCK)
# url connections → "rps p50_us owner-µs-per-request forwarder-µs-per-request", one round.
measured() {
  local o0 f0 o1 f1 rps p50
  o0=$(ticks "$owner_pid"); f0=$(ticks "$other_pid")
  read -r rps p50 <<<"$(wrk_run "$1" "$2")"
  o1=$(ticks "$owner_pid"); f1=$(ticks "$other_pid")
  python3 -c "r=$rps*$SECS; print($rps, $p50, ($o1-$o0)/$tck/r*1e6, ($f1-$f0)/$tck/r*1e6)"
}
median_of() { local c=$1; shift; printf '%s\n' "$@" | awk -v c="$c" '{print $c}' | median; }
# label direct-url proxied-url connections figure → a table row (medians of $ROUNDS rounds,
# direct and proxied in turn) and each round's p50 ratio appended to $FIGURES.
compare() {
  local d=() p=() a b
  for _ in $(seq "$ROUNDS"); do
    a=$(measured "$2" "$4"); b=$(measured "$3" "$4")
    d+=("$a"); p+=("$b")
    [ -n "${FIGURES:-}" ] && echo "$5 $(awk -v p="$b" -v d="$a" 'BEGIN {split(p, x); split(d, y); print x[2] / y[2]}')" >>"$FIGURES"
  done
  printf '| %s | %.0f req/s, p50 %.0f µs | %.0f req/s, p50 %.0f µs | %.2fx | %.1f µs | %.1f + %.1f µs |\n' "$1" \
    "$(median_of 1 "${d[@]}")" "$(median_of 2 "${d[@]}")" "$(median_of 1 "${p[@]}")" "$(median_of 2 "${p[@]}")" \
    "$(echo "$(median_of 2 "${p[@]}")/$(median_of 2 "${d[@]}")" | bc -l)" \
    "$(median_of 3 "${d[@]}")" "$(median_of 3 "${p[@]}")" "$(median_of 4 "${p[@]}")"
}

client=$(free_port); peer=$(free_port)
etcd --data-dir "$tmp/etcd" --listen-client-urls "http://127.0.0.1:$client" --advertise-client-urls "http://127.0.0.1:$client" \
  --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
  --initial-cluster "default=http://127.0.0.1:$peer" >"$tmp/etcd.log" 2>&1 &
pids+=($!)
until grep -q "ready to serve client requests" "$tmp/etcd.log"; do sleep 0.05; done
# start_members NAME FIRST FLAGS... → three members g$FIRST.. of cluster NAME; sets g1/g2 (their
# URLs, the first owning the keys measured) and owner_pid/other_pid.
start_members() {
  local name=$1 first=$2; shift 2
  local n urls=() ps=()
  for n in $first $((first + 1)) $((first + 2)); do
    RUST_LOG=warn "$PWD/target/release/rasa-gateway" --listen 127.0.0.1:0 --memory 1GiB --cluster "etcd://127.0.0.1:$client" \
      --node-id "g$n" --cluster-name "$name" "$@" >"$tmp/g$n.out" 2>"$tmp/g$n.err" &
    pids+=($!); ps+=($!)
    until grep -q listening "$tmp/g$n.out"; do sleep 0.05; done
    urls+=("$(sed -n 's/.*listening on //p' "$tmp/g$n.out")")
  done
  g1=${urls[0]}; g2=${urls[1]}; owner_pid=${ps[0]}; other_pid=${ps[1]}; owner_node=g$first
  until [ "$(curl -sf "$g1/v1/cluster" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["members"]))')" = 3 ]; do sleep 0.05; done
}
head -c 1024 /dev/urandom >"$tmp/1k"; head -c 1048576 /dev/urandom >"$tmp/1m"
# Keys g1 owns: PUT through g1 until the answer names g1.
owned() { # file → a key g1 owns, holding the file's bytes
  for i in $(seq 1 100); do
    node=$(curl -sf -T "$1" "$g1/v1/objects/bench/$(basename "$1")-$i" | python3 -c 'import json,sys; print(json.load(sys.stdin)["node_id"])')
    [ "$node" = "$owner_node" ] && echo "bench/$(basename "$1")-$i" && return
  done
  echo "no key owned by $owner_node in 100 tries" >&2; exit 1
}
start_members bench 1
k1=$(owned "$tmp/1k"); k2=$(owned "$tmp/1m")
rows=$(
  compare "1 KiB, one request at a time" "$g1/v1/objects/$k1" "$g2/v1/objects/$k1" 1 forward_1k_c1
  compare "1 MiB, one request at a time" "$g1/v1/objects/$k2" "$g2/v1/objects/$k2" 1 forward_1m_c1
  compare "1 KiB, 32 connections" "$g1/v1/objects/$k1" "$g2/v1/objects/$k1" 32 forward_1k_c32
)
for p in "${pids[@]:1}"; do kill "$p"; done
# The same with near copies (--cluster-near-cache): the other member answers from its copy of
# the owner's answer while the owner's lease on it runs, the hop taken once a lease.
start_members bench-near 4 --cluster-near-cache 256MiB
k1=$(owned "$tmp/1k"); k2=$(owned "$tmp/1m")
near_rows=$(
  compare "1 KiB, one request at a time, near copies" "$g1/v1/objects/$k1" "$g2/v1/objects/$k1" 1 near_1k_c1
  compare "1 MiB, one request at a time, near copies" "$g1/v1/objects/$k2" "$g2/v1/objects/$k2" 1 near_1m_c1
  compare "1 KiB, 32 connections, near copies" "$g1/v1/objects/$k1" "$g2/v1/objects/$k1" 32 near_1k_c32
)

echo "## Cluster"
echo
echo "Placement by rendezvous hashing (\`cargo run --release -p rasa-openapi --example placement\`, 1 M keys):"
echo
"$PWD/target/release/examples/placement"
echo
echo "GETs in a cluster of three gateways on one etcd (\`wrk -t1 -d${SECS}s --latency\`, medians of $ROUNDS rounds, direct and"
echo "forwarded in turn): sent to the key's owner, or to another member, which forwards it (one hop over a pooled"
echo "connection, the answer streamed). CPU per request from \`/proc/PID/stat\` of the owner and the forwarder."
echo
echo "| GET | direct to the owner | via another member | p50 forwarded / direct | owner CPU per request, direct | owner + forwarder CPU, forwarded |"
echo "| --- | --- | --- | --- | --- | --- |"
echo "$rows"
echo "$near_rows"
echo
echo "With near copies (\`--cluster-near-cache\`) the other member answers from its copy of the owner's last answer for the one-second lease the owner grants with it; the owner revokes it before acknowledging a write. The forwarder's CPU column is then the near member's."
