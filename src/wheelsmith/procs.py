"""Processes wheelsmith starts: who owns them, and ending what a dead wheelsmith left behind.

Every command runs under a supervisor (`resources/supervise.py`, started by `cmd.run`) that
dies with wheelsmith and takes the command's whole tree with it. As a second line, every
command's environment names its owner in `OWNER_ENV` (the wheelsmith process's pid and start
time), so a later run that finds a lock whose holder is gone can end whatever that holder left
running, even when its supervisors were killed too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Sized
from pathlib import Path

OWNER_ENV = "WHEELSMITH_OWNER"
PROC = Path("/proc")
END_TIMEOUT_S = 30.0


def ident(pid: int) -> str | None:
    """`PID.STARTTIME` (clock ticks since boot), which names one process even after its pid is
    reused; None when there is no such live process (a zombie has ended)."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()  # the command name may hold spaces and ')'
    if fields[0] in ("Z", "X"):
        return None
    return f"{pid}.{fields[19]}"  # field 22 of proc(5), counted after the name


def own_ident() -> str:
    found = ident(os.getpid())
    assert found is not None  # this process is alive
    return found


def alive(owner: str) -> bool:
    pid, _, _ = owner.partition(".")
    return pid.isdigit() and ident(int(pid)) == owner


def with_env(name: str, value: str) -> list[int]:
    """Live processes whose environment holds `name=value` (they or an ancestor were started
    with it)."""
    needle = f"{name}={value}".encode()
    found = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()  # empty for a zombie
        except OSError:  # gone, or not ours
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def owned_by(owner: str) -> list[int]:
    """Live processes whose environment says `owner` started them (or their ancestors)."""
    return with_env(OWNER_ENV, owner)


def end_all(find: Callable[[], list[int]]) -> int:
    """SIGKILL what `find` names until nothing is left (a dying tree may still fork); return
    how many processes were ended."""
    ended: set[int] = set()
    deadline = time.monotonic() + END_TIMEOUT_S
    while (pids := find()) and time.monotonic() < deadline:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        ended.update(pids)
        time.sleep(0.05)
    return len(ended)


def end_owned_by(owner: str) -> int:
    """SIGKILL everything `owner` (a wheelsmith process that is gone) left running."""
    return end_all(lambda: owned_by(owner))


def gone_within(find: Callable[[], Sized], seconds: float) -> bool:
    """Wait up to `seconds` for `find` to name no process; True when none is left."""
    deadline = time.monotonic() + seconds
    while len(find()):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True
