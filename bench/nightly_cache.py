"""Benchmark: cold build vs warm rebuild from the compile cache vs a no-op nightly, plus the
peak memory of the build at the parallelism wheelsmith chose.

All in one run on this machine:
  1. cold: causal-conv1d 1.7.0 for 12.0 with an empty compile cache
  2. warm: the same build in a fresh work and output directory (another "runner"), sharing
     only the compile cache
  3. no-op nightly: a matrix whose cells are all in the index already (causal-conv1d 12.0 from
     step 1, fla-core and flash-linear-attention built once here), run a second time
  4. the content keys of every cell of the shipped matrix.yaml (what a no-op night computes)
Targets: warm <= 10% of cold; a no-op nightly < 5 s.
Usage: python bench/nightly_cache.py
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from wheelsmith import locations
from wheelsmith.arch import ArchSet
from wheelsmith.builder import orchestrate
from wheelsmith.builder.buildenv import machine_size
from wheelsmith.builder.request import BuildRequest, QuietReporter
from wheelsmith.fleet import matrix
from wheelsmith.recipes import repos
from wheelsmith.toolchain.profile import default_profile_name

REPO = Path(__file__).resolve().parents[1]

BENCH_MATRIX = """packages:
  - recipe: causal-conv1d
    archs: ["12.0"]
  - recipe: fla-core
  - recipe: flash-linear-attention
"""


class MemoryWatch:
    """Peak memory in use on the machine while the block runs (MemAvailable sampled)."""

    def __init__(self) -> None:
        self.lowest = machine_size()[1]
        self.start = self.lowest
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self.stop.wait(0.5):
            self.lowest = min(self.lowest, machine_size()[1])

    def __enter__(self) -> MemoryWatch:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()

    @property
    def peak_gb(self) -> float:
        return self.start - self.lowest


def wheelsmith(*args: str, env: dict[str, str]) -> float:
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "wheelsmith", *args], cwd=REPO, env=env,
                   check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - started


def shipped_matrix_keys_seconds() -> tuple[int, float]:
    root = locations.project_root()
    cells = matrix.load(root / "matrix.yaml", repos.recipe_file,
                        default_toolchain=default_profile_name(root / "toolchains"),
                        default_python=f"{sys.version_info[0]}.{sys.version_info[1]}")
    started = time.monotonic()
    for cell in cells:
        orchestrate.prepare(BuildRequest(
            recipe=cell.recipe, version=cell.version, toolchain=cell.toolchain,
            archs=ArchSet.parse([cell.archs]) if cell.archs else None),
            QuietReporter())
    return len(cells), time.monotonic() - started


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="ws-cache-bench-"))
    env = dict(os.environ, WHEELSMITH_CCACHE_DIR=str(work / "ccache"))
    build = ("build", "causal-conv1d", "--arch", "12.0", "--json")
    try:
        cores, available = machine_size()
        with MemoryWatch() as memory:
            cold = wheelsmith(*build, "--out", str(work / "out-1"), "--work-dir",
                              str(work / "w1"), env=env)
        warm = wheelsmith(*build, "--out", str(work / "out-2"), "--work-dir", str(work / "w2"),
                          env=env)
        (work / "matrix.yaml").write_text(BENCH_MATRIX)
        index = str(work / "index")
        wheelsmith("publish", "--index", index, *map(str, (work / "out-1").glob("*.whl")),
                   env=env)
        night = ("nightly", "--matrix", str(work / "matrix.yaml"), "--index", index, "--out",
                 str(work / "out-n"), "--work-dir", str(work / "wn"), "--report",
                 str(work / "report"))
        wheelsmith(*night, env=env)  # builds the two pure cells, skips causal-conv1d
        noop = wheelsmith(*night, env=env)
        cells, keys_seconds = shipped_matrix_keys_seconds()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{'causal-conv1d 1.7.0 for 12.0':<44} {'wall':>8}   vs cold")
    print(f"{'cold (empty compile cache)':<44} {cold:>7.0f}s   1.00")
    print(f"{'warm (fresh directory, cache shared)':<44} {warm:>7.1f}s   {warm / cold:.3f}"
          f"   (target <= 0.10)")
    print(f"{'no-op nightly (3 cells, all in the index)':<44} {noop:>7.1f}s"
          f"            (target < 5 s)")
    print(f"{f'content keys of the shipped matrix ({cells} cells)':<44} {keys_seconds:>7.2f}s")
    print(f"peak memory during the cold build: {memory.peak_gb:.1f} GB of {available:.1f} GB "
          f"available ({cores} cores; wheelsmith chose MAX_JOBS from 3 GB per job)")


if __name__ == "__main__":
    main()
