#!/usr/bin/env bash
# make dist-check (run by make test): builds the release (scripts/dist.sh) and uses it as
# a user would, on this machine, with nothing of the repository's build in reach:
#
#   1. the tarball, unpacked into an empty directory: `--version` names the version and
#      the commit, the binaries are stripped, the gateway starts from the example
#      rasa.toml and answers the README's curl session; the time from unpacking to
#      /readyz is printed (goal: under 10 s, checked);
#   2. its systemd unit accepted by `systemd-analyze verify` (no warning), its exposure
#      score printed;
#   3. the wheel: metadata checked by `twine check --strict`, installed into a fresh venv
#      with no Rust toolchain on PATH (pip, from the file alone), the README's Python
#      session run against the unpacked gateway, one-sided; again with libfabric made
#      unloadable (RASA_LIBFABRIC pointing nowhere): the same session over HTTP;
#   4. the engines' smoke test (SGLang's HiCache through rasa_client.sglang) with the wheel
#      installed over the engines' base (scripts/engines.sh made it), and NIXL's agent
#      loading the tarball's lib/nixl/libplugin_RASA.so (test_nixl_rasa.py);
#   5. the Dockerfile linted by hadolint, and built from the tarball: no toolchain image,
#      a non-root user, a HEALTHCHECK on /healthz.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
./scripts/dist.sh
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
name=rasa-$version-$(uname -m)-linux
tarball=$root/target/dist/$name.tar.gz
wheel=$(ls "$root"/target/dist/rasa_client-"$version"-*.whl)
tools=$root/target/dist-venv/bin
work=$(mktemp -d)
gateway_pid=
cleanup() {
  [ -n "$gateway_pid" ] && kill "$gateway_pid" 2>/dev/null && wait "$gateway_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "dist-check: $*" >&2
  exit 1
}
# The shell block after the line matching $2 in markdown file $1.
block() {
  awk -v head="$2" '$0 ~ head {h = 1} h && /^```(sh|python)$/ {b = 1; next} b && /^```$/ {exit} b' "$1"
}

(cd target/dist && sha256sum --quiet -c SHA256SUMS) || fail "target/dist/SHA256SUMS does not match"

# 1. The tarball.
t0=$(date +%s%N)
mkdir "$work/release"
tar -xzf "$tarball" -C "$work/release"
dir=$work/release/$name
for f in bin/rasa-gateway bin/rasa lib/nixl/libplugin_RASA.so rasa.toml rasa-gateway.service README.md LICENSE CHANGELOG.md; do
  [ -f "$dir/$f" ] || fail "the tarball has no $f"
done
commit=$(git rev-parse --short=12 HEAD)
for bin in rasa-gateway rasa; do
  got=$("$dir/bin/$bin" --version)
  case "$got" in "$bin $version (commit $commit"*) ;; *) fail "$bin --version: '$got'" ;; esac
  readelf -S "$dir/bin/$bin" | grep -q '\.symtab' && fail "bin/$bin is not stripped"
