#!/usr/bin/env bash
# doctor's model view with a GPU visible (device: gpu), on the machine's transformers 5.17.0
# and on 5.25.0 (carried with what it needs), with fla 0.6.0 and causal_conv1d's stand-in
# (tests/fixtures/fastpath-cpu) installed and without them; then the model itself, forward on the
# GPU with and without fla, as the independent check of the verdict. Run from the repo's root.
set -uo pipefail
here=docs/evidence/gpu-proof/2026-12-07-h100-doctor-dispatch
out=${OUT:-/tmp/out}
work=$(mktemp -d)
tf525=$work/tf525 fla=$work/fla
mkdir -p "$out" "$tf525" "$fla"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target $fla \
  .whl/fla_core-*.whl .whl/flash_linear_attention-*.whl
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target $tf525 \
  $(ls .whl/*.whl | grep -v -e fla_core -e flash_linear)
stand_ins=tests/fixtures/fastpath-cpu
needs() {  # LABEL PYTHONPATH TYPE
  PYTHONPATH="$2" timeout 300 python3 src/wheelsmith/resources/model_needs.py "$3" \
    | sed -n 's/^WHEELSMITH-MODEL //p' | tee "$out/$1.json" | python3 -c '
import json, sys
a = json.load(sys.stdin)
print(sys.argv[1], a["transformers"], a["device"], [(n["function"], n["available"], n["reason"]) for n in a["needs"]])' "$1"
}
{
  nvidia-smi -L
  python3 -c 'import torch, triton, transformers; print("torch", torch.__version__, "triton", triton.__version__, "transformers", transformers.__version__)'
  needs 517-with $fla:$stand_ins qwen3_5
  needs 517-without "" qwen3_5
  needs 525-with $tf525:$fla:$stand_ins qwen3_5
  needs 525-without $tf525 qwen3_5
  needs 525-lfm2-with $tf525:$stand_ins lfm2
  needs 525-qwen3_next-with $tf525:$fla:$stand_ins qwen3_next
  echo "== doctor, transformers 5.25.0, with fla and the causal_conv1d stand-in"
  PYTHONPATH=src:$tf525:$fla:$stand_ins timeout 600 python3 -m wheelsmith doctor \
    --model-type qwen3_5 --index http://127.0.0.1:9 --op-timeout 240; echo "exit $?"
  echo "== the model forward on the GPU"
  PYTHONPATH=$tf525:$fla timeout 300 python3 $here/forward.py with-fla
  PYTHONPATH=$tf525 timeout 300 python3 $here/forward.py without-fla
} 2>&1 | tee "$out/console.txt"
