"""Faults: concurrent publishers and publishers killed with SIGKILL at random moments.

After every run, what a reader sees is consistent (every page lists only complete files with
the right sha256), `index check` passes (noting what the next writer finishes), and every
publish that reported success is present.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.wheels import make_wheel
from wheelsmith.files import sha256_file
from wheelsmith.index import ledger

CHANNEL = "cu130-torch2.14"
ENV = dict(os.environ, PYTHONUNBUFFERED="1")


def publisher(root: Path, wheels: list[Path]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "wheelsmith", "publish", "--index", str(root),
                             "--channel", CHANNEL, *map(str, wheels)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV)


def check(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wheelsmith", "index", "check", "--index",
                           str(root)], capture_output=True, text=True, check=False)


def assert_reader_view_consistent(root: Path) -> None:
    """Without any recovery: every file a page lists is complete and has its sha256."""
    for page in root.glob("*/simple/*/index.json"):
        for entry in json.loads(page.read_text())["files"]:
            path = (page.parent / entry["url"].replace("%2B", "+")).resolve()
            assert path.is_file(), f"{page} lists a missing file {entry['filename']}"
            assert sha256_file(path) == entry["hashes"]["sha256"], entry["filename"]


def make_batch(directory: Path, project: str, count: int) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    return [make_wheel(directory, project, f"1.{n}.0", tags="py3-none-any",
                       files={f"{project.replace('-', '_')}/__init__.py": os.urandom(20_000)})
            for n in range(count)]


PUBLISHERS = 16


def test_sixteen_concurrent_publishers(tmp_path: Path) -> None:
    root = tmp_path / "index"
    shared = make_batch(tmp_path / "shared", "common", 1)
    batches = [make_batch(tmp_path / f"w{i}", f"project-{i}", 5) + shared
               for i in range(PUBLISHERS)]
    procs = [publisher(root, batch) for batch in batches]
    outputs = [proc.communicate(timeout=240) for proc in procs]
    assert [proc.returncode for proc in procs] == [0] * PUBLISHERS, outputs
    files = PUBLISHERS * 5 + 1
    state = ledger.read(root)
    assert len(state.by_filename) == files
    lines = (root / "ledger.jsonl").read_text().splitlines()
    assert len(lines) == files  # the shared wheel is in the ledger once; the rest were no-ops
    statuses = [line.split(":")[0] for out, _ in outputs for line in out.splitlines()]
    assert statuses.count("published") == files
    assert statuses.count("already published") == PUBLISHERS - 1
    assert_reader_view_consistent(root)
    result = check(root)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"ok: {files} file(s) match the ledger; every page is current\n"


RUNS = 30  # publishers started at least; more until KILLED_MID_RUN of them were killed
KILLED_MID_RUN = 15  # most runs really are killed, not finished
RUNS_AT_MOST = 90


def test_publishers_killed_at_random_points_leave_a_consistent_index(tmp_path: Path) -> None:
    root = tmp_path / "index"
    rng = random.Random(20261130)
    wheels = make_batch(tmp_path / "wheels", "demo-ext", 4 * RUNS_AT_MOST)
    reported: set[str] = set()
    killed_mid_run = run = 0
    while run < RUNS or killed_mid_run < KILLED_MID_RUN:
        assert run < RUNS_AT_MOST, (
            f"only {killed_mid_run} of {run} publishers were killed before they finished")
        batch = wheels[run * 4:run * 4 + 4]
        proc = publisher(root, batch)
        assert proc.stdout is not None
        head = ""
        if run % 3:  # two runs in three: kill during a publish, just after the first completes
            head = proc.stdout.readline()
            time.sleep(rng.uniform(0.0, 0.02))
        else:  # one in three: at any moment, interpreter start-up included
            time.sleep(rng.uniform(0.0, 0.6))
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate(timeout=30)
        killed_mid_run += proc.returncode == -signal.SIGKILL
        reported |= set(re.findall(r"^published: (\S+)", head + out, re.MULTILINE))
        run += 1
        if not root.exists():  # killed before it made the index: nothing to check yet
            assert not reported
            continue
        assert_reader_view_consistent(root)
        result = check(root)  # what the killed publisher left is noted, for the next writer
        assert result.returncode == 0, f"run {run}: {result.stderr}"
        strays = [p.relative_to(root) for p in (root / ".tmp").glob("*")]  # may not exist yet
        assert all(f"note: {p} is a partial file" in result.stderr for p in strays)
        present = set(ledger.read(root).by_filename)
        assert reported <= present, f"run {run}: reported but missing: {reported - present}"
    assert reported  # and some publishes completed before their kill
    subprocess.run([sys.executable, "-m", "wheelsmith", "index", "rebuild", "--index",
                    str(root)], capture_output=True, check=True)
    result = check(root)  # a writer finished what the last kill left
    assert result.returncode == 0, result.stderr
    assert "is behind" not in result.stderr
    assert "partial file" not in result.stderr
    assert result.stdout.endswith("; every page is current\n")
    assert not list((root / ".tmp").glob("*"))
