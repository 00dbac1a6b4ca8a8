#!/usr/bin/env bash
# Build helm from its Go module, for the chart tests (charts/koordinator) and users.
#
# helm v3.19 builds on Kubernetes' v0.34 libraries, the version of the envtest apiserver.
# Its go.mod has no replace directives, so `go install` builds it; the version is stamped in
# as a release build would (`helm version`).
#
# Cached outside the repository, keyed by version:
#   ${KOORD_ENVTEST_CACHE:-$XDG_CACHE_HOME/koordinator-envtest}/helm-<v>/helm
# Built only when missing. Prints the directory holding it as its last line.
set -euo pipefail

HELM_VERSION="${KOORD_HELM_VERSION:-v3.19.5}"
CACHE_ROOT="${KOORD_ENVTEST_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/koordinator-envtest}"
OUT="$CACHE_ROOT/helm-${HELM_VERSION}"

if [[ -x "$OUT/helm" ]]; then
  echo "$OUT"
  exit 0
fi

command -v go >/dev/null || { echo "helm.sh: go is not on PATH" >&2; exit 1; }
mkdir -p "$OUT"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"
GOBIN="$work" CGO_ENABLED=0 go install -trimpath \
  -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION} -X helm.sh/helm/v3/internal/version.gitTreeState=clean" \
  "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}"
mv "$work/helm" "$OUT/helm"
echo "$OUT"
