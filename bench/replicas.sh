#!/usr/bin/env bash
# A fleet loading one checkpoint (issue 66), simulated on one host: three members, each in
# a network namespace of its own whose link is shaped to the same rate (tc tbf on the
# member's side: what it sends), a real etcd, and READERS processes in the root namespace,
# each its own Python SDK client, reading every shard of a checkpoint one-sided
# (`tcp;ofi_rxm`) into a registered buffer. The checkpoint's shards all hash to one owner
# (the hot case: one member's link serves everyone). Run with --cluster-replicas ckpt=N for
# N = 1, 2, 3 (the fleet started again for each); the aggregate load throughput of each
# and its ratio to N = 1, as a Markdown section on stdout. With N = 3, PROBES read-after-
# write probes run while the readers load: a write of a replicated key through one member,
# then a read through every member, which must answer it (0 older reads).
#
#   bench/replicas.sh            the bench (release binaries; `make bench`)
#   bench/replicas.sh --short    a small one for `make test` (debug binaries): fails when a
#                                probe reads an older value, a read is not one-sided, or
#                                three replicas load less than 1.5x as fast as one
# Needs root (network namespaces, tc), etcd, and the Python SDK in .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
SHORT=0
[ "${1:-}" = --short ] && SHORT=1
if [ $SHORT = 1 ]; then
  RATE=${RATE:-200mbit} SHARDS=${SHARDS:-16} SHARD_MIB=${SHARD_MIB:-2} READERS=${READERS:-3} PROBES=${PROBES:-100}
  BIN=$PWD/target/debug
else
  RATE=${RATE:-400mbit} SHARDS=${SHARDS:-32} SHARD_MIB=${SHARD_MIB:-8} READERS=${READERS:-6} PROBES=${PROBES:-1000}
  cargo build --release --locked -p rasa-gateway --bins >/dev/null 2>&1
  ./scripts/python.sh --release >/dev/null
  BIN=$PWD/target/release
fi
PY=$PWD/.venv/bin/python
[ -x "$PY" ] || { echo "replicas.sh: no .venv (scripts/python.sh makes it)" >&2; exit 1; }
tmp=$(mktemp -d)
BR=rasa-rb NET=10.79.0
pids=()
unlink() {
  for i in 1 2 3; do ip netns del "rasa-r$i" 2>/dev/null || true; ip link del "rr${i}a" 2>/dev/null || true; done
  ip link del $BR 2>/dev/null || true
}
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  unlink
  # The members' logs stay for a run that failed.
  [ "${done_ok:-0}" = 1 ] || { rm -rf /tmp/rasa-replicas-logs; cp -r "$tmp" /tmp/rasa-replicas-logs 2>/dev/null && echo "replicas.sh: logs in /tmp/rasa-replicas-logs" >&2; }
  rm -rf "$tmp"
}
trap cleanup EXIT
unlink
ip link add $BR type bridge && ip addr add $NET.1/24 dev $BR && ip link set $BR up
for i in 1 2 3; do
  ip netns add "rasa-r$i"
  ip link add "rr${i}a" type veth peer name "rr${i}b"
  ip link set "rr${i}a" master $BR && ip link set "rr${i}a" up
  ip link set "rr${i}b" netns "rasa-r$i"
  ip netns exec "rasa-r$i" ip addr add "$NET.1$i/24" dev "rr${i}b"
  ip netns exec "rasa-r$i" ip link set "rr${i}b" up
  ip netns exec "rasa-r$i" ip link set lo up
  # What the member sends — to readers and to its replicas — at RATE (one FIFO queue).
  ip netns exec "rasa-r$i" tc qdisc add dev "rr${i}b" root tbf rate "$RATE" burst 256kb latency 200ms
done
peer=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
etcd --data-dir "$tmp/etcd" --listen-client-urls "http://$NET.1:2379" --advertise-client-urls "http://$NET.1:2379" \
  --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
  --initial-cluster "default=http://127.0.0.1:$peer" >"$tmp/etcd.log" 2>&1 &
