#!/usr/bin/env bash
# GPU proof of the user's chain on a machine that stands in for the user (Python 3.12, torch
# 2.11 + CUDA 13.0, no network): wheels built ELSEWHERE for that environment (`wheelsmith build
# causal-conv1d --arch 9.0 --python ENV`, no CUDA toolkit needed in ENV) are published to an
# index here and served on 127.0.0.1; then the one user command,
#     wheelsmith install causal-conv1d --python python3 --index URL
# must find the wheel in the channel that matches this environment (an index hit: no
# compiler runs), pip-install it by its sha256 and import it; upstream's causal-conv1d tests
# then run against it on the GPU with PTX JIT disabled (so only the shipped SASS can run), and
# `wheelsmith doctor` must report the channel and the kernels.
# Usage: scripts/gpu-proof-user-env.sh WHEEL_DIR UPSTREAM_TESTS_DIR [RESULTS_DIR]
set -uo pipefail
wheels=$(realpath "$1")
tests=$(realpath "$2")
results=$(realpath -m "${3:-gpu-proof-user-env}")
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
mkdir -p "$results"
export PYTHONPATH="$repo/src" PYTHONUNBUFFERED=1 WHEELSMITH_HOME="$repo"
ws() { python3 -m wheelsmith "$@"; }
python3 -m pip uninstall -q -y causal-conv1d 2>/dev/null
{ python3 --version; python3 -c "import torch; print('torch', torch.__version__, 'CUDA', \
torch.version.cuda, torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0))"; \
  command -v nvcc || echo "(no nvcc is needed)"; } > "$results/environment.txt" 2>&1
ws publish "$wheels"/*.whl --index "$work/index" > "$results/publish.txt" 2>&1
ws serve --index "$work/index" --port 8766 2> "$results/serve.log" &
server=$!
sleep 2
start=$(date +%s%N)
ws install causal-conv1d --python "$(command -v python3)" --index http://127.0.0.1:8766 \
  --json > "$results/install.json" 2> "$results/install.log"
code=$?
echo "wheelsmith install exit code: $code in $(( ($(date +%s%N) - start) / 1000000 )) ms" \
  | tee "$results/install-exit.txt"
(cd "$work" && CUDA_DISABLE_PTX_JIT=1 python3 -m pytest -q -p no:cacheprovider -n 8 \
  -p no:benchmark "$tests/test_causal_conv1d.py" 2>&1 | tail -n 1 > "$results/upstream-tests.txt")
cat "$results/upstream-tests.txt"
ws doctor --need causal_conv1d --index http://127.0.0.1:8766 > "$results/doctor.txt" 2>&1
echo "doctor exit code: $?" >> "$results/doctor.txt"
kill "$server"
grep -E 'GET ' "$results/serve.log" | sed 's/.*"GET \([^ ]*\).*/\1/' > "$results/requests.txt"
