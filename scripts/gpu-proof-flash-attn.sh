#!/usr/bin/env bash
# flash-attn 2.8.3 on a GPU machine: built in time-limited runs that resume (issue 19), then
# proven. wheelsmith runs from this checkout with the machine's own torch and nvcc
# (--toolchain system); the machine has no network, so INPUTS=DIR holds the sdist
# (flash_attn-2.8.3.tar.gz) and upstream's tests/test_flash_attn.py of v2.8.3
# (`git show v2.8.3:tests/test_flash_attn.py`).
#
#   scripts/gpu-proof-flash-attn.sh build ARCH OUT   one run of at most $LIMIT seconds (540);
#                                                    run it again and it resumes
#   scripts/gpu-proof-flash-attn.sh prove ARCH OUT   cuobjdump, wheelsmith verify, the GPU
#                                                    smoke, and upstream's tests (a subset)
#   scripts/gpu-proof-flash-attn.sh pack ARCH OUT    the work directory, as xz parts of at most
#                                                    15.5 MB, to resume on another machine
#
# To resume on another machine, join the parts as INPUTS/fa-ARCH-workdir.tar.xz: `build`
# unpacks it into build/wheelsmith/ before its first run there. The checkout must be at the same
# path on both, so that ninja's absolute paths and log still match.
#
# OUT gets the logs: build-ARCH.log (every run appended), result-ARCH.json, memory-ARCH.txt
# (the build's peak memory), cuobjdump-ARCH.txt, verify-ARCH.txt, upstream-ARCH.txt.
set -euo pipefail
step=$1 arch=$2 out=$3
inputs=$(realpath -m "${INPUTS:?INPUTS=DIR: the sdist and upstream's test file}")
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
export PYTHONPATH=$repo/src PYTHONUNBUFFERED=1
sha=1e71dd64a9e0280e0447b8a0c2541bad4bf6ac65bdeaa2f90e51a9e57de0370d
cache=${WHEELSMITH_CACHE:-$HOME/.cache/wheelsmith}/downloads/${sha:0:2}
mkdir -p "$cache" "$out"
[ -f "$cache/$sha" ] || cp "$inputs/flash_attn-2.8.3.tar.gz" "$cache/$sha"
wheels=build/flash-attn-out

sample_memory() {  # used memory (MemTotal - MemAvailable, GiB) every 5 s, to stdout
  while sleep 5; do
    echo "$(date +%s) $(awk '/MemTotal/ {t=$2} /MemAvailable/ {a=$2} END {printf "%.1f", (t-a)/1048576}' /proc/meminfo)"
  done
}

objects_done() {  # finished objects in ninja's log of the kept build tree
  local log
  log=$(find build/wheelsmith -path "*/build/temp*/.ninja_log" 2>/dev/null | head -1)
  if [ -n "$log" ]; then echo "$(($(wc -l < "$log") - 1)) objects in $log"; else echo "no build tree"; fi
}

case $step in
build)
  packed=$inputs/fa-$arch-workdir.tar.xz
  if [ -f "$packed" ] && ! ls -d build/wheelsmith/flash-attn-2.8.3-* >/dev/null 2>&1; then
    mkdir -p build/wheelsmith && tar -C build/wheelsmith -xJf "$packed"
    echo "=== unpacked $packed (checkout at $repo)" >> "$out/build-$arch.log"
  fi
  sample_memory >> "$out/memory-$arch.txt" &
  sampler=$!
  echo "=== run at $(date -u +%FT%TZ), limit ${LIMIT:-540}s, $(nproc) cores; before: $(objects_done)" \
    >> "$out/build-$arch.log"
  rc=0
  timeout --signal=TERM "${LIMIT:-540}" python3 -m wheelsmith build flash-attn --arch "$arch" \
    --toolchain system --out "$wheels" --json > "$out/result-$arch.json" \
    2>> "$out/build-$arch.log" || rc=$?
  kill "$sampler"
  echo "=== exit $rc; after: $(objects_done)" | tee -a "$out/build-$arch.log"
  echo "peak memory used: $(sort -k2 -n "$out/memory-$arch.txt" | tail -1 | cut -d' ' -f2) GiB" \
    | tee -a "$out/build-$arch.log"
  tail -5 "$out/build-$arch.log"
  ;;
pack)
  work=$(ls -d build/wheelsmith/flash-attn-2.8.3-*/ | head -1)
  tar -C build/wheelsmith --format=posix -cf - "$(basename "$work")" | xz -T0 -6 > /tmp/workdir.tar.xz
  split -b 15500000 -d /tmp/workdir.tar.xz "$out/workdir.tar.xz.part"
  ls -l "$out"/workdir.tar.xz.part*
  ;;
prove)
  wheel=$(find "$wheels" -name "flash_attn-2.8.3+*.whl" | head -1)
  python3 -m wheelsmith verify "$wheel" --arch "$arch" 2>&1 | tee "$out/verify-$arch.txt"
  site=$(mktemp -d)
  python3 -m pip install --quiet --no-deps --no-index --target "$site" "$wheel"
  for so in "$site"/*.so; do echo "== $(basename "$so")"; cuobjdump --list-elf --list-ptx "$so"; done \
    > "$out/cuobjdump-$arch.txt" 2>&1
  # upstream's tests, forward and backward, head dims 64 and 128, causal and not, fp16 and
  # bf16 (the other axes at one value each); CUDA_DISABLE_PTX_JIT=1: only the SASS may run
  # SUBSET=wide keeps every value of the other axes too (head dims still 64 and 128) and adds
  # the varlen tests: a longer run (stopped at 480 s; the dots show how far it got)
  python3 - "$inputs/test_flash_attn.py" "$site/test_flash_attn_subset.py" "${SUBSET:-narrow}" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
one = {"deterministic": "[False]", "alibi": "[False]", "local": "[False]", "dropout_p": "[0.0]",
       "softcap": "[0.0]", "kvpacked": "[False]", "mha_type": '["mha", "gqa"]',
       "d": "[64, 128]", "seqlen": "[128, 1024]"}
if sys.argv[3] == "wide":
    one = {"d": one["d"]}
for name, values in one.items():
    text = re.sub(rf'^@pytest.mark.parametrize\("{name}", .*\)$',
                  f'@pytest.mark.parametrize("{name}", {values})', text, flags=re.MULTILINE)
if sys.argv[3] != "wide":
    text = re.sub(r'^@pytest.mark.parametrize\(\n    "seqlen_q,seqlen_k",\n    \[\n.*?^    \],\n\)$',
                  '@pytest.mark.parametrize("seqlen_q,seqlen_k", [(113, 203), (1024, 1024)])',
                  text, flags=re.MULTILINE | re.DOTALL)
open(sys.argv[2], "w").write(text)
EOF
  tests="test_flash_attn_qkvpacked or test_flash_attn_output"
  [ "${SUBSET:-narrow}" = wide ] && tests="$tests or test_flash_attn_varlen_output"
  (cd "$site" && CUDA_DISABLE_PTX_JIT=1 PYTHONPATH="$site" timeout 480 python3 -m pytest -q \
     -p no:cacheprovider test_flash_attn_subset.py \
     -k "$tests") 2>&1 | tee "$out/upstream-$arch-${SUBSET:-narrow}.txt" | tail -40
  ;;
esac
