#!/usr/bin/env bash
# Namespaces (issue 31): what they cost a PUT and what 100 small ones take in memory, in one
# run. Two release gateways, fast path on (tcp;ofi_rxm: arenas registered), --memory 4GiB:
# "off" has no --namespaces and takes PUTs at /v1/objects; "on" has 100 namespaces of
# 16 MiB and one of 2 GiB, and takes the same PUTs at /v1/ns/bench/objects. Rounds of
# `wrk -t2 -c16 -d3s` PUTs over 1,000 keys (leases of 1 s: replaced versions are
# reclaimed), alternating between the two; the best round of each is reported. First, one
# 4 KiB value goes into each of the 100 small namespaces of the fresh "on" gateway: arena
# memory allocated (the metric) and resident memory (VmRSS) before and after. Prints a Markdown
# section; `make bench` includes it in bench/results.md.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
./scripts/setup.sh --bench >&2
cargo build -q --release --locked -p rasa-gateway --bins >&2
tmp=$(mktemp -d)
pids=()
trap 'kill ${pids[@]+"${pids[@]}"} 2>/dev/null || true; rm -rf "$tmp"' EXIT
rss_mib() { awk '/^VmRSS:/ {printf "%.1f", $2/1024}' "/proc/$1/status"; }
first_line() { timeout 30 sed -n "/$2/{s/.*$2//p;q}" <(tail -F "$1"); }
metric() { curl -sf "$1/metrics" | awk -v m="$2" '$1 == m {print $2}'; }

{
  for i in $(seq 1 100); do echo "small-$i 16MiB"; done
  echo "bench 2GiB"
} >"$tmp/namespaces"
start() { # NAME ARGS...
  local name=$1
  shift
  RUST_LOG=warn target/release/rasa-gateway --listen 127.0.0.1:0 --fast-path on \
    --fabric-provider 'tcp;ofi_rxm' --memory 4GiB --lease 1s --lease-grace 200ms "$@" \
    >"$tmp/$name.out" 2>/dev/null &
  pids+=($!)
  eval "${name}_pid=$!"
  eval "${name}_url=$(first_line "$tmp/$name.out" "listening on ")"
}
start off
start on --namespaces "$tmp/namespaces"
on_idle_rss=$(rss_mib "$on_pid")
off_idle_rss=$(rss_mib "$off_pid")

# 100 small namespaces, one value each.
head -c 4096 /dev/urandom >"$tmp/small"
before_alloc=$(metric "$on_url" rasa_arena_bytes_allocated)
before_rss=$(rss_mib "$on_pid")
for i in $(seq 1 100); do
  curl -sf -X PUT --data-binary @"$tmp/small" "$on_url/v1/ns/small-$i/objects/one" >/dev/null
done
after_alloc=$(metric "$on_url" rasa_arena_bytes_allocated)
after_rss=$(rss_mib "$on_pid")
small_alloc=$(metric "$on_url" 'rasa_namespace_bytes_allocated{namespace="small-1"}')


best() { sort -g | tail -1; }
rows=""
for size in 4096 1048576; do
  head -c "$size" /dev/urandom >"$tmp/body"
  for mode in off on; do
    prefix=/v1/objects
    [ "$mode" = on ] && prefix=/v1/ns/bench/objects
    cat >"$tmp/$mode.lua" <<LUA
local f = io.open("$tmp/body", "rb"); local body = f:read("*a"); f:close()
local n = 0
request = function()
  n = n + 1
  return wrk.format("PUT", string.format("$prefix/b/%d", n % 1000), nil, body)
end
LUA
  done
  : >"$tmp/off.rps"
  : >"$tmp/on.rps"
  for _ in $(seq "$ROUNDS"); do
    for mode in off on; do
      url_var="${mode}_url"
      wrk -t2 -c16 -d3s -s "$tmp/$mode.lua" "${!url_var}" |
        awk '/Requests\/sec/{print $2}' >>"$tmp/$mode.rps"
    done
  done
  off=$(best <"$tmp/off.rps")
  on=$(best <"$tmp/on.rps")
  label="4 KiB"
  [ "$size" = 1048576 ] && label="1 MiB"
  rows+=$(printf '| PUT %s | %.0f | %.0f | %.2f |' "$label" "$off" "$on" "$(echo "$on/$off" | bc -l)")$'\n'
done

echo "## Namespaces (\`bench/namespaces.sh\`)"
echo
echo "Release gateways, fast path on (\`tcp;ofi_rxm\`), \`--memory 4GiB --lease 1s\`: *off* without \`--namespaces\` (PUTs to \`/v1/objects\`), *on* with 100 namespaces of 16 MiB and one of 2 GiB (PUTs to \`/v1/ns/bench/objects\`). \`wrk -t2 -c16 -d3s\` over 1,000 keys, best of $ROUNDS alternating rounds (goal: on ≥ 0.90 × off)."
echo
echo "| | off (req/s) | on (req/s) | on/off |"
echo "| --- | --- | --- | --- |"
printf '%s' "$rows"
echo
echo "Memory of the *on* gateway: idle $on_idle_rss MiB of RSS (*off*: $off_idle_rss MiB). One 4 KiB value put into each of the 100 small namespaces: arena memory allocated $(( ${before_alloc%.*} >> 20 )) → $(( ${after_alloc%.*} >> 20 )) MiB ($(( ${small_alloc%.*} >> 10 )) KiB for each small namespace: one arena of a quarter of its quota, not one \`--arena-size\` arena), RSS $before_rss → $after_rss MiB: arenas of a multiple of 2 MiB are mapped on transparent huge pages, so a namespace's first value makes one 2 MiB page resident — within the arena memory charged to its quota, and the rest of the arena stays unbacked until written."
