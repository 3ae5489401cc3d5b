#!/usr/bin/env bash
# LMCache's own L2 benchmark (`lmcache bench l2`, LMCache 0.5.6) against Rasa and the
# other backends LMCache ships that run here, in one run (issue 64): Rasa through the
# `plugin` route (RasaL2Adapter: the L1 arena registered once) and the `native_plugin`
# route (RasaConnector) over shm, Rasa over HTTP, LMCache's fs adapter on a local
# directory (page cache), and its RESP adapter on a redis-server. Release gateway on
# loopback; every server started here and stopped by PID. Prints Markdown.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/engines.sh >&2
cargo build -q --release --locked -p rasa-gateway --bins >&2
KEYS=${KEYS:-32} SIZE_KB=${SIZE_KB:-2048} ROUNDS=${ROUNDS:-5}
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

target/release/rasa-gateway --listen 127.0.0.1:0 --memory 8GiB --max-object-size 64MiB \
  --fast-path on --fabric-provider 'tcp;ofi_rxm,shm' >"$tmp/rasa.out" 2>"$tmp/rasa.err" &
pids+=($!)
rasa=$(timeout 30 sed -n '/listening on /{s/.*listening on //p;q}' <(tail -F "$tmp/rasa.out")) || true
[ -n "$rasa" ] || { echo "bench/lmcache_l2: the gateway did not start" >&2; cat "$tmp/rasa.err" >&2; exit 1; }
port=$(free_port)
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no >"$tmp/redis.out" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done
redis-cli -p "$port" ping >/dev/null || { echo "bench/lmcache_l2: redis-server did not start" >&2; exit 1; }
mkdir -p "$tmp/fs"

bench() { # NAME JSON: one `lmcache bench l2` run, its results as JSON in $tmp/NAME.json
  LMCACHE_DISABLE_BANNER=1 PYTHONWARNINGS=ignore target/engines-venv/bin/python - "$@" <<'PY' >&2
import sys
from lmcache.cli.main import main
name, spec = sys.argv[1:3]
sys.argv = ["lmcache", "bench", "l2", "--l2-adapter", spec, "--num-keys", sys.argv[3],
            "--data-size-kb", sys.argv[4], "--rounds", sys.argv[5], "--no-skip-verify",
            "--format", "json", "--output", sys.argv[6], "-q"]
sys.exit(main())
PY
}
params='"endpoint": "'"$rasa"'", "prefix": "'"$RANDOM"'/"'
runs=(
  "Rasa, plugin route (L1 registered once), shm|{\"type\": \"plugin\", \"module_path\": \"rasa_client.lmcache_l2\", \"class_name\": \"RasaL2Adapter\", \"adapter_params\": {$params}}"
  "Rasa, native_plugin route, shm|{\"type\": \"native_plugin\", \"module_path\": \"rasa_client.lmcache\", \"class_name\": \"RasaConnector\", \"adapter_params\": {$params, \"prefix\": \"n$RANDOM/\"}}"
  "Rasa, HTTP|{\"type\": \"native_plugin\", \"module_path\": \"rasa_client.lmcache\", \"class_name\": \"RasaConnector\", \"adapter_params\": {$params, \"prefix\": \"h$RANDOM/\", \"fast_path\": \"off\"}}"
  "LMCache fs, local directory (page cache)|{\"type\": \"fs\", \"base_path\": \"$tmp/fs\"}"
  "LMCache resp, redis-server 7|{\"type\": \"resp\", \"host\": \"127.0.0.1\", \"port\": $port}"
)
echo "## LMCache's own L2 benchmark (\`bench/lmcache_l2.sh\`)"
echo
echo "\`lmcache bench l2\` (LMCache 0.5.6), $KEYS keys of $SIZE_KB KiB a submit, $ROUNDS rounds, round trip verified; release gateway on loopback, 2 cores:"
echo
echo "| backend | store GB/s | load GB/s | lookup ops/s |"
echo "| --- | --- | --- | --- |"
i=0
for run in "${runs[@]}"; do
  name=${run%%|*} spec=${run#*|}
  out="$tmp/run$i.json"; i=$((i + 1))
  if ! bench "$name" "$spec" "$KEYS" "$SIZE_KB" "$ROUNDS" "$out"; then
    echo "| $name | failed | failed | failed |"
    continue
  fi
  python3 - "$name" "$out" <<'PY'
import json, sys
name, path = sys.argv[1:]
doc = json.load(open(path))
ops = {}
def walk(x):
    if isinstance(x, dict):
        op = str(x.get("operation", x.get("Operation", ""))).lower()
        if op in ("store", "load", "lookup"):
            ops[op] = x
        for v in x.values():
            walk(v)
    elif isinstance(x, list):
        for v in x:
            walk(v)
walk(doc)
def get(op, *names):
    d = ops.get(op, {})
    for n in names:
        for k, v in d.items():
            if k.lower().replace(" ", "_").startswith(n):
                return v
    return None
def gbs(op):
    v = get(op, "throughput_avg", "throughput_avg_mb_s", "avg_throughput")
    return "?" if v is None else f"{float(v) / 1000:.2f}"
ops_s = get("lookup", "avg_ops", "avg_ops_s", "ops_per_s")
print(f"| {name} | {gbs('store')} | {gbs('load')} | {'?' if ops_s is None else f'{float(ops_s):,.0f}'} |")
PY
done
