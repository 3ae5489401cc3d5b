#!/usr/bin/env bash
# Rasa next to Mooncake Store (issue 63) in one run: writes and reads of 256 × 64 KiB and
# 16 × 16 MiB and a 4 KiB get, Rasa's default Python client (one-sided over shm), over tcp
# and over HTTP, Mooncake over TCP and in its same-host mode (bench/mooncake_bench.py).
# Release builds, loopback; every server started here on 127.0.0.1 and stopped by PID.
# Prints Markdown; `make bench` puts it in bench/results.md.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh --bench >&2
cargo build -q --release --locked -p rasa-gateway --bins >&2
./scripts/python.sh --release >&2
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { # port name
  local until=$((SECONDS + 30))
  until python3 -c "import socket; socket.create_connection(('127.0.0.1', $1), 1)" 2>/dev/null; do
    [ $SECONDS -lt $until ] || { echo "bench/mooncake: $2 did not listen on $1 within 30 s" >&2; cat "$tmp/$2.err" >&2; exit 1; }
    sleep 0.1
  done
}

target/release/rasa-gateway --listen 127.0.0.1:0 --memory 4GiB --max-object-size 64MiB \
  --fast-path on --fabric-provider 'tcp;ofi_rxm,shm' >"$tmp/rasa.out" 2>"$tmp/rasa.err" &
pids+=($!)
rasa=$(timeout 30 sed -n '/listening on /{s/.*listening on //p;q}' <(tail -F "$tmp/rasa.out")) || true
[ -n "$rasa" ] || { echo "bench/mooncake: the gateway did not start" >&2; cat "$tmp/rasa.err" >&2; exit 1; }
# Two of 1 GiB for the rounds that turn memory over (issue 63): default warm memory (all
# of it faulted in ahead, at start), and a quarter of it (the earlier default).
small() { # name args... → starts it; its URL is then in $tmp/name.url
  target/release/rasa-gateway --listen 127.0.0.1:0 --memory 1GiB --max-object-size 64MiB \
    --fast-path on --fabric-provider 'tcp;ofi_rxm,shm' "${@:2}" >"$tmp/$1.out" 2>"$tmp/$1.err" &
  pids+=($!) # not in a subshell: the cleanup stops it
  timeout 30 sed -n '/listening on /{s/.*listening on //p;q}' <(tail -F "$tmp/$1.out") >"$tmp/$1.url" || true
  [ -s "$tmp/$1.url" ] || { echo "bench/mooncake: gateway $1 did not start" >&2; cat "$tmp/$1.err" >&2; exit 1; }
}
small whole
small quarter --warm-memory 256MiB
quarter=$(cat "$tmp/quarter.url")
whole=$(cat "$tmp/whole.url")

# Every gateway's warm memory faulted in before the first round (`rasa_arena_bytes_warm` at
# its --warm-memory): a gateway still faulting pages in shares the cores with whichever peer
# is measured then (on a fresh VM, 1 GiB took seconds of a core).
wait_warm() { # url bytes name
  local until=$((SECONDS + 60)) got
  while :; do
    got=$(curl -sf "$1/metrics" | awk '/^rasa_arena_bytes_warm /{printf "%d", $2}')
    [ "${got:-0}" -ge "$2" ] && return 0
    [ $SECONDS -lt $until ] || {
      echo "bench/mooncake: gateway $3 had ${got:-no} bytes of its $2 of warm memory (rasa_arena_bytes_warm) after 60 s" >&2
      exit 1
    }
    sleep 0.1
  done
}
wait_warm "$rasa" $((1 << 30)) main
wait_warm "$whole" $((1 << 30)) whole
wait_warm "$quarter" $((256 << 20)) quarter

mc=.venv-bench/bin
rpc=$(free_port); meta=$(free_port); client=$(free_port)
"$mc/mooncake_master" --rpc_address=127.0.0.1 --rpc_port="$rpc" --enable_http_metadata_server=true \
  --http_metadata_server_host=127.0.0.1 --http_metadata_server_port="$meta" \
  >"$tmp/master.out" 2>"$tmp/master.err" &
pids+=($!)
wait_port "$rpc" master
wait_port "$meta" master
"$mc/mooncake_client" --host=127.0.0.1 --port="$client" --protocol=tcp --global_segment_size="4 GB" \
  --master_server_address="127.0.0.1:$rpc" --metadata_server="http://127.0.0.1:$meta/metadata" \
  >"$tmp/client.out" 2>"$tmp/client.err" &
pids+=($!)
wait_port "$client" client

site=$(.venv-bench/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "## Rasa next to Mooncake Store (\`bench/mooncake.sh\`)"
echo
echo "Mooncake Store $("$mc/mooncake_master" --version | sed -n 's/.*version \([^ ]*\).*/\1/p') (PyPI \`mooncake-transfer-engine-efa-non-cuda\`): its master and a \`mooncake_client\` holding 4 GB, on loopback; Rasa's release gateway with \`--fabric-provider 'tcp;ofi_rxm,shm'\`. Python clients in one process, peers in turn round by round, every read checked byte-exact, reads into registered memory:"
echo
MOONCAKE_SITE="$site" .venv/bin/python bench/mooncake_bench.py "$rasa" "127.0.0.1:$rpc" \
  "http://127.0.0.1:$meta/metadata" "127.0.0.1:$client" \
  "default --warm-memory (all of 1 GiB)=$whole" "--warm-memory 256MiB=$quarter"
