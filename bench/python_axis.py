"""Benchmark: the Python axis of a build matrix. One recipe for one arch, built for a first
Python and then for a second one (same profile: torch, CUDA), with one empty compile cache.

The second build should take every CUDA object that does not include Python.h from the cache
(build/pathview.py) and compile only the bindings again. Reported per build: the compile
stage's seconds (from its stage line to verify's), the CPU seconds of the whole build, and
what each source file got from the cache, and how long each object took (ninja's log); then
the second build's compile time and CPU seconds as shares of the first's. Target for
causal-conv1d: <= 15%. The objects the second build must compile (its cache misses: the
bindings, which include Python.h) are its floor.
Usage: python bench/python_axis.py [RECIPE] [--arch 12.0] [--pythons 3.11,3.12]
(python3.X on PATH, import-tested against the toolchain's torch; run it under
`flock /tmp/wheelsmith-cuda.lock` on a shared machine)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from wheelsmith.toolchain.profile import default_profile_name

REPO = Path(__file__).resolve().parents[1]
STAGE_RE = re.compile(r"==> \[\s*(?:(\d+)m)?(\d+)s\] (\w+):")  # [   42s], [ 5m23s]


def compile_seconds(stderr: str) -> int:
    """From the compile stage's first line to the verify stage's."""
    stages = [(60 * int(m[1] or 0) + int(m[2]), m[3])
              for m in map(STAGE_RE.search, re.split(r"[\r\n]+", stderr)) if m]
    start = next(t for t, name in stages if name == "compile")
    return next(t for t, name in stages if name == "verify") - start


def build(recipe: str, arch: str, python: str, cache: Path, scratch: Path) -> dict[str, int]:
    """One build; its figures (objects_s: the sum of its compile steps' seconds, ninja's)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "wheelsmith", "build", recipe, "--arch", arch, "--toolchain",
         default_profile_name(REPO / "toolchains"), "--python", python,
         "--compile-cache", str(cache),
         "--work-dir", str(scratch / "work"), "--out", str(scratch / "out"), "--json"],
        cwd=REPO, capture_output=True, text=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise SystemExit(f"the build for {python} failed:\n{result.stderr[-3000:]}")
    run = json.loads(result.stdout)["run"]
    cache_record = run["compile_cache"]
    print(python, json.dumps(cache_record["sources"]))
    print(python, "object seconds:", json.dumps(run["build"]["object_seconds"]))
    return {"objects_s": round(sum(run["build"]["object_seconds"].values())),
            "wall_s": round(time.monotonic() - started),
            "compile_s": compile_seconds(result.stderr),
            "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime),
            "hits": cache_record["hits"], "misses": cache_record["misses"]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("recipe", nargs="?", default="causal-conv1d")
    parser.add_argument("--arch", default="12.0")
    parser.add_argument("--pythons", default="3.11,3.12")
    args = parser.parse_args()
    os.environ.pop("WHEELSMITH_COMPILE_CACHE", None)
    with tempfile.TemporaryDirectory(prefix="python-axis-") as tmp:
        cache = Path(tmp) / "ccache"
        runs = [build(args.recipe, args.arch, python, cache, Path(tmp) / f"run{i}")
                for i, python in enumerate(args.pythons.split(","))]
    for python, run in zip(args.pythons.split(","), runs, strict=True):
        print(python, json.dumps(run))
    first, second = runs[0], runs[-1]
    print(f"second Python: compile {second['compile_s']} s of {first['compile_s']} s "
          f"({100 * second['compile_s'] / max(1, first['compile_s']):.0f}%), "
          f"CPU {second['cpu_s']} s of {first['cpu_s']} s "
          f"({100 * second['cpu_s'] / max(1, first['cpu_s']):.0f}%)")


if __name__ == "__main__":
    main()
