#!/usr/bin/env bash
# Installs what building and testing Rasa needs on a Debian machine, when it is missing.
# Safe to run again: it only installs what is absent. Used by `make run` and `make test`.
#
#   scripts/setup.sh            install what is missing to build, run and test (make test)
#   scripts/setup.sh --run      only what building and running the gateway needs (make run):
#                               a C toolchain, libfabric, clang for bindgen, protoc
#   scripts/setup.sh --dist     what `make dist` needs: --run's, python3's venv, strip
#   scripts/setup.sh --bench    also what `make bench` compares Rasa with (wrk, nginx,
#                               Varnish, memcached, GNU time, etcd, redis, and Mooncake
#                               Store in a venv of its own, .venv-bench) and valgrind
#   scripts/setup.sh --dry-run  print the Debian packages it would install, one per line
#                               (other steps, e.g. cargo install, go to stderr); install nothing
#
# Every dependency is detected the way the build or the tests use it, never by a look-alike:
#   - libclang: the file names clang-sys (bindgen) loads — libclang.so, libclang-*.so,
#     libclang.so.*, libclang-*.so.* — in the directories clang-sys searches, excluding
#     libclang-cpp (the C++ library, which clang-sys ignores too);
#   - clang's own headers (stddef.h, …) that bindgen's clang needs to parse libfabric's;
#   - libfabric: `pkg-config --exists libfabric` and its header rdma/fabric.h;
#   - protoc and its well-known protos (etcd-client's build compiles etcd's .proto files,
#     which import google/protobuf/descriptor.proto): by compiling a file that imports them;
#   - tools (cc, g++, curl, openssl, python3's venv, s3s-fs, etcd, chromium, mdbook, kubectl's
#     kustomize): by running them.
#
# RASA_SETUP_SYSROOT=DIR looks for libraries and headers under DIR instead of /
# (tests build fake trees with it). RASA_SETUP_SKIP_TEST_TOOLS=1 is --run (image builds).
set -euo pipefail

dry_run=0
bench=0
dist=0
for arg in "$@"; do
  case "$arg" in
    --dry-run | -n) dry_run=1 ;;
    --bench) bench=1 ;;
    --run) RASA_SETUP_SKIP_TEST_TOOLS=1 ;;
    --dist) RASA_SETUP_SKIP_TEST_TOOLS=1 dist=1 ;;
    -h | --help)
      sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    *)
      echo "setup: unknown argument $arg (try --help)" >&2
      exit 2
      ;;
  esac
done

root=${RASA_SETUP_SYSROOT:-}
root=${root%/}
skip_test_tools=${RASA_SETUP_SKIP_TEST_TOOLS:-0}

# The directory globs clang-sys searches on Linux (build/common.rs, DIRECTORIES_LINUX),
# after $LIBCLANG_PATH and `llvm-config --libdir`.
libclang_dirs() {
  if [ -z "$root" ]; then
    [ -n "${LIBCLANG_PATH:-}" ] && echo "$LIBCLANG_PATH"
    command -v llvm-config >/dev/null 2>&1 && llvm-config --libdir 2>/dev/null
  fi
  local g
  for g in "/usr/local/llvm*/lib*" "/usr/local/lib*/*/*" "/usr/local/lib*/*" "/usr/local/lib*" \
    "/usr/lib*/*/*" "/usr/lib*/*" "/usr/lib*"; do
    compgen -G "$root$g" || true
  done
}

has_libclang() {
  local dir f name
  while IFS= read -r dir; do
    [ -d "$dir" ] || continue
    for f in "$dir"/libclang.so "$dir"/libclang-*.so "$dir"/libclang.so.* "$dir"/libclang-*.so.*; do
      [ -e "$f" ] || continue
      name=${f##*/}
      case "$name" in *-cpp.*) continue ;; esac # libclang-cpp: not libclang
      return 0
    done
  done < <(libclang_dirs)
  return 1
}

