#!/usr/bin/env bash
# A Debian bookworm base image without a registry: debootstrap a minimal root file system and
# import it into podman (research/builds.md 10.2: ~35 s, ~205 MB). Prints the image reference.
# Usage: scripts/make-base-image.sh [IMAGE] [MIRROR]     (needs root, debootstrap, podman)
set -euo pipefail
image=${1:-localhost/wheelsmith-base:bookworm}
mirror=${2:-http://deb.debian.org/debian}
if podman image exists "$image"; then echo "$image"; exit 0; fi
rootfs=$(mktemp -d)
trap 'rm -rf "$rootfs"' EXIT
debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >&2
tar -C "$rootfs" -c . | podman import - "$image" >&2
echo "$image"
