"""The only subprocess wrapper.

It echoes `+ command` to the log, streams every output line to the log (and to an optional
log file, secrets hidden, and line callback), and on failure raises with the output's tail.

Every command runs under a supervisor (`resources/supervise.py`) in a session of its own: it
dies with wheelsmith, even with a SIGKILL, and takes the command's whole tree (compilers
included) with it. When wheelsmith is interrupted (Ctrl-C, SIGTERM: KeyboardInterrupt) while a
command runs, the command's tree is stopped before the interrupt goes on. Its environment names
wheelsmith as its owner (procs.OWNER_ENV), for a later run to clean up after a dead one.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import selectors
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from wheelsmith import procs
from wheelsmith.errors import CommandError, WheelsmithError
from wheelsmith.untrusted import TOOL_HINT, Bounds, too_big, too_slow
from wheelsmith.untrusted.redaction import redacted
from wheelsmith.untrusted.text import python_error

log = logging.getLogger(__name__)
output_log = logging.getLogger("wheelsmith.output")

TAIL_LINES = 40
SUPERVISOR = Path(__file__).parent / "resources" / "supervise.py"
STOP_GRACE_S = 3.0  # SIGTERM to the command's tree, then SIGKILL
STOP_WAIT_S = STOP_GRACE_S + 10.0  # then the supervisor itself is killed
INTERRUPTS = {signal.SIGINT, signal.SIGTERM, signal.SIGALRM}  # SIGALRM: time_limit
DRAIN_SIGNAL = signal.SIGUSR1  # to a supervisor: let the compiles run, start none (supervise.py)
DRAINED_EXIT = 75  # from a supervisor: the command failed after the drain stopped part of it
DRAIN_MAX_S = 900.0  # a default drain is a quarter of the time limit, at most this
UNBOUNDED = Bounds(max_bytes=sys.maxsize, seconds=math.inf)

_running: set[subprocess.Popen[str]] = set()  # the supervisors of the commands running now
_draining = False
_cut_by_drain = False  # a command failed because the drain stopped part of it


class TimeLimitReached(BaseException):  # an interrupt, like KeyboardInterrupt
    """A time limit ran out: raised where the code was, and handled like an interrupt (the
    running command's tree is stopped, nothing half-written is kept, a build's work directory
    keeps what it finished)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"the time limit of {seconds:g} s ran out")
        self.seconds = seconds


def default_drain(seconds: float) -> float:
    return min(seconds / 4, DRAIN_MAX_S)


@contextlib.contextmanager
def time_limit(seconds: float | None, *, drain: float | None = None) -> Iterator[None]:
    """Raise TimeLimitReached in this (the main) thread once `seconds` have passed inside the
    block; None: no limit.

    The last `drain` seconds (default_drain when None; 0: none) drain the commands running:
    the compiles they have in flight go on, none starts (resources/supervise.py), so a cut
    does not lose work that was nearly done; commands that are not compiles (verify, smoke)
    run as usual. A command that fails because the drain stopped part of it (ninja after its
    first refused compile) ends the block early with TimeLimitReached, as does the limit
    itself; any other failure is reported as itself."""
    if seconds is None:
        yield
        return
    global _draining, _cut_by_drain  # noqa: PLW0603 - one drain, as there is one SIGALRM
    drain = min(default_drain(seconds) if drain is None else drain, seconds)
    phases = [seconds - drain, drain] if drain > 0 else [seconds]

    def expire(signum: int, frame: object) -> None:  # noqa: ARG001 - a signal handler
        global _draining  # noqa: PLW0603
        phases.pop(0)
        if not phases:
            raise TimeLimitReached(seconds)
        signal.setitimer(signal.ITIMER_REAL, phases[0])
        _draining = True
        # logging, not the reporter: its lock may be held where the signal landed
        log.warning("time limit: %g s left: no new compile starts; those running may finish",
                    phases[0])
        drain_running()

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, phases[0])
    try:
        yield
    except WheelsmithError as error:
        if _cut_by_drain:
            raise TimeLimitReached(seconds) from error
        raise
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        _draining = _cut_by_drain = False


def drain_running() -> None:
    """Ask the supervisor of every command running now to drain."""
    for proc in list(_running):
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(DRAIN_SIGNAL)


@dataclass(frozen=True, slots=True)
class Completed:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


def render(argv: Sequence[str | Path]) -> str:
    return shlex.join(str(a) for a in argv)


def _resolve(argv: Sequence[str | Path], env: Mapping[str, str] | None) -> list[str]:
    args = [str(a) for a in argv]
    path = (env or os.environ).get("PATH")
    found = shutil.which(args[0], path=path)
    if found is None:
        here = shutil.which(args[0])
        raise CommandError(
            f"command not found: {args[0]}",
            tail=[],
            returncode=127,
            hint=f"install {args[0]} or put it on PATH" if here is None else
            f"{args[0]} is {here}, but not on the PATH this command runs with ({path})",
        )
    return args


