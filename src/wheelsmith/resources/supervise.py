"""Run one command so that it cannot outlive wheelsmith (started by wheelsmith.cmd; stdlib only).

usage: python -I -S supervise.py PARENT_PID GRACE_S -- ARGV...

Started in a session of its own (a terminal's Ctrl-C reaches wheelsmith alone, which then
stops the tree in order), the supervisor asks the kernel for SIGTERM when its parent dies
(PR_SET_PDEATHSIG) and becomes a child subreaper (PR_SET_CHILD_SUBREAPER): every orphan of the
command's tree is re-parented to it, whatever process group it went to (ninja puts each
compiler in a group of its own, so killing one group is not enough). It exits with the
command's status. On SIGTERM, SIGINT or SIGHUP, or when wheelsmith dies, it sends SIGTERM to
its whole tree, SIGKILL to what is left after GRACE_S, reaps everything and exits with 128 plus
the signal.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
POLL_S = 0.02


class Stop(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _stop(signum: int, _frame: object) -> None:
    raise Stop(signum)


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option})")


def _descendants() -> list[int]:
    """Live processes below this one (zombies are only reaped, not signalled)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):  # noqa: PTH208 - no pathlib: start-up time
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:  # noqa: PTH123 - no pathlib: start-up time
                fields = handle.read().rpartition(b")")[2].split()
        except OSError:
            continue
        if fields[0] not in (b"Z", b"X"):
            children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [os.getpid()]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _reap() -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


def _signal_all(pids: list[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


def end_tree(grace: float) -> None:
    """SIGTERM to every descendant (also to those born meanwhile), SIGKILL after `grace`."""
    deadline = time.monotonic() + grace
    signalled: set[int] = set()
    while (alive := _descendants()) and time.monotonic() < deadline:
        _signal_all([pid for pid in alive if pid not in signalled], signal.SIGTERM)
        signalled.update(alive)
        time.sleep(POLL_S)
        _reap()
    while alive := _descendants():
        _signal_all(alive, signal.SIGKILL)
        time.sleep(POLL_S)
        _reap()
    _reap()


def _exec(argv: list[str]) -> None:
    """In the forked child: default signal dispositions (Python ignores SIGPIPE and SIGXFSZ,
    and ignored signals survive exec), then the command."""
    try:
        for signum in (*STOP_SIGNALS, signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(signum, signal.SIG_DFL)
        os.execvp(argv[0], argv)  # noqa: S606 - the command wheelsmith.cmd was asked to run
    except BaseException as exc:  # report, leave the forked child
        os.write(2, f"wheelsmith supervisor: cannot run {argv[0]}: {exc}\n".encode())
    os._exit(127)


def _wait_for(child: int) -> int:
    """Reap until `child` ends (orphans re-parented here are reaped on the way)."""
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == child:
            return status


def _exit_like(status: int) -> None:
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)  # die of the same signal, so the caller sees it
        if signum not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    sys.exit(os.waitstatus_to_exitcode(status))


def main(argv: list[str]) -> None:
    parent, grace, command = int(argv[1]), float(argv[2]), argv[4:]
    for signum in STOP_SIGNALS:
        signal.signal(signum, _stop)
    try:
        # wheelsmith blocks them (and its time limit's SIGALRM) while it starts us
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {*STOP_SIGNALS, signal.SIGALRM})
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
        _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # wheelsmith died before the kernel could be asked
            raise Stop(signal.SIGTERM)
        child = os.fork()
        if child == 0:
            _exec(command)
        status = _wait_for(child)
        for signum in STOP_SIGNALS:  # the command has ended: nothing left to stop
            signal.signal(signum, signal.SIG_DFL)
    except Stop as stop:
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_IGN)
        end_tree(grace)
        os._exit(128 + stop.signum)
    _exit_like(status)


if __name__ == "__main__":
    main(sys.argv)
