#!/usr/bin/env bash
# Builds (or reuses) the pinned test-bed binaries from their Go modules:
#   build-bins.sh [kube-apiserver|etcd|helm ...]   (default: all three)
# Each lands in $GW_TEST_BINS_DIR/<component>-<version>/<component> (helm: <version>-k8s1.<minor>; default dir
# ~/.cache/gw-test-bins), outside the clone so every later run and clone reuses it.
# Prints one `<component>=<path>` line per component on stdout; progress goes to stderr.
# A failure names the step and the path of its log, and exits non-zero.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bins_dir="${GW_TEST_BINS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/gw-test-bins}"
go_bin="${GW_GO:-$(command -v go || echo /usr/local/go/bin/go)}"

fail() {
  echo "gw-test-bins: step '$1' failed; log: $2" >&2
  if [[ -f "$2" ]]; then tail -n 20 "$2" >&2; fi
  exit 1
}

# The version each wrapper go.mod requires is the one pinned; reading it here keeps one
# source of truth.
required_version() {
  awk -v mod="$2" '$1 == "require" && $2 == mod { print $3 } $1 == mod && $2 ~ /^v/ { print $2 }' \
    "$here/go/$1/go.mod" | head -n 1
}

component_module() {
  case "$1" in
    kube-apiserver) echo k8s.io/kubernetes ;;
    etcd) echo go.etcd.io/etcd/server/v3 ;;
    helm) echo helm.sh/helm/v3 ;;
    *) echo "gw-test-bins: unknown component '$1' (kube-apiserver, etcd, helm)" >&2; exit 2 ;;
  esac
}

component_package() {
  case "$1" in
    kube-apiserver) echo k8s.io/kubernetes/cmd/kube-apiserver ;;
    etcd) echo go.etcd.io/etcd/server/v3 ;;
    helm) echo helm.sh/helm/v3/cmd/helm ;;
  esac
}

# Without these the server reports v0.0.0-master: `kubectl version` exits non-zero and
# Helm's kubeVersion checks fail. Both packages carry their own copy of the variables.
component_ldflags() {
  local version="$2"
  case "$1" in
    kube-apiserver)
      local minor="${version#v1.}"
      minor="${minor%%.*}"
      local build_date="${SOURCE_DATE_EPOCH:+$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)}"
      build_date="${build_date:-$(date -u +%Y-%m-%dT%H:%M:%SZ)}"
      local flags="-s -w" pkg
      for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        flags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
        flags+=" -X $pkg.gitCommit=0000000000000000000000000000000000000000"
        flags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$build_date"
      done
      echo "$flags"
      ;;
    etcd) echo "-s -w" ;;
    helm)
      # Offline (`helm template`, `helm lint`) Helm assumes the Kubernetes version linked
      # into it, v1.20 by default: link the test bed's own so kubeVersion checks pass.
      local kube_minor flags pkg
      kube_minor="$(kube_minor_version)"
      flags="-s -w -X helm.sh/helm/v3/internal/version.version=$version -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
      for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
        flags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$kube_minor"
      done
      echo "$flags"
      ;;
  esac
}

# Minor version of the pinned kube-apiserver (v1.32.13 → 32).
kube_minor_version() {
  local minor
  minor="$(required_version kube-apiserver k8s.io/kubernetes)"
  minor="${minor#v1.}"
  echo "${minor%%.*}"
}

# The cache folder names whatever is linked into the binary, so a change rebuilds it.
component_dir() {
  case "$1" in
    helm) echo "$bins_dir/$1-$2-k8s1.$(kube_minor_version)" ;;
    *) echo "$bins_dir/$1-$2" ;;
  esac
}

build_component() {
  local name="$1" module version dir bin log
  module="$(component_module "$name")"
  version="$(required_version "$name" "$module")"
  [[ -n "$version" ]] || fail "read-version-$name" "$here/go/$name/go.mod"
  dir="$(component_dir "$name" "$version")"
  bin="$dir/$name"
  if [[ -x "$bin" ]]; then echo "$name=$bin"; return; fi

  mkdir -p "$dir"
  log="$dir/build.log"
  # One builder per component and version across concurrent runs; the others wait here and
  # then find the finished binary.
  exec {lock_fd}>"$dir/.lock"
  flock "$lock_fd"
  if [[ -x "$bin" ]]; then
    exec {lock_fd}>&-
    echo "$name=$bin"
    return
  fi

  echo "gw-test-bins: building $name $version (log: $log)" >&2
  : >"$log"
  # Leftovers of a build killed outright (no trap ran) are removed under the lock.
  rm -rf "$dir/src" "$dir/.$name.tmp."*
  # The build runs in a copy so the repo's wrapper is never rewritten by -mod=mod.
  cp -R "$here/go/$name" "$dir/src" >>"$log" 2>&1 || fail "copy-wrapper-$name" "$log"
  [[ -x "$go_bin" ]] || { echo "go not found (looked for $go_bin)" >>"$log"; fail "find-go" "$log"; }
  local tmp="$dir/.$name.tmp.$$"
  partial="$tmp"
  (
    cd "$dir/src"
    export GOSUMDB=off GOFLAGS=-mod=mod CGO_ENABLED=0 GOTOOLCHAIN=local
    "$go_bin" version
    "$go_bin" build -ldflags "$(component_ldflags "$name" "$version")" -o "$tmp" \
      "$(component_package "$name")"
  ) >>"$log" 2>&1 || fail "go-build-$name" "$log"
  # Rename is atomic: a reader sees no binary or a whole one.
  mv -f "$tmp" "$bin"
  partial=""
  exec {lock_fd}>&-
  echo "gw-test-bins: built $bin" >&2
  echo "$name=$bin"
}

# An interrupted or failed build leaves no half-written binary behind.
partial=""
trap 'if [[ -n "$partial" ]]; then rm -f "$partial"; fi' EXIT

components=("$@")
if [[ ${#components[@]} -eq 0 ]]; then components=(kube-apiserver etcd helm); fi
mkdir -p "$bins_dir"
for c in "${components[@]}"; do build_component "$c"; done