pids+=($!)
for _ in $(seq 200); do grep -q "ready to serve client requests" "$tmp/etcd.log" && break; sleep 0.05; done
grep -q "ready to serve client requests" "$tmp/etcd.log" || { echo "replicas.sh: etcd did not start" >&2; exit 1; }
size=$((SHARD_MIB << 20))
members=("http://$NET.11:8080" "http://$NET.12:8080" "http://$NET.13:8080")
# fleet N FLAGS...: three members with FLAGS (logs named by N).
fleet() {
  local n=$1 i name="rep$1-$RANDOM"
  shift
  for i in 1 2 3; do
    ip netns exec "rasa-r$i" env RUST_LOG=${MEMBER_LOG:-warn} "$BIN/rasa-gateway" --listen "$NET.1$i:8080" \
      --advertise-url "http://$NET.1$i:8080" --cluster "etcd://$NET.1:2379" --cluster-name "$name" \
      --node-id "g$i" --memory 2GiB --lease 60s --fast-path on --fabric-provider 'tcp;ofi_rxm' \
      "$@" >"$tmp/g$i-$n.log" 2>&1 &
    pids+=($!)
    disown # killed with the fleet, unreported
  done
  for m in "${members[@]}"; do
    for _ in $(seq 300); do
      [ "$(curl -sf "$m/v1/cluster" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["members"]))' 2>/dev/null)" = 3 ] && break
      sleep 0.1
    done
    for _ in $(seq 300); do curl -sf -o /dev/null "$m/readyz" && break; sleep 0.1; done
    curl -sf -o /dev/null "$m/readyz" || { echo "replicas.sh: $m not ready" >&2; tail -n 5 "$tmp"/g*-"$n".log >&2; exit 1; }
  done
}
stop_fleet() {
  pkill -KILL -f "rasa-gateway --listen $NET" 2>/dev/null || true
  for _ in $(seq 100); do pgrep -f "rasa-gateway --listen $NET" >/dev/null || break; sleep 0.1; done
}
# The checkpoint: SHARDS keys g1 owns, SHARD_MIB each, written through g1; then waits until
# each replica copied every shard.
checkpoint() {
  local n=$1
  "$PY" bench/replicas_bench.py keys "${members[0]}" "$SHARDS" ckpt/shard- >"$tmp/keys"
  head -c "$size" /dev/urandom >"$tmp/shard"
  while read -r k; do
    curl -sf -o /dev/null -X PUT --data-binary @"$tmp/shard" "${members[0]}/v1/objects/$k"
  done <"$tmp/keys"
  local want=$(( (n - 1) * SHARDS )) got=0
  for _ in $(seq 600); do
    got=0
    for m in "${members[@]:1}"; do
      c=$(curl -sf "$m/metrics" | awk '/^rasa_cluster_replica_copies_total\{result="copied"\}/ {s+=$2} END {print s+0}')
      got=$((got + ${c%.*}))
    done
    [ "$got" -ge "$want" ] && break
    sleep 0.2
  done
  [ "$got" -ge "$want" ] || { echo "replicas.sh: $got of $want replica copies made" >&2; exit 1; }
}
declare -A result
for n in 1 2 3; do
  fleet "$n" --cluster-replicas "ckpt=$n"
  checkpoint "$n"
  result[$n]=$("$PY" bench/replicas_bench.py load "${members[0]}" "$NET.1" "$tmp/keys" "$size" "$READERS")
  echo "replicas=$n: ${result[$n]}" >&2
  if [ "$n" = 3 ]; then
    # Again, with read-after-write probes of another replicated key meanwhile.
    probed=$("$PY" bench/replicas_bench.py probes "${members[0]}" "$NET.1" "$tmp/keys" "$size" "$READERS" "$PROBES" "${members[@]}")
    echo "replicas=$n with probes: $probed" >&2
  fi
  stop_fleet
