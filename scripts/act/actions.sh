#!/usr/bin/env bash
# Local copies of the actions nightly.yml uses, at the commits it pins, for scripts/act-nightly.sh:
#
#   scripts/act/actions.sh MIRRORS [DEST]
#
# MIRRORS  a directory of bare git repositories named OWNER+NAME/repo (or OWNER+NAME.git), e.g.
#          snapshots of the public action repositories brought in without GitHub access
# DEST     where each becomes NAME@SHA (default /var/tmp/wheelsmith-act/actions)
#
# A snapshot may lack its largest files (the bundled dist/*.js of upload-artifact and
# download-artifact): those are rebuilt from the same commit's sources with its package-lock and
# ncc (`npm ci`, from the npm registry the machine's npm is configured with). Two changes to
# upload-artifact's bundle make it talk to act's artifact server (act 0.2.89, open upstream as
# nektos/act#6022 and #6021); docs/nightly.md, "The workflow under act", has the details.
set -euo pipefail
mirrors=${1:?usage: actions.sh MIRRORS [DEST]}
dest=${2:-/var/tmp/wheelsmith-act/actions}
workflow=$(cd "$(dirname "$0")/../.." && pwd)/.github/workflows/nightly.yml
mkdir -p "$dest"

# an action in a subfolder (actions/cache/restore@SHA) comes from its repository (actions/cache)
for uses in $(grep -o 'uses: [^ ]*' "$workflow" | cut -d' ' -f2 \
              | sed -E 's|^([^/]+/[^/@]+)[^@]*@|\1@|' | sort -u); do
  repo=${uses%@*} sha=${uses#*@} dir=$dest/${uses#*/}
  [ -f "$dir/action.yml" ] && continue
  git_dir=$mirrors/${repo/\//+}/repo
  [ -d "$git_dir" ] || git_dir=$mirrors/${repo/\//+}.git
  mkdir -p "$dir"
  git --git-dir="$git_dir" --work-tree="$dir" checkout -f "$sha" -- . 2>/dev/null || true
  missing=$(git --git-dir="$git_dir" ls-tree -r "$sha" --name-only -- dist | while read -r f; do
    [ -f "$dir/$f" ] || echo "$f"; done)
  if [ -n "$missing" ]; then
    echo "$uses: rebuilding $(echo "$missing" | tr '\n' ' ')from its sources" >&2
    # @actions/artifact 6.2.0, in upload-artifact's lock, is no longer served; 6.2.1 is the fix
    sed -i 's/"@actions\/artifact": "^6.2.0"/"@actions\/artifact": "6.2.1"/' "$dir/package.json"
    (cd "$dir" && if grep -q '"6.2.1"' package.json; then npm install --ignore-scripts --no-audit \
       --no-fund >&2; else npm ci --ignore-scripts --no-audit --no-fund >&2; fi)
    for f in $missing; do  # dist/X/index.js from src/X/index.ts, else package.json's ncc entry
      out=$(dirname "$f") sub=${f#dist/}
      entry=src/${sub%/index.js}/index.ts
      [ -f "$dir/$entry" ] || entry=$(grep -o 'ncc build src/[A-Za-z_-]*\.ts' "$dir/package.json" \
                                       | head -n 1 | cut -d' ' -f3 || true)
      (cd "$dir" && npx ncc build "$entry" -o "$out" >&2)
    done
    rm -rf "$dir/node_modules"
  fi
  if [ "${repo#*/}" = upload-artifact ]; then
    for f in "$dir"/dist/*/index.js; do
      # act's CreateArtifact does not know the request's mime_type field (artifact API v7):
      # it refuses the whole request, so the field is not sent
      sed -i '/^ *mimeType: StringValue.create({ value: contentType }),$/d' "$f"
      # the blob client drops the `=` that ends the signed URL's base64 signature, which act
      # then refuses (401): the `=` goes percent-encoded, which act decodes back
      sed -i 's|^\( *const blobClient = new BlobClient(authenticatedUploadURL\));$|\1.replace(/=(?=\&\|$)/g, "%3D"));|' "$f"
    done
  fi
  echo "$uses -> $dir" >&2
done
