#!/usr/bin/env bash
# The inference engines' virtualenv, for the tests that run Rasa behind their own code
# (LMCache's L2 connector contract, vLLM's secondary tier, SGLang's HiCache storage
# backend, NIXL's OBJ backend and Rasa's own NIXL plugin): target/engines-venv, with
# rasa_client built into it, on top of a base of the engines' pinned packages.
#
#   scripts/engines.sh           make (or update) target/engines-venv
#   scripts/engines.sh --test    then run the engines' tests against a real gateway
#
# The base — torch 2.15.0 (PyPI's Linux wheel is the CUDA build: ~3 GB to download, ~5.3
# GB installed, ~5 minutes here; it runs on CPU), lmcache 0.5.6 (+0.9 GB), vllm 0.33.0
# (--no-deps: it pins torch 2.14; +0.9 GB, with the few packages its tiering needs), sglang
# 0.5.23 (--no-deps, with what its HiCache pieces import on CPU; +0.2 GB), nixl-cu12 1.5.1
# (--no-deps; +0.2 GB) — is made once
# per machine under ${RASA_ENGINES_BASE:-~/.cache/rasa/engines-<pins>} and shared by every
# checkout (a .pth file puts its packages on target/engines-venv's path): a fresh clone
# does not download and unpack it again. It is detected by importing the pinned versions.
# The engines' tests come from their source distributions (pip download --no-binary),
# kept next to it.
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH=2.15.0 LMCACHE=0.5.6 VLLM=0.33.0 SGLANG=0.5.23 NIXL=1.5.1
# What vLLM's KV-offloading code imports on CPU (vllm itself goes in --no-deps).
VLLM_DEPS=(cbor2==6.3.0 openai-harmony==0.0.8 openai==3.57.0 cloudpickle==3.1.3 uvloop==0.23.0
  xgrammar==0.2.8 partial-json-parser==0.2.1.1.post7 llguidance==1.7.6 pillow==13.0.0 pybase64==1.5.1)
# What SGLang's HiCache pieces (its KV pools, host pool, storage backends) import on CPU
# (sglang itself goes in --no-deps: its full set is a GPU server's).
SGLANG_DEPS=(orjson==3.13.0 ipython==9.18.1 traitlets==5.16.1 torchvision==0.29.2 dill==0.4.1
  sentencepiece==0.2.3 compressed-tensors==0.20.1 loguru==0.7.3 gguf==0.19.0)
test=0
for arg in "$@"; do
  case "$arg" in
    --test) test=1 ;;
    *) echo "engines.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done
python=${PYTHON:-python3}
base=${RASA_ENGINES_BASE:-$HOME/.cache/rasa/engines-torch$TORCH-lmcache$LMCACHE}
pinned() { # the base imports the pinned versions
  "$base/bin/python" - <<PY 2>/dev/null
import importlib.metadata as m, torch, lmcache
assert m.version("torch") == "$TORCH" and m.version("lmcache") == "$LMCACHE"
PY
}
with_vllm() {
  "$base/bin/python" - <<PY 2>/dev/null
import importlib.metadata as m
import vllm.v1.kv_offload.file_mapper, vllm.v1.kv_offload.tiering.manager
assert m.version("vllm") == "$VLLM"
PY
}
with_sglang() {
  "$base/bin/python" - <<PY 2>/dev/null
import importlib.metadata as m
import sglang.srt.mem_cache.hicache_storage, sglang.srt.mem_cache.pool_host.mha
import sglang.srt.mem_cache.memory_pool, sglang.srt.mem_cache.storage.backend_factory
assert m.version("sglang") == "$SGLANG"
PY
}
with_nixl() {
  "$base/bin/python" - <<PY 2>/dev/null
import importlib.metadata as m
import nixl_cu12._api
assert m.version("nixl-cu12") == "$NIXL"
PY
}
pip_q() { "$base/bin/pip" install -q --no-cache-dir --disable-pip-version-check "$@"; }
if ! pinned; then
  echo "engines: making the base at $base (torch $TORCH, lmcache $LMCACHE: ~3 GB download, ~6.5 GB installed, several minutes)" >&2
  rm -rf "$base"
  "$python" -m venv "$base"
  pip_q "torch==$TORCH" "lmcache==$LMCACHE"
  pinned || { echo "engines: the base does not import torch $TORCH and lmcache $LMCACHE" >&2; exit 1; }
fi
if ! with_vllm; then
  echo "engines: adding vllm $VLLM to the base (--no-deps; ~340 MB download, ~1 minute)" >&2
  pip_q --no-deps "vllm==$VLLM"
  pip_q "${VLLM_DEPS[@]}" 2>&1 | grep -v "^ERROR: pip's dependency resolver\|requires\|incompatible" >&2 || true
  with_vllm || { echo "engines: the base does not import vllm $VLLM's KV offloading" >&2; exit 1; }
