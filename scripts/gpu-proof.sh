#!/usr/bin/env bash
# Proof on a real GPU: build causal-conv1d for ARCHS with the machine's own torch + CUDA
# (`--toolchain system`), verify it, then run upstream's own test suite against the wheel
# with PTX JIT disabled, so every kernel that runs is SASS from the wheel.
#
# Usage: scripts/gpu-proof.sh [ARCHS] [RESULTS_DIR]    (default "9.0;12.0", ./gpu-proof)
# Needs: python3 with torch (CUDA build), nvcc matching torch's CUDA major, pytest, einops.
set -euo pipefail
# The machine's Python needs ninja (wheelsmith refuses a CUDA build without it); offline:
#   python3 -m pip install --no-index --find-links DIR ninja auditwheel
archs=${1:-"9.0;12.0"}
results=$(realpath -m "${2:-gpu-proof}")
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
mkdir -p "$results"
export PYTHONPATH="$repo/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
ws() { python3 -m wheelsmith "$@"; }

nvidia-smi -L | tee "$results/gpu.txt"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' \
  | tee -a "$results/gpu.txt"

start=$(date +%s)
ws build causal-conv1d --arch "$archs" --toolchain system --keep-work --json \
  --out "$work/wheelhouse" --work-dir "$work/build" "${@:3}" > "$results/build.json"
echo "build: $(( $(date +%s) - start )) s" | tee "$results/timing.txt"
wheel=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["wheel"])' \
  "$results/build.json")
ws verify "$wheel" --arch "$archs" | tee "$results/verify.txt"

python3 -m pip install --quiet --no-deps --no-index --target "$work/site" "$wheel"
cp -r "$work"/build/causal-conv1d-*/src/causal_conv1d-*/tests "$work/upstream-tests"
cd "$work"   # not the source tree: the tests must import the installed wheel
start=$(date +%s)
CUDA_DISABLE_PTX_JIT=1 PYTHONPATH="$work/site" python3 -m pytest -q -p no:cacheprovider \
  ${PYTEST_XDIST:--n 8} "$work/upstream-tests/test_causal_conv1d.py" 2>&1 \
  | tail -n 5 | tee "$results/upstream-tests.txt"
echo "tests: $(( $(date +%s) - start )) s" | tee -a "$results/timing.txt"
PYTHONPATH="$work/site" python3 -c 'import torch, causal_conv1d_cuda as m; print(m.__file__)' \
  >> "$results/verify.txt"
