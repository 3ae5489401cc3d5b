#!/usr/bin/env bash
# The gateway's user-space work per 1 KiB GET, counted rather than timed: the gateway runs
# under valgrind's callgrind with instrumentation off, a value is stored and read a few
# times, then instrumentation is switched on for N reads on one keep-alive connection and
# off again. The instructions executed (Ir) divided by N do not depend on how busy the
# machine is, so two builds compare within a fraction of a percent where timings move
# by 15 %. (The kernel's work, the other half of a request's CPU, is not in it.)
# Usage: bench/instructions.sh [BIN...] (default: the release gateway); prints one line
# a binary: "BIN: I instructions a request".
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-2000}
command -v valgrind >/dev/null || { echo "bench/instructions: needs valgrind (scripts/setup.sh --bench)" >&2; exit 1; }
[ $# -ge 1 ] || set -- target/release/rasa-gateway
tmp=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
head -c 1024 /dev/urandom >"$tmp/1k"
for bin in "$@"; do
  rm -f "$tmp"/cg.out* "$tmp/log"
  RUST_LOG=warn valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$tmp/cg.out" \
    "$bin" --listen 127.0.0.1:0 --fast-path off >"$tmp/log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do grep -q 'listening on' "$tmp/log" && break; sleep 0.1; done
  url=$(sed -n 's/.*listening on //p' "$tmp/log")
  [ -n "$url" ] || { echo "bench/instructions: $bin did not start under valgrind:" >&2; cat "$tmp/log" >&2; exit 1; }
  curl -sf -o /dev/null -T "$tmp/1k" "$url/v1/objects/k"
  for _ in 1 2 3 4 5; do curl -sf -o /dev/null "$url/v1/objects/k"; done
  callgrind_control -i on "$pid" >/dev/null 2>&1
  python3 - "$url" "$N" <<'PY'
import http.client, sys, urllib.parse
u = urllib.parse.urlparse(sys.argv[1])
c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
for _ in range(int(sys.argv[2])):
    c.request("GET", "/v1/objects/k")
    r = c.getresponse()
    assert r.status == 200 and len(r.read()) == 1024, r.status
PY
  callgrind_control -i off "$pid" >/dev/null 2>&1
  callgrind_control -d "$pid" >/dev/null 2>&1
  kill "$pid"; wait "$pid" 2>/dev/null || true; pid=
  # The dump holds the reads; the file written at exit, nothing (instrumentation was off).
  ir=$(cat "$tmp"/cg.out* | awk '/^totals:/ {s += $2} END {print s + 0}')
  [ "$ir" -gt 0 ] || { echo "bench/instructions: callgrind counted nothing for $bin" >&2; exit 1; }
  echo "$bin: $((ir / N)) instructions a request"
done
