#!/usr/bin/env bash
# Build the node tier from Go modules and Debian packages: a real kubelet, container runtime
# and CNI, for the `node` test tier and `make cluster` (testsupport/nodetier).
#
#   bin/      kubelet, kube-controller-manager, kube-proxy, kube-scheduler (k8s.io/kubernetes
#             at the envtest apiserver's version, through hack/lib/k8s-command.sh);
#             containerd, containerd-shim-runc-v2, ctr (containerd 2.x, static, no cgo);
#             runc (cgo, -tags seccomp: the kubelet always asks for RuntimeDefault seccomp on
#             the sandbox, so a runc without seccomp cannot run any pod)
#   cni-bin/  bridge, host-local, loopback (containerd always adds the loopback network)
#   images/   pause.tar (a static pause program under the name containerd pins as its sandbox
#             image) and busybox.tar (Debian's static busybox), OCI archives for `ctr import`
#
# Debian's libseccomp-dev (runc's build) and nftables (kube-proxy's nft) are installed with
# apt-get when missing; busybox-static is only downloaded. Everything is cached outside the repository, keyed by the versions:
#   ${KOORD_NODETIER_CACHE:-$XDG_CACHE_HOME/koordinator-nodetier}/k8s-<v>-containerd-<v>-runc-<v>-cni-<v>
# Each piece is built only when missing. Prints that directory as its last line.
set -euo pipefail

K8S_VERSION="${KOORD_ENVTEST_K8S_VERSION:-v1.34.4}"
CONTAINERD_VERSION=v2.2.9 # its script/setup/runc-version pins runc v1.3.6
RUNC_VERSION=v1.3.6
CNI_VERSION=v1.9.1
CACHE_ROOT="${KOORD_NODETIER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/koordinator-nodetier}"
OUT="$CACHE_ROOT/k8s-${K8S_VERSION}-containerd-${CONTAINERD_VERSION}-runc-${RUNC_VERSION}-cni-${CNI_VERSION}"
HERE="$(cd "$(dirname "$0")" && pwd)"

K8S_COMMANDS=(kubelet kube-controller-manager kube-proxy kube-scheduler)
BINARIES=("${K8S_COMMANDS[@]}" containerd containerd-shim-runc-v2 ctr runc)
CNI_PLUGINS=(bridge host-local loopback)

complete() {
  local b
  for b in "${BINARIES[@]}"; do [[ -x "$OUT/bin/$b" ]] || return 1; done
  for b in "${CNI_PLUGINS[@]}"; do [[ -x "$OUT/cni-bin/$b" ]] || return 1; done
  [[ -f "$OUT/images/pause.tar" && -f "$OUT/images/busybox.tar" ]]
}

# shellcheck source=hack/lib/debian.sh
source "$HERE/lib/debian.sh"

# kube-proxy's nftables mode runs nft (there is no iptables here); without it the node
# runs without kube-proxy
command -v nft >/dev/null || debian_package nftables || echo "node-tier.sh: no nft: kube-proxy will not run" >&2

if complete; then
  echo "$OUT"
  exit 0
fi

command -v go >/dev/null || { echo "node-tier.sh: go is not on PATH" >&2; exit 1; }
command -v gcc >/dev/null || { echo "node-tier.sh: gcc is not on PATH (runc and the pause program need it)" >&2; exit 1; }
mkdir -p "$OUT/bin" "$OUT/cni-bin" "$OUT/images"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export GOFLAGS="-mod=mod"
export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"

# --- Kubernetes commands ------------------------------------------------------------------
# shellcheck source=hack/lib/k8s-command.sh
source "$HERE/lib/k8s-command.sh"
declare -A K8S_APP=(
  [kubelet]='app.NewKubeletCommand(context.Background())'
  [kube-controller-manager]='app.NewControllerManagerCommand()'
  [kube-proxy]='app.NewProxyCommand()'
  [kube-scheduler]='app.NewSchedulerCommand()'
)
for cmd in "${K8S_COMMANDS[@]}"; do
  [[ -x "$OUT/bin/$cmd" ]] && continue
  echo "node-tier.sh: building $cmd ${K8S_VERSION}" >&2
  context_import=""
  [[ "$cmd" == kubelet ]] && context_import='"context"'
  # the blank imports of each upstream cmd/<name>/<name>.go: JSON logs, client-go and version metrics
  k8s_build_command "koordinator.invalid/nodetier-$cmd" "$(cat <<GO
