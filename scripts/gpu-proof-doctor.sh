#!/usr/bin/env bash
# GPU proof of `wheelsmith doctor` running the fast path (issue 11), on a machine with its own
# torch, Triton and transformers and no network (the H200: torch 2.11, Triton 3.6.0):
#   1. build causal-conv1d for sm_90 and the tiny fixture for 12.0 only (--toolchain system),
#      publish them, serve the index on 127.0.0.1 and pip-install causal-conv1d from it;
#   2. doctor for a model that needs only causal-conv1d (lfm2): healthy, each op's max error;
#      the GatedDeltaNet default and qwen3_5 without fla: unhealthy, fla named;
#   3. install fla (the wheels in INPUTS/wheels): the GatedDeltaNet backward is refused by
#      Triton on Hopper, so doctor is unhealthy and names fla, Triton, Hopper and the fix;
#   4. trouble and bad input: a GPU whose memory another process holds; the 12.0-only wheel
#      installed: unhealthy; --model without config.json, an unknown model type; an op over
#      its time limit (a cold Triton cache, --op-timeout 8).
# Usage: INPUTS=DIR [TARBALL=FILE] [STAGE=all|trouble] scripts/gpu-proof-doctor.sh RESULTS_DIR
#   STAGE=trouble: step 4 alone, with fla installed and no causal-conv1d build.
#   INPUTS/wheels: fla-core and flash-linear-attention wheels; INPUTS/downloads: the
#   causal-conv1d sdist as wheelsmith's download cache lays it out (downloads/XX/SHA256).
#   TARBALL: RESULTS_DIR is packed into it after each step, so a run stopped at a time limit
#   still leaves the steps it finished.
set -uo pipefail
results=$(realpath -m "${1:-gpu-proof-doctor}")
repo=$(cd "$(dirname "$0")/.." && pwd)
inputs=$(realpath -m "${INPUTS:?INPUTS=DIR: the fla wheels and the download cache}")
work=$(mktemp -d)
mkdir -p "$results" "$work/cache" "$work/proj/recipes"
cp -r "$inputs/downloads" "$work/cache/"
export PYTHONPATH="$repo/src" PYTHONUNBUFFERED=1 WHEELSMITH_CACHE="$work/cache"
ws() { python3 -m wheelsmith "$@"; }
start=$(date +%s)
elapsed() { echo "$(( $(date +%s) - start )) s"; }
common=(--toolchain system --env NVCC_APPEND_FLAGS=--split-compile=0)
index="$work/index"
url=http://127.0.0.1:8765
cd "$repo" || exit 1
doctor() {  # NAME ARGS...: text report and exit code into NAME.txt
  local name=$1 t0
  shift
  t0=$(date +%s)
  ws doctor --index "$url" "$@" > "$results/$name.txt" 2>&1
  echo "exit code: $? ($(( $(date +%s) - t0 )) s)" >> "$results/$name.txt"
  echo "== $name: $(tail -1 "$results/$name.txt")"
  pack
}
pack() { [ -z "${TARBALL:-}" ] || tar czf "$TARBALL" -C "$(dirname "$results")" "$(basename "$results")"; }


{ nvidia-smi -L; python3 -c 'import sys, torch, triton, transformers
print("python", sys.version.split()[0], "torch", torch.__version__, "triton", triton.__version__,
      "transformers", transformers.__version__)'; } > "$results/env.txt" 2>&1
cat "$results/env.txt"

# 1. builds, side by side
cp -r "$repo/toolchains" "$work/proj/"
sed "s|PATH|$repo/tests/fixtures/tiny-ext|" "$repo/tests/fixtures/tiny-ext.recipe.yaml" \
  > "$work/proj/recipes/tiny-ext.yaml"
(cd "$work/proj" && python3 -m wheelsmith build tiny-ext --arch 12.0 "${common[@]}" \
  --out "$work/wh-tiny" > "$results/tiny.log" 2>&1) &
if [ "${STAGE:-all}" = all ]; then
  ws build causal-conv1d --arch 9.0 "${common[@]}" --out "$work/wh-causal" \
    --work-dir "$work/b-causal" > "$results/causal.log" 2>&1 || { tail -30 "$results/causal.log"; exit 1; }
fi
wait
echo "built at $(elapsed)" | tee -a "$results/timing.txt"
pack
ws publish "$work"/wh-*/*.whl --index "$index" > "$results/publish.txt" 2>&1
ws serve --index "$index" --port 8765 2> "$work/serve.log" &
server=$!
sleep 2
channel="$url/$(ls "$index" | grep '^cu')/simple/"

if [ "${STAGE:-all}" = all ]; then
  python3 -m pip install -q --no-deps --index-url "$channel" causal-conv1d && echo "installed causal-conv1d"
  # 2. without fla
  doctor a-lfm2-healthy --model-type lfm2
  ws doctor --index "$url" --model-type lfm2 --json > "$results/a-lfm2-healthy.json" 2>/dev/null
  doctor b-default-without-fla
  doctor c-qwen3_5-without-fla --model-type qwen3_5

  # 3. with fla
  python3 -m pip install -q --no-deps --no-index "$inputs"/wheels/*.whl && echo "installed fla"
  doctor d-default-fla-hopper
  ws doctor --index "$url" --json > "$results/d-default-fla-hopper.json" 2>/dev/null
  doctor e-qwen3_5-fla-hopper --model-type qwen3_5
  doctor f-lfm2-with-fla --model-type lfm2
  echo "fla runs done at $(elapsed)" | tee -a "$results/timing.txt"
else
  python3 -m pip install -q --no-deps --no-index "$inputs"/wheels/*.whl && echo "installed fla"
fi

# 4. trouble and bad input
python3 -c "import sys, time, torch
free, _ = torch.cuda.mem_get_info()
hold = torch.empty(free - (64 << 20), dtype=torch.uint8, device='cuda')
open(sys.argv[1], 'w').write('held')
time.sleep(300)" "$work/held" &
hog=$!
for _ in $(seq 60); do [ -f "$work/held" ] && break; sleep 1; done
doctor h-gpu-memory-held --arch 9.0 --run --model-type qwen3_5
kill "$hog"; wait "$hog" 2>/dev/null
python3 -m pip install -q --no-deps --index-url "$channel" tiny-ext && echo "installed tiny-ext (12.0 only)"
doctor k-twelve-only-wheel --model-type qwen3_5
mkdir -p "$work/no-config"
doctor i-model-without-config --model "$work/no-config" --no-run
doctor j-unknown-model-type --model-type qwen9 --no-run
TRITON_CACHE_DIR="$work/cold-triton" doctor g-op-timeout --model-type qwen3_5 --op-timeout 8
echo "total: $(elapsed)" | tee -a "$results/timing.txt"
pack
kill "$server"
