#!/usr/bin/env bash
# A one-sided reader under a gateway that flaps: the gateway runs in a network namespace
# (`tcp;ofi_rxm`), four Python SDK threads read 300 KB values in a loop for SECONDS
# (default 70), and the gateway is frozen (SIGSTOP, 2.5 s) and cut off (its link down,
# 2 s) in turns. Prints the reader's counters; exit 139 is the reader dying of SIGSEGV
# (a core is left in $OUT). Found libfabric 1.17's crash in fi_close of an rxm endpoint
# with reads in flight (issue 45, item 7). Needs root (network namespaces), the debug
# binaries and the Python SDK (`make test` builds both). Not part of `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TO_RUN=${1:-70}
OUT=${OUT:-$(mktemp -d /tmp/rasa-chaos-fabric.XXXX)}
B=$PWD/target/debug
NS=rasa-chaos
cleanup() {
  [ -n "${GW:-}" ] && kill -CONT "$GW" 2>/dev/null && kill "$GW" 2>/dev/null
  ip netns del $NS 2>/dev/null || true
  ip link del rc0 2>/dev/null || true
}
trap cleanup EXIT
cleanup
ip netns add $NS
ip link add rc0 type veth peer name rc1
ip link set rc1 netns $NS
ip addr add 10.78.0.1/24 dev rc0 && ip link set rc0 up
ip netns exec $NS ip addr add 10.78.0.2/24 dev rc1
ip netns exec $NS ip link set rc1 up && ip netns exec $NS ip link set lo up
ip netns exec $NS "$B/rasa-gateway" --listen 10.78.0.2:8080 --fast-path on \
  --fabric-provider 'tcp;ofi_rxm' >"$OUT/gateway.log" 2>&1 &
sleep 0.5
GW=$(pgrep -f "rasa-gateway --listen 10.78.0.2:8080" | head -1)
for _ in $(seq 100); do curl -sf -o /dev/null http://10.78.0.2:8080/healthz && break; sleep 0.1; done
head -c 300000 /dev/urandom >"$OUT/value"
for k in $(seq 8); do
  curl -sf -o /dev/null -X PUT --data-binary @"$OUT/value" "http://10.78.0.2:8080/v1/objects/k$k"
done
(
  end=$((SECONDS + SECONDS_TO_RUN))
  while [ $SECONDS -lt "$end" ]; do
    sleep 1.5; kill -STOP "$GW"; sleep 2.5; kill -CONT "$GW"; sleep 1
    ip netns exec $NS ip link set rc1 down; sleep 2; ip netns exec $NS ip link set rc1 up
  done
) &
FLAP=$!
cd "$OUT"
ulimit -c unlimited
rc=0
"$OLDPWD/.venv/bin/python" - "$SECONDS_TO_RUN" <<'PY' || rc=$?
import sys, threading, time
import rasa_client
c = rasa_client.Client("http://10.78.0.2:8080", fast_path="auto", timeout=2.0,
                       read_timeout=1.0, fabric_addr="10.78.0.1")
stop = time.time() + float(sys.argv[1])
n = {"ok": 0, "err": 0}
def run():
    while time.time() < stop:
        for k in range(1, 9):
            try:
                c.get(f"k{k}")
                n["ok"] += 1
            except Exception:
                n["err"] += 1
ts = [threading.Thread(target=run) for _ in range(4)]
[t.start() for t in ts]
[t.join() for t in ts]
print(n, c.stats())
PY
wait "$FLAP" || true
echo "reader exit status: $rc (139: SIGSEGV; a core is in $OUT)"
exit "$rc"
