#!/usr/bin/env bash
# Builds (or reuses) the pinned test-bed binaries from their Go modules:
#   build-bins.sh [COMPONENT ...]   (default: all)
# Components: kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy (one
# Kubernetes release, built together from go/kubernetes), etcd, helm, coredns.
# Each wrapper module lands in $GW_TEST_BINS_DIR/<wrapper>-<version>/ (helm: <version>-k8s1.<minor>;
# default dir ~/.cache/gw-test-bins), outside the clone so every later run and clone reuses it.
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

# The wrapper module (folder under go/) that builds a component.
component_wrapper() {
  case "$1" in
    kube-apiserver|kube-controller-manager|kube-scheduler|kubelet|kube-proxy) echo kubernetes ;;
    etcd|helm|coredns) echo "$1" ;;
    *) echo "gw-test-bins: unknown component '$1' (kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy etcd helm coredns)" >&2; exit 2 ;;
  esac
}

# The module whose required version names the build.
wrapper_module() {
  case "$1" in
    kubernetes) echo k8s.io/kubernetes ;;
    etcd) echo go.etcd.io/etcd/server/v3 ;;
    helm) echo helm.sh/helm/v3 ;;
    coredns) echo github.com/coredns/coredns ;;
  esac
}

# The binaries a wrapper builds, as `<name>=<package>` pairs; one `go build` makes them all,
# so the five Kubernetes binaries share one compile of their common packages.
wrapper_packages() {
  case "$1" in
    kubernetes)
      local c
      for c in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy; do
        echo "$c=k8s.io/kubernetes/cmd/$c"
      done
      ;;
    etcd) echo "etcd=go.etcd.io/etcd/server/v3" ;;
    helm) echo "helm=helm.sh/helm/v3/cmd/helm" ;;
    coredns) echo "coredns=github.com/coredns/coredns" ;;
  esac
}

# Without these the server reports v0.0.0-master: `kubectl version` exits non-zero and
# Helm's kubeVersion checks fail. Both packages carry their own copy of the variables.
wrapper_ldflags() {
  local version="$2"
  case "$1" in
    kubernetes)
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
    etcd|coredns) echo "-s -w" ;;
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

# Minor version of the pinned Kubernetes release (v1.33.13 → 33).
kube_minor_version() {
  local minor
  minor="$(required_version kubernetes k8s.io/kubernetes)"
  minor="${minor#v1.}"
  echo "${minor%%.*}"
}

# The cache folder names whatever is linked into the binary, so a change rebuilds it.
wrapper_dir() {
  case "$1" in
    helm) echo "$bins_dir/$1-$2-k8s1.$(kube_minor_version)" ;;
    *) echo "$bins_dir/$1-$2" ;;
  esac
}

build_wrapper() {
  local wrapper="$1" module version dir log pair name pkg missing=0
  module="$(wrapper_module "$wrapper")"
  version="$(required_version "$wrapper" "$module")"
  [[ -n "$version" ]] || fail "read-version-$wrapper" "$here/go/$wrapper/go.mod"
  dir="$(wrapper_dir "$wrapper" "$version")"
  local -a pairs
  mapfile -t pairs < <(wrapper_packages "$wrapper")
  for pair in "${pairs[@]}"; do [[ -x "$dir/${pair%%=*}" ]] || missing=1; done
  if [[ $missing -eq 0 ]]; then report "$dir" "${pairs[@]}"; return; fi

  mkdir -p "$dir"
  log="$dir/build.log"
  # One builder per wrapper and version across concurrent runs; the others wait here and
  # then find the finished binaries.
  exec {lock_fd}>"$dir/.lock"
  flock "$lock_fd"
  missing=0
  for pair in "${pairs[@]}"; do [[ -x "$dir/${pair%%=*}" ]] || missing=1; done
  if [[ $missing -eq 0 ]]; then
    exec {lock_fd}>&-
    report "$dir" "${pairs[@]}"
    return
  fi

  echo "gw-test-bins: building $wrapper $version (log: $log)" >&2
  : >"$log"
  # Leftovers of a build killed outright (no trap ran) are removed under the lock.
  rm -rf "$dir/src" "$dir/.tmp."*
  # The build runs in a copy so the repo's wrapper is never rewritten by -mod=mod.
  cp -R "$here/go/$wrapper" "$dir/src" >>"$log" 2>&1 || fail "copy-wrapper-$wrapper" "$log"
  [[ -x "$go_bin" ]] || { echo "go not found (looked for $go_bin)" >>"$log"; fail "find-go" "$log"; }
  local tmp="$dir/.tmp.$$"
  partial="$tmp"
  mkdir -p "$tmp"
  local -a packages=()
  for pair in "${pairs[@]}"; do packages+=("${pair#*=}"); done
  (
    cd "$dir/src"
    export GOSUMDB=off GOFLAGS=-mod=mod CGO_ENABLED=0 GOTOOLCHAIN=local
    "$go_bin" version
    if [[ ${#packages[@]} -eq 1 ]]; then
      "$go_bin" build -ldflags "$(wrapper_ldflags "$wrapper" "$version")" -o "$tmp/${pairs[0]%%=*}" "${packages[0]}"
    else
      # With several packages, -o names a folder and each binary takes its package's name.
      "$go_bin" build -ldflags "$(wrapper_ldflags "$wrapper" "$version")" -o "$tmp/" "${packages[@]}"
    fi
  ) >>"$log" 2>&1 || fail "go-build-$wrapper" "$log"
  # Rename is atomic: a reader sees no binary or a whole one.
  for pair in "${pairs[@]}"; do
    name="${pair%%=*}"
    [[ -x "$tmp/$name" ]] || { echo "no $name in $tmp" >>"$log"; fail "go-build-$wrapper" "$log"; }
    mv -f "$tmp/$name" "$dir/$name"
  done
  rm -rf "$tmp" "$dir/src"
  partial=""
  exec {lock_fd}>&-
  echo "gw-test-bins: built $wrapper $version in $dir" >&2
  report "$dir" "${pairs[@]}"
}

report() {
  local dir="$1" pair; shift
  for pair in "$@"; do
    local name="${pair%%=*}"
    if [[ " ${wanted[*]} " == *" $name "* ]]; then echo "$name=$dir/$name"; fi
  done
}

# An interrupted or failed build leaves no half-written binary behind.
partial=""
trap 'if [[ -n "$partial" ]]; then rm -rf "$partial"; fi' EXIT

wanted=("$@")
if [[ ${#wanted[@]} -eq 0 ]]; then
  wanted=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy etcd helm coredns)
fi
wrappers=()
for c in "${wanted[@]}"; do
  w="$(component_wrapper "$c")" || exit 2
  if [[ " ${wrappers[*]} " != *" $w "* ]]; then wrappers+=("$w"); fi
done
mkdir -p "$bins_dir"
for w in "${wrappers[@]}"; do build_wrapper "$w"; done
