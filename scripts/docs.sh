#!/usr/bin/env bash
# The book (docs/, mdBook), built into target/book/ (open target/book/index.html).
#
#   scripts/docs.sh           regenerate the reference pages from the code, then build the book
#   scripts/docs.sh --check   also what `make test` runs: fail if a reference page differs
#                             from what the code gives now, a link or #anchor is broken, a
#                             page under docs/ is not in SUMMARY.md, or the book does not build
#
# Generated pages: docs/configuration.md (every flag and key: rasa-gateway config
# reference), docs/reference/metrics.md (the catalog: rasa-gateway metrics),
# docs/reference/cli.md (rasa reference), docs/reference/http-api.md (from
# openapi/openapi.json, itself checked against the gateway by its own test).
set -euo pipefail
cd "$(dirname "$0")/.."
check=0
case "${1:-}" in
  --check) check=1 ;;
  "") ;;
  *) echo "docs: unknown argument $1 (try --check)" >&2; exit 2 ;;
esac
if ! mdbook --version >/dev/null 2>&1; then
  echo "docs: mdbook is missing (scripts/setup.sh installs it)" >&2
  exit 1
fi
cargo build -q --locked -p rasa-gateway -p rasa-cli --bins
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
target/debug/rasa-gateway config reference >"$tmp/configuration.md"
target/debug/rasa-gateway metrics >"$tmp/metrics.md"
target/debug/rasa reference >"$tmp/cli.md"
python3 scripts/docs/http_reference.py openapi/openapi.json >"$tmp/http-api.md"
stale=0
for pair in configuration.md:docs/configuration.md metrics.md:docs/reference/metrics.md \
  cli.md:docs/reference/cli.md http-api.md:docs/reference/http-api.md; do
  made=$tmp/${pair%%:*} page=${pair#*:}
  if ! cmp -s "$made" "$page"; then
    if [ "$check" = 1 ]; then
      echo "docs: $page is stale (the code says otherwise): run make docs" >&2
      diff -u "$page" "$made" | head -20 >&2 || true
      stale=1
    else
      cp "$made" "$page"
    fi
  fi
done
[ "$stale" = 0 ] || exit 1
python3 scripts/docs/check_links.py .
mdbook build docs 2>"$tmp/mdbook.err" || { cat "$tmp/mdbook.err" >&2; exit 1; }
if grep -E "WARN|ERROR" "$tmp/mdbook.err" >&2; then
  echo "docs: mdbook warned (above)" >&2
  exit 1
fi
echo "docs: the book is in target/book/index.html ($(find docs -name '*.md' | wc -l) pages)" >&2