# clang's resource headers (stddef.h, stdint.h, …): bindgen's clang needs them to parse
# libfabric's headers. Debian ships them in libclang-common-N-dev (pulled in by clang and
# libclang-dev).
has_clang_headers() {
  compgen -G "$root/usr/lib/llvm-*/lib/clang/*/include/stddef.h" >/dev/null ||
    compgen -G "$root/usr/lib/clang/*/include/stddef.h" >/dev/null ||
    compgen -G "$root/usr/local/lib/clang/*/include/stddef.h" >/dev/null
}

# pkg-config as the build runs it (fastpath/build.rs, which prefers the AWS EFA installer's
# libfabric under /opt/amazon/efa), or inside RASA_SETUP_SYSROOT.
pc() {
  local efa="$root/opt/amazon/efa/lib64/pkgconfig:$root/opt/amazon/efa/lib/pkgconfig"
  if [ -n "$root" ]; then
    PKG_CONFIG_SYSROOT_DIR="$root" \
      PKG_CONFIG_LIBDIR="$efa:$root/usr/lib/x86_64-linux-gnu/pkgconfig:$root/usr/lib/aarch64-linux-gnu/pkgconfig:$root/usr/lib/pkgconfig:$root/usr/share/pkgconfig" \
      pkg-config "$@"
  else
    PKG_CONFIG_PATH="$efa${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}" pkg-config "$@"
  fi
}

has_libfabric() {
  pc --exists libfabric 2>/dev/null || return 1
  # Debian's .pc gives no include path; build.rs then uses /usr/include.
  local inc
  inc=$(pc --variable=includedir libfabric 2>/dev/null || true)
  inc=${inc#"$root"}
  [ -e "$root${inc:-/usr/include}/rdma/fabric.h" ] || [ -e "$root/usr/include/rdma/fabric.h" ]
}

runs() { "$@" >/dev/null 2>&1; }

# protoc as prost-build runs it ($PROTOC, else protoc on PATH), with the well-known protos
# on its default include path (Debian: libprotobuf-dev; protobuf-compiler alone lacks them).
has_protoc_with_well_known_protos() {
  if [ -n "$root" ]; then # a sysroot's protoc cannot be run: look for the files instead
    [ -x "$root/usr/bin/protoc" ] && [ -e "$root/usr/include/google/protobuf/descriptor.proto" ]
    return
  fi
  local protoc=${PROTOC:-protoc} dir ok=1
  runs "$protoc" --version || return 1
  dir=$(mktemp -d)
  printf 'syntax = "proto3";\nimport "google/protobuf/descriptor.proto";\nimport "google/protobuf/struct.proto";\n' >"$dir/probe.proto"
  runs "$protoc" -I "$dir" --descriptor_set_out="$dir/out.pb" "$dir/probe.proto" && ok=0
  rm -rf "$dir"
  return $ok
}

need_apt=()
need() {
  local p
  for p in "$@"; do
    case " ${need_apt[*]-} " in *" $p "*) ;; *) need_apt+=("$p") ;; esac
  done
}

runs pkg-config --version || need pkg-config
has_libfabric || need libfabric-dev
has_libclang || need libclang-dev
has_clang_headers || need clang
runs cc --version || need build-essential
runs curl --version || need curl
# The cluster's etcd client is generated from etcd's .proto files at build time.
if ! has_protoc_with_well_known_protos; then
  if [ -n "$root" ]; then
    [ -x "$root/usr/bin/protoc" ] || need protobuf-compiler
  else
    runs "${PROTOC:-protoc}" --version || need protobuf-compiler
  fi
  need libprotobuf-dev
fi
if [ "$skip_test_tools" != 1 ]; then
  # The TLS tests make certificates the way users do (openssl req -x509 …).
  runs openssl version || need openssl
  # The cluster tests start a real etcd (Debian's 3.4).
  runs etcd --version || need etcd-server
  # The status page's test loads /ui in headless Chromium.
  runs chromium --version || need chromium
  # The S3 clients' suite copies with rclone (the others come from PyPI).
  runs rclone version || need rclone
  # The Kubernetes manifests are rendered offline by kubectl's kustomize
  # (scripts/k8s-check.sh; it needs kustomize v4 or later, kubectl 1.21 or later).
  runs kubectl kustomize --help || need kubernetes-client
  # The release's systemd unit is checked with `systemd-analyze verify` (scripts/dist-check.sh).
  runs systemd-analyze --version || need systemd
  # The NIXL plugin's C++20 engine (scripts/nixl-plugin.sh), loaded by NIXL in the engines' tests.
  runs g++ --version || need g++
  # bench/replicas.sh (make test's short run): network namespaces, links shaped by tc.
  runs ip -V || need iproute2
  runs tc -V || need iproute2
