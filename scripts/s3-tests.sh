#!/usr/bin/env bash
# ceph/s3-tests, the public S3 conformance suite, against a freshly started S3 listener:
# `make s3-tests S3_TESTS_DIR=path/to/s3-tests` (a checkout of github.com/ceph/s3-tests;
# CI cannot download it, so it is not part of `make test`). The suite gets its own
# virtualenv from its requirements.txt (target/s3-tests-venv), two S3 keys (its main and
# alt users) made with `rasa-gateway s3-key new`, and a gateway that lets them create
# buckets (--s3-create-buckets: each bucket a namespace) and MD5 ETags (--s3-etag md5, which
# the suite assumes; the default SHA-256 ETags are a documented difference). Prints the pass count by
# feature group (the test name's first words) and in total; pytest's own report is kept
# in target/s3-tests/report.txt. Extra arguments go to pytest (e.g. -k bucket_list).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${S3_TESTS_DIR:?set S3_TESTS_DIR to a checkout of github.com/ceph/s3-tests}
[ -f "$dir/s3tests/functional/test_s3.py" ] || {
  echo "s3-tests: $dir is not a checkout of ceph/s3-tests" >&2
  exit 2
}
cargo build -q --release --locked -p rasa-gateway --bins
. scripts/venv.sh
venv=target/s3-tests-venv
venv_with "$venv" "$dir/requirements.txt" s3-tests
out=target/s3-tests
rm -rf "$out"
mkdir -p "$out"
bin=target/release/rasa-gateway
read -r main_id main_secret < <("$bin" s3-key new main --scopes read,write,buckets --file "$out/keys" 2>/dev/null)
read -r alt_id alt_secret < <("$bin" s3-key new alt --scopes read,write,buckets --file "$out/keys" 2>/dev/null)
: >"$out/namespaces"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
RUST_LOG=warn "$bin" --listen 127.0.0.1:0 --s3-listen "127.0.0.1:$port" --s3-bucket rasa-default \
  --s3-credentials-file "$out/keys" --namespaces "$out/namespaces" --s3-create-buckets \
  --s3-bucket-quota 64MiB --memory 16GiB --fast-path off --s3-etag md5 >"$out/gateway.out" 2>"$out/gateway.log" &
gw=$!
trap 'kill $gw 2>/dev/null' EXIT
timeout 30 sed -n '/listening on/q' <(tail -F "$out/gateway.out")
cat >"$out/s3tests.conf" <<EOF
[DEFAULT]
host = 127.0.0.1
port = $port
is_secure = False
ssl_verify = False
[fixtures]
bucket prefix = rasa-{random}-
iam name prefix = s3-tests-
iam path prefix = /s3-tests/
[s3 main]
display_name = main
user_id = main
email = main@example.com
api_name = default
access_key = $main_id
secret_key = $main_secret
[s3 alt]
display_name = alt
user_id = alt
email = alt@example.com
access_key = $alt_id
secret_key = $alt_secret
[s3 tenant]
display_name = tenant
user_id = tenant
email = tenant@example.com
access_key = $alt_id
secret_key = $alt_secret
tenant = tenant
[iam]
email = iam@example.com
user_id = iam
access_key = $main_id
secret_key = $main_secret
display_name = iam
[iam root]
access_key = $main_id
secret_key = $main_secret
user_id = root
email = root@example.com
[iam alt root]
access_key = $alt_id
secret_key = $alt_secret
user_id = altroot
email = altroot@example.com
EOF
set +e
# The whole run is bounded (the suite has no per-test timeout of its own).
S3TEST_CONF=$PWD/$out/s3tests.conf timeout "${S3_TESTS_TIMEOUT:-3600}" \
  "$venv/bin/python" -m pytest "$dir/s3tests/functional/test_s3.py" \
  -q -p no:cacheprovider -rA -o addopts="" "$@" >"$out/report.txt" 2>&1
set -e
# One line per test: PASSED/FAILED/ERROR name. Grouped by the test name's first two words.
python3 - "$out/report.txt" <<'PY'
import collections, re, sys
counts = collections.defaultdict(lambda: [0, 0])
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"^(PASSED|FAILED|ERROR) \S*::(test_\w+)", line)
    if not m:
        continue
    words = m.group(2)[len("test_"):].split("_")
    group = "_".join(words[:2])
    counts[group][0] += m.group(1) == "PASSED"
    counts[group][1] += 1
print("| group | passed | of |")
print("| --- | --- | --- |")
for g in sorted(counts):
    print(f"| {g} | {counts[g][0]} | {counts[g][1]} |")
total = [sum(c[0] for c in counts.values()), sum(c[1] for c in counts.values())]
print(f"| **all** | **{total[0]}** | **{total[1]}** |")
PY
