#!/usr/bin/env bash
# Large values and start-up, as a Markdown section on stdout (`make bench` puts it in
# bench/results.md): `rasa get` of a 256 MiB value next to curl, over HTTP and one-sided,
# to /dev/null and to a file, with peak RSS; and what a new CLI process costs before and
# at its first one-sided read. Medians of $ROUNDS runs; a release gateway on loopback.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
./scripts/setup.sh --bench # what the benchmarks compare with, when missing
cargo build --release --locked -p rasa-gateway -p rasa-cli --bins >/dev/null 2>&1
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT
"$PWD/target/release/rasa-gateway" --listen 127.0.0.1:0 --memory 2GiB --max-object-size 512MiB --fast-path on \
  >"$tmp/gw.out" 2>"$tmp/gw.err" &
pids+=($!)
while ! grep -q listening "$tmp/gw.out"; do sleep 0.05; done
gw=$(sed -n 's/.*listening on //p' "$tmp/gw.out")
head -c 268435456 /dev/urandom >"$tmp/big"
head -c 1 /dev/urandom >"$tmp/one"
curl -sf -T "$tmp/big" "$gw/v1/objects/big256" >/dev/null
curl -sf -T "$tmp/one" "$gw/v1/objects/one" >/dev/null
rasa="$PWD/target/release/rasa"
# "seconds peak_kb" of one run of a command.
measure() { /usr/bin/time -f '%e %M' -o "$tmp/t" "$@" >/dev/null 2>&1 || { echo "bench: $* failed" >&2; exit 1; }; cat "$tmp/t"; }
med() { # command... → "median_seconds max_peak_kb"
  local out=(); for _ in $(seq "$ROUNDS"); do out+=("$(measure "$@")"); done
  printf '%s\n' "${out[@]}" | awk '{print $1}' | sort -g | awk '{a[NR]=$1} END {printf "%s ", a[int((NR+1)/2)]}'
  printf '%s\n' "${out[@]}" | awk '{print $2}' | sort -g | tail -1
}
row() { # name "seconds kb" reference_seconds
  read -r s kb <<<"$2"; printf '| %s | %.2f s | %.2fx | %.0f MB |\n' "$1" "$s" "$(echo "$s/$3" | bc -l)" "$(echo "$kb/1024" | bc -l)"; }
read -r curl_s curl_kb <<<"$(med curl -sf -o /dev/null "$gw/v1/objects/big256")"
off_null=$(med "$rasa" --endpoint "$gw" get big256 -o /dev/null --fast-path off)
off_file=$(med "$rasa" --endpoint "$gw" get big256 -o "$tmp/out" --fast-path off)
fab_null=$(med "$rasa" --endpoint "$gw" get big256 -o /dev/null --fast-path required)
fab_file=$(med "$rasa" --endpoint "$gw" get big256 -o "$tmp/out" --fast-path required)
cmp -s "$tmp/out" "$tmp/big" || { echo "bench: the file differs" >&2; exit 1; }
curl_file=$(med curl -sf -o "$tmp/out" "$gw/v1/objects/big256")
# Start-up: milliseconds of one run, median of 9.
ms() { python3 - "$@" <<'PY'
import subprocess, sys, time
runs = []
for _ in range(9):
    t = time.perf_counter(); subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    runs.append((time.perf_counter() - t) * 1000)
print("%.0f" % sorted(runs)[4])
PY
}
help_ms=$(ms "$rasa" --help)
stat_ms=$(ms "$rasa" --endpoint "$gw" stat big256)
one_http_ms=$(ms "$rasa" --endpoint "$gw" get one -o /dev/null --fast-path off)
one_fab_ms=$(ms "$rasa" --endpoint "$gw" get one -o /dev/null --fast-path required)
read -r _ one_fab_kb <<<"$(med "$rasa" --endpoint "$gw" get one -o /dev/null --fast-path required)"

echo "## Large values and start-up (\`bench/large.sh\`)"
echo
echo "A 256 MiB value, medians of $ROUNDS runs (peak RSS: the largest), next to \`curl -o\` from the same gateway:"
echo
read -r curl_file_s _ <<<"$curl_file"
echo "| command | time | / curl, same output | peak RSS |"
echo "| --- | --- | --- | --- |"
row "\`curl -o /dev/null\`" "$curl_s $curl_kb" "$curl_s"
row "\`rasa get -o /dev/null --fast-path off\`" "$off_null" "$curl_s"
row "\`rasa get -o /dev/null --fast-path required\`" "$fab_null" "$curl_s"
row "\`curl -o FILE\`" "$curl_file" "$curl_file_s"
row "\`rasa get -o FILE --fast-path off\`" "$off_file" "$curl_file_s"
row "\`rasa get -o FILE --fast-path required\`" "$fab_file" "$curl_file_s"
echo
echo "A new \`rasa\` process (median of 9): \`--help\` $help_ms ms; \`stat\` $stat_ms ms; \`get\` of a 1-byte value over HTTP $one_http_ms ms,"
echo "one-sided $one_fab_ms ms with a peak RSS of $(( one_fab_kb / 1024 )) MB (loading libfabric and opening a client endpoint)."
