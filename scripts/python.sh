#!/usr/bin/env bash
# The Python SDK, ready to use and test: a virtualenv at .venv (repository root) with the
# pinned tools of python/requirements-dev.txt, and rasa_client built into it with
# `maturin develop` (a debug build sharing target/ with cargo; --release for a fast one).
#
#   scripts/python.sh              build and install rasa_client into .venv
#   scripts/python.sh --release    the same, optimised (bench)
#   scripts/python.sh --test       then run its tests (pytest, against the real gateway)
set -euo pipefail
cd "$(dirname "$0")/.."
release=() test=0
for arg in "$@"; do
  case "$arg" in
    --release) release=(--release) ;;
    --test) test=1 ;;
    *) echo "python.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done
venv=.venv
reqs=python/requirements-dev.txt
# shellcheck source=scripts/venv.sh
. scripts/venv.sh
venv_with "$venv" "$reqs" python
VIRTUAL_ENV=$PWD/$venv "$venv/bin/maturin" develop -q --locked ${release[@]+"${release[@]}"} -m python/Cargo.toml
if [ "$test" = 1 ]; then
  # The tests start the gateway binary of the same profile (built as `make test` builds
  # it, with the whole workspace's features: building the one package alone would
  # resolve features differently and rebuild half the dependencies).
  profile=debug
  [ ${#release[@]} -gt 0 ] && profile=release
  cargo build -q --locked ${release[@]+"${release[@]}"} --workspace --bins
  # pytest exits 5 when it collects no test: that, like any failure, fails this script.
  RASA_GATEWAY_BIN=${RASA_GATEWAY_BIN:-target/$profile/rasa-gateway} \
    "$venv/bin/python" -m pytest python/tests -q --timeout 120 -p no:cacheprovider
fi
