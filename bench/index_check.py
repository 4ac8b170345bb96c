"""Benchmark: `index rebuild` and `index check` on ledgers of growing length, side by side.

For each size (default 5,000, 20,000 and 200,000 lines) an index is laid out by hand in a
temporary directory: publish lines for projects of 10 versions each (a new project every 10
lines, so the channel's list grows with the ledger) and a yank every 100th line, the files
and sidecars in their content-addressed places (each 100 files share one content, as hard
links, so the disk holds a few thousand inodes, not hundreds of thousands), no page and no
watermark: a ledger whose pages were never written. Then, each in its own process:

  1. `wheelsmith index rebuild`: recovery regenerates every page, the rebuild compares them
  2. `wheelsmith index check`: every line parsed, every file hashed, every page rendered and
     compared, once

Prints each command's seconds and peak memory (the process's maximum resident set) per size,
per line, and their growth against the size before: linear growth multiplies the seconds and
the memory by at most the lines' factor (less, while the interpreter's start-up and its own
memory still weigh). It asserts only that check found the index whole.
Usage: python bench/index_check.py [--sizes 5000,20000,200000]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from wheelsmith.index import ledger

CHANNEL = "cu130-torch2.14"
VERSIONS = 10  # lines per project
SHARED = 100  # files per content
YANK_EVERY = 100


@dataclass(frozen=True)
class Run:
    seconds: float
    peak_mb: float
    output: str


def lay_out(root: Path, lines: int) -> None:
    """An index of `lines` ledger lines, its files in place, no pages (see the docstring)."""
    entries: list[dict[str, object]] = []
    for n in range(lines):
        if n % YANK_EVERY == YANK_EVERY - 1:  # the file the line before published
            entries.append(ledger.yank_entry(_record(n - 1), "bench"))
        else:
            _place(root, n)
            entries.append(ledger.publish_entry(_record(n)))
    with (root / ledger.LEDGER).open("w") as handle:
        for entry in entries:
            handle.write(json.dumps(entry, sort_keys=True, separators=(",", ":")) + "\n")


def _content(n: int) -> tuple[bytes, bytes]:
    """File n's bytes and its METADATA's: the same for each SHARED files in a row."""
    group = n // SHARED
    return f"wheel bytes {group}\n".encode(), f"Metadata-Version: 2.1\nName: g{group}\n".encode()


def _record(n: int) -> ledger.FileRecord:
    project, version = f"project-{n // VERSIONS:06d}", f"1.{n % VERSIONS}.0"
    data, metadata = _content(n)
    return ledger.FileRecord(
        channel=CHANNEL, project=project,
        filename=f"{project.replace('-', '_')}-{version}-py3-none-any.whl",
        sha256=hashlib.sha256(data).hexdigest(), size=len(data),
        upload_time=f"2026-01-01T00:00:{n % 60:02d}.{n % 1_000_000:06d}Z",
        metadata_sha256=hashlib.sha256(metadata).hexdigest(), requires_python=">=3.10",
        version=version, key=hashlib.sha256(str(n).encode()).hexdigest(), archs="12.0")


def _place(root: Path, n: int) -> None:
    """File n and its sidecar; after the first of a group, hard links to that one's."""
    target = root / _record(n).path
    sidecar = target.with_name(f"{target.name}.metadata")
    if n % SHARED == 0:
        data, metadata = _content(n)
        target.parent.mkdir(parents=True)
        target.write_bytes(data)
        sidecar.write_bytes(metadata)
        return
    first = target.with_name(_record(n - n % SHARED).filename)
    os.link(first, target)
    os.link(first.with_name(f"{first.name}.metadata"), sidecar)


def timed(*args: str) -> Run:
    """`wheelsmith ARGS` in its own process: wall seconds, peak resident MB, its output."""
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "wheelsmith", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    output = proc.stdout.read().decode(errors="replace")
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"wheelsmith {' '.join(args)} failed ({proc.returncode}):\n{output}")
    return Run(seconds, usage.ru_maxrss / 1024, output)


def measure(lines: int) -> tuple[Run, Run]:
    work = Path(tempfile.mkdtemp(prefix="ws-index-check-bench-"))
    try:
        root = work / "index"
        root.mkdir()
        lay_out(root, lines)
        rebuild = timed("index", "rebuild", "--index", str(root))
        check = timed("index", "check", "--index", str(root))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if "every page is current" not in check.output:
        raise SystemExit(f"index check of {lines} lines found problems:\n{check.output}")
    return rebuild, check


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="5000,20000,200000")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    print(f"{'lines':>8} {'command':<14} {'seconds':>8} {'peak MB':>8} {'us/line':>8} "
          f"{'KB/line':>8}   {'vs the size before: lines, seconds, peak MB'}")
    before: dict[str, tuple[int, Run]] = {}
    for lines in sizes:
        for name, run in zip(("index rebuild", "index check"), measure(lines), strict=True):
            growth = ""
            if name in before:
                count, earlier = before[name]
                growth = (f"x{lines / count:.1f}, x{run.seconds / earlier.seconds:.1f}, "
                          f"x{run.peak_mb / earlier.peak_mb:.1f}")
            before[name] = (lines, run)
            print(f"{lines:>8} {name:<14} {run.seconds:>8.1f} {run.peak_mb:>8.0f} "
                  f"{run.seconds / lines * 1e6:>8.0f} {run.peak_mb * 1024 / lines:>8.2f}   "
                  f"{growth}", flush=True)


if __name__ == "__main__":
    main()
