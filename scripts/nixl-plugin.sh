#!/usr/bin/env bash
# Builds Rasa's NIXL backend plugin, target/PROFILE/nixl/libplugin_RASA.so: the Rust half
# (nixl-plugin/, a static library: the SDK under a C ABI) linked with the C++ engine
# (nixl-plugin/cpp/plugin.cpp, NIXL's nixlBackendEngine). NIXL loads it from the
# directory named by NIXL_PLUGIN_DIR (the engines guide, "NIXL").
#
#   scripts/nixl-plugin.sh            a debug build, target/debug/nixl (what make test loads)
#   scripts/nixl-plugin.sh --release  an optimised one, target/release/nixl (make dist ships it)
#
# Needs cargo and a C++20 compiler (g++ >= 10); nothing of NIXL's (its ABI is declared in
# nixl-plugin/cpp/nixl_abi.h). Only nixl_plugin_init and nixl_plugin_fini are exported.
set -euo pipefail
cd "$(dirname "$0")/.."
profile=debug flags=()
for arg in "$@"; do
  case "$arg" in
    --release) profile=release flags=(--release) ;;
    *) echo "nixl-plugin.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done
command -v "${CXX:-g++}" >/dev/null || { echo "nixl-plugin.sh: no C++ compiler (${CXX:-g++}); scripts/setup.sh installs g++" >&2; exit 1; }
cargo build --locked -q -p rasa-nixl "${flags[@]}"
out=target/$profile/nixl
mkdir -p "$out"
exports=$(mktemp)
trap 'rm -f "$exports"' EXIT
printf '{ global: nixl_plugin_init; nixl_plugin_fini; local: *; };\n' >"$exports"
"${CXX:-g++}" -std=c++20 -O2 -fPIC -shared -fvisibility=hidden -Wall -Wextra -Werror \
  -I nixl-plugin/cpp \
  nixl-plugin/cpp/plugin.cpp "target/$profile/librasa_nixl.a" \
  -o "$out/libplugin_RASA.so.tmp" \
  -Wl,--version-script="$exports" -Wl,--no-undefined -Wl,--gc-sections \
  -lpthread -ldl -lm -lrt -lgcc_s
mv "$out/libplugin_RASA.so.tmp" "$out/libplugin_RASA.so"
echo "$out/libplugin_RASA.so"