package main

import (
	${context_import}
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/$cmd/app"
)

func main() {
	os.Exit(cli.Run(${K8S_APP[$cmd]}))
}
GO
)" "$OUT/bin/$cmd"
done

# --- containerd (no replace directives: go install works) ---------------------------------
if [[ ! -x "$OUT/bin/containerd" || ! -x "$OUT/bin/containerd-shim-runc-v2" || ! -x "$OUT/bin/ctr" ]]; then
  echo "node-tier.sh: building containerd ${CONTAINERD_VERSION}" >&2
  GOBIN="$work/containerd" CGO_ENABLED=0 go install -trimpath \
    -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=${CONTAINERD_VERSION}" \
    "github.com/containerd/containerd/v2/cmd/containerd@${CONTAINERD_VERSION}" \
    "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@${CONTAINERD_VERSION}" \
    "github.com/containerd/containerd/v2/cmd/ctr@${CONTAINERD_VERSION}"
  mv "$work"/containerd/* "$OUT/bin/"
fi

# --- runc, with seccomp -------------------------------------------------------------------
if [[ ! -x "$OUT/bin/runc" ]]; then
  echo "node-tier.sh: building runc ${RUNC_VERSION}" >&2
  debian_package libseccomp-dev
  GOBIN="$work/runc" CGO_ENABLED=1 go install -trimpath -tags seccomp \
    -ldflags "-s -w -X main.version=${RUNC_VERSION#v}" "github.com/opencontainers/runc@${RUNC_VERSION}"
  mv "$work/runc/runc" "$OUT/bin/runc"
fi

# --- CNI plugins --------------------------------------------------------------------------
if [[ ! -x "$OUT/cni-bin/bridge" || ! -x "$OUT/cni-bin/host-local" || ! -x "$OUT/cni-bin/loopback" ]]; then
  echo "node-tier.sh: building the CNI plugins ${CNI_VERSION}" >&2
  GOBIN="$work/cni" CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" \
    "github.com/containernetworking/plugins/plugins/main/bridge@${CNI_VERSION}" \
    "github.com/containernetworking/plugins/plugins/ipam/host-local@${CNI_VERSION}" \
    "github.com/containernetworking/plugins/plugins/main/loopback@${CNI_VERSION}"
  mv "$work"/cni/* "$OUT/cni-bin/"
fi

# --- images -------------------------------------------------------------------------------
if [[ ! -f "$OUT/images/pause.tar" || ! -f "$OUT/images/busybox.tar" ]]; then
  echo "node-tier.sh: making the pause and busybox images" >&2
  gcc -static -Os -s -o "$work/pause" "$HERE/node-tier/pause.c"
  (cd "$work" && apt-get download -q -o APT::Sandbox::User=root busybox-static >&2) \
    || { apt-get update -q >&2 && (cd "$work" && apt-get download -q -o APT::Sandbox::User=root busybox-static >&2); }
  dpkg-deb -x "$work"/busybox-static_*.deb "$work/busybox"
  # the packer is standard-library only: run as a file, not through its package
  python3 "$HERE/../testsupport/nodetier/image.py" pause "$work/pause" "$work/pause.tar"
  python3 "$HERE/../testsupport/nodetier/image.py" busybox "$work/busybox/bin/busybox" "$work/busybox.tar"
  mv "$work/pause.tar" "$work/busybox.tar" "$OUT/images/"
fi

complete || { echo "node-tier.sh: the build left $OUT incomplete" >&2; exit 1; }
echo "$OUT"
