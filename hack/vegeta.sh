#!/usr/bin/env bash
# Build vegeta, the constant-rate HTTP load generator of the webhook_admission benchmark (M1).
#
# The benchmark's load must come from a separate, established generator, so that pauses of
# the generator itself cannot enter the latency figures. vegeta is built from its Go module
# with `go install` and cached outside the repository, keyed by version:
#   ${KOORD_BENCH_CACHE:-$XDG_CACHE_HOME/koordinator-bench}/vegeta-<v>/vegeta
# Prints the binary's path as its last line; exits non-zero (with the reason) if it cannot.
set -euo pipefail

VEGETA_VERSION="${KOORD_VEGETA_VERSION:-v12.13.0}"
CACHE_ROOT="${KOORD_BENCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/koordinator-bench}"
OUT="$CACHE_ROOT/vegeta-${VEGETA_VERSION}"

if [[ -x "$OUT/vegeta" ]]; then
  echo "$OUT/vegeta"
  exit 0
fi

command -v go >/dev/null || { echo "vegeta.sh: go is not on PATH (needed to build vegeta)" >&2; exit 1; }
mkdir -p "$OUT"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"
# Install into a scratch GOBIN and move the binary into place, so a broken build never
# leaves a half-written binary in the cache.
GOBIN="$work/bin" GOFLAGS="-trimpath" go install -ldflags "-s -w" \
  "github.com/tsenart/vegeta/v12@${VEGETA_VERSION}" >&2
mv "$work/bin/vegeta" "$OUT/vegeta.tmp"
mv "$OUT/vegeta.tmp" "$OUT/vegeta"
echo "$OUT/vegeta"