fi
if ! with_sglang; then
  echo "engines: adding sglang $SGLANG to the base (--no-deps; ~60 MB download, under a minute)" >&2
  pip_q --no-deps "sglang==$SGLANG" "${SGLANG_DEPS[@]}"
  with_sglang || { echo "engines: the base does not import sglang $SGLANG's HiCache pieces" >&2; exit 1; }
fi
if ! with_nixl; then
  # The CUDA 12 build, imported as nixl_cu12: NIXL's `nixl` front package would pick
  # nixl-cu13 for torch's CUDA 13 build; both run on CPU.
  echo "engines: adding nixl-cu12 $NIXL to the base (--no-deps; ~70 MB download)" >&2
  pip_q --no-deps "nixl-cu12==$NIXL"
  with_nixl || { echo "engines: the base does not import nixl_cu12 $NIXL" >&2; exit 1; }
fi
sdist() { # NAME VERSION: the sdist's tests under $sdists (found through pip's index)
  [ -d "$sdists/$1-$2/tests" ] && return 0
  mkdir -p "$sdists"
  local url
  url=$(curl -fsS "https://pypi.org/simple/$1/" | grep -o "href=\"[^\"]*/$1-$2.tar.gz[^\"]*\"" | head -1 | sed 's/^href="//; s/#.*//; s/"$//')
  [ -n "$url" ] || { echo "engines: no sdist of $1 $2 on the index" >&2; exit 1; }
  curl -fsS -o "$sdists/$1-$2.tar.gz" "$url"
  tar -xzf "$sdists/$1-$2.tar.gz" -C "$sdists" "$1-$2/tests"
}
# The engines' own tests, from their source distributions.
sdists="$base/sdists"
sdist lmcache "$LMCACHE"
sdist vllm "$VLLM"

venv=target/engines-venv
site() { "$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
echo "$(site "$base")" >"$(site "$venv")/rasa-engines-base.pth"
"$venv/bin/pip" install -q --disable-pip-version-check maturin==1.16.0 pytest==9.2.0 pytest-timeout==2.4.0
VIRTUAL_ENV="$PWD/$venv" "$venv/bin/maturin" develop -q --locked -m python/Cargo.toml >&2

if [ "$test" = 1 ]; then
  cargo build -q --locked -p rasa-gateway --bins
  # One engine's tests in a directory of their own: DIR, then files copied in with
  # conftest.py; what else they need is put there by the caller first.
  suite() {
    local work=target/engines-tests/$1; shift
    cp python/engines/conftest.py "$@" "$work/"
    (cd "$work" && "$OLDPWD/$venv/bin/python" -m pytest -q -p no:cacheprovider --disable-warnings .)
  }
  fresh() { rm -rf "target/engines-tests/$1" && mkdir -p "target/engines-tests/$1"; }
  # LMCache's own contract test of native_plugin connectors, its fixtures pointed at
  # RasaConnector against a real gateway (python/engines/conftest.py starts it), and
  # LMCache's StorageManager storing to Rasa and loading back (test_lmcache_rasa.py).
  fresh lmcache
  python/engines/point_at_rasa.py \
    "$sdists/lmcache-$LMCACHE/tests/v1/distributed/test_native_connector_l2_adapter.py" \
    >target/engines-tests/lmcache/test_native_connector_l2_adapter.py
  suite lmcache python/engines/test_lmcache_rasa.py python/engines/test_safetensors_torch.py
  # vLLM's secondary-tier tests adapted to RasaTier, with vLLM's own helpers.
  fresh vllm
  cp "$sdists/vllm-$VLLM/tests/v1/kv_offload/tiering/test_fs_tier.py" target/engines-tests/vllm/vllm_fs_tier.py
  suite vllm python/engines/test_vllm_rasa_tier.py
  # SGLang's unit test of its Mooncake Store HiCache backend pointed at RasaHiCache, and
  # SGLang's own KV pools and backend factory storing and prefetching pages through it.
  fresh sglang
  sglang_dir=$("$venv/bin/python" -c 'import os, sglang; print(os.path.dirname(sglang.__file__))')
  python/engines/point_sglang_at_rasa.py \
    "$sglang_dir/srt/mem_cache/storage/mooncake_store/test_mooncake_store.py" \
    >target/engines-tests/sglang/test_sglang_store_contract.py
  suite sglang python/engines/test_sglang_rasa.py
  # NIXL's OBJ backend (its own agent and S3 plugin) against the S3 listener.
  fresh nixl
  suite nixl python/engines/test_nixl_obj.py
  # Rasa's own NIXL plugin (scripts/nixl-plugin.sh) loaded by NIXL's agent: a process of
  # its own, since NIXL_PLUGIN_DIR replaces NIXL's plugin directory for the process.
  ./scripts/nixl-plugin.sh >/dev/null
  fresh nixl-rasa
  suite nixl-rasa python/engines/test_nixl_rasa.py
fi
