#!/usr/bin/env bash
# The inference engines' virtualenv, for the tests that run Rasa behind their own code
# (LMCache's L2 connector contract today): target/engines-venv, with rasa_client built into
# it, on top of a base of the engines' pinned packages.
#
#   scripts/engines.sh           make (or update) target/engines-venv
#   scripts/engines.sh --test    then run the engines' tests against a real gateway
#
# The base — torch 2.15.0 (PyPI's Linux wheel is the CUDA build: ~3 GB to download, ~5.3
# GB installed, ~5 minutes here; it runs on CPU), lmcache 0.5.6 (+0.9 GB) — is made once
# per machine under ${RASA_ENGINES_BASE:-~/.cache/rasa/engines-<pins>} and shared by every
# checkout (a .pth file puts its packages on target/engines-venv's path): a fresh clone
# does not download and unpack it again. It is detected by importing the pinned versions.
# The engines' tests come from their source distributions (pip download --no-binary),
# kept next to it.
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH=2.15.0 LMCACHE=0.5.6
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
if ! pinned; then
  echo "engines: making the base at $base (torch $TORCH, lmcache $LMCACHE: ~3 GB download, ~6.5 GB installed, several minutes)" >&2
  rm -rf "$base"
  "$python" -m venv "$base"
  "$base/bin/pip" install -q --no-cache-dir --disable-pip-version-check "torch==$TORCH" "lmcache==$LMCACHE"
  pinned || { echo "engines: the base does not import torch $TORCH and lmcache $LMCACHE" >&2; exit 1; }
fi
# The engines' own tests, from their source distributions (found through pip's index).
sdists="$base/sdists"
if [ ! -f "$sdists/lmcache-$LMCACHE/tests/v1/distributed/test_native_connector_l2_adapter.py" ]; then
  mkdir -p "$sdists"
  url=$(curl -fsS "https://pypi.org/simple/lmcache/" | grep -o "href=\"[^\"]*/lmcache-$LMCACHE.tar.gz[^\"]*\"" | head -1 | sed 's/^href="//; s/#.*//; s/"$//')
  [ -n "$url" ] || { echo "engines: no sdist of lmcache $LMCACHE on the index" >&2; exit 1; }
  curl -fsS -o "$sdists/lmcache-$LMCACHE.tar.gz" "$url"
  tar -xzf "$sdists/lmcache-$LMCACHE.tar.gz" -C "$sdists" "lmcache-$LMCACHE/tests"
fi

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
  # LMCache's own contract test of native_plugin connectors, its fixtures pointed at
  # RasaConnector against a real gateway (python/engines/conftest.py starts it).
  work=target/engines-tests/lmcache
  rm -rf "$work" && mkdir -p "$work"
  cp python/engines/conftest.py "$work/"
  python/engines/point_at_rasa.py \
    "$sdists/lmcache-$LMCACHE/tests/v1/distributed/test_native_connector_l2_adapter.py" \
    >"$work/test_native_connector_l2_adapter.py"
  (cd "$work" && "$OLDPWD/$venv/bin/python" -m pytest -q -p no:cacheprovider .)
fi
