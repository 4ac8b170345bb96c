"""Benchmark: build.ninja's order vs longest first, one recipe, two cold builds in one run.

  * as written:    the build from nothing (`--compile-cache off`, `--fresh`) in a new work
                   directory: ninja starts the compiles in torch's order (setup.py's sources)
  * longest first: the same build again from nothing in that work directory: the first
                   build's run facts give each object's seconds, and the pre-build check
                   writes the compiles longest first (prebuild.py; its plan line says so)

Per build: the compile stage's seconds (stage lines), the machine's busy CPU seconds
(/proc/stat; run it on a quiet machine) and the longest object's seconds; then longest first /
as written. The gain is the tail: with more objects than cores, a heavy file that starts last
runs alone while the other cores idle.

Usage: python bench/longest_first.py [RECIPE] [--arch 12.0]
(causal-conv1d: about 10 min on 2 cores; run it under `flock /tmp/wheelsmith-cuda.lock` on a
shared machine)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from long_build import busy_seconds  # noqa: E402
from python_axis import compile_seconds  # noqa: E402


@dataclass(frozen=True)
class Leg:
    compile_s: int
    cpu_s: int
    longest_object_s: float
    ordered: bool  # the plan line says longest first


def build(recipe: str, arch: str, scratch: Path) -> Leg:
    busy = busy_seconds()
    result = subprocess.run(
        [sys.executable, "-m", "wheelsmith", "build", recipe, "--arch", arch,
         "--compile-cache", "off", "--fresh", "--rebuild", "--work-dir", str(scratch / "work"),
         "--out", str(scratch / "out"), "--json"],
        cwd=REPO, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"the build failed:\n{result.stderr[-3000:]}")
    run = json.loads(result.stdout)["run"]
    plan = [line for line in result.stderr.splitlines() if "plan from" in line]
    times = run["build"]["object_seconds"]
    print(*plan, f"  objects: {json.dumps(times)}", sep="\n")
    return Leg(compile_seconds(result.stderr), round(busy_seconds() - busy), max(times.values()),
               any("longest first" in line for line in plan))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("recipe", nargs="?", default="causal-conv1d")
    parser.add_argument("--arch", default="12.0")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="longest-first-") as tmp:
        written = build(args.recipe, args.arch, Path(tmp))
        longest = build(args.recipe, args.arch, Path(tmp))
    if written.ordered or not longest.ordered:
        raise SystemExit("the second build, and only it, should be ordered by the first's times")
    print(f"{args.recipe} --arch {args.arch}, cold, no compile cache")
    for name, leg in (("as written", written), ("longest first", longest)):
        print(f"  {name:14} compile {leg.compile_s:5} s   CPU {leg.cpu_s:5} s   "
              f"longest object {leg.longest_object_s:6.1f} s")
    compile_ratio = longest.compile_s / max(1, written.compile_s)
    print(f"  longest first / as written: compile {compile_ratio:.2f}, "
          f"CPU {longest.cpu_s / max(1, written.cpu_s):.2f}")


if __name__ == "__main__":
    main()
