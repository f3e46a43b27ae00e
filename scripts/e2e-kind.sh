#!/usr/bin/env bash
# End-to-end run on a real cluster, as a user would do it: a kind cluster, the two images
# built and loaded, `helm install`, the examples applied with kubectl, requests through a
# sidecar-injected demo app (200 then 429 with X-RateLimit-* headers), a key created
# through the admin Service, and smoothing Events in `kubectl get events`.
#
# Needs a Docker engine, kind, kubectl, helm and curl. Not part of `npm test`.
#   npm run e2e:kind
# Environment:
#   GW_KIND_CLUSTER  cluster name (default gw-e2e); an existing cluster of that name is reused
#   GW_KIND_KEEP=1   keep the cluster afterwards (default: delete it if this run created it)
#   GW_IMAGE_TAG     tag of the built images (default e2e)
set -euo pipefail

cluster="${GW_KIND_CLUSTER:-gw-e2e}"
tag="${GW_IMAGE_TAG:-e2e}"
release_ns=gw-system
app_ns=demo
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="$(mktemp -d)"
created_cluster=0
forward_pids=()

log() { printf '\n==> %s\n' "$*"; }
fail() { printf '\nFAILED: %s\n' "$*" >&2; exit 1; }

cleanup() {
  local code=$?
  for pid in "${forward_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  if [[ $code -ne 0 ]]; then
    log "diagnostics"
    kubectl get pods -A -o wide || true
    kubectl -n "$release_ns" logs deployment/gw-operator --tail=50 || true
    kubectl -n "$app_ns" logs deployment/demo -c gw-sidecar --tail=50 || true
  fi
  if [[ $created_cluster -eq 1 && "${GW_KIND_KEEP:-0}" != 1 ]]; then
    kind delete cluster --name "$cluster" || true
  fi
  rm -rf "$work"
  exit "$code"
}
trap cleanup EXIT

for tool in docker kind kubectl helm curl; do
  command -v "$tool" >/dev/null || fail "$tool is not installed (this script needs a Docker engine, kind, kubectl, helm and curl)"
done
docker info >/dev/null 2>&1 || fail "no Docker engine is reachable (docker info failed)"

# Repeats a command until it succeeds, for at most $1 seconds.
retry() {
  local timeout=$1; shift
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    [[ $SECONDS -lt $deadline ]] || fail "timed out after ${timeout}s: $*"
    sleep 2
  done
}

# Starts kubectl port-forward in the background and waits until the local port answers.
forward() {
  local target=$1 ns=$2 ports=$3 check=$4
  kubectl -n "$ns" port-forward "$target" "$ports" >"$work/forward-${ports%%:*}.log" 2>&1 &
  forward_pids+=($!)
  retry 30 curl -s -o /dev/null "$check"
}

log "kind cluster $cluster"
if kind get clusters 2>/dev/null | grep -qx "$cluster"; then
  kubectl config use-context "kind-$cluster" >/dev/null
else
  kind create cluster --name "$cluster" --wait 180s
  created_cluster=1
fi

log "build and load images (tag $tag)"
docker build --target operator -t "gw-operator:$tag" "$root"
docker build --target sidecar -t "gw-sidecar:$tag" "$root"
kind load docker-image --name "$cluster" "gw-operator:$tag" "gw-sidecar:$tag"

log "helm install"
kubectl create namespace "$app_ns" --dry-run=client -o yaml | kubectl apply -f -
helm upgrade --install gw "$root/charts/gw" --namespace "$release_ns" --create-namespace \
  --set image.tag="$tag" \
  --set "sidecar.namespaces={$app_ns}" \
  --set admin.targetNamespace="$app_ns" \
  --set gateway.settings.enable_redis_rolling_limiter=true \
  --set gateway.settings.rate_limit_response_headers=rate_limits \
  --wait --timeout 5m
kubectl get gw -A >/dev/null
retry 60 kubectl get mutatingwebhookconfiguration gw-sidecar-injector

log "apply the examples"
kubectl apply -n "$app_ns" -f "$root/examples/"
retry 60 kubectl -n "$app_ns" wait --for=condition=Ready apidefinition/keyless-api apidefinition/auth-token-api --timeout=5s
kubectl get gw -n "$app_ns"

log "demo app with an injected gateway"
kubectl apply -n "$app_ns" -f - <<EOF
apiVersion: apps/v1
kind: Deployment
metadata:
  name: demo
