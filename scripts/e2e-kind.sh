#!/usr/bin/env bash
# The user's journey (scripts/journey/journey.ts) on a kind cluster: the images built with
# README.md's Docker lines and loaded into kind, then the same steps the node test bed runs
# in `npm test` (helm install as the README says, injected pods, 200 then 429, shared
# counters, admin keys, smoothing Events, category reads, delete until reload, leader
# failover, a sidecar restart, helm upgrade and uninstall).
#
# Needs a Docker engine, kind, kubectl and helm. Not part of `npm test`.
#   npm run e2e:kind
# Environment:
#   GW_KIND_CLUSTER  cluster name (default gw-e2e); an existing cluster of that name is reused
#   GW_KIND_KEEP=1   keep the cluster afterwards (default: delete it if this run created it)
set -euo pipefail

cluster="${GW_KIND_CLUSTER:-gw-e2e}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version="$(node -p "require('$root/package.json').version")"
created_cluster=0

log() { printf '\n==> %s\n' "$*"; }
fail() { printf '\nFAILED: %s\n' "$*" >&2; exit 1; }

cleanup() {
  local code=$?
  if [[ $created_cluster -eq 1 && "${GW_KIND_KEEP:-0}" != 1 ]]; then
    kind delete cluster --name "$cluster" || true
  fi
  exit "$code"
}
trap cleanup EXIT

for tool in docker kind kubectl helm; do
  command -v "$tool" >/dev/null || fail "$tool is not installed (this script needs a Docker engine, kind, kubectl and helm)"
done
docker info >/dev/null 2>&1 || fail "no Docker engine is reachable (docker info failed)"

log "kind cluster $cluster"
if kind get clusters 2>/dev/null | grep -qx "$cluster"; then
  kubectl config use-context "kind-$cluster" >/dev/null
else
  kind create cluster --name "$cluster" --wait 180s
  created_cluster=1
fi

log "build the images as README.md says, and load them into kind"
cd "$root"
bash -euo pipefail -c "$(node_modules/.bin/node -e "import('./scripts/journey/readme-blocks.ts').then((m) => process.stdout.write(m.readmeBlock('images-docker')))")"
kind load docker-image --name "$cluster" "gw-operator:$version" "gw-sidecar:$version" "gw-redis:$version"

log "the journey"
node_modules/.bin/node scripts/journey/journey.ts
