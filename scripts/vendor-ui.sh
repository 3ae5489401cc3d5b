#!/usr/bin/env bash
# Re-vendors the status page's chart library (uPlot, MIT) from the npm registry into
# gateway/ui/vendor/, checking the tarball against the registry's sha512 integrity pinned
# here. The files are committed: the build never downloads them (no CDN, no network).
# Needs curl, tar and openssl only.
set -euo pipefail
VERSION=1.6.32
INTEGRITY="sha512-KIMVnG68zvu5XXUbC4LQEPnhwOxBuLyW1AHtpm6IKTXImkbLgkMy+jabjLgSLMasNuGGzQm/ep3tOkyTxpiQIw=="
cd "$(dirname "$0")/.."
dest=gateway/ui/vendor
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
curl -fsSL "https://registry.npmjs.org/uplot/-/uplot-${VERSION}.tgz" -o "$tmp/uplot.tgz"
got="sha512-$(openssl dgst -sha512 -binary "$tmp/uplot.tgz" | base64 -w0)"
if [ "$got" != "$INTEGRITY" ]; then
  echo "uplot-${VERSION}.tgz: integrity $got, expected $INTEGRITY" >&2
  exit 1
fi
tar -xzf "$tmp/uplot.tgz" -C "$tmp"
mkdir -p "$dest"
cp "$tmp/package/dist/uPlot.iife.min.js" "$dest/uPlot.iife.min.js"
cp "$tmp/package/dist/uPlot.min.css" "$dest/uPlot.min.css"
cp "$tmp/package/LICENSE" "$dest/uPlot.LICENSE"
echo "uPlot ${VERSION} vendored into $dest"
