# Sourced by hack/node-tier.sh and hack/image.sh: install a Debian package with apt-get when
# dpkg does not have it (refreshing the package lists once if the first try fails).
#
#   debian_package <package>
#
# Messages go to stderr, named after the script that sourced this file.

debian_package() {
  local me
  me="$(basename "$0")"
  dpkg -s "$1" >/dev/null 2>&1 && return 0
  command -v apt-get >/dev/null || { echo "$me: $1 is missing and there is no apt-get" >&2; return 1; }
  echo "$me: installing Debian's $1" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$1" >&2 \
    || { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$1" >&2; }
}
