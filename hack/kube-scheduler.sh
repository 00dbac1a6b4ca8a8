#!/usr/bin/env bash
# Build upstream's kube-scheduler from its Go module, the side-by-side anchor of the
# end-to-end scheduler benchmark (benchmarks/scheduler_e2e.py).
#
# The same version as the envtest kube-apiserver (hack/envtest.sh), built the same way
# (hack/lib/k8s-command.sh); its main runs the scheduler command of cmd/kube-scheduler/app.
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
export GOFLAGS="-mod=mod"
export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"
# shellcheck source=hack/lib/k8s-command.sh
source "$(dirname "$0")/lib/k8s-command.sh"

# the blank imports of cmd/kube-scheduler (JSON logs, client-go and version metrics)
k8s_build_command koordinator.invalid/bench-kube-scheduler "$(cat <<'GO'
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
)" "$OUT/kube-scheduler"

echo "$OUT"
