#!/usr/bin/env bash
# The Kubernetes manifests (deploy/kubernetes), checked offline: each kustomization
# rendered by `kubectl kustomize`, validated strictly against Kubernetes 1.32's schemas
# (kubernetes-validate, pinned, in target/k8s-venv: unknown fields fail), its gateway
# configuration checked by the gateway itself (`rasa-gateway config check`), and what must
# agree across files checked by scripts/k8s_semantics.py (memory limit against --memory,
# probes, node ids, the disk claim against --disk-size, selectors). `make test` runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! kubectl kustomize --help >/dev/null 2>&1; then
  echo "k8s-check: kubectl with kustomize is missing (scripts/setup.sh installs it)" >&2
  exit 1
fi
kver=$(kubectl version --client -o json 2>/dev/null | sed -n 's/.*"kustomizeVersion": *"v\{0,1\}\([0-9]*\).*/\1/p')
if [ -z "$kver" ] || [ "$kver" -lt 4 ]; then
  echo "k8s-check: kubectl's kustomize is older than v4 (labels:, resources: ../base); use kubectl >= 1.21" >&2
  exit 1
fi
venv=target/k8s-venv
reqs=deploy/kubernetes/requirements.txt
if ! cmp -s "$reqs" "$venv/requirements.txt" 2>/dev/null; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$reqs"
  cp "$reqs" "$venv/requirements.txt"
fi
cargo build -q --locked -p rasa-gateway --bins
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for k in deploy/kubernetes/*/kustomization.yaml; do
  dir=$(dirname "$k")
  name=$(basename "$dir")
  kubectl kustomize "$dir" >"$tmp/$name.yaml"
  "$venv/bin/kubernetes-validate" --strict --quiet --kubernetes-version 1.32.0 "$tmp/$name.yaml"
  [ -f "$dir/rasa.toml" ] && target/debug/rasa-gateway config check "$dir/rasa.toml" >/dev/null
  "$venv/bin/python" scripts/k8s_semantics.py "$tmp/$name.yaml"
  echo "k8s-check: $dir ok ($(grep -c '^kind:' "$tmp/$name.yaml") objects)"
done
