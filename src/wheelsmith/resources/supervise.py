"""Run one command so that it cannot outlive wheelsmith (started by wheelsmith.cmd; stdlib only).

usage: python -I -S supervise.py PARENT_PID GRACE_S [--end-tree] -- ARGV...

Started in a session of its own (a terminal's Ctrl-C reaches wheelsmith alone, which then
stops the tree in order), the supervisor asks the kernel for SIGTERM when its parent dies
(PR_SET_PDEATHSIG) and becomes a child subreaper (PR_SET_CHILD_SUBREAPER): every orphan of the
command's tree is re-parented to it, whatever process group it went to (ninja puts each
compiler in a group of its own, so killing one group is not enough). It exits with the
command's status. On SIGTERM, SIGINT or SIGHUP, or when wheelsmith dies, it sends SIGTERM to
its whole tree, SIGKILL to what is left after GRACE_S, reaps everything and exits with 128 plus
the signal. With --end-tree (a command that is not trusted, whose output wheelsmith parses) it
also ends what the command left when it ends: a child that keeps its pipes open, or one that
went into a session of its own, does not outlive it.

On SIGUSR1 it drains: the compiles running go on, none starts. From then on it ends every
command that a `ninja` below it starts (killing its process group): ninja takes the failure as
its cue to start nothing more, waits for the compiles it has running, and exits. Those
compiles finish and enter ninja's log, so a later run does not compile them again (a time
limit that cut them would lose their work; cmd.time_limit drains before it cuts). Other
commands run to their end: a drain that comes before the command starts only marks it. When the
drain stopped something and the command then fails, the supervisor exits with DRAINED_EXIT
(cmd.DRAINED_EXIT), so wheelsmith tells a cut by the time limit from a failure of its own.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
from collections import namedtuple

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
DRAIN_SIGNAL = signal.SIGUSR1  # cmd.DRAIN_SIGNAL
DRAINED_EXIT = 75  # cmd.DRAINED_EXIT: the command failed after the drain stopped part of it
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


# started: clock ticks after boot; name: bytes (typing.NamedTuple would cost start-up time)
Proc = namedtuple("Proc", "pid parent group started name")


def _processes() -> list[Proc]:
    """Live processes (zombies are only reaped, not signalled)."""
    found = []
    for entry in os.listdir("/proc"):  # noqa: PTH208 - no pathlib: start-up time
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:  # noqa: PTH123 - no pathlib: start-up time
                head, _, tail = handle.read().rpartition(b")")
        except OSError:
            continue
        fields = tail.split()
        if fields[0] not in (b"Z", b"X"):
            found.append(Proc(int(entry), int(fields[1]), int(fields[2]), int(fields[19]),
                              head.partition(b"(")[2]))
    return found


def _below(processes: list[Proc]) -> list[Proc]:
    """Those of `processes` below this one."""
    children: dict[int, list[Proc]] = {}
    for proc in processes:
        children.setdefault(proc.parent, []).append(proc)
    found, todo = [], [os.getpid()]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child.pid)
    return found


def _descendants() -> list[int]:
    """Live processes below this one."""
    return [proc.pid for proc in _below(_processes())]


class Drain(Exception):
    pass


_drain_asked = False  # a SIGUSR1 came
_waiting = False  # inside _wait_for, where the handler may raise Drain
_stopped = 0  # commands the drain stopped


def _drain(_signum: int, _frame: object) -> None:
    """Mark the drain; raise only inside the wait (it may come as soon as the signal is
    unblocked, before the command has started: an exception there would end the supervisor)."""
    global _drain_asked  # noqa: PLW0603 - signal handler state
    signal.signal(DRAIN_SIGNAL, signal.SIG_IGN)  # once is enough
    _drain_asked = True
    if _waiting:
        raise Drain


def _ticks_now() -> int:
    with open("/proc/uptime", "rb") as handle:  # noqa: PTH123 - no pathlib: start-up time
        return int(float(handle.read().split()[0]) * os.sysconf("SC_CLK_TCK"))


def end_new_compiles(since: int) -> None:
    """End what a ninja below this one started at or after `since` (clock ticks after boot)."""
    global _stopped  # noqa: PLW0603
    below = _below(_processes())
    ninjas = {proc.pid for proc in below if proc.name == b"ninja"}
    for proc in below:
        if proc.parent in ninjas and proc.started >= since and proc.name != b"ninja":
            with contextlib.suppress(ProcessLookupError):
                if proc.group == proc.pid:  # ninja gives each command a group of its own
                    os.killpg(proc.pid, signal.SIGKILL)
                else:
                    os.kill(proc.pid, signal.SIGKILL)
            _stopped += 1
            os.write(2, f"wheelsmith: draining for the time limit: stopped a command ninja "
                        f"started (pid {proc.pid})\n".encode())


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
        for signum in (*STOP_SIGNALS, DRAIN_SIGNAL, signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(signum, signal.SIG_DFL)
        os.execvp(argv[0], argv)  # noqa: S606 - the command wheelsmith.cmd was asked to run
    except BaseException as exc:  # report, leave the forked child
        os.write(2, f"wheelsmith supervisor: cannot run {argv[0]}: {exc}\n".encode())
    os._exit(127)


def _wait_for(child: int) -> int:
    """Reap until `child` ends (orphans re-parented here are reaped on the way); drain from
    the first SIGUSR1 on."""
    global _waiting  # noqa: PLW0603
    try:
        _waiting = True  # then the check: a SIGUSR1 between the two raises in the try
        if _drain_asked:
            raise Drain
        while True:
            pid, status = os.waitpid(-1, 0)
            if pid == child:
                return status
    except Drain:
        return _wait_draining(child, _ticks_now())


def _wait_draining(child: int, since: int) -> int:
    while True:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == child:
            return status
        if pid == 0:
            end_new_compiles(since)
            time.sleep(POLL_S)


def _exit_like(status: int) -> None:
    if _stopped and status != 0:
        sys.exit(DRAINED_EXIT)
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)  # die of the same signal, so the caller sees it
        if signum not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    sys.exit(os.waitstatus_to_exitcode(status))


def main(argv: list[str]) -> None:
    split = argv.index("--")
    parent, grace, command = int(argv[1]), float(argv[2]), argv[split + 1:]
    end_with_command = "--end-tree" in argv[3:split]
    for signum in STOP_SIGNALS:
        signal.signal(signum, _stop)
    signal.signal(DRAIN_SIGNAL, _drain)
    try:
        # wheelsmith blocks them (and its time limit's SIGALRM) while it starts us
        signal.pthread_sigmask(signal.SIG_UNBLOCK,
                               {*STOP_SIGNALS, DRAIN_SIGNAL, signal.SIGALRM})
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
        _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # wheelsmith died before the kernel could be asked
            raise Stop(signal.SIGTERM)
        child = os.fork()
        if child == 0:
            _exec(command)
        status = _wait_for(child)
        if end_with_command:
            end_tree(grace)
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
