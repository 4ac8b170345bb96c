"""Benchmark: the Python axis of a build matrix. One recipe for one arch, built for a first
Python and then for a second one (same profile: torch, CUDA), with one empty compile cache.

The second build should take every CUDA object that does not include Python.h from the cache
(builder/pathview.py) and compile only the bindings again. Reported per build: the compile
stage's seconds (from its stage line to verify's), the CPU seconds of the whole build, and
what each source file got from the cache, and how long each object took (ninja's log); then
the second build's compile time and CPU seconds as shares of the first's. Target for
causal-conv1d: <= 15%. The objects the second build must compile (its cache misses: the
bindings, which include Python.h) are its floor.
With `--limit S` each build is stopped with SIGTERM after S seconds, as a nightly cell out
of time is (for builds that take hours: flash-attn), and the figures are the seconds of each
object both builds compiled (their kept trees' ninja logs): what the second Python paid for
the objects the first one compiled.
Usage: python bench/python_axis.py [RECIPE] [--arch 12.0] [--pythons 3.11,3.12] [--limit S]
(python3.X on PATH, import-tested against the toolchain's torch; run it under
`flock /tmp/wheelsmith-cuda.lock` on a shared machine)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from wheelsmith.builder import resume
from wheelsmith.toolchain.profile import default_profile_name

REPO = Path(__file__).resolve().parents[1]
STAGE_RE = re.compile(r"==> \[\s*(?:(\d+)m)?(\d+)s\] (\w+):")  # [   42s], [ 5m23s]


def compile_seconds(stderr: str) -> int:
    """From the compile stage's first line to the verify stage's."""
    stages = [(60 * int(m[1] or 0) + int(m[2]), m[3])
              for m in map(STAGE_RE.search, re.split(r"[\r\n]+", stderr)) if m]
    start = next(t for t, name in stages if name == "compile")
    return next(t for t, name in stages if name == "verify") - start


def build_argv(recipe: str, arch: str, python: str, cache: Path, scratch: Path) -> list[str]:
    return [sys.executable, "-m", "wheelsmith", "build", recipe, "--arch", arch, "--toolchain",
            default_profile_name(REPO / "toolchains"), "--python", python,
            "--compile-cache", str(cache),
            "--work-dir", str(scratch / "work"), "--out", str(scratch / "out"), "--json"]


def build_for(recipe: str, arch: str, python: str, cache: Path, scratch: Path, *,
              limit: float) -> dict[str, float]:
    """One build stopped with SIGTERM after `limit` seconds (unless it ends first): the
    seconds of each object it compiled (its kept tree's ninja log)."""
    process = subprocess.Popen(build_argv(recipe, arch, python, cache, scratch), cwd=REPO,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = process.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate()
    print(python, "ended with exit code", process.returncode, "|", stderr.strip()[-300:])
    if process.returncode not in (0, 130):  # 130: stopped at the limit, as asked
        raise SystemExit(f"the build for {python} failed:\n{stderr[-3000:]}")
    if process.returncode == 0:  # finished in time: its tree is gone, its run facts say
        return dict(json.loads(stdout)["run"]["build"]["object_seconds"])
    seconds: dict[str, float] = {}
    for work in sorted((scratch / "work").glob("*/")):
        for tree in sorted(resume.source_dir(work).glob("*/")):
            seconds.update(resume.object_seconds(tree))
    print(python, "object seconds:", json.dumps(seconds))
    return seconds


def compare_objects(pythons: list[str], first: dict[str, float],
                    second: dict[str, float]) -> None:
    both = [name for name in first if name in second]
    for name in both:
        print(f"{name}: {pythons[0]} {first[name]:.1f} s, {pythons[-1]} {second[name]:.1f} s")
    paid, cost = sum(second[n] for n in both), sum(first[n] for n in both)
    print(f"second Python: the {len(both)} object(s) both compiled took {paid:.1f} s of "
          f"{cost:.1f} s ({100 * paid / max(cost, 1e-9):.0f}%); "
          f"{len(second) - len(both)} more compiled in its time")


def build(recipe: str, arch: str, python: str, cache: Path, scratch: Path) -> dict[str, int]:
    """One build; its figures (objects_s: the sum of its compile steps' seconds, ninja's)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    result = subprocess.run(build_argv(recipe, arch, python, cache, scratch),
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
    parser.add_argument("--limit", type=float, help="stop each build after this many seconds")
    args = parser.parse_args()
    os.environ.pop("WHEELSMITH_COMPILE_CACHE", None)
    pythons = args.pythons.split(",")
    if args.limit is not None:
        with tempfile.TemporaryDirectory(prefix="python-axis-") as tmp:
            timed = [build_for(args.recipe, args.arch, python, Path(tmp) / "ccache",
                               Path(tmp) / f"run{i}", limit=args.limit)
                     for i, python in enumerate(pythons)]
        compare_objects(pythons, timed[0], timed[-1])
        return
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
