"""Benchmark: wheelsmith's cold build of causal-conv1d for sm_120 vs. upstream's own build.

Both run on this machine, one after the other, with the same pinned toolchain:
  * wheelsmith: `wheelsmith build causal-conv1d --arch 12.0` (patched: exactly one arch)
  * upstream:   `CAUSAL_CONV1D_FORCE_BUILD=TRUE pip wheel --no-build-isolation` of the
                unpatched sdist, which compiles its whole hard-coded list (9 archs on CUDA 13)

Prints both times, the ratio, and the wheel sizes side by side. Takes ~40 minutes on 2 cores.
Usage: python bench/build_speed.py [--skip-upstream SECONDS,BYTES]
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

from wheelsmith import locations
from wheelsmith.recipes.fetch import fetch
from wheelsmith.recipes.model import load_recipe
from wheelsmith.toolchain.profile import load_profile
from wheelsmith.toolchain.venv import ensure_profile

REPO = Path(__file__).resolve().parents[1]


def wheelsmith_build(work: Path) -> tuple[float, int]:
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "wheelsmith", "build", "causal-conv1d", "--arch",
                    "12.0", "--out", str(work / "ws-out"), "--work-dir", str(work / "ws-work"),
                    "--rebuild"], cwd=REPO, check=True)
    seconds = time.monotonic() - started
    wheel = next((work / "ws-out").glob("*.whl"))
    return seconds, wheel.stat().st_size


def upstream_build(work: Path) -> tuple[float, int]:
    recipe = load_recipe(REPO / "recipes" / "causal-conv1d.yaml")
    toolchain = ensure_profile(load_profile(REPO / "toolchains" / "cu130-torch2.14.yaml"),
                               Path(sys.executable), locations.cache_dir())
    source = fetch(recipe.latest.source, work / "up-src", locations.cache_dir())
    env = dict(os.environ, CUDA_HOME=str(toolchain.cuda_home),
               PATH=f"{toolchain.python.parent}:{toolchain.cuda_home}/bin:{os.environ['PATH']}",
               CAUSAL_CONV1D_FORCE_BUILD="TRUE", TORCH_CUDA_ARCH_LIST="12.0", MAX_JOBS="2",
               PIP_CONFIG_FILE=os.devnull)
    started = time.monotonic()
    subprocess.run([str(toolchain.python), "-m", "pip", "wheel", "--no-build-isolation",
                    "--no-deps", "--no-index", "-w", str(work / "up-out"), str(source)],
                   env=env, check=True)
    seconds = time.monotonic() - started
    wheel = next((work / "up-out").glob("*.whl"))
    return seconds, wheel.stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--skip-upstream", metavar="SECONDS,BYTES",
                        help="reuse a measured upstream result instead of building again")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ws-bench-"))
    try:
        ws_s, ws_size = wheelsmith_build(work)
        if args.skip_upstream:
            up_s, up_size = (float(x) for x in args.skip_upstream.split(","))
        else:
            up_s, up_size = upstream_build(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = [("wheelsmith --arch 12.0", ws_s, ws_size),
            ("upstream (hard-coded list)", up_s, up_size)]
    print(f"{'build':<28} {'wall':>10} {'wheel MB':>10}")
    for name, seconds, size in rows:
        print(f"{name:<28} {seconds:>9.0f}s {size / 1e6:>10.1f}")
    print(f"speed-up: {up_s / ws_s:.1f}x   size ratio: {up_size / ws_size:.1f}x   "
          f"(target: >= 6x faster)")
    print(json.dumps({"wheelsmith_s": round(ws_s, 1), "upstream_s": round(up_s, 1),
                      "speedup": round(up_s / ws_s, 2), "wheelsmith_bytes": ws_size,
                      "upstream_bytes": int(up_size)}))


if __name__ == "__main__":
    main()
