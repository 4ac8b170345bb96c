#!/usr/bin/env bash
# Pin a Dockerfile base image by digest in images.lock (like cibuildwheel's pinned images
# file and its update script). Needs a registry: pulls the tag (a short name, resolved by the
# engine's own registry configuration), reads the digest, writes it.
# Usage: scripts/update-base-image.sh [SUITE]     (bookworm: Python 3.11, trixie: 3.13)
set -euo pipefail
suite=${1:-bookworm}
tag="debian:${suite}-slim"
engine=$(command -v podman || command -v docker)
"$engine" pull --quiet "$tag" >/dev/null
digest=$("$engine" image inspect --format '{{.Digest}}' "$tag")
case "$digest" in sha256:*) ;; *) echo "no digest for $tag" >&2; exit 1 ;; esac
lock="$(dirname "$0")/../images.lock"
sed -i "s|^debian-${suite}: .*|debian-${suite}: \"debian@${digest}\"|" "$lock"
echo "pinned debian@${digest} (${tag}) in images.lock"
