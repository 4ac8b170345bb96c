"""How wheelsmith looks in a terminal: stage lines, the live progress bar, errors.

Only the CLI uses this module; the library reports through `logging` and the `Reporter`
protocol and never prints.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

import click

from wheelsmith.errors import WheelsmithError
from wheelsmith.untrusted.redaction import keep_environment, redacted
from wheelsmith.untrusted.text import inert

BAR_WIDTH = 28
TICK_S = 1.0
PLAIN_TICK_S = 30.0

_LOG = logging.getLogger("wheelsmith.console")


def _use_color(stream: IO[str]) -> bool:
    return stream.isatty() and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"


def _elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


class InertStream:
    """A text stream (stdout, stderr) whose writes reach the terminal inert and without a
    secret: every control character a terminal would obey is escaped (`untrusted.text.inert`),
    every secret in play hidden (`untrusted.redaction.redacted`). Text from outside (a wheel's
    names, a server's answer, a compiler's output) reaches many writes; during a command they
    all pass here (`inert_output`). This module's own styling (colour, the bar's redraw) goes
    through `styled`, which hides secrets too."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(inert(redacted(text)))

    def writelines(self, lines: Iterable[str]) -> None:
        self._stream.writelines(inert(redacted(line)) for line in lines)

    def styled(self, text: str) -> int:
        return self._stream.write(redacted(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def inert_output() -> Iterator[None]:
    """sys.stdout and sys.stderr as InertStream while one command runs; the values of the
    environment's secret variables are hidden from the start (`keep_environment`)."""
    keep_environment()
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = (s if isinstance(s, InertStream) else InertStream(s) for s in saved)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


@contextlib.contextmanager
def unraisable_to_log() -> Iterator[None]:
    """While one command runs, an exception Python cannot raise (one from a __del__, as of an
    object whose constructor Ctrl-C cut short) goes to the debug log (-vv), not to the
    terminal as a traceback."""
    saved = sys.unraisablehook

    def to_log(unraisable: Any) -> None:
        _LOG.debug("ignored in %r: %s: %s", unraisable.object,
                   type(unraisable.exc_value).__name__, unraisable.exc_value)

    sys.unraisablehook = to_log
    try:
        yield
    finally:
        try:
            gc.collect()  # what the command left in reference cycles ends under this hook
        finally:
            sys.unraisablehook = saved


def _styled(stream: IO[str], text: str) -> None:
    """Text holding this module's own escape sequences, whose other parts are inert already."""
    write = getattr(stream, "styled", None)
    (write or stream.write)(text)


class TerminalReporter:
    """Stage lines with elapsed time; during compile a bar from ninja's [N/M] lines.

    On a terminal the bar redraws every second, so the clock moves while one long translation
    unit compiles; elsewhere (CI logs) a line is printed when a step finishes and every 30 s.
    """

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty()
        self.color = _use_color(self.stream)
        self.started = time.monotonic()
        self.stage_started = self.started
        self.stage_name = ""
        self.done = 0
        self.total = 0
        self.first_done: tuple[float, int] | None = None  # when the first count came, and it
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.ticker: threading.Thread | None = None

    def __enter__(self) -> TerminalReporter:
        self.ticker = threading.Thread(target=self._tick, daemon=True)
        self.ticker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        if self.ticker is not None:
            self.ticker.join()
        self._clear()

    def say(self, stopping: str) -> None:
        """What stopping now leaves, from here on."""
        self.stopping = stopping

    def stage(self, name: str, detail: str) -> None:
        progress().stage(name, detail)
        with self.lock:
            self._clear()
            self.stage_name, self.stage_started = name, time.monotonic()
            self.done = self.total = 0
            self.first_done = None
            label = f"\033[1m{inert(name)}\033[0m" if self.color else inert(name)
            clock = _elapsed(self.stage_started - self.started)
            _styled(self.stream, f"==> [{clock:>6}] {label}: {inert(detail)}\n")
            self.stream.flush()

    def finding(self, line: str, marks: dict[str, str] | None = None) -> None:
        """A line of the command's own output (stdout), said while the stages run: the bar is
        cleared first, so the line stands alone on the terminal. `marks`: the colour of its
        first word (`todo:`) where stdout is a terminal that takes colour."""
        out = sys.stdout
        word, sep, rest = line.partition(": ")
        colour = (marks or {}).get(word) if sep and _use_color(out) else None
        text = f"\033[{colour}m{inert(word)}\033[0m: {inert(rest)}" if colour else inert(line)
        with self.lock:
            self._clear()
            _styled(out, f"{text}\n")
            out.flush()

    def progress(self, done: int, total: int) -> None:
        """ninja's count; the bar never goes back within one count (a step ninja counted
        that then failed, a drain's stopped compile), and starts again for another."""
        with self.lock:
            if total != self.total or done > self.done:
                if total != self.total or self.first_done is None:
                    self.first_done = (time.monotonic(), done) if done else None
                self.done, self.total = done, total
            if not self.live:
                self._plain_line()
            else:
                self._draw()

    def _bar(self) -> str:
        fraction = self.done / self.total if self.total else 0.0
        filled = int(fraction * BAR_WIDTH)
        bar = "█" * filled + "·" * (BAR_WIDTH - filled)
        step = f"{self.done}/{self.total}" if self.total else "starting"
        clock = _elapsed(time.monotonic() - self.stage_started)
        return f"    {self.stage_name} [{bar}] {step} {clock}{self._left()}"

    def _left(self) -> str:
        """`, about 1h12m left`: the objects still to do at the pace of those done so far
        (counted from the first one done, not from a resume's or the configure's start)."""
        if self.first_done is None or not self.total or self.done >= self.total:
            return ""
        started, at_first = self.first_done
        finished = self.done - at_first
        if finished <= 0:
            return ""
        pace = (time.monotonic() - started) / finished
        return f", about {_elapsed(pace * (self.total - self.done))} left"

    def _draw(self) -> None:
        _styled(self.stream, "\r\033[K" + inert(self._bar()))
        self.stream.flush()

    def _plain_line(self) -> None:
        self.stream.write(self._bar().replace("█", "#").replace("·", "-") + "\n")
        self.stream.flush()

    def _clear(self) -> None:
        if self.live:
            _styled(self.stream, "\r\033[K")
            self.stream.flush()

    def _tick(self) -> None:
        interval = TICK_S if self.live else PLAIN_TICK_S
        while not self.stop.wait(interval):
            with self.lock:
                if self.stage_name != "compile":
                    continue
                if self.live:
                    self._draw()
                else:
                    self._plain_line()


NAMES_SHOWN = 10  # names an interrupt's line lists; the rest are counted


@dataclass
class Progress:
    """What the running command has done, and what stopping it now leaves: the line an
    interrupt (Ctrl-C, SIGTERM) prints, in `Main.invoke`, says both.

    A command says what stopping it leaves (`stopping`; `after`: the same from a stage on, as
    its reporter passes the stages here). One that works through a list (wheels to publish,
    cells) names it (`items`) and `begin`s each, or a stage named `item_stage` does; each
    item starts from `fresh`, and `stopping` is said only while an item is under way."""

    stopping: str = "the commands it ran were stopped"
    after: dict[str, str] = field(default_factory=dict)  # stage name -> `stopping` from then
    fresh: str | None = None  # `stopping` as each item begins
    note: str = ""  # said last, whatever was under way
    verb: str = ""  # what a finished item is: "published"
    rest: str = ""  # what the items not begun are: "not published"
    item_stage: str | None = None  # a stage whose detail names the item it begins
    done: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    current: str | None = None

    def items(self, names: Sequence[str], verb: str, rest: str, *,
              stage: str | None = None) -> None:
        self.pending, self.verb, self.rest, self.item_stage = list(names), verb, rest, stage

    def begin(self, name: str) -> None:
        """`name` is under way: the one before it is done."""
        self.finish()
        if name in self.pending:
            self.pending.remove(name)
        self.current = name
        self.stopping = self.fresh or self.stopping

    def finish(self) -> None:
        if self.current is not None:
            self.done.append(self.current)
        self.current = None

    def say(self, stopping: str) -> None:
        """What stopping now leaves, from here on."""
        self.stopping = stopping

    def stage(self, name: str, detail: str) -> None:
        if name == self.item_stage:
            self.begin(detail)
        self.stopping = self.after.get(name, self.stopping)

    def said(self) -> str:
        parts = []
        if self.verb:
            total = len(self.done) + len(self.pending) + (self.current is not None)
            parts.append(f"{self.verb} {len(self.done)} of {total}"
                         + (f": {_names(self.done)}" if self.done else ""))
        if not self.verb:
            parts.append(self.stopping)
        elif self.current is not None:  # what stopping the item under way left, by its name
            named = self.stopping.startswith(self.current)
            parts.append(self.stopping if named else f"{self.current}: {self.stopping}")
        if self.pending:
            parts.append(f"{self.rest}: {_names(self.pending)}")
        return "; ".join([*parts, *([self.note] if self.note else [])])


def _names(names: Sequence[str]) -> str:
    shown = ", ".join(names[:NAMES_SHOWN])
    return shown + (f" and {len(names) - NAMES_SHOWN} more" if len(names) > NAMES_SHOWN else "")


def progress() -> Progress:
    """The running command's record (one per command line, in click's shared meta); outside a
    command, a record nobody reads."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return Progress()
    found: Progress = ctx.meta.setdefault("wheelsmith.progress", Progress())
    return found


def setup_logging(verbosity: int) -> None:
    """-v shows commands and stage details, -vv also every line of build output."""
    level = {0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    root = logging.getLogger("wheelsmith")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False
    # a warning another library raises in wheelsmith's process (the build frontend re-raises
    # the package's build's as BuildBackendWarning: NumPy's, setuptools' deprecations) is a
    # detail of the log, not a line of the user's output: shown with -v
    logging.captureWarnings(True)
    warned = logging.getLogger("py.warnings")
    warned.handlers[:] = [handler]
    warned.setLevel(logging.WARNING if verbosity else logging.ERROR)
    warned.propagate = False


def render_error(error: WheelsmithError, stream: IO[str] | None = None) -> None:
    """The error, its details and its hint, each line inert (its text may hold outside data)."""
    out = stream or sys.stderr
    color = _use_color(out)
    prefix = "\033[31;1merror\033[0m" if color else "error"
    lines = [f"{prefix}: {inert(error.message)}", *(f"  {inert(line)}" for line in
                                                    error.details())]
    if error.hint:
        tip = "\033[33mhint\033[0m" if color else "hint"
        first, *rest = inert(error.hint).splitlines() or [""]
        lines += [f"{tip}: {first}", *(f"      {line}" for line in rest)]
    _styled(out, "".join(f"{line}\n" for line in lines))
    out.flush()


def error_json(error: WheelsmithError) -> dict[str, object]:
    return {"ok": False, "error": {"type": type(error).__name__, "exit_code": error.exit_code,
                                   "message": error.message, "hint": error.hint,
                                   "details": error.details()}}
