"""Locks that know their holder: what a build holds for its whole life.

`NAME.lock` is flocked while its holder works (the kernel drops the lock when the holder dies,
however it dies); `NAME.owner.json` beside it says who holds it (pid, start time, stage) to a
process that has to wait, and is removed when the holder lets go. Finding that record on taking
the lock means its holder died holding it: whatever the holder left running is ended first
(`procs.end_owned_by`), then the lock is taken over.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from wheelsmith import procs
from wheelsmith.files import atomic_write_bytes, exclusive_lock

log = logging.getLogger(__name__)

RECORD_WAIT_S = 2.0  # a holder that has just taken the lock writes its record right after


@dataclass(frozen=True, slots=True)
class Holder:
    ident: str  # procs.ident: pid and start time
    pid: int
    started: str
    stage: str

    def describe(self) -> str:
        return f"pid {self.pid}, started {self.started}, stage {self.stage}"


class Held:
    """A lock while it is held; `stage()` keeps its record current for those who wait."""

    def __init__(self, record: Path, holder: Holder) -> None:
        self.record = record
        self.holder = holder
        self._write()

    def stage(self, name: str) -> None:
        self.holder = dataclasses.replace(self.holder, stage=name)
        self._write()

    def _write(self) -> None:
        data = json.dumps(dataclasses.asdict(self.holder)).encode()
        atomic_write_bytes(self.record, data, durable=False)


def record_of(lock: Path) -> Path:
    return lock.with_name(lock.name.removesuffix(".lock") + ".owner.json")


def read_holder(record: Path) -> Holder | None:
    try:
        return Holder(**json.loads(record.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _current_holder(record: Path) -> Holder | None:
    deadline = time.monotonic() + RECORD_WAIT_S
    while (holder := read_holder(record)) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return holder


@contextlib.contextmanager
def hold(lock: Path, *, on_busy: Callable[[Holder | None], None],
         on_takeover: Callable[[Holder, int], None]) -> Iterator[Held]:
    """Hold `lock`. When another process holds it, `on_busy(holder)` runs first (it reports
    the wait, or raises instead of waiting). When the last holder died holding it, what it
    left running is ended and `on_takeover(holder, how many processes)` runs."""
    record = record_of(lock)
    with exclusive_lock(lock, on_busy=lambda: on_busy(_current_holder(record))):
        last = read_holder(record)
        if last is not None and not procs.alive(last.ident):
            ended = procs.end_owned_by(last.ident)
            log.info("%s: the holder (%s) is gone; ended %d process(es) it left", lock,
                        last.describe(), ended)
            on_takeover(last, ended)
        held = Held(record, Holder(ident=procs.own_ident(), pid=os.getpid(),
                                   started=time.strftime("%Y-%m-%d %H:%M:%S"), stage="start"))
        try:
            yield held
        finally:
            record.unlink(missing_ok=True)