spec:
  replicas: 1
  selector:
    matchLabels: { app: demo }
  template:
    metadata:
      labels: { app: demo }
      annotations:
        gw.dev/inject: "true"
        gw.dev/apis: "keyless-api,auth-token-api"
    spec:
      serviceAccountName: gw-sidecar
      securityContext:
        runAsNonRoot: true
        runAsUser: 65532
        seccompProfile: { type: RuntimeDefault }
      containers:
        # The examples' upstream is http://127.0.0.1:9000: a tiny JSON echo in the same pod.
        - name: app
          image: gw-sidecar:${tag}
          command: ["node", "-e", "require('node:http').createServer((q, s) => { s.setHeader('content-type', 'application/json'); s.end(JSON.stringify({ path: q.url })); }).listen(9000, '127.0.0.1')"]
          resources:
            requests: { cpu: 10m, memory: 32Mi }
            limits: { memory: 64Mi }
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities: { drop: [ALL] }
EOF
kubectl -n "$app_ns" rollout status deployment/demo --timeout=180s
pod="$(kubectl -n "$app_ns" get pod -l app=demo -o jsonpath='{.items[0].metadata.name}')"
kubectl -n "$app_ns" get pod "$pod" -o jsonpath='{.spec.initContainers[*].name}' | grep -qw gw-sidecar || fail "the sidecar was not injected into $pod"

forward "pod/$pod" "$app_ns" 18080:8080 http://127.0.0.1:18080/keyless/
forward service/gw-admin "$release_ns" 18081:8081 http://127.0.0.1:18081/

log "200 then 429 through the sidecar (keyless-api: 5 requests per 10 s)"
sleep 11 # a fresh window: the port-forward readiness check above spent requests
statuses=()
for _ in 1 2 3 4 5 6; do
  statuses+=("$(curl -s -o /dev/null -D "$work/headers" -w '%{http_code}' http://127.0.0.1:18080/keyless/get)")
done
echo "statuses: ${statuses[*]}"
[[ "${statuses[0]}" == 200 ]] || fail "first request got ${statuses[0]}, expected 200"
[[ "${statuses[5]}" == 429 ]] || fail "sixth request got ${statuses[5]}, expected 429"
grep -qi '^x-ratelimit-limit: 5' "$work/headers" || fail "429 without X-RateLimit-Limit: 5"
grep -qi '^x-ratelimit-remaining: 0' "$work/headers" || fail "429 without X-RateLimit-Remaining: 0"
grep -qi '^x-ratelimit-reset: ' "$work/headers" || fail "429 without X-RateLimit-Reset"

log "admin create-key through the admin Service"
admin_secret="$(kubectl -n "$release_ns" get secret gw-auth -o jsonpath='{.data.admin-secret}' | base64 -d)"
code="$(curl -s -o "$work/key.json" -w '%{http_code}' -X POST http://127.0.0.1:18081/admin/org/keys \
  -H "Admin-Auth: $admin_secret" -H 'Content-Type: application/json' \
  -d '{"alias":"e2e-admin-key","apply_policies":["smoothed"]}')"
[[ "$code" == 200 ]] || fail "create key answered $code: $(cat "$work/key.json")"
retry 30 sh -c "kubectl -n $app_ns get gwkey -o jsonpath='{.items[*].spec.alias}' | grep -qw e2e-admin-key"
kubectl -n "$app_ns" get gwkey

log "smoothing Events under rising load (policy smoothed: threshold 20 per 10 s, step 10)"
kubectl apply -n "$app_ns" -f - <<'EOF'
apiVersion: gw.dev/v1alpha1
kind: Key
metadata:
  name: e2e-smoothed
spec:
  alias: e2e-smoothed
  apply_policies: [smoothed]
EOF
retry 60 sh -c "kubectl -n $app_ns get gwkey e2e-smoothed -o jsonpath='{.status.secretName}' | grep -q ."
secret="$(kubectl -n "$app_ns" get gwkey e2e-smoothed -o jsonpath='{.status.secretName}')"
raw_key="$(kubectl -n "$app_ns" get secret "$secret" -o jsonpath='{.data.key}' | base64 -d)"
deadline=$((SECONDS + 90))
until kubectl get events -n "$app_ns" --field-selector reason=RateLimitSmoothingUp -o name | grep -q .; do
  [[ $SECONDS -lt $deadline ]] || fail "no RateLimitSmoothingUp event within 90 s"
  for _ in $(seq 1 30); do curl -s -o /dev/null -H "Authorization: $raw_key" http://127.0.0.1:18080/auth/anything/e2e; done
  sleep 1
done
kubectl get events -n "$app_ns" --field-selector reason=RateLimitSmoothingUp

log "all end-to-end checks passed"
