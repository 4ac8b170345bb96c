#!/bin/bash
# One time-limited run of the flash-attn farm cell on the GPU machine; saves the kept tree to $OUT.
# usage: bash .carry/farm-run.sh LIMIT [--resume]
set -u
limit=$1; shift
tar -C /tmp -xJf .carry/farm-tools.tar.xz
if ldd /tmp/farmtools/bwrap | grep -q "not found"; then
  mv /tmp/farmtools/bwrap /tmp/farmtools/bwrap.bin
  printf '#!/bin/sh\nLD_LIBRARY_PATH=/tmp/farmtools exec /tmp/farmtools/bwrap.bin "$@"\n' > /tmp/farmtools/bwrap
  chmod +x /tmp/farmtools/bwrap
fi
export PATH=/tmp/farmtools:$PATH
if [ "${1:-}" = --resume ] && [ ! -d build/farm-fa/work/build ] && [ -f .carry/farm-fa-tree.tar.xz ]; then
  mkdir -p build/farm-fa && tar -C build/farm-fa -xJf .carry/farm-fa-tree.tar.xz && echo "unpacked carried tree"
fi
nproc; free -g | head -2
python3 scripts/gpu-proof-farm.py flash-attn 9.0 build/farm-fa --sdists .carry/sdists --bwrap /tmp/farmtools/bwrap --limit "$limit" "$@" 2>&1 | tail -60
rc=${PIPESTATUS[0]}
cp build/farm-fa/runs.jsonl build/farm-fa/farm.log "$OUT"/ 2>/dev/null
cp build/farm-fa/result.json "$OUT"/ 2>/dev/null
[ -d build/farm-fa/wheels ] && cp -r build/farm-fa/wheels "$OUT"/
tar -C build/farm-fa -cf - work/build | xz -T0 -2 > "$OUT"/farm-fa-tree.tar.xz
ls -la "$OUT"; echo "rc=$rc"
