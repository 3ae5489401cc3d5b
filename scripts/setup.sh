#!/usr/bin/env bash
# Installs what building and testing Rasa needs on a Debian machine, when it is missing.
# Safe to run again: it only installs what is absent. Used by `make run` and `make test`.
set -euo pipefail

need_apt=()
pkg-config --version >/dev/null 2>&1 || need_apt+=(pkg-config)
pkg-config --exists libfabric 2>/dev/null || need_apt+=(libfabric-dev)
# bindgen (fast path) needs libclang.
compgen -G "/usr/lib/llvm-*/lib/libclang*.so*" >/dev/null || need_apt+=(libclang-dev clang)
command -v cc >/dev/null 2>&1 || need_apt+=(build-essential)
command -v curl >/dev/null 2>&1 || need_apt+=(curl)
# The API fuzzer (schemathesis) runs in a virtualenv.
if [ "${RASA_SETUP_SKIP_TEST_TOOLS:-0}" != 1 ]; then
  command -v python3 >/dev/null 2>&1 || need_apt+=(python3)
  python3 -m venv --help >/dev/null 2>&1 || need_apt+=(python3-venv)
  python3 -c 'import ensurepip' >/dev/null 2>&1 || need_apt+=(python3-venv)
fi

if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing ${need_apt[*]} (apt-get)" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo not found; install Rust from https://rustup.rs" >&2
  exit 1
fi
for comp in rustfmt clippy; do
  if ! cargo "${comp/rustfmt/fmt}" --version >/dev/null 2>&1; then
    echo "setup: adding rustup component $comp" >&2
    rustup component add "$comp"
  fi
done

# The S3-compatible server the read-through tests start (newer versions need a newer Rust).
# RASA_SETUP_SKIP_TEST_TOOLS=1 skips it (image builds).
if [ "${RASA_SETUP_SKIP_TEST_TOOLS:-0}" != 1 ] && ! command -v s3s-fs >/dev/null 2>&1; then
  echo "setup: installing s3s-fs 0.14.1 (cargo install, a few minutes)" >&2
  cargo install s3s-fs@0.14.1 --locked --features binary
fi
