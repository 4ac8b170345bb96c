#!/usr/bin/env bash
# Pin the Dockerfile's base image by digest in images.lock (like cibuildwheel's pinned images
# file and its update script). Needs a registry: pulls the tag, reads the digest, writes it.
# Usage: scripts/update-base-image.sh [TAG]     (default docker.io/library/debian:bookworm-slim)
set -euo pipefail
tag=${1:-docker.io/library/debian:bookworm-slim}
engine=$(command -v podman || command -v docker)
"$engine" pull --quiet "$tag" >/dev/null
digest=$("$engine" image inspect --format '{{.Digest}}' "$tag")
case "$digest" in sha256:*) ;; *) echo "no digest for $tag" >&2; exit 1 ;; esac
lock="$(dirname "$0")/../images.lock"
sed -i "s|^debian-bookworm: .*|debian-bookworm: \"${tag%%:*}@${digest}\"|" "$lock"
echo "pinned ${tag%%:*}@${digest} in images.lock"