done
cd "$dir"
coproc GATEWAY { exec bin/rasa-gateway --config rasa.toml --listen 127.0.0.1:0 2>"$work/gateway.err"; }
gateway_pid=$GATEWAY_PID
IFS= read -r -t 10 line <&"${GATEWAY[0]}" || fail "the gateway printed no address in 10 s: $(cat "$work/gateway.err")"
addr=${line#rasa-gateway listening on http://}
[ "$addr" != "$line" ] || fail "unexpected first line from the gateway: $line"
curl -fsS --retry-connrefused --retry 50 --retry-delay 0 --max-time 10 "http://$addr/readyz" >/dev/null ||
  fail "the gateway at $addr is not ready"
ready_ms=$((($(date +%s%N) - t0) / 1000000))
echo "dist-check: tarball unpacked and the gateway ready in $ready_ms ms (http://$addr)"
[ "$ready_ms" -lt 10000 ] || fail "the gateway took $ready_ms ms from unpacking to ready (goal: 10 s)"
block "$root/README.md" '^## Try it' | sed "s/127\.0\.0\.1:8080/$addr/g" >"$work/try.sh"
[ -s "$work/try.sh" ] || fail "no curl session under the README's 'Try it'"
out=$(bash -euo pipefail "$work/try.sh") || fail "the README's curl session failed: $out"
# (the descriptor before the DELETE's status has no newline at its end)
[ "${out: -4}" = $'\n204' ] || [ "${out: -4}" = '}204' ] || fail "the README's curl session ended with: ${out: -200}"
echo "dist-check: the README's curl session answered (the DELETE: 204)"
cli=$(bin/rasa --endpoint "http://$addr" put docs/cli README.md --json >/dev/null &&
  bin/rasa --endpoint "http://$addr" get docs/cli --json) || fail "the CLI failed: $cli"
echo "dist-check: the CLI: $cli"
cd "$root"

# 2. The systemd unit, its commands pointed at the unpacked binaries.
sed "s#/usr/local/bin/#$dir/bin/#g" "$dir/rasa-gateway.service" >"$work/rasa-gateway.service"
verify=$(systemd-analyze verify --man=no "$work/rasa-gateway.service" 2>&1) || fail "systemd-analyze verify: $verify"
[ -z "$verify" ] || fail "systemd-analyze verify warns: $verify"
exposure=$(systemd-analyze security --offline=yes "$work/rasa-gateway.service" 2>&1 | sed -n 's/.*Overall exposure level for [^:]*: //p')
echo "dist-check: the systemd unit verifies; exposure $exposure"

# 3. The wheel, in a fresh venv, with no Rust toolchain on PATH.
"$tools/twine" check --strict "$wheel" >/dev/null || fail "twine check --strict $wheel"
clean_path=/usr/local/bin:/usr/bin:/bin
env -i PATH="$clean_path" sh -c '! command -v cargo && ! command -v rustc' >/dev/null ||
  fail "cargo or rustc is on $clean_path: the wheel's test would not show it needs none"
t1=$(date +%s%N)
env -i PATH="$clean_path" HOME="$work" python3 -m venv "$work/venv"
env -i PATH="$clean_path" HOME="$work" "$work/venv/bin/pip" install -q --no-index --no-deps \
  --disable-pip-version-check "$wheel" || fail "pip install $wheel"
echo "dist-check: wheel $(basename "$wheel") ($(($(stat -c %s "$wheel") / 1024)) KiB) installed in a fresh venv in $((($(date +%s%N) - t1) / 1000000)) ms"
got=$(env -i PATH="$clean_path" "$work/venv/bin/python" -c 'import rasa_client; print(rasa_client.__version__)')
[ "$got" = "$version" ] || fail "the wheel's rasa_client.__version__ is '$got', not $version"
block README.md '^From Python' | sed "s/127\.0\.0\.1:8080/$addr/g" >"$work/session.py"
[ -s "$work/session.py" ] || fail "no Python session in the README"
py() { (cd "$work" && env -i PATH="$clean_path" HOME="$work" "$@" "$work/venv/bin/python" session.py); }
got=$(py) || fail "the README's Python session failed: $got"
[[ "$got" =~ ^1048576\ [^\ ]+\ fabric$ ]] || fail "the README's Python session printed '$got' (expected a one-sided read)"
echo "dist-check: the README's Python session, from the wheel: $got"
got=$(py RASA_LIBFABRIC=/nonexistent/libfabric.so.1) || fail "without libfabric, the Python session failed: $got"
[[ "$got" =~ ^1048576\ [^\ ]+\ http$ ]] || fail "without libfabric, the Python session printed '$got' (expected HTTP)"
echo "dist-check: the same without libfabric: $got"
kill "$gateway_pid" && wait "$gateway_pid" 2>/dev/null || true
gateway_pid=

# 4. The engines' smoke test with the wheel, over the engines' base (scripts/engines.sh
# makes it once per machine; make test has run it by now).
purelib() { "$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
[ -x target/engines-venv/bin/python ] || ./scripts/engines.sh
base_pth=$(purelib target/engines-venv)/rasa-engines-base.pth
if [ -f "$base_pth" ]; then
  python3 -m venv "$work/engines"
  cp "$base_pth" "$(purelib "$work/engines")/"
  "$work/engines/bin/pip" install -q --disable-pip-version-check "$wheel" pytest==9.2.0 pytest-timeout==2.4.0
  mkdir "$work/smoke" && cp python/engines/conftest.py python/engines/test_sglang_rasa.py "$work/smoke/"
  (cd "$work/smoke" && RASA_GATEWAY_BIN="$dir/bin/rasa-gateway" "$work/engines/bin/python" -c \
    'import rasa_client, sys; sys.exit(0 if "/engines/" in rasa_client.__file__ else f"rasa_client from {rasa_client.__file__}")' &&
    RASA_GATEWAY_BIN="$dir/bin/rasa-gateway" "$work/engines/bin/python" -m pytest -q -p no:cacheprovider --disable-warnings .) ||
    fail "the engines' smoke test (SGLang HiCache) with the wheel"
  echo "dist-check: SGLang's HiCache through the wheel's rasa_client.sglang passed"
  mkdir "$work/nixl" && cp python/engines/conftest.py python/engines/test_nixl_rasa.py "$work/nixl/"
  (cd "$work/nixl" && RASA_GATEWAY_BIN="$dir/bin/rasa-gateway" RASA_NIXL_PLUGIN_DIR="$dir/lib/nixl" \
    "$work/engines/bin/python" -m pytest -q -p no:cacheprovider --disable-warnings .) ||
    fail "NIXL's agent with the tarball's lib/nixl/libplugin_RASA.so"
  echo "dist-check: NIXL's agent with the tarball's RASA plugin passed"
else
  fail "no engines' base ($base_pth) after scripts/engines.sh"
fi

# 5. The Dockerfile: linted, and built from the release, not from source.
"$tools/hadolint" --no-color docker/Dockerfile || fail "hadolint docker/Dockerfile (above)"
grep -Eq '^FROM (rust|.*rust:)' docker/Dockerfile && fail "docker/Dockerfile starts from a Rust toolchain image"
grep -Eq 'cargo|rustup|setup\.sh' docker/Dockerfile && fail "docker/Dockerfile builds from source"
grep -Eq "^ARG VERSION=$version\$" docker/Dockerfile || fail "docker/Dockerfile's VERSION is not $version"
grep -Eq '^ADD target/dist/rasa-\$\{VERSION\}-\$\{ARCH\}-linux\.tar\.gz' docker/Dockerfile ||
  fail "docker/Dockerfile does not install the release tarball"
grep -Eq '^USER [1-9][0-9]*' docker/Dockerfile || fail "docker/Dockerfile runs as root"
grep -Eq 'HEALTHCHECK .*' docker/Dockerfile && grep -q '/healthz' docker/Dockerfile ||
  fail "docker/Dockerfile has no HEALTHCHECK on /healthz"
grep -q '^!target/dist/$' .dockerignore || fail ".dockerignore leaves target/dist/ out of the build context"
echo "dist-check: docker/Dockerfile lints clean and installs $name.tar.gz"
