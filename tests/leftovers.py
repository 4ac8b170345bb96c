"""Finding the processes a test started, however they were started: each test run puts a
marker of its own into the environment of what it starts, which descendants inherit unless
their environment is rebuilt (a package's build gets an allow-listed one), and those that do
not carry it run in the test's directory or name a marked wheelsmith as their owner
(procs.OWNER_ENV: a build's compilers run in the path view, builder/pathview.py, a directory
every build shares)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from wheelsmith import procs

MARK = "WHEELSMITH_TEST_MARK"
# per mark, the OWNER_ENV lines of the marked processes seen so far (they may be killed since)
_OWNERS: dict[str, set[bytes]] = {}


def new_env(**extra: str) -> tuple[str, dict[str, str]]:
    """A fresh marker and an environment carrying it."""
    mark = uuid.uuid4().hex
    return mark, {**os.environ, MARK: mark, "PYTHONUNBUFFERED": "1", **extra}


def marked(mark: str, root: Path | None = None) -> list[str]:
    """`PID NAME` of every live process (but this one) carrying `mark`, owned by one that
    carried it, or, with `root`, whose working directory is under `root` (zombies have
    none of these)."""
    needle = f"{MARK}={mark}".encode()
    owners = _OWNERS.setdefault(mark, set())
    seen: list[tuple[str, set[bytes], Path | None]] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = set((entry / "environ").read_bytes().split(b"\0"))
            cwd = (entry / "cwd").readlink() if root is not None else None
            name = f"{entry.name} {(entry / 'comm').read_text().strip()}"
        except OSError:
            continue
        if needle in environ and (ident := procs.ident(int(entry.name))) is not None:
            owners.add(f"{procs.OWNER_ENV}={ident}".encode())
        seen.append((name, environ, cwd))
    return [name for name, environ, cwd in seen
            if needle in environ or environ & owners
            or (root is not None and cwd is not None and cwd.is_relative_to(root))]


def supervisors(mark: str, root: Path | None = None) -> list[int]:
    """The PIDs of the `marked` processes that are wheelsmith's supervisors
    (resources/supervise.py)."""
    found = []
    for entry in marked(mark, root):
        pid = int(entry.split()[0])
        try:
            if b"supervise.py" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:  # ended since it was listed
            continue
    return found


def left_after(mark: str, seconds: float, root: Path | None = None) -> list[str]:
    """What is still `marked` after waiting up to `seconds` for it all to end."""
    procs.gone_within(lambda: marked(mark, root), seconds)
    return marked(mark, root)

