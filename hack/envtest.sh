#!/usr/bin/env bash
# Build kube-apiserver and etcd from their Go modules for the envtest tier.
#
# k8s.io/kubernetes cannot be `go install`ed (its go.mod replaces every staging
# module with a local path), so we build through a wrapper module that requires
# k8s.io/kubernetes and pins each staging module to its published v0.x twin.
# etcd's own main module has replace directives too, so it gets a wrapper that
# calls etcdmain.Main.
#
# Binaries are cached outside the repository, keyed by version:
#   ${KOORD_ENVTEST_CACHE:-$XDG_CACHE_HOME/koordinator-envtest}/k8s-<v>-etcd-<v>/{kube-apiserver,etcd}
# Prints the directory holding both binaries as its last line.
set -euo pipefail

K8S_VERSION="${KOORD_ENVTEST_K8S_VERSION:-v1.34.4}"
ETCD_VERSION="${KOORD_ENVTEST_ETCD_VERSION:-v3.6.4}"
CACHE_ROOT="${KOORD_ENVTEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/koordinator-envtest}"
OUT="$CACHE_ROOT/k8s-${K8S_VERSION}-etcd-${ETCD_VERSION}"

if [[ -x "$OUT/kube-apiserver" && -x "$OUT/etcd" ]]; then
  echo "$OUT"
  exit 0
fi

command -v go >/dev/null || { echo "envtest.sh: go is not on PATH" >&2; exit 1; }
mkdir -p "$OUT"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export GOFLAGS="-mod=mod"
export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"

minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
staging_version="v0.${K8S_VERSION#v1.}"

# --- kube-apiserver -----------------------------------------------------------
kube="$work/kube"
mkdir -p "$kube"
# The staging modules are the replace targets of k8s.io/kubernetes' own go.mod.
kmod="$(go mod download -json "k8s.io/kubernetes@${K8S_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')"
[[ -f "$kmod" ]] || { echo "envtest.sh: could not download k8s.io/kubernetes@${K8S_VERSION}" >&2; exit 1; }
{
  echo "module koordinator.invalid/envtest-apiserver"
  echo
  echo "go $(sed -n 's/^go \(.*\)/\1/p' "$kmod")"
  echo
  echo "require k8s.io/kubernetes ${K8S_VERSION}"
  echo
  echo "replace ("
  grep -oE '^\s*k8s\.io/[a-z0-9-]+ => \./staging/src/k8s\.io/[a-z0-9-]+' "$kmod" \
    | awk -v v="$staging_version" '{print "\t" $1 " => " $1 " " v}'
  echo ")"
} >"$kube/go.mod"
cat >"$kube/main.go" <<'GO'
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
GO
ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X ${pkg}.gitVersion=${K8S_VERSION} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${minor} -X ${pkg}.gitTreeState=clean"
done
(cd "$kube" && go mod tidy && go build -trimpath -ldflags "-s -w${ldflags}" -o "$OUT/kube-apiserver.tmp" .)
mv "$OUT/kube-apiserver.tmp" "$OUT/kube-apiserver"

# --- etcd ---------------------------------------------------------------------
etcd="$work/etcd"
mkdir -p "$etcd"
cat >"$etcd/go.mod" <<GOMOD
module koordinator.invalid/envtest-etcd

go 1.23.0

require go.etcd.io/etcd/server/v3 ${ETCD_VERSION}
GOMOD
cat >"$etcd/main.go" <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
GO
(cd "$etcd" && go mod tidy && go build -trimpath -ldflags "-s -w" -o "$OUT/etcd.tmp" .)
mv "$OUT/etcd.tmp" "$OUT/etcd"

echo "$OUT"