def run(
    argv: Sequence[str | Path],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    log_file: IO[str] | None = None,
    log_path: Path | None = None,
    on_line: Callable[[str], None] | None = None,
    ok_returncodes: Sequence[int] = (0,),
    error: type[WheelsmithError] = CommandError,
    what: str | None = None,
    stream: bool = True,
    hint: str | None = None,
    bounds: Bounds | None = None,
    python_errors: bool = True,
    end_tree: bool = True,
) -> Completed:
    """Run a command, streaming its merged output; raise `error` unless its exit code is ok.

    With `stream=False` stdout and stderr are kept apart (for tools whose stdout is data, such
    as cuobjdump) and the output is logged after the command ends. `hint` (what to do) goes
    with the error. `bounds` (a command whose answer is read: the probe of `--python`, cuobjdump,
    a container engine; its output is then captured): past its byte cap or deadline, or
    silent past its `quiet_seconds`, the command's tree is stopped and UntrustedDataError
    names it (`what`), with `hint` (else TOOL_HINT); and what it starts ends when it ends (a
    child that keeps its pipes open would hold the read to its deadline, a daemon would outlive
    wheelsmith), unless `end_tree` is False (a server it starts on purpose: sccache, podman's).
    Every command whose answer is waited for passes `bounds` (tests/trust/test_call_sites.py).
    A Python that fails with a traceback: the message names its exception and where it was
    raised (`python_error`), unless `python_errors` is False (the build: its compiler's first).
    """
    args = _resolve(argv, env)
    line = f"+ {render(args)}"
    log.info(line)
    if log_file is not None:
        log_file.write(redacted(line) + "\n")
        log_file.flush()
    try:
        if stream and bounds is None:
            returncode, stdout, stderr, tail = _run_streaming(args, cwd, env, log_file, on_line)
        else:
            returncode, stdout, stderr, tail = _run_captured(
                args, cwd, env, log_file, bounds=bounds, alone=bounds is not None and end_tree,
                subject=(what or render(args), hint or TOOL_HINT))
    except OSError as exc:  # not a program (exec format error), not permitted, ...
        raise error(f"{what or args[0]} could not start: {exc.strerror or exc}", tail=[],
                    returncode=127, log_file=log_path) from exc
    if returncode not in ok_returncodes:
        _note_drained(returncode)
        subject = what or render(args)
        raised = python_error(stderr or "\n".join(tail)) if python_errors else None
        raise error(
            f"{subject} failed with exit code {returncode}" + (f": {raised}" if raised else ""),
            tail=tail,
            returncode=returncode,
            log_file=log_path,
            hint=hint,
        )
    return Completed(tuple(args), returncode, stdout, stderr)


def _note_drained(returncode: int) -> None:
    global _cut_by_drain  # noqa: PLW0603
    if _draining and returncode == DRAINED_EXIT:
        _cut_by_drain = True


def _emit(text: str, log_file: IO[str] | None, on_line: Callable[[str], None] | None) -> None:
    output_log.debug(text)
    if log_file is not None:
        log_file.write(redacted(text) + "\n")
    if on_line is not None:
        on_line(text)


@contextlib.contextmanager
def _started(args: list[str], cwd: Path | None, env: Mapping[str, str] | None, *,
             capture: bool, alone: bool = False) -> Iterator[subprocess.Popen[str]]:
    """The command under its supervisor; on any exception (an interrupt included) its tree
    is stopped before the exception goes on. `alone`: nothing it starts outlives it."""
    supervised = [sys.executable, "-I", "-S", str(SUPERVISOR), str(os.getpid()),
                  str(STOP_GRACE_S), *(["--end-tree"] if alone else []), "--", *args]
    proc = None
    try:
        with _interrupts_held() as held:
            proc = subprocess.Popen(
                supervised,
                cwd=cwd,
                env={**(env if env is not None else os.environ),
                     procs.OWNER_ENV: procs.own_ident()},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE if capture else subprocess.STDOUT,
                text=True,
                errors="replace",
                bufsize=-1 if capture else 1,
                start_new_session=True,
            )
        _running.add(proc)
        if _draining:  # started while a time limit drains: it drains too
            proc.send_signal(DRAIN_SIGNAL)
        for signum in held:  # what arrived meanwhile, now that `proc` is known
            signal.raise_signal(signum)
        yield proc
    except BaseException:
        if proc is not None:
            _stop(proc, args)
        raise
    finally:
        if proc is not None:
            _running.discard(proc)
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()


