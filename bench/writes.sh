#!/usr/bin/env bash
# Writes (issue 46), in one run: plain PUTs into little memory next to plenty (the lease
# rule), batches next to single PUTs and redis-server's pipelined SET, cold batch reads
# next to warm ones (bench/writes_bench.py). Release builds, loopback. Prints Markdown;
# `make bench` puts it in bench/results.md.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q --release --locked -p rasa-gateway --bins >&2
./scripts/python.sh --release >&2
.venv/bin/pip install -q --disable-pip-version-check -r bench/requirements-python.txt >&2
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT
start() { # name args... → starts it (not in a subshell: the cleanup stops it); its URL in $tmp/name.url
  target/release/rasa-gateway --listen 127.0.0.1:0 "${@:2}" >"$tmp/$1.out" 2>"$tmp/$1.err" &
  pids+=($!)
  timeout 30 sed -n '/listening on /{s/.*listening on //p;q}' <(tail -F "$tmp/$1.out") >"$tmp/$1.url" || true
  [ -s "$tmp/$1.url" ] || { echo "bench/writes: gateway $1 did not start:" >&2; cat "$tmp/$1.err" >&2; exit 1; }
}
start big --memory 1GiB --fast-path on --fabric-provider 'tcp;ofi_rxm,shm'
start small --memory 64MiB --arena-size 8MiB --max-object-size 4MiB --fast-path on --fabric-provider 'tcp;ofi_rxm'
big=$(cat "$tmp/big.url")
small=$(cat "$tmp/small.url")
redis_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$redis_port" --save '' --appendonly no --daemonize no >"$tmp/redis.out" 2>&1 &
pids+=($!)
until redis-cli -p "$redis_port" ping >/dev/null 2>&1; do sleep 0.05; done

# 300 × 1 MiB plain PUTs (no ?lease=true), one curl process, one kept-alive connection.
head -c 1048576 /dev/urandom >"$tmp/1m"
burst() { # url → seconds
  local cfg="$tmp/burst.cfg"
  : >"$cfg"
  for i in $(seq 0 299); do printf 'upload-file = "%s"\nurl = "%s/v1/objects/burst/%d"\noutput = "/dev/null"\nwrite-out = "%%{http_code}\\n"\n' "$tmp/1m" "$1" $((i % 40)) >>"$cfg"; done
  local t0 t1
  t0=$(date +%s.%N)
  curl -s -K "$cfg" >"$tmp/codes"
  t1=$(date +%s.%N)
  local bad; bad=$(grep -vc '^201$' "$tmp/codes" || true)
  echo "$(echo "$t1 - $t0" | bc -l) $bad"
}
read -r into_big bad_big < <(burst "$big")
read -r into_small bad_small < <(burst "$small")

echo "## Writes (\`bench/writes.sh\`)"
echo
echo "| 300 × 1 MiB plain PUTs, one curl, default 10 s lease | wall | not 201 |"
echo "| --- | --- | --- |"
printf '| into `--memory 1GiB` | %.2f s | %s |\n' "$into_big" "$bad_big"
printf '| into `--memory 64MiB --arena-size 8MiB --max-object-size 4MiB` | %.2f s (%.2f× the 1 GiB figure) | %s |\n' "$into_small" "$(echo "$into_small / $into_big" | bc -l)" "$bad_small"
echo
echo "Batches against the 1 GiB gateway, its memory written through once first (Python \`rasa_client\` with \`fast_path=\"off\"\`: plain writes, nothing leased; release build) and redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p') with redis-py $(.venv/bin/python -c 'import redis; print(redis.__version__)'), median of ${WRITE_ROUNDS:-15}:"
echo
.venv/bin/python bench/writes_bench.py "$big" "$redis_port"
