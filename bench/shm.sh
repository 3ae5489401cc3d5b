#!/usr/bin/env bash
# One-sided reads over libfabric's shm (the same host) next to tcp;ofi_rxm and HTTP, in
# one run (issue 33): the SDK benchmarks of `make bench` (fastpath_bench: one reader,
# 4 KiB / 1 MiB / 16 MiB, with gateway CPU per GB; concurrency_bench: 1–16 readers of one
# client) against a release gateway on each provider, and the ceiling — process_vm_readv
# between two processes, which is what shm's reader does — measured here by a child
# process reading its parent's buffer. Prints a Markdown section; `make bench` includes it.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q --release --locked -p rasa-gateway -p rasa-client --bins --examples >&2
tmp=$(mktemp -d)
pids=()
trap 'kill ${pids[@]+"${pids[@]}"} 2>/dev/null || true; rm -rf "$tmp"' EXIT
first_line() { timeout 30 sed -n "/$2/{s/.*$2//p;q}" <(tail -F "$1"); }

ceiling() { # SIZE ROUNDS: GB/s of process_vm_readv from a child into its own buffer
  python3 bench/ceiling.py "$1" "$2"
}

declare -A url pid
for provider in shm 'tcp;ofi_rxm'; do
  RUST_LOG=warn target/release/rasa-gateway --listen 127.0.0.1:0 --fast-path on \
    --fabric-provider "$provider" --memory 2GiB >"$tmp/gw.out" 2>/dev/null &
  pids+=($!)
  pid[$provider]=$!
  url[$provider]=$(first_line "$tmp/gw.out" "listening on ")
  target/release/examples/fastpath_bench "${url[$provider]}" "${pid[$provider]}" >"$tmp/one-$provider.md"
  target/release/examples/concurrency_bench "${url[$provider]}" "${pid[$provider]}" >"$tmp/many-$provider.md"
  kill "${pid[$provider]}"
done
c4k=$(ceiling 4096 20000)
c1m=$(ceiling 1048576 2000)
c16m=$(ceiling 16777216 200)

echo "## One-sided reads over shm (\`bench/shm.sh\`)"
echo
echo "The ceiling, \`process_vm_readv\` from another process (what shm's reader does): 4 KiB $c4k GB/s, 1 MiB $c1m GB/s, 16 MiB $c16m GB/s."
echo
echo "### shm, one reader"
echo
cat "$tmp/one-shm.md"
echo
echo "### tcp;ofi_rxm, one reader (same run)"
echo
cat "$tmp/one-tcp;ofi_rxm.md"
echo
echo "### shm, readers sharing one client"
echo
cat "$tmp/many-shm.md"
echo
echo "### tcp;ofi_rxm, readers sharing one client (same run)"
echo
cat "$tmp/many-tcp;ofi_rxm.md"