fi
if [ "$dist" = 1 ] || [ "$skip_test_tools" != 1 ]; then
  # make dist: maturin (pinned, in a venv) builds the wheel; binutils' strip the binaries.
  # The tests' Python tools (the SDK's, the API fuzzer, the S3 clients) use venvs too.
  runs python3 --version || need python3
  runs python3 -m venv --help || need python3-venv
  runs python3 -c 'import ensurepip' || need python3-venv
  runs strip --version || need binutils
fi
if [ "$bench" = 1 ]; then
  # What the benchmarks run next to Rasa (bench/*.sh), each detected by running it.
  command -v wrk >/dev/null 2>&1 || need wrk # (`wrk --version` exits 1)
  runs nginx -v || need nginx
  runs varnishd -V || need varnish
  runs memcached -V || need memcached
  runs /usr/bin/time -f %e true || need time
  runs etcd --version || need etcd-server
  # bench/writes.sh: put_many next to redis's pipelined SET.
  runs redis-server --version || need redis-server
  # bench/instructions.sh: a request's user-space instructions, counted by callgrind.
  runs valgrind --version || need valgrind
fi

# The S3-compatible server the read-through tests start (newer versions need a newer Rust).
need_s3s=0
if [ "$skip_test_tools" != 1 ] && ! runs s3s-fs --help; then
  need_s3s=1
fi
# The book's builder (scripts/docs.sh: make docs, and make test's check of the book).
need_mdbook=0
if [ "$skip_test_tools" != 1 ] && ! runs mdbook --version; then
  need_mdbook=1
fi

# bench/mooncake.sh: Mooncake Store (its master, client and Python module), pinned, in a
# venv of its own (its dependencies never meet the SDK's), detected by running its master.
bench_venv="$(cd "$(dirname "$0")/.." && pwd)/.venv-bench"
need_mooncake=0
if [ "$bench" = 1 ] && ! runs "$bench_venv/bin/mooncake_master" --version; then
  need_mooncake=1
fi

if [ "$dry_run" = 1 ]; then
  for p in ${need_apt[@]+"${need_apt[@]}"}; do echo "$p"; done
  [ "$need_s3s" = 1 ] && echo "setup: would also run: cargo install s3s-fs@0.14.1" >&2
  [ "$need_mdbook" = 1 ] && echo "setup: would also run: cargo install mdbook@0.5.4" >&2
  [ "$need_mooncake" = 1 ] && echo "setup: would also run: pip install mooncake-transfer-engine-efa-non-cuda==0.3.13.post1 (.venv-bench)" >&2
  exit 0
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
if [ "$skip_test_tools" != 1 ]; then # make test checks formatting and lints
  for comp in rustfmt clippy; do
    if ! cargo "${comp/rustfmt/fmt}" --version >/dev/null 2>&1; then
      echo "setup: adding rustup component $comp" >&2
      rustup component add "$comp"
    fi
  done
fi

if [ "$need_s3s" = 1 ]; then
  echo "setup: installing s3s-fs 0.14.1 (cargo install, a few minutes)" >&2
  cargo install s3s-fs@0.14.1 --locked --features binary
fi
if [ "$need_mooncake" = 1 ]; then
  echo "setup: installing Mooncake Store 0.3.13.post1 into .venv-bench (pip)" >&2
  python3 -m venv "$bench_venv"
  "$bench_venv/bin/pip" install -q --disable-pip-version-check \
    mooncake-transfer-engine-efa-non-cuda==0.3.13.post1
fi
if [ "$need_mdbook" = 1 ]; then
  echo "setup: installing mdbook 0.5.4 (cargo install, about 2 minutes)" >&2
  cargo install mdbook@0.5.4 --locked --no-default-features --features search
fi
