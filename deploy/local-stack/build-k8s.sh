#!/usr/bin/env bash
# Build kube-apiserver, kube-controller-manager and kube-scheduler (and, with NODEROLL_BUILD_KUBELET=1,
# the kubelet of the real-node test tier) from Debian's `kubernetes` source package into a versioned
# cache directory.
#
# Usage: [NODEROLL_BUILD_KUBELET=1] build-k8s.sh CACHE_DIR
# Needs root (apt-get). Idempotent: exits early when the binaries exist. A cache holding the control
# plane of the current build revision but no kubelet gets only the kubelet added (same source, same
# patch, same stamp), so asking for the kubelet never rebuilds what is there.
# Why a source build: no kubelet-less control-plane binaries are packaged for
# Debian and nothing outside the package registries can be downloaded here.
set -euo pipefail
cache_dir=${1:?usage: build-k8s.sh CACHE_DIR}
bins=(kube-apiserver kube-controller-manager kube-scheduler)
extra=()
if [ "${NODEROLL_BUILD_KUBELET:-0}" = 1 ]; then extra=(kubelet); fi

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# Bump when the build changes (patches, flags): a cache without this stamp is rebuilt.
# 2: vendored reflect2 v1.0.1 patched for Go >= 1.18 (v1.0.2's fix); without it the apiserver
#    crashes ("fatal error: fault" in mapiterinit) when it encodes maps, e.g. on creating a custom resource.
build_revision=2
have_all() {
  for b in "${bins[@]}"; do [ -x "$cache_dir/$b" ] || return 1; done
  [ "$(cat "$cache_dir/.noderoll-build" 2>/dev/null)" = "$build_revision" ]
}
have_extra() {
  for b in "${extra[@]}"; do [ -x "$cache_dir/$b" ] || return 1; done
}
if have_all && have_extra; then echo "k8s binaries already in $cache_dir"; exit 0; fi
# One build at a time per cache folder: a second caller waits, then finds the binaries.
mkdir -p "$(dirname "$cache_dir")"
exec 9>"$cache_dir.lock"
flock 9
if have_all && have_extra; then echo "k8s binaries already in $cache_dir"; exit 0; fi
# The control plane is there: build only what is missing of the extras, and add it to the cache.
only_extra=0
if have_all; then
  only_extra=1
  missing=()
  for b in "${extra[@]}"; do [ -x "$cache_dir/$b" ] || missing+=("$b"); done
  extra=("${missing[@]}")
fi

if [ "$(id -u)" != 0 ]; then
  echo "error: building the Kubernetes control plane needs root (apt-get install golang-go rsync jq etcd-server; apt-get source kubernetes)." >&2
  echo "       Run as root, or set KUBEBUILDER_ASSETS to a folder holding ${bins[*]}." >&2
  exit 3
fi

suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
# Same URI and Signed-By as the machine's own entry, or apt refuses "conflicting values".
src_list=/etc/apt/sources.list.d/noderoll-deb-src.sources
if ! grep -rqs "^deb-src " /etc/apt/sources.list /etc/apt/sources.list.d/ && \
   ! grep -rqs "^Types: .*deb-src" /etc/apt/sources.list.d/; then
  keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  printf 'Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: %s\nComponents: main\nSigned-By: %s\n' \
    "$suite" "$keyring" > "$src_list"
fi
export DEBIAN_FRONTEND=noninteractive
# Each step's output goes to its own log, kept beside the cache; a ticker says what runs, for how long and
# where its log is at least every 30 s (a build step is silent for minutes otherwise).
logs=$(dirname "$cache_dir")/build-logs
mkdir -p "$logs"
total=$SECONDS
step() {
  local what=$1 log=$2; shift 2
  local start=$SECONDS rc=0
  echo "build-k8s: $what (log $log)..."
  ( while sleep 30; do echo "build-k8s: $what: $((SECONDS - start)) s so far (log $log)"; done ) &
  local ticker=$!
  "$@" >"$log" 2>&1 || rc=$?
  kill "$ticker" 2>/dev/null || true
  wait "$ticker" 2>/dev/null || true
  if [ "$rc" != 0 ]; then
    tail -n 30 "$log" >&2
    echo "error: $what failed (exit $rc; log $log). Remove $cache_dir and retry, or set KUBEBUILDER_ASSETS." >&2
    exit 5
  fi
  echo "build-k8s: $what done in $((SECONDS - start)) s"
}
step "apt-get update" "$logs/apt-update.log" apt-get update
step "installing golang-go rsync jq etcd-server dpkg-dev" "$logs/apt-install.log" \
  apt-get install -y --no-install-recommends golang-go rsync jq etcd-server dpkg-dev

work=$(mktemp -d "${TMPDIR:-/tmp}/noderoll-k8s-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
step "fetching Debian's kubernetes source package" "$logs/apt-source.log" apt-get source kubernetes
src=$(find . -maxdepth 1 -type d -name 'kubernetes-*' | head -n1)
[ -n "$src" ] || { echo "error: apt-get source kubernetes produced no source tree" >&2; exit 4; }
cd "$src"
# Debian's Go (1.19) changed reflect.mapiterinit's signature, which the vendored reflect2 links to.
if [ ! -f vendor/github.com/modern-go/reflect2/go_above_118.go ]; then
  patch -p1 --forward --quiet < "$here/reflect2-go1.18.patch"
fi
# Debian's Go is newer than what 1.20 expects; vendor mode and no version check keep the build offline.
export GOFLAGS=-mod=vendor GO111MODULE=on GOPROXY=off GOTOOLCHAIN=local
export KUBE_VERBOSE=0 FORCE_HOST_GO=y
targets=("${extra[@]}")
if [ "$only_extra" = 0 ]; then targets=("${bins[@]}" "${extra[@]}"); fi
for b in "${targets[@]}"; do
  step "building $b (the first one about 5.5 min on 2 cores, then about 40 s each)" "$logs/build-$b.log" \
    make WHAT="cmd/$b"
done
if [ "$only_extra" = 1 ]; then
  for b in "${extra[@]}"; do
    install -m 0755 "$(find _output -type f -name "$b" -perm -u+x | head -n1)" "$cache_dir/.$b.tmp"
    mv "$cache_dir/.$b.tmp" "$cache_dir/$b"
  done
  echo "k8s binaries ${extra[*]} added to $cache_dir ($((SECONDS - total)) s)"
  exit 0
fi
mkdir -p "$cache_dir.tmp"
for b in "${bins[@]}" "${extra[@]}"; do
  install -m 0755 "$(find _output -type f -name "$b" -perm -u+x | head -n1)" "$cache_dir.tmp/$b"
done
echo "$build_revision" > "$cache_dir.tmp/.noderoll-build"
rm -rf "$cache_dir"; mv "$cache_dir.tmp" "$cache_dir"
echo "k8s binaries installed in $cache_dir ($((SECONDS - total)) s)"