@contextlib.contextmanager
def _interrupts_held() -> Iterator[list[int]]:
    """An interrupt must not land inside Popen, after the fork but before `proc` is known (the
    supervisor would outlive wheelsmith). Inside the block the interrupts are blocked in this
    thread (the supervisor starts with them blocked and unblocks them itself) and their Python
    handlers only record them: blocking alone is not enough, as another thread (the console's
    ticker) may receive the signal, or one may have arrived just before the block, and the
    main thread runs the handler at its next bytecode, which can be inside Popen. The caller
    raises what was recorded."""
    held: list[int] = []
    if threading.current_thread() is not threading.main_thread():  # handlers run in main only
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {DRAIN_SIGNAL})
        try:
            yield held
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        return

    def record(signum: int, frame: object) -> None:  # noqa: ARG001 - a signal handler
        held.append(signum)

    handlers = {signum: signal.signal(signum, record) for signum in INTERRUPTS}
    # the supervisor starts with the drain signal blocked too, until its handler is set
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {*INTERRUPTS, DRAIN_SIGNAL})
    try:
        yield held
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for signum, handler in handlers.items():  # None: not set from Python
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)


def _stop(proc: subprocess.Popen[str], args: list[str]) -> None:
    """End a command's whole tree: the supervisor does it on SIGTERM; wait for that (a second
    Ctrl-C does not cut it short), killing the supervisor only if it does not finish."""
    if proc.stdout is not None:
        proc.stdout.close()  # writers get EPIPE instead of blocking on a full pipe
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    while True:
        try:
            proc.wait(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            log.warning("the supervisor of %s did not stop; killing it", render(args))
            proc.kill()
            proc.wait()
        except KeyboardInterrupt:
            continue
        return


def _run_streaming(
    args: list[str],
    cwd: Path | None,
    env: Mapping[str, str] | None,
    log_file: IO[str] | None,
    on_line: Callable[[str], None] | None,
) -> tuple[int, str, str, list[str]]:
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    collected: list[str] = []
    with _started(args, cwd, env, capture=False) as proc:
        assert proc.stdout is not None
        for raw in proc.stdout:
            text = raw.rstrip("\n")
            tail.append(text)
            collected.append(text)
            _emit(text, log_file, on_line)
        returncode = proc.wait()
    if log_file is not None:
        log_file.flush()
    return returncode, "\n".join(collected), "", list(tail)


def _run_captured(
    args: list[str],
    cwd: Path | None,
    env: Mapping[str, str] | None,
    log_file: IO[str] | None,
    *,
    bounds: Bounds | None,
    alone: bool,
    subject: tuple[str, str | None],
) -> tuple[int, str, str, list[str]]:
    limits = bounds or UNBOUNDED
    deadline = time.monotonic() + limits.seconds
    with _started(args, cwd, env, capture=True, alone=alone) as proc:
        assert proc.stdout is not None
        assert proc.stderr is not None
        out, err = _read_pipes((proc.stdout.fileno(), proc.stderr.fileno()), limits, subject)
        try:
            proc.wait(timeout=None if bounds is None else max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise too_slow(subject[0], limits.seconds, verb="did not finish",
                           hint=subject[1]) from None
    stdout, stderr = (_text(part) for part in (out, err))
    lines = (stdout + stderr).splitlines()
    for text in lines:
        _emit(text, log_file, None)
    return proc.returncode, stdout, stderr, lines[-TAIL_LINES:]


def _text(data: bytes) -> str:
    """As a text-mode pipe reads it: undecodable bytes replaced, newlines universal."""
    return data.decode(errors="replace").replace("\r\n", "\n").replace("\r", "\n")


def _read_pipes(fds: tuple[int, int], bounds: Bounds, subject: tuple[str, str | None]
                ) -> tuple[bytes, bytes]:
    """Both pipes until they end, in chunks: past `bounds` UntrustedDataError (and `_started`
    stops the command's tree)."""
    start = time.monotonic()
    parts = {fd: bytearray() for fd in fds}
    total = 0
    with selectors.DefaultSelector() as selector:
        for fd in fds:
            os.set_blocking(fd, False)
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map():
            quiet = total == 0 and bounds.quiet_seconds is not None
            limit = bounds.quiet_seconds if quiet and bounds.quiet_seconds else bounds.seconds
            left = start + limit - time.monotonic()
            if left <= 0:
                raise too_slow(subject[0], limit, hint=subject[1],
                               verb="printed nothing" if quiet else "did not finish")
            for key, _ in selector.select(None if math.isinf(left) else left):
                with contextlib.suppress(BlockingIOError):
                    chunk = os.read(key.fd, 1 << 16)
                    if not chunk:
                        selector.unregister(key.fd)
                    total += len(chunk)
                    parts[key.fd] += chunk
            if total > bounds.max_bytes:
                raise too_big(subject[0], bounds, verb="printed", hint=subject[1])
    return bytes(parts[fds[0]]), bytes(parts[fds[1]])

