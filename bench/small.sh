#!/usr/bin/env bash
# Small objects: what a cached item costs in memory, Rasa next to memcached, same run.
# N items of 16-byte values under 32-byte keys go into each; the figure is the growth of
# the process's resident memory (VmRSS) divided by N, and for Rasa also that minus its
# frames (192 bytes of arena each, 64-byte aligned: the 64-byte header, the value, one
# 8-byte block-table entry, the 32-byte key and 44 bytes of SHA-256, time, media type and
# key length). Rasa is loaded over HTTP with wrk (a Lua script naming a new key each
# request), memcached with pipelined `set`s. Prints a Markdown section; `make bench`
# includes it in bench/results.md.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-1000000}
./scripts/setup.sh --bench # what the benchmarks compare with, when missing
cargo build -q --release --locked -p rasa-gateway --bins >&2
tmp=$(mktemp -d)
pids=()
trap 'kill ${pids[@]+"${pids[@]}"} 2>/dev/null || true; rm -rf "$tmp"' EXIT
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
first_line() { timeout 30 sed -n "/$2/{s/.*$2//p;q}" <(tail -F "$1"); }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# --- Rasa: one open arena at a time, no fast path (no registration), no origin.
target/release/rasa-gateway --listen 127.0.0.1:0 --memory 4GiB --fast-path off >"$tmp/rasa.out" 2>/dev/null &
rasa_pid=$!
pids+=($rasa_pid)
rasa=$(first_line "$tmp/rasa.out" "listening on ")
curl -sf -X PUT --data-binary 0123456789abcdef "$rasa/v1/objects/warm" >/dev/null
before=$(rss_kb $rasa_pid)
cat >"$tmp/put.lua" <<EOF
local per = math.ceil($N / 2)
local made = 0
local id = 0
local threads = {}
setup = function(thread) thread:set("id", #threads); table.insert(threads, thread) end
init = function() id = wrk.thread:get("id") end
request = function()
  made = made + 1
  if made > per then wrk.thread:stop() end
  -- 32 bytes: "thumbnails/" + 21 digits
  return wrk.format("PUT", string.format("/v1/objects/thumbnails/%06d%015d", id, made), nil, "0123456789abcdef")
end
EOF
# wrk's threads each stop after their share; 64 connections over 2 threads.
wrk -t2 -c64 -d120s -s "$tmp/put.lua" "$rasa" >/dev/null 2>&1 || true
stored=$(curl -sf "$rasa/metrics" | awk '/^rasa_versions_stored_total / {print $2}')
n_rasa=$((stored - 1))
after=$(rss_kb $rasa_pid)
rasa_per=$(( (after - before) * 1024 / n_rasa ))
rasa_meta=$(( rasa_per - 192 ))

# --- memcached, enough memory for all items.
port=$(free_port)
memcached -l 127.0.0.1 -p "$port" -m 4096 -U 0 -t 2 -u root >/dev/null 2>&1 &
mc_pid=$!
pids+=($mc_pid)
for _ in $(seq 100); do (echo stats >/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break; sleep 0.05; done
mc_before=$(rss_kb $mc_pid)
python3 - "$port" "$n_rasa" <<'EOF'
import socket, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
s = socket.create_connection(("127.0.0.1", port))
batch = 2000
for start in range(0, n, batch):
    cmds = b"".join(b"set thumbnails/%021d 0 0 16 noreply\r\n0123456789abcdef\r\n" % i
                    for i in range(start, min(n, start + batch)))
    s.sendall(cmds)
s.sendall(b"stats\r\n")
buf = b""
while not buf.endswith(b"END\r\n"):
    buf += s.recv(65536)
items = [l for l in buf.split(b"\r\n") if l.startswith(b"STAT curr_items ")]
print(items[0].split()[2].decode(), file=open("/dev/stderr", "w"))
EOF
mc_after=$(rss_kb $mc_pid)
mc_per=$(( (mc_after - mc_before) * 1024 / n_rasa ))
if [ -n "${FIGURES:-}" ]; then echo "small $rasa_meta $mc_per" >>"$FIGURES"; fi

echo "## Small objects: memory per cached item, Rasa vs memcached"
echo
echo "$n_rasa items of 16-byte values under 32-byte keys, loaded into each; growth of the process's resident memory per item (\`/proc/PID/status\` VmRSS), same run. memcached $(memcached -V | awk '{print $2}') with \`-m 4096\`; Rasa \`--fast-path off\`."
echo
echo "| | per item (RSS) | beyond the item's bytes |"
echo "| --- | --- | --- |"
echo "| Rasa | $rasa_per B | $rasa_meta B beyond its 192-byte frame (header, value, block table, key, SHA-256, time, media type) |"
echo "| memcached | $mc_per B | (its item header, key and value are all in this) |"
echo
echo "The heap part alone is measured by \`gateway/tests/heap_per_version.rs\` (a counting allocator)."
echo
echo "The index those items live in (\`cargo bench -p rasa-gateway --bench index\`, one thread):"
echo
cargo bench -q --locked -p rasa-gateway --bench index 2>/dev/null | sed 's/^/- /'
