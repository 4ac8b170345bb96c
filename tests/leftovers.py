"""Finding the processes a test started, however they were started: each test run puts a
marker of its own into the environment of what it starts, which descendants inherit unless
their environment is rebuilt (a package's build gets an allow-listed one), and those that do
not carry it run in the test's directory."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

MARK = "WHEELSMITH_TEST_MARK"


def new_env(**extra: str) -> tuple[str, dict[str, str]]:
    """A fresh marker and an environment carrying it."""
    mark = uuid.uuid4().hex
    return mark, {**os.environ, MARK: mark, "PYTHONUNBUFFERED": "1", **extra}


def marked(mark: str, root: Path | None = None) -> list[str]:
    """`PID NAME` of every live process (but this one) carrying `mark` or, with `root`, whose
    working directory is under `root` (zombies have neither)."""
    needle = f"{MARK}={mark}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            ours = needle in (entry / "environ").read_bytes().split(b"\0") or (
                root is not None and (entry / "cwd").readlink().is_relative_to(root))
            if ours:
                found.append(f"{entry.name} {(entry / 'comm').read_text().strip()}")
        except OSError:
            continue
    return found


def left_after(mark: str, seconds: float, root: Path | None = None) -> list[str]:
    """What is still `marked` after waiting up to `seconds` for it all to end."""
    deadline = time.monotonic() + seconds
    while (alive := marked(mark, root)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive
