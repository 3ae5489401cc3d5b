#!/usr/bin/env bash
# make dist: what users install, built into target/dist/ (issue 67):
#
#   rasa-VERSION-ARCH-linux.tar.gz   the gateway and the CLI (release, stripped, `--version`
#                                    naming the commit), NIXL's RASA plugin
#                                    (lib/nixl/libplugin_RASA.so, no debug information), an
#                                    example rasa.toml, a hardened systemd unit, README,
#                                    LICENSE and CHANGELOG
#   rasa_client-VERSION-cp311-abi3-manylinux_2_34_ARCH.whl
#                                    the Python SDK: one wheel for CPython >= 3.11 (the
#                                    buffer protocol is in the stable ABI from 3.11), glibc
#                                    >= 2.34; libfabric is loaded at run time, not bundled
#   SHA256SUMS
#
# The archive is deterministic (file times from the commit, owner root, names sorted, gzip
# without a time stamp): the same binaries make the same tarball. scripts/dist-check.sh tests what this builds.
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/dist
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
[ -n "$version" ] || { echo "dist: no [workspace.package] version in Cargo.toml" >&2; exit 1; }
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
if [ "$commit" != unknown ] && [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  commit="$commit-dirty"
fi
when=$(git log -1 --format=%ct 2>/dev/null || date +%s)
name=rasa-$version-$(uname -m)-linux
start=$(date +%s)

# shellcheck source=scripts/venv.sh
. scripts/venv.sh
venv_with target/dist-venv scripts/dist-requirements.txt dist

echo "dist: building rasa-gateway and rasa $version (commit $commit), release" >&2
RASA_BUILD="$version (commit $commit)" \
  cargo build -q --release --locked -p rasa-gateway -p rasa-cli --bins
echo "dist: building NIXL's RASA plugin, release" >&2
./scripts/nixl-plugin.sh --release >/dev/null

mkdir -p "$out"
rm -f "$out"/rasa-*.tar.gz "$out"/rasa_client-*.whl "$out/SHA256SUMS"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/$name/bin" "$stage/$name/lib/nixl"
for bin in rasa-gateway rasa; do
  strip -o "$stage/$name/bin/$bin" "target/release/$bin"
done
# The plugin keeps its symbol table: test_nixl_rasa.py reads its engine's from it.
strip --strip-debug -o "$stage/$name/lib/nixl/libplugin_RASA.so" target/release/nixl/libplugin_RASA.so
"$stage/$name/bin/rasa-gateway" config example >"$stage/$name/rasa.toml"
cp deploy/systemd/rasa-gateway.service "$stage/$name/"
cp deploy/release/README.md LICENSE CHANGELOG.md "$stage/$name/"
chmod 0755 "$stage/$name" "$stage/$name/bin" "$stage/$name/bin/"* "$stage/$name/lib" "$stage/$name/lib/nixl"
chmod 0644 "$stage/$name/lib/nixl/libplugin_RASA.so"
chmod 0644 "$stage/$name/"*.* "$stage/$name/LICENSE"
tar -C "$stage" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$when" -cf - "$name" |
  gzip -9n >"$out/$name.tar.gz"

echo "dist: building the wheel (maturin, release)" >&2
VIRTUAL_ENV=$PWD/target/dist-venv target/dist-venv/bin/maturin build -q --release --locked \
  --strip --compatibility manylinux_2_34 -m python/Cargo.toml --out "$out" >&2

(cd "$out" && sha256sum -- *.tar.gz *.whl >SHA256SUMS)
echo "dist: in $(($(date +%s) - start)) s:" >&2
(cd "$out" && ls -l -- *.tar.gz *.whl SHA256SUMS) >&2
