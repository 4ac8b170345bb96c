#!/usr/bin/env bash
# `make demo`: build causal-conv1d for sm_120 with the pinned toolchain, verify the wheel with
# cuobjdump, install it into a scratch venv (pip pulls torch 2.14 there) and import it.
set -euo pipefail
ws=${WHEELSMITH:-.venv/bin/wheelsmith}
python=${PYTHON:-python3}

"$ws" build causal-conv1d --arch 12.0 --json > build/demo-build.json
wheel=$("$python" -c 'import json,sys; print(json.load(open(sys.argv[1]))["wheel"])' \
  build/demo-build.json)
echo "==> verify"
"$ws" verify "$wheel" --arch 12.0
echo "==> install into build/demo-venv"
rm -rf build/demo-venv
"$python" -m venv build/demo-venv
build/demo-venv/bin/python -m pip install --quiet --disable-pip-version-check "$wheel"
echo "==> import"
cd build
demo-venv/bin/python -W ignore -c '
import causal_conv1d, causal_conv1d_cuda, torch
print("imported causal_conv1d", causal_conv1d.__version__, "with torch", torch.__version__)
print("extension:", causal_conv1d_cuda.__file__)'
