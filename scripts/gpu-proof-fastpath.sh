#!/usr/bin/env bash
# Proof of the whole fast path on a GPU machine with its own torch + CUDA (no network):
#   1. build causal-conv1d and mamba-ssm for ARCHS, and the pure fla-core and
#      flash-linear-attention, with `--toolchain system` (mamba-ssm's recipe smoke test
#      compares its selective scan with a reference on the GPU during the build);
#   2. publish them to a wheelsmith index, serve it on 127.0.0.1 and pip-install from it;
#   3. run upstream causal-conv1d tests against the installed wheel with CUDA_DISABLE_PTX_JIT=1
#      (mamba-ssm's sdist ships no op tests: MAMBA_TESTS=PATH runs a copy of upstream's
#      tests/ops/test_selective_scan.py from the mamba repository, too);
#   4. `wheelsmith doctor` must say healthy; after installing a wheel built for 12.0 only
#      (the tiny fixture), it must say unhealthy.
# The causal-conv1d chain runs while mamba-ssm compiles. Usage: [ARCHS] [RESULTS_DIR]
# The work can be split across runs:
#   WORK=DIR STAGE=mamba   builds mamba-ssm only (its wheel kept in DIR); a later run with the
#                          same WORK skips every build whose wheel is already there.
set -uo pipefail
# The machine's Python needs ninja (wheelsmith refuses a CUDA build without it); offline:
#   python3 -m pip install --no-index --find-links DIR ninja auditwheel
archs=${1:-"9.0;12.0"}
results=$(realpath -m "${2:-gpu-proof-fastpath}")
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(realpath -m "${WORK:-$(mktemp -d)}")
stage=${STAGE:-all}
mkdir -p "$work"
built() { compgen -G "$1/*.whl" > /dev/null; }
mkdir -p "$results"
export PYTHONPATH="$repo/src" PYTHONUNBUFFERED=1
ws() { python3 -m wheelsmith "$@"; }
common=(--toolchain system --env NVCC_APPEND_FLAGS=--split-compile=0)
index="$work/index"
url=http://127.0.0.1:8765
install() { python3 -m pip install -q --no-deps --index-url "$url/$(ls "$index" | grep '^cu')/simple/" "$@"; }
start=$(date +%s)

causal_chain() {
  if ! built "$work/wh-causal"; then
    ws build causal-conv1d --arch "$archs" "${common[@]}" --out "$work/wh-causal" \
      --work-dir "$work/b-causal" --keep-work --json \
      > "$results/causal.json" 2> "$results/causal.log" || return 1
  fi
  ws publish "$work"/wh-causal/*.whl --index "$index" || return 1
  ws serve --index "$index" --port 8765 2> "$results/serve.log" &
  sleep 2
  install causal-conv1d && echo "installed causal-conv1d from the index"
  cp -r "$work"/b-causal/causal-conv1d-*/src/causal_conv1d-*/tests "$work/upstream-tests"
  (cd "$work" && CUDA_DISABLE_PTX_JIT=1 python3 -m pytest -q -p no:cacheprovider -n 8 \
    "$work/upstream-tests/test_causal_conv1d.py" 2>&1 | tail -n 1 > "$results/upstream-tests.txt")
  echo "causal chain done at $(( $(date +%s) - start )) s"
}
if [ "$stage" != mamba ]; then
  causal_chain > "$results/causal-chain.txt" 2>&1 &
  for pure in fla-core flash-linear-attention; do
    built "$work/wh-pure" || ws build "$pure" --toolchain system --out "$work/wh-pure" \
      --work-dir "$work/b-$pure" 2>> "$results/pure.log" &
  done
fi
built "$work/wh-mamba" || ws build mamba-ssm --arch "$archs" "${common[@]}" --out "$work/wh-mamba" \
  --work-dir "$work/b-mamba" --json > "$results/mamba.json" 2> "$results/mamba.log" \
  || { tail -30 "$results/mamba.log"; exit 1; }
echo "mamba built at $(( $(date +%s) - start )) s" | tee -a "$results/timing.txt"
[ "$stage" = mamba ] && exit 0
wait
cat "$results/causal-chain.txt" "$results/upstream-tests.txt"
ws publish "$work"/wh-mamba/*.whl "$work"/wh-pure/*.whl --index "$index" | tee "$results/publish.txt"
install mamba-ssm fla-core flash-linear-attention && echo "installed the rest from the index"
if [ -n "${MAMBA_TESTS:-}" ]; then  # upstream's tests/ops/test_selective_scan.py (not in the sdist)
  (cd "$work" && CUDA_DISABLE_PTX_JIT=1 python3 -m pytest -q -p no:cacheprovider "$MAMBA_TESTS" \
    2>&1 | tail -n 1 | tee "$results/upstream-mamba-tests.txt")
fi
grep -c '\.metadata HTTP' "$results/serve.log" | sed 's/^/.metadata requests: /'

ws doctor --need fla --need causal_conv1d --need mamba_ssm --index "$url" \
  > "$results/doctor-healthy.txt" 2>&1
echo "doctor exit code: $?" | tee -a "$results/doctor-healthy.txt"
mkdir -p "$work/proj/recipes" && cp -r "$repo/toolchains" "$work/proj/"
sed "s|PATH|$repo/tests/fixtures/tiny-ext|" "$repo/tests/fixtures/tiny-ext.recipe.yaml" \
  > "$work/proj/recipes/tiny-ext.yaml"
(cd "$work/proj" && ws build tiny-ext --arch 12.0 --toolchain system --publish \
  --index "$index" 2>> "$results/tiny.log")
install tiny-ext && echo "installed tiny-ext (12.0 only) from the index"
ws doctor --need fla --need causal_conv1d --need mamba_ssm --index "$url" \
  > "$results/doctor-unhealthy.txt" 2>&1
echo "doctor exit code: $?" | tee -a "$results/doctor-unhealthy.txt"
echo "total: $(( $(date +%s) - start )) s" | tee -a "$results/timing.txt"
cat "$results/doctor-healthy.txt" "$results/doctor-unhealthy.txt"
kill %1 2>/dev/null; pkill -f "wheelsmith serve" || true
