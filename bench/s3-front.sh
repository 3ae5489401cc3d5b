#!/usr/bin/env bash
# Rasa's S3 listener next to s3s-fs (an S3 server over a directory), same machine, same
# run: `aws s3 cp` of 256 MiB up and down, and boto3 GETs of 1 KiB and 1 MiB objects.
# Prints a Markdown section; `make bench` includes it in bench/results.md.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q --release --locked --workspace --bins >&2
./scripts/s3-clients.sh --co -q >/dev/null # installs the pinned clients into their venv
venv=${RASA_S3_CLIENTS_VENV:-target/s3-clients-venv}
tmp=$(mktemp -d)
pids=()
trap 'kill ${pids[@]+"${pids[@]}"} 2>/dev/null || true; rm -rf "$tmp"' EXIT
mkdir -p "$tmp/s3/bench"
NO_COLOR=1 RUST_LOG=s3s_fs=info s3s-fs --host 127.0.0.1 --port 0 --access-key bench --secret-key bench-secret \
  "$tmp/s3" >"$tmp/s3s.out" 2>/dev/null &
pids+=($!)
target/release/rasa-gateway s3-key new bench --scopes read,write --file "$tmp/keys" >"$tmp/key" 2>/dev/null
read -r key secret <"$tmp/key"
target/release/rasa-gateway --listen 127.0.0.1:0 --s3-listen 127.0.0.1:0 --s3-bucket bench \
  --s3-credentials-file "$tmp/keys" --memory 2GiB --fast-path off >"$tmp/rasa.out" 2>/dev/null &
pids+=($!)
# Each server prints its address once it listens; wait for those lines (bounded).
first_line() { timeout 30 sed -n "/$2/{s/.*$2//p;q}" <(tail -F "$1"); }
s3s=$(first_line "$tmp/s3s.out" "server is running at ")
rasa=$(first_line "$tmp/rasa.out" "S3 on ")
[ -n "$s3s" ] && [ -n "$rasa" ] || { echo "bench/s3-front: a server did not start" >&2; exit 1; }
head -c $((256 << 20)) /dev/urandom >"$tmp/big"
cp_time() { # endpoint key secret args...
  local url=$1 k=$2 s=$3; shift 3
  local t0 t1
  t0=$(date +%s.%N)
  AWS_ACCESS_KEY_ID=$k AWS_SECRET_ACCESS_KEY=$s AWS_DEFAULT_REGION=us-east-1 AWS_CONFIG_FILE=/dev/null \
    "$venv/bin/aws" --endpoint-url "$url" s3 cp --only-show-errors "$@"
  t1=$(date +%s.%N)
  echo "$t1 - $t0" | bc -l
}
row() { # name url key secret
  local up down
  up=$(cp_time "$2" "$3" "$4" "$tmp/big" s3://bench/big)
  down=$(cp_time "$2" "$3" "$4" s3://bench/big "$tmp/down")
  cmp -s "$tmp/big" "$tmp/down" || { echo "bench/s3-front: $1 returned other bytes" >&2; exit 1; }
  rm -f "$tmp/down"
  printf '| %s | %.2f s (%.0f MB/s) | %.2f s (%.0f MB/s) |\n' "$1" "$up" "$(echo "268.435456/$up" | bc -l)" "$down" "$(echo "268.435456/$down" | bc -l)"
}
echo "## S3 listener: Rasa next to s3s-fs (\`bench/s3-front.sh\`)"
echo
echo "\`aws s3 cp\` (aws-cli $("$venv/bin/aws" --version 2>&1 | cut -d' ' -f1 | cut -d/ -f2), multipart above 8 MiB) of a 256 MiB file, one run each, same machine:"
echo
echo "| server | upload | download |"
echo "| --- | --- | --- |"
row "Rasa S3 listener (memory)" "$rasa" "$key" "$secret"
row "s3s-fs (files)" "$s3s" bench bench-secret
echo
"$venv/bin/python" bench/s3_front.py "$rasa" "$key" "$secret" "$s3s" bench bench-secret
