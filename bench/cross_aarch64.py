"""Benchmark: an aarch64 wheel cross-built here vs. the x86-64 wheel of the same source, in the
same run, one after the other, with no compile cache (`--platform aarch64` vs `x86_64`).

Prints, per platform, the compile stage (the run facts' build seconds, verify and smoke
excluded) and the whole build, and the aarch64/x86-64 ratios. A native build under qemu-user
(the other way to get aarch64 wheels) needs binfmt_misc, which runs the aarch64 cicc, ptxas and
g++ that nvcc starts as child processes; where it is missing that is said instead of a figure.

Usage: python bench/cross_aarch64.py [--recipe tiny|causal-conv1d] [--arch 9.0]
(tiny: the test fixture, ~1 min; causal-conv1d: ~12 min on 2 cores)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.conftest import add_variant  # noqa: E402

BINFMT = Path("/proc/sys/fs/binfmt_misc/qemu-aarch64")


def project(work: Path) -> Path:
    """A project with the tiny fixture's recipe beside the real toolchains/."""
    home = work / "home"
    (home / "recipes").mkdir(parents=True)
    shutil.copytree(REPO / "toolchains", home / "toolchains")
    add_variant(home, "tiny-ext")
    return home


def build(recipe: str, arch: str, platform: str, work: Path, home: Path | None
          ) -> tuple[float, float]:
    env = dict(os.environ, WHEELSMITH_HOME=str(home)) if home else None
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "wheelsmith", "build", recipe, "--arch", arch, "--platform",
         platform, "--compile-cache", "off", "--rebuild", "--out", str(work / f"out-{platform}"),
         "--work-dir", str(work / "work"), "--json"],
        cwd=home or REPO, env=env, capture_output=True, text=True, check=True)
    whole = time.monotonic() - started
    return json.loads(result.stdout)["run"]["build"]["seconds"], whole


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--recipe", default="tiny", choices=["tiny", "causal-conv1d"])
    parser.add_argument("--arch", default="9.0;12.0")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="wheelsmith-bench-cross-") as scratch:
        work = Path(scratch)
        home = project(work) if args.recipe == "tiny" else None
        recipe = "tiny-ext" if args.recipe == "tiny" else args.recipe
        times = {p: build(recipe, args.arch, p, work, home) for p in ("x86_64", "aarch64")}
    (x_compile, x_whole), (a_compile, a_whole) = times["x86_64"], times["aarch64"]
    print(f"{recipe} --arch {args.arch}, no compile cache, {os.cpu_count()} cores")
    print(f"  x86-64 (native):  build {x_compile:7.1f} s   whole {x_whole:7.1f} s")
    print(f"  aarch64 (cross):  build {a_compile:7.1f} s   whole {a_whole:7.1f} s   "
          f"ratios {a_compile / x_compile:.2f} / {a_whole / x_whole:.2f}")
    if not BINFMT.exists():
        print("  aarch64 (native under qemu-user): not measured: no binfmt_misc handler for "
              "aarch64 here (nvcc's child processes could not run)")


if __name__ == "__main__":
    main()
