#!/bin/sh
# ensure-packages.sh PKG... — installs those of Debian's packages PKG that
# are not installed (apt-get, after one update), and says which. What CI,
# the VM image's build and the Kubernetes parts' build need from the host.
set -eu
missing=""
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing="$missing $p"
done
[ -n "$missing" ] || exit 0
echo "installing Debian's$missing" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
