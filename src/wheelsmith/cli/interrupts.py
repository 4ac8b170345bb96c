"""Ctrl-C and SIGTERM, at any moment: raised as KeyboardInterrupt only inside `raised`
(Main.invoke, where the line that says what was done and what was not is printed, exit 130);
outside it, from the entry's first line (`wheelsmith.__main__.run` blocks both before any
import) through the start-up, the parsing of the command line and the exit, held: blocked, and
only recorded where another thread takes one. One held when the command begins is raised at
once; one that comes after it is said by `held`."""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import NoReturn

import click

from wheelsmith.cli import console

INTERRUPTED = 130  # 128 + SIGINT, as shells report it
INTERRUPTS = {signal.SIGINT, signal.SIGTERM}
STARTING = "wheelsmith was starting: nothing was done"
ENDED = "its command had ended (what it printed stands)"


def say(said: str) -> None:
    click.echo(f"\ninterrupted: {said}", err=True)


@contextlib.contextmanager
def raised() -> Iterator[None]:
    """Inside the block Ctrl-C and SIGTERM raise KeyboardInterrupt (SIGTERM as Ctrl-C: the
    clean-up of containers and temporary files runs) and reach this thread; one held already
    is raised at once, said as `STARTING`. Both are as they were after it."""
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, ())  # as it is
    handlers = {signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler),
                signal.SIGTERM: signal.signal(signal.SIGTERM, _terminated)}
    progress = console.progress()
    stopping, progress.stopping = progress.stopping, STARTING
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, INTERRUPTS)  # one held: raised here
        progress.stopping, _OUTSIDE.began = stopping, True
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for signum, handler in handlers.items():  # None: not set from Python
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)


def _terminated(*_: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one is enough: let the clean-up finish
    raise KeyboardInterrupt


@dataclass
class _Outside:
    """What `held` says of an interrupt outside `raised`: the interrupts that reached the
    process there (`_hold`), and whether `raised` had begun its command."""

    held: list[int] = field(default_factory=list)
    began: bool = False


_OUTSIDE = _Outside()


def held(command: Callable[[], object]) -> NoReturn:
    """Run `command` (click's main, which exits) with the interrupts held outside `raised`
    (the caller blocked them): one that comes while it starts, parses its options, or ends
    is one line and exit 130 too, never a traceback or death by the signal."""
    for signum in INTERRUPTS:
        signal.signal(signum, _hold)
    try:
        command()
    except SystemExit as ended:
        came = _OUTSIDE.held or INTERRUPTS & signal.sigpending()
        if ended.code == INTERRUPTED or not came:  # said already, or none came
            raise
    say(ENDED if _OUTSIDE.began else STARTING)
    sys.exit(INTERRUPTED)


def _hold(signum: int, frame: object) -> None:  # noqa: ARG001 - a signal handler
    _OUTSIDE.held.append(signum)
