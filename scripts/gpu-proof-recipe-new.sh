#!/usr/bin/env bash
# Packages whose recipes `wheelsmith recipe new` wrote with no edit, built for 9.0 on a GPU
# machine with its own torch + nvcc (--toolchain system, no network), installed, and their
# upstream tests run there with CUDA_DISABLE_PTX_JIT=1 (the sm_90 cubins, not PTX, run them).
# Prepare the bundle on a machine with the index (DIR is carried to the GPU machine):
#   wheelsmith recipe new warp-rnnt==0.7.0 --recipes DIR/recipes-repo --no-configure
#   wheelsmith recipe new torchsort==0.1.10 --recipes DIR/recipes-repo --no-configure
#   DIR/cache/downloads/: the two sdists as wheelsmith's download cache holds them
#   DIR/wheels/: ninja, auditwheel, pyelftools, scipy, click, pyyaml wheels for the GPU's Python
#   DIR/fss/: fast_soft_sort (torchsort's tests compare with it; not on the index)
# Usage (on the GPU machine, from the repository root): OUT=RESULTS scripts/gpu-proof-recipe-new.sh DIR
set -uo pipefail
B=$(cd "${1:?bundle directory}" && pwd); repo=$(cd "$(dirname "$0")/.." && pwd); cd "$B" || exit 1
python3 -V; python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
nvidia-smi -L
for m in ninja:ninja auditwheel:auditwheel elftools:pyelftools scipy:scipy click:click yaml:pyyaml; do
  python3 -c "import ${m%%:*}" 2>/dev/null \
    || python3 -m pip install -q --no-index --no-deps --find-links wheels "${m#*:}"
done
export PYTHONPATH="$repo/src" WHEELSMITH_CACHE="$B/cache" PYTHONUNBUFFERED=1
for p in warp-rnnt torchsort; do
  python3 -m wheelsmith build "$p" --recipes recipes-repo --arch 9.0 --toolchain system \
    --out wh --work-dir work --json > "$OUT/$p.json" 2> "$OUT/$p.log"
  echo "$p build rc=$?"
done
python3 -m wheelsmith verify wh/*.whl > "$OUT/verify.txt" 2>&1; echo "verify rc=$?"
unset PYTHONPATH
python3 -m pip install -q --no-deps wh/*.whl
mkdir -p t/warp t/sort
for sdist in cache/downloads/*/*[0-9a-f]; do tar xzf "$sdist" -C t; done
cp t/warp_rnnt-0.7.0/warp_rnnt/test.py t/warp/test_warp_rnnt.py
cp t/torchsort-0.1.10/tests/test_ops.py t/sort/test_ops.py
cd t || exit 1
CUDA_DISABLE_PTX_JIT=1 python3 -m pytest -p no:cacheprovider -q warp/test_warp_rnnt.py \
  2>&1 | tail -n 2 | tee "$OUT/upstream-warp-rnnt.txt"
CUDA_DISABLE_PTX_JIT=1 PYTHONPATH="$B/fss" python3 -m pytest -p no:cacheprovider -p no:benchmark -q \
  sort/test_ops.py 2>&1 | tail -n 2 | tee "$OUT/upstream-torchsort.txt"
