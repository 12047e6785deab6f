#!/usr/bin/env bash
# build.sh — build the Kubernetes parts the tests run, from Go modules, into a
# cache outside the repo keyed by their versions:
#   etcd                     go.etcd.io/etcd/server/v3 (e2e/cluster/etcd/go.mod)
#   kube-apiserver, kube-controller-manager, kube-scheduler, kubectl
#                            k8s.io/kubernetes (the project's go.mod)
#   kwok                     sigs.k8s.io/kwok (e2e/cluster/kwok/go.mod)
#   csi-provisioner, csi-resizer, csi-snapshotter, snapshot-controller
#                            the kubernetes-csi sidecars (e2e/cluster/csi-*/go.mod)
# usage: build.sh [BINARY...]   (default: etcd kube-apiserver)
# Prints the directory that holds the binaries (KUBEBUILDER_ASSETS) last.
# A cold kube-apiserver build takes 11-14 min on 2 cores; warm, seconds.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CACHE=${THINLVM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/thinlvm}

modver() { (cd "$1" && go list -m -f '{{.Version}}' "$2"); }
K8S=$(modver "$ROOT" k8s.io/kubernetes)
ETCD=$(modver "$ROOT/e2e/cluster/etcd" go.etcd.io/etcd/server/v3)
# The wrapper modules pin every other version: their go.mod files are the key.
WRAP=$(cat "$ROOT"/e2e/cluster/*/go.mod | sha256sum | cut -c1-12)
BIN=$CACHE/k8s/bin-k8s$K8S-etcd$ETCD-$WRAP
mkdir -p "$BIN"

# Without -X the binaries report v0.0.0-master, which clients that parse the
# server version (and kubectl's skew check) trip over.
k8s_ldflags() {
  local v=$K8S m n x out=""
  m=${v#v}; n=${m#*.}; m=${m%%.*}; n=${n%%.*}
  for x in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    out+="-X $x.gitVersion=$v -X $x.gitMajor=$m -X $x.gitMinor=$n -X $x.gitTreeState=clean "
  done
  echo "$out"
}

build() { # name dir package ldflags
  local name=$1 dir=$2 pkg=$3 ld=$4 t=$SECONDS
  if [ -x "$BIN/$name" ]; then return; fi
  echo "build: $name ($pkg) into $BIN ..." >&2
  (cd "$dir" && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w $ld" -o "$BIN/$name.tmp" "$pkg")
  mv "$BIN/$name.tmp" "$BIN/$name"
  echo "build: $name in $((SECONDS - t))s" >&2
}

# The k8s.io/kubernetes binaries asked for and missing are built by one go
# build: their many shared packages compile once and the links overlap the
# compiles (measured in e2e/README.md).
build_k8s() { # name...
  local missing=() pkgs=() n t=$SECONDS tmp
  for n in "$@"; do [ -x "$BIN/$n" ] || missing+=("$n"); done
  [ ${#missing[@]} -gt 0 ] || return 0
  for n in "${missing[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$n"); done
  echo "build: $(IFS=+; echo "${missing[*]}") (${pkgs[*]}) into $BIN ..." >&2
  tmp=$(mktemp -d "$BIN/.build.XXXXXX")
  (cd "$ROOT" && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w $(k8s_ldflags)" -o "$tmp/" "${pkgs[@]}")
  for n in "${missing[@]}"; do mv "$tmp/$n" "$BIN/$n"; done
  rmdir "$tmp"
  echo "build: $(IFS=+; echo "${missing[*]}") in $((SECONDS - t))s" >&2
}

targets=("$@"); [ ${#targets[@]} -gt 0 ] || targets=(etcd kube-apiserver)
k8s=()
for t in "${targets[@]}"; do
  case $t in
    kube-apiserver|kube-controller-manager|kube-scheduler|kubectl) k8s+=("$t") ;;
  esac
done
[ ${#k8s[@]} -eq 0 ] || build_k8s "${k8s[@]}"
for t in "${targets[@]}"; do
  case $t in
    etcd) build etcd "$ROOT/e2e/cluster/etcd" . "" ;;
    kube-apiserver|kube-controller-manager|kube-scheduler|kubectl) ;;
    kwok) build kwok "$ROOT/e2e/cluster/kwok" sigs.k8s.io/kwok/cmd/kwok "" ;;
    csi-provisioner) build "$t" "$ROOT/e2e/cluster/csi-provisioner" github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner "" ;;
    csi-resizer) build "$t" "$ROOT/e2e/cluster/csi-resizer" github.com/kubernetes-csi/external-resizer/v2/cmd/csi-resizer "" ;;
    csi-snapshotter|snapshot-controller)
      build "$t" "$ROOT/e2e/cluster/csi-snapshotter" "github.com/kubernetes-csi/external-snapshotter/v8/cmd/$t" "" ;;
    all) "$0" etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok csi-provisioner csi-resizer csi-snapshotter snapshot-controller >/dev/null ;;
    *) echo "build: unknown binary $t" >&2; exit 2 ;;
  esac
done
echo "$BIN"
