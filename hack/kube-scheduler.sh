#!/usr/bin/env bash
# Build upstream's kube-scheduler from its Go module, the side-by-side anchor of the
# end-to-end scheduler benchmark (benchmarks/scheduler_e2e.py).
#
# The same version as the envtest kube-apiserver (hack/envtest.sh), built the same way:
# k8s.io/kubernetes cannot be `go install`ed (its go.mod replaces every staging module with
# a local path), so a wrapper module requires k8s.io/kubernetes and pins each staging module
# to its published v0.x twin; its main runs the scheduler command of cmd/kube-scheduler/app.
#
# The binary is cached outside the repository, keyed by version, under the envtest cache:
#   ${KOORD_ENVTEST_CACHE:-$XDG_CACHE_HOME/koordinator-envtest}/kube-scheduler-<v>/kube-scheduler
# Built only when missing. Prints the directory holding it as its last line; exits non-zero
# (with the reason) if it cannot. With --cached it never builds: exit status 3 when the
# binary is not in the cache (the benchmark's quick smoke run uses that).
set -euo pipefail

cached_only=false
case "${1:-}" in
  --cached) cached_only=true ;;
  "") ;;
  *) echo "usage: $0 [--cached]" >&2; exit 2 ;;
esac

K8S_VERSION="${KOORD_ENVTEST_K8S_VERSION:-v1.34.4}"
CACHE_ROOT="${KOORD_ENVTEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/koordinator-envtest}"
OUT="$CACHE_ROOT/kube-scheduler-${K8S_VERSION}"

if [[ -x "$OUT/kube-scheduler" ]]; then
  echo "$OUT"
  exit 0
fi
if $cached_only; then
  echo "kube-scheduler.sh: $OUT/kube-scheduler is not built (bash hack/kube-scheduler.sh builds it)" >&2
  exit 3
fi

command -v go >/dev/null || { echo "kube-scheduler.sh: go is not on PATH" >&2; exit 1; }
mkdir -p "$OUT"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export GOFLAGS="-mod=mod"
export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"

minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
staging_version="v0.${K8S_VERSION#v1.}"

# The staging modules are the replace targets of k8s.io/kubernetes' own go.mod.
kmod="$(go mod download -json "k8s.io/kubernetes@${K8S_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')"
[[ -f "$kmod" ]] || { echo "kube-scheduler.sh: could not download k8s.io/kubernetes@${K8S_VERSION}" >&2; exit 1; }
{
  echo "module koordinator.invalid/bench-kube-scheduler"
  echo
  echo "go $(sed -n 's/^go \(.*\)/\1/p' "$kmod")"
  echo
  echo "require k8s.io/kubernetes ${K8S_VERSION}"
  echo
  echo "replace ("
  grep -oE '^\s*k8s\.io/[a-z0-9-]+ => \./staging/src/k8s\.io/[a-z0-9-]+' "$kmod" \
    | awk -v v="$staging_version" '{print "\t" $1 " => " $1 " " v}'
  echo ")"
} >"$work/go.mod"
# upstream's cmd/kube-scheduler/scheduler.go, blank imports included
cat >"$work/main.go" <<'GO'
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	os.Exit(cli.Run(app.NewSchedulerCommand()))
}
GO
ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X ${pkg}.gitVersion=${K8S_VERSION} -X ${pkg}.gitMajor=1 -X ${pkg}.gitMinor=${minor} -X ${pkg}.gitTreeState=clean"
done
(cd "$work" && go mod tidy >&2 && go build -trimpath -ldflags "-s -w${ldflags}" -o "$OUT/kube-scheduler.tmp" . >&2)
mv "$OUT/kube-scheduler.tmp" "$OUT/kube-scheduler"

echo "$OUT"