done
if [ $SHORT = 0 ]; then
  # Hot by demand: no rule; HOT_KEYS keys of HOT_MIB MiB loaded in rounds by READERS
  # readers that keep their clients (each key read READERS times a round: past 1 a second
  # over a 5 s window). The first round reads from the owner alone; then the keys are
  # listed hot; then PASSES - 1 rounds.
  HOT_KEYS=${HOT_KEYS:-8} HOT_MIB=${HOT_MIB:-2} PASSES=${PASSES:-5}
  fleet hot --cluster-hot-reads 1 --cluster-hot-window 5s --cluster-hot-replicas 3
  "$PY" bench/replicas_bench.py keys "${members[0]}" "$HOT_KEYS" prompt/block- >"$tmp/hot-keys"
  head -c $((HOT_MIB << 20)) /dev/urandom >"$tmp/block"
  while read -r k; do
    curl -sf -o /dev/null -X PUT --data-binary @"$tmp/block" "${members[0]}/v1/objects/$k"
  done <"$tmp/hot-keys"
  hot=$("$PY" bench/replicas_bench.py hot "${members[0]}" "$NET.1" "$tmp/hot-keys" $((HOT_MIB << 20)) "$READERS" "$PASSES")
  echo "hot: $hot" >&2
  promotions=$(curl -sf "${members[0]}/metrics" | awk '/^rasa_cluster_hot_promotions_total/ {s+=$2} END {print s+0}')
  stop_fleet
fi
field() { python3 -c "import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$1" "$2"; }
ratio() { python3 -c "print(f'{$(field "${result[$1]}" gb_per_s) / $(field "${result[1]}" gb_per_s):.2f}')"; }
echo "## A fleet loading one checkpoint, with replicas (\`bench/replicas.sh\`)"
echo
echo "Three members, each in a network namespace with its link shaped to $RATE (what it sends), a real etcd; $READERS readers (each a process with its own Python SDK client) read a checkpoint of $SHARDS shards of $SHARD_MIB MiB, all owned by one member, one-sided (\`tcp;ofi_rxm\`) into registered buffers. \`--cluster-replicas ckpt=N\`; replicas copied before the load."
echo
echo "| replicas | aggregate load | vs 1 replica | one-sided reads | HTTP reads |"
echo "| --- | --- | --- | --- | --- |"
for n in 1 2 3; do
  printf '| %s | %.3f GB/s (%.1f s) | %sx | %s | %s |\n' "$n" "$(field "${result[$n]}" gb_per_s)" \
    "$(field "${result[$n]}" seconds)" "$(ratio "$n")" "$(field "${result[$n]}" fabric_reads)" "$(field "${result[$n]}" http_reads)"
done
echo
echo "Loaded again with 3 replicas ($(printf '%.3f' "$(field "$probed" gb_per_s)") GB/s) while $(field "$probed" probes) writes of another replicated key went each through the next member, each then read through all three: $(field "$probed" older) older reads in $(field "$probed" reads); $(field "$probed" http_reads) shard reads over HTTP."
if [ $SHORT = 0 ]; then
  echo
  echo "Hot by demand (\`--cluster-hot-reads 1 --cluster-hot-window 5s --cluster-hot-replicas 3\`, no replica rule): $HOT_KEYS keys of $HOT_MIB MiB owned by one member, loaded in rounds by $READERS readers that keep their clients (as engines do); the owner listed them hot after the first round and $(python3 -c "import json,sys; print(json.loads(sys.argv[1])[0]['loads_before_hot'])" "$hot") more ($promotions promotions); round 1 read from the owner alone, the rounds shown after it came once the keys were hot."
  echo
  echo "| round | aggregate load | vs the first | one-sided reads | HTTP reads |"
  echo "| --- | --- | --- | --- | --- |"
  "$PY" bench/replicas_bench.py hot-table "$hot"
fi
older=$(field "$probed" older)
if [ $SHORT = 1 ]; then
  [ "$older" = 0 ] || { echo "replicas.sh: $older reads answered an older value" >&2; exit 1; }
  for r in "${result[@]}" "$probed"; do
    [ "$(field "$r" http_reads)" = 0 ] || { echo "replicas.sh: shard reads over HTTP: $r" >&2; exit 1; }
  done
  python3 -c "import sys; sys.exit(0 if $(ratio 3) >= 1.5 else 1)" || { echo "replicas.sh: 3 replicas load only $(ratio 3)x as fast as 1" >&2; exit 1; }
fi
done_ok=1
