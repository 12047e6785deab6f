#!/usr/bin/env bash
# build.sh — build the Kubernetes parts the tests run, from Go modules, into a
# cache outside the repo keyed by their versions:
#   etcd                     go.etcd.io/etcd/server/v3 (e2e/cluster/etcd/go.mod)
#   kube-apiserver, kube-controller-manager, kube-scheduler, kubectl,
#   kubelet, kube-proxy      k8s.io/kubernetes (the project's go.mod)
#   csi-provisioner, csi-resizer, csi-snapshotter, snapshot-controller, kwok,
#   containerd, containerd-shim-runc-v2, ctr, runc
#                            the kubernetes-csi sidecars, sigs.k8s.io/kwok,
#                            containerd 2 and runc for the real node
#                            (e2e/cluster/addons/go.mod, its k8s.io modules
#                            at the product's Kubernetes version); runc
#                            links its C part (nsenter) statically
#   helm                     helm.sh/helm/v4 (deploy/chart/go.mod): the
#                            suites install thinlvm's chart with it
#   e2e.test, agnhost        Kubernetes' storage e2e suite and the binary
#                            of its agnhost test image, from k8s.io/kubernetes
#                            at the product's version (e2e/conformance/go.mod),
#                            into a directory keyed by that module alone
#                            (its go.mod and Go files)
# usage: build.sh [BINARY...]   (default: etcd kube-apiserver)
# With K8S_MODULE=scheduler/k8s<minor> the k8s.io/kubernetes binaries are
# that older minor's, built in its module (with -tags k8s<minor>, as the
# minor's scheduler is, so that they share its compiled packages) into a
# directory of their own: the compatibility suite's control plane.
# Prints the directory that holds the binaries (KUBEBUILDER_ASSETS) last.
# Each group (the k8s.io/kubernetes binaries, the add-ons) is one go build, so
# that the packages its binaries share compile once; the add-ons come after
# the Kubernetes binaries and reuse much of what they compiled. Cold on 2
# cores: about 10 and 4 minutes (e2e/README.md); warm, seconds.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CACHE=${THINLVM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/thinlvm}

