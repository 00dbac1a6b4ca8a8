#!/usr/bin/env bash
# Build the project's container image from Dockerfile without a Docker daemon, and write it
# as an archive that `ctr images import` (the node tier's containerd) and `docker load` take.
#
# No image registry is reachable here, so the Dockerfile's base is made locally: Debian
# bookworm with python3 by debootstrap (deb.debian.org), committed by buildah as
# localhost/koordinator-py/debian:bookworm. buildah (chroot isolation, the host's network
# for apt-get and pip) then builds the Dockerfile. Debian's buildah and debootstrap are
# installed with apt-get when missing.
#
# Cached outside the repository, keyed by a hash of the image's inputs:
#   ${KOORD_IMAGE_CACHE:-$XDG_CACHE_HOME/koordinator-image}/koordinator-<hash>.tar
# Prints the archive's path as its last line. The image is named
#   ${KOORD_IMAGE:-ghcr.io/koordinator-py/koordinator:<chart appVersion>}
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${KOORD_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/koordinator-image}"
VERSION="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$ROOT/charts/koordinator/Chart.yaml")"
IMAGE="${KOORD_IMAGE:-ghcr.io/koordinator-py/koordinator:${VERSION}}"
BASE=localhost/koordinator-py/debian:bookworm
STORAGE=(--root "$CACHE/storage" --runroot "$CACHE/run" --storage-driver vfs)

inputs() { # every file the image is made of, and this script
  cd "$ROOT"
  git ls-files -z Dockerfile .dockerignore pyproject.toml setup.py README.md requirements native \
    koordinator koordlet controlplane hack/image.sh | xargs -0 sha256sum
  echo "$IMAGE"
}
KEY="$(inputs | sha256sum | cut -c1-16)"
OUT="$CACHE/koordinator-${KEY}.tar"
if [[ -f "$OUT" ]]; then
  echo "$OUT"
  exit 0
fi

# shellcheck source=hack/lib/debian.sh
source "$ROOT/hack/lib/debian.sh"
debian_package buildah
debian_package debootstrap
mkdir -p "$CACHE"

if ! buildah "${STORAGE[@]}" inspect --type image "$BASE" >/dev/null 2>&1; then
  echo "image.sh: making $BASE with debootstrap" >&2
  rootfs="$(mktemp -d)"
  trap 'rm -rf "$rootfs"' EXIT
  debootstrap --variant=minbase --include=python3,ca-certificates bookworm "$rootfs" \
    http://deb.debian.org/debian >&2
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
    "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/locale/*
  container="$(buildah "${STORAGE[@]}" from scratch)"
  mnt="$(buildah "${STORAGE[@]}" mount "$container")"
  cp -a "$rootfs"/. "$mnt"/
  buildah "${STORAGE[@]}" umount "$container" >/dev/null
  buildah "${STORAGE[@]}" commit --rm "$container" "$BASE" >&2
fi

echo "image.sh: building $IMAGE" >&2
# the host's CA bundle (a build secret, not kept in the image) lets pip through a TLS proxy
secret=()
ca_bundle="${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}"
[[ -s "$ca_bundle" ]] && secret=(--secret "id=ca-bundle,src=$ca_bundle")
buildah "${STORAGE[@]}" build --isolation chroot --network host --layers=false "${secret[@]}" \
  --build-arg "BASE=$BASE" -t "$IMAGE" -f "$ROOT/Dockerfile" "$ROOT" >&2
rm -f "$CACHE"/koordinator-*.tar.tmp
buildah "${STORAGE[@]}" push "$IMAGE" "docker-archive:$OUT.tmp:$IMAGE" >&2
mv "$OUT.tmp" "$OUT"
# archives of earlier sources, unused for a day, go (another checkout may still read a newer one)
find "$CACHE" -maxdepth 1 -name 'koordinator-*.tar' ! -name "$(basename "$OUT")" -mtime +0 -delete
buildah "${STORAGE[@]}" rmi "$IMAGE" >/dev/null 2>&1 || true
echo "$OUT"
