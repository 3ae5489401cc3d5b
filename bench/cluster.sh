#!/usr/bin/env bash
# The cluster's figures, as a Markdown section on stdout (`make bench` puts it in
# bench/results.md): keys moved on leave/join and the cost of placement (simulated,
# `cargo run --example placement`), and a 1 KiB GET sent to the key's owner vs to another
# member that forwards it (two release gateways on a real etcd, wrk).
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
wrk_rps_p50() { # url → "rps p50_us"
  wrk -t2 -c32 -d"${SECS}s" --latency "$1" | python3 -c '
import sys,re
t=sys.stdin.read()
def dur(s):
    v=float(re.match(r"[\d.]+",s).group()); u=s[len(re.match(r"[\d.]+",s).group()):]
    return v*{"us":1,"ms":1e3,"s":1e6}[u]
bad=re.search(r"Non-2xx or 3xx responses: (\d+)",t)
assert not bad, "non-2xx answers"
print(float(re.search(r"Requests/sec:\s+([\d.]+)",t).group(1)), dur(re.search(r"50%\s+(\S+)",t).group(1)))'
}
rounds() { local out=(); for _ in $(seq "$ROUNDS"); do out+=("$(wrk_rps_p50 "$1")"); done
  for c in 1 2; do printf '%s\n' "${out[@]}" | awk -v c=$c '{print $c}' | median; done | paste -sd' '; }

client=$(free_port); peer=$(free_port)
etcd --data-dir "$tmp/etcd" --listen-client-urls "http://127.0.0.1:$client" --advertise-client-urls "http://127.0.0.1:$client" \
  --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
  --initial-cluster "default=http://127.0.0.1:$peer" >"$tmp/etcd.log" 2>&1 &
pids+=($!)
until grep -q "ready to serve client requests" "$tmp/etcd.log"; do sleep 0.05; done
for n in 1 2; do
  "$PWD/target/release/rasa-gateway" --listen 127.0.0.1:0 --memory 1GiB --cluster "etcd://127.0.0.1:$client" \
    --node-id "g$n" --cluster-name bench >"$tmp/g$n.out" 2>"$tmp/g$n.err" &
  pids+=($!)
  until grep -q listening "$tmp/g$n.out"; do sleep 0.05; done
done
g1=$(sed -n 's/.*listening on //p' "$tmp/g1.out"); g2=$(sed -n 's/.*listening on //p' "$tmp/g2.out")
until [ "$(curl -sf "$g1/v1/cluster" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["members"]))')" = 2 ]; do sleep 0.05; done
head -c 1024 /dev/urandom >"$tmp/1k"
# A key g1 owns: PUT through g1 until the answer names g1.
for i in $(seq 1 50); do
  node=$(curl -sf -T "$tmp/1k" "$g1/v1/objects/bench/k$i" | python3 -c 'import json,sys; print(json.load(sys.stdin)["node_id"])')
  [ "$node" = g1 ] && key="bench/k$i" && break
done
read -r direct_rps direct_p50 <<<"$(rounds "$g1/v1/objects/$key")"
read -r proxied_rps proxied_p50 <<<"$(rounds "$g2/v1/objects/$key")"

echo "## Cluster"
echo
echo "Placement by rendezvous hashing (\`cargo run --release -p rasa-openapi --example placement\`, 1 M keys):"
echo
"$PWD/target/release/examples/placement"
echo
echo "A 1 KiB GET in a cluster of two gateways on one etcd (\`wrk -t2 -c32 -d${SECS}s\`, medians of $ROUNDS rounds): sent to the"
echo "key's owner, or to the other member, which forwards it (one hop, streamed)."
echo
echo "| | req/s | p50 |"
echo "| --- | --- | --- |"
printf '| direct to the owner | %.0f | %.0f µs |\n' "$direct_rps" "$direct_p50"
printf '| via the other member (proxied) | %.0f | %.0f µs |\n' "$proxied_rps" "$proxied_p50"
printf '| proxied / direct | %.2fx | %.2fx |\n' "$(echo "$proxied_rps/$direct_rps" | bc -l)" "$(echo "$proxied_p50/$direct_p50" | bc -l)"