modver() { (cd "$1" && go list -m -f '{{with .Replace}}{{.Version}}{{else}}{{.Version}}{{end}}' "$2"); }
K8S_DIR=$ROOT K8S_TAGS=
if [ -n "${K8S_MODULE:-}" ]; then
  K8S_DIR=$ROOT/$K8S_MODULE K8S_TAGS=${K8S_MODULE##*/}
fi
K8S=$(modver "$K8S_DIR" k8s.io/kubernetes)
ETCD=$(modver "$ROOT/e2e/cluster/etcd" go.etcd.io/etcd/server/v3)
# The wrapper modules pin every other version: their go.mod files are the key.
WRAP=$(cat "$ROOT"/e2e/cluster/*/go.mod "$ROOT/deploy/chart/go.mod" ${K8S_MODULE:+"$K8S_DIR/go.mod"} | sha256sum | cut -c1-12)
BIN=$CACHE/k8s/bin-k8s$K8S-etcd$ETCD-$WRAP
targets=("$@"); [ ${#targets[@]} -gt 0 ] || targets=(etcd kube-apiserver)
# The storage suite's binaries are asked for alone and kept apart: a change
# of their module rebuilds them only, and theirs rebuilds nothing else.
CONFORMANCE=0
case " ${targets[*]} " in *" e2e.test "*|*" agnhost "*)
  for t in "${targets[@]}"; do
    [ "$t" = e2e.test ] || [ "$t" = agnhost ] || { echo "build: e2e.test and agnhost are built apart from $t" >&2; exit 2; }
  done
  CONFORMANCE=1
  BIN=$CACHE/k8s/e2e-k8s$K8S-$(cat "$ROOT"/e2e/conformance/go.mod "$ROOT"/e2e/conformance/*.go | sha256sum | cut -c1-12) ;;
esac
mkdir -p "$BIN"
[ "${targets[*]}" != all ] || targets=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy
  kwok csi-provisioner csi-resizer csi-snapshotter snapshot-controller containerd containerd-shim-runc-v2 ctr runc helm)
# Every binary asked for built already (each is moved into place whole):
# no need to wait for the lock while the other lane builds others.
have=1; for t in "${targets[@]}"; do [ -x "$BIN/$t" ] || have=0; done
if [ $have = 1 ]; then echo "$BIN"; exit 0; fi
# One build at a time per directory: the suites of make test-vm's two lanes
# start together and would each compile the same binaries at once (the
# go build cache does not share a compile in flight). The second waits and
# finds them built.
exec 9>"$BIN/.lock"
flock 9

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

# The binaries asked for and missing of one group are built by one go
# build: their shared packages compile once and the links overlap the
# compiles (measured in e2e/README.md).
build_group() { # dir ldflags name=package...
  local dir=$1 ld=$2 missing=() pkgs=() n t=$SECONDS tmp
  shift 2
  for n in "$@"; do [ -x "$BIN/${n%%=*}" ] || { missing+=("${n%%=*}"); pkgs+=("${n#*=}"); }; done
  [ ${#missing[@]} -gt 0 ] || return 0
  echo "build: $(IFS=+; echo "${missing[*]}") (${pkgs[*]}) into $BIN ..." >&2
  tmp=$(mktemp -d "$BIN/.build.XXXXXX")
  (cd "$dir" && CGO_ENABLED=${CGO:-0} go build -trimpath -tags "${TAGS:-}" -ldflags="-s -w $ld" -o "$tmp/" "${pkgs[@]}")
  for n in "${missing[@]}"; do mv "$tmp/$n" "$BIN/$n"; done
  rmdir "$tmp"
  echo "build: $(IFS=+; echo "${missing[*]}") in $((SECONDS - t))s" >&2
}

if [ $CONFORMANCE = 1 ]; then
  # e2e.test is a test binary (go test -c); agnhost is the image's command.
  build_group "$ROOT/e2e/conformance" "" agnhost=k8s.io/kubernetes/test/images/agnhost
  if [ ! -x "$BIN/e2e.test" ]; then
    echo "build: e2e.test (k8s.io/kubernetes/test/e2e/storage/external, e2e/conformance) into $BIN ..." >&2
    t=$SECONDS tmp=$(mktemp -d "$BIN/.build.XXXXXX")
    (cd "$ROOT/e2e/conformance" && CGO_ENABLED=0 go test -c -trimpath -ldflags="-s -w $(k8s_ldflags)" -o "$tmp/e2e.test" .)
    mv "$tmp/e2e.test" "$BIN/e2e.test"; rmdir "$tmp"
    echo "build: e2e.test in $((SECONDS - t))s" >&2
  fi
  echo "$BIN"; exit 0
fi

etcd=() k8s=() addons=() runc=() helm=()
for t in "${targets[@]}"; do
  case $t in
    etcd) etcd=(etcd=.) ;;
    kube-apiserver|kube-controller-manager|kube-scheduler|kubectl|kubelet|kube-proxy) k8s+=("$t=k8s.io/kubernetes/cmd/$t") ;;
    kwok) addons+=("$t=sigs.k8s.io/kwok/cmd/kwok") ;;
    csi-provisioner) addons+=("$t=github.com/kubernetes-csi/external-provisioner/v6/cmd/$t") ;;
    csi-resizer) addons+=("$t=github.com/kubernetes-csi/external-resizer/v2/cmd/$t") ;;
    csi-snapshotter|snapshot-controller) addons+=("$t=github.com/kubernetes-csi/external-snapshotter/v8/cmd/$t") ;;
    containerd|containerd-shim-runc-v2|ctr) addons+=("$t=github.com/containerd/containerd/v2/cmd/$t") ;;
    runc) runc=(runc=github.com/opencontainers/runc) ;;
    helm) helm=(helm=helm.sh/helm/v4/cmd/helm) ;;
    *) echo "build: unknown binary $t" >&2; exit 2 ;;
  esac
done
[ ${#k8s[@]} -eq 0 ] || TAGS=$K8S_TAGS build_group "$K8S_DIR" "$(k8s_ldflags)" "${k8s[@]}"
[ ${#addons[@]} -eq 0 ] || build_group "$ROOT/e2e/cluster/addons" "" "${addons[@]}"
# runc's nsenter is C, run before the Go runtime starts: cgo, linked
# statically (with Debian's libseccomp.a, libseccomp-dev: containerd gives
# pod sandboxes the RuntimeDefault seccomp profile) so that the guest needs
# no library of the host's.
if [ ${#runc[@]} -gt 0 ]; then
  "$ROOT/e2e/ensure-packages.sh" libseccomp-dev pkg-config
fi
[ ${#runc[@]} -eq 0 ] || CGO=1 TAGS="seccomp netgo osusergo" build_group "$ROOT/e2e/cluster/addons" "-extldflags=-static" "${runc[@]}"
[ ${#etcd[@]} -eq 0 ] || build_group "$ROOT/e2e/cluster/etcd" "" "${etcd[@]}"
# The helm command the suites install thinlvm with: the chart module's Helm.
[ ${#helm[@]} -eq 0 ] || build_group "$ROOT/deploy/chart" "-X helm.sh/helm/v4/internal/version.version=$(modver "$ROOT/deploy/chart" helm.sh/helm/v4)" "${helm[@]}"
echo "$BIN"
