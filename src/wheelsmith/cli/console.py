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
from typing import IO, TYPE_CHECKING, Any

import click

from wheelsmith.doctor.report import missing_dependency
from wheelsmith.errors import WheelsmithError
from wheelsmith.untrusted.redaction import keep_environment, redacted
from wheelsmith.untrusted.text import inert

if TYPE_CHECKING:
    from wheelsmith.doctor.report import Report

BAR_WIDTH = 28
TICK_S = 1.0
PLAIN_TICK_S = 30.0

_LOG = logging.getLogger("wheelsmith.console")


def _use_color(stream: IO[str]) -> bool:
    return stream.isatty() and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"


def _elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
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
            label = f"\033[1m{inert(name)}\033[0m" if self.color else inert(name)
            clock = _elapsed(self.stage_started - self.started)
            _styled(self.stream, f"==> [{clock:>6}] {label}: {inert(detail)}\n")
            self.stream.flush()

    def progress(self, done: int, total: int) -> None:
        with self.lock:
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
        return f"    {self.stage_name} [{bar}] {step} {clock}"

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


def render_doctor(report: Report, stream: IO[str] | None = None) -> None:
    out = stream or sys.stdout
    gpu = report.gpu or "none visible"
    out.write(f"python   {report.python} ({report.python_version})\n")
    out.write(f"torch    {report.torch or '-'} (CUDA {report.torch_cuda or '-'})\n")
    out.write(f"GPU      {gpu}; checking kernels for {report.arch.sm} "
              f"(from {report.arch_source})\n")
    if report.driver is not None:
        out.write(f"driver   {report.driver.describe()}\n")
    out.write(f"channel  {report.channel or '- (no CUDA torch)'}\n")
    out.write(f"model    {_model_line(report)}\n\n")
    width = max([len(p.name) for p in report.packages] + [16])
    out.write(f"{'package':<{width}}  {'version':<40}  kernels for {report.arch.sm}\n")
    labels = {"sass": "SASS (native)", "ptx": "PTX only (JIT at start)", "none": "NONE"}
    for package in report.packages:
        out.write(f"{package.name:<{width}}  {package.version:<40}  {labels[package.status]}\n")
    if not report.packages:
        out.write("(no CUDA-extension packages installed)\n")
    out.write("\nfast path: " + ", ".join(
        f"{module} {_import_state(module, state)}" for module, state in report.fast_path.items())
        + "\n")
    _render_ops(report, out)
    for note in report.notes:
        out.write(f"note: {note}\n")
    if report.healthy:
        ran = ", its ops run correctly" if report.ops else ""
        imports = (f"the fast path imports{ran}" if report.needed else
                   "no fast-path package is installed or asked for")
        out.write(f"\nhealthy: every extension has native kernels for {report.arch.sm}, "
                  f"{imports}\n")
    out.flush()


def _import_state(module: str, state: dict[str, Any]) -> str:
    """ok, or why not: the package is not there, or it is there but does not import (a
    dependency missing, or another error such as an undefined symbol)."""
    if state["ok"]:
        return "ok"
    dependency = missing_dependency(module, state)
    if dependency is None and (state.get("error") or "").startswith("ModuleNotFoundError"):
        return "MISSING" if state["needed"] else "not installed"
    said = "DOES NOT IMPORT" if state["needed"] else "does not import"
    return f"{said} ({dependency} is missing)" if dependency else said


def _model_line(report: Report) -> str:
    model = report.model
    if model.source == "default":
        judged = ", ".join(model.modules) or "none installed"
        return (f"not given; judging {model.model_type} ({judged}); --model-type or --model "
                "asks transformers what your model needs")
    if model.input_error:
        return f"not examined: {model.message}"
    said = f"{model.model_type} (transformers {model.transformers or '-'})"
    if model.error is not None:
        return f"{said}: cannot tell (see below)"
    if not model.needs:
        return f"{said}: uses no fast-path kernels"
    missing, undecided, taken = model.unavailable(), model.undecided(), model.taken()
    if missing:
        return f"{said}: FALLS BACK to torch without {', '.join(missing)}"
    parts = [f"fast path through {', '.join(taken)}"] if taken else []
    if undecided:
        parts.append(f"undecided for {', '.join(undecided)} (see the note)")
    seen = {"fake-cuda": " (its dispatch run on CUDA inputs without storage: no GPU here)",
            "no-device": " (its dispatch run on inputs of no device)"}.get(model.device or "", "")
    return f"{said}: {'; '.join(parts)}{seen if taken else ''}"


def _render_ops(report: Report, out: IO[str]) -> None:
    if report.ops is None:
        out.write(f"ops: not run: no GPU is visible to the torch in {report.python}, and the "
                  "ops need one\n"
                  if report.gpu is None else "ops: not run (--no-run)\n")
        return
    if not report.ops:
        out.write("ops: none installed\n")
        return
    out.write("\nop (vs plain PyTorch)              result\n")
    for op in report.ops:
        seconds = f"{op['seconds']:.1f} s" if op.get("seconds") is not None else ""
        if op["status"] in ("ok", "wrong"):
            result = (f"{'ok' if op['status'] == 'ok' else 'WRONG':<8}max error "
                      f"{op['max_error'] if op['max_error'] is not None else float('inf'):.2g}")
        else:
            result = {"timeout": "TIMEOUT", "not-run": "not run"}.get(
                op["status"], f"ERROR in {op['phase'] or 'its run'}")
            compared = [e for e in (op.get("errors") or {}).values() if e is not None]
            if compared:  # the forward pass was compared before the backward failed
                result += f" (forward: max error {max(compared):.2g})"
        out.write(f"{op['op']:<34} {result:<28} {seconds}".rstrip() + "\n")


def error_json(error: WheelsmithError) -> dict[str, object]:
    return {"ok": False, "error": {"type": type(error).__name__, "exit_code": error.exit_code,
                                   "message": error.message, "hint": error.hint,
                                   "details": error.details()}}
