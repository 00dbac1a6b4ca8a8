#!/usr/bin/env bash
# Build kube-apiserver and etcd from their Go modules for the envtest tier.
#
# kube-apiserver is built through a wrapper module (hack/lib/k8s-command.sh: k8s.io/kubernetes
# cannot be `go install`ed). etcd's own main module has replace directives too, so it gets a
# wrapper that calls etcdmain.Main.
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

# shellcheck source=hack/lib/k8s-command.sh
source "$(dirname "$0")/lib/k8s-command.sh"

# --- kube-apiserver -----------------------------------------------------------
k8s_build_command koordinator.invalid/envtest-apiserver "$(cat <<'GO'
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
)" "$OUT/kube-apiserver"

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
