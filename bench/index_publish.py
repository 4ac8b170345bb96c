"""Benchmark: publishing one wheel into a 1,000-wheel index vs. rebuilding every page.

Publishes 1,000 small wheels across 100 projects (10 versions each) into a fresh index, then
times, in the same run: one more publish (median of 5, each a new version of one project) and
a full `index rebuild` with all pages removed first (median of 3). Prints both and the ratio;
the incremental publish should be at least 50x cheaper than the rebuild.
Usage: python bench/index_publish.py [--projects 100] [--versions 10]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.wheels import make_wheel

from wheelsmith.index import store as index
from wheelsmith.index.publish import publish

CHANNEL = "cu130-torch2.14"


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--projects", type=int, default=100)
    parser.add_argument("--versions", type=int, default=10)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ws-index-bench-"))
    try:
        wheels, root = work / "wheels", work / "index"
        wheels.mkdir()
        batch = [make_wheel(wheels, f"project-{p:03d}", f"1.{v}.0", tags="py3-none-any")
                 for p in range(args.projects) for v in range(args.versions)]
        fill = timed(lambda: [publish(w, root, channel=CHANNEL) for w in batch])
        extra = [make_wheel(wheels, f"project-{n * 17 % args.projects:03d}", "2.0.0",
                            tags="py3-none-any") for n in range(5)]
        incremental = statistics.median(timed(partial(publish, w, root, channel=CHANNEL))
                                        for w in extra)

        def full_rebuild() -> None:
            shutil.rmtree(root / CHANNEL)
            index.rebuild(root)

        rebuild = statistics.median(timed(full_rebuild) for _ in range(3))
        assert not index.check(root).problems
    finally:
        shutil.rmtree(work, ignore_errors=True)
    total = len(batch) + len(extra)
    print(f"index of {total} wheels in {args.projects} projects "
          f"(initial fill: {fill:.1f} s, {fill / len(batch) * 1000:.1f} ms per wheel)")
    print(f"{'one more publish (median of 5)':<36} {incremental * 1000:>9.1f} ms")
    print(f"{'full index rebuild (median of 3)':<36} {rebuild * 1000:>9.1f} ms")
    print(f"rebuild / incremental: {rebuild / incremental:.0f}x   (target: >= 50x)")


if __name__ == "__main__":
    main()
