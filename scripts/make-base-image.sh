#!/usr/bin/env bash
# A Debian base image without a registry: debootstrap a minimal root file system and import it
# into podman or $ENGINE (research/builds.md 10.2: ~35 s, ~205 MB). Prints the image reference.
# `wheelsmith image build` runs it when no base is pinned and no registry answers.
# Usage: scripts/make-base-image.sh [IMAGE] [SUITE] [MIRROR]     (needs root, debootstrap, podman)
#   SUITE   bookworm (python3 3.11, the default), trixie (python3 3.13) or forky (python3.14 and
#           python3.15); a suite this debootstrap has no script for (forky on Debian 12's
#           debootstrap) is made with the script of sid, which every Debian suite shares
#   MIRROR  default: the Debian mirror this machine's apt sources use
set -euo pipefail
suite=${2:-bookworm}
image=${1:-localhost/wheelsmith-base:$suite}
mirror=${3:-}
engine=${ENGINE:-podman}
if [ -z "$mirror" ]; then
  # the first Debian archive URI in apt's sources (deb822 .sources files, then sources.list)
  mirror=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null \
             | awk '/^URIs:/ {print $2}' | grep -v -- '-security' | grep -m1 '/debian/\?$' || true)
  [ -n "$mirror" ] || mirror=$(grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
             | awk '{print $2}' | grep -m1 '/debian/\?$' || true)
  [ -n "$mirror" ] || { echo "no Debian mirror in apt's sources: pass one as MIRROR" >&2; exit 1; }
fi
if "$engine" image inspect "$image" >/dev/null 2>&1; then echo "$image"; exit 0; fi
rootfs=$(mktemp -d)
trap 'rm -rf "$rootfs"' EXIT
script=/usr/share/debootstrap/scripts/$suite
[ -e "$script" ] || script=/usr/share/debootstrap/scripts/sid
debootstrap --variant=minbase "$suite" "$rootfs" "$mirror" "$script" >&2
tar -C "$rootfs" -c . | "$engine" import - "$image" >&2
echo "$image"
