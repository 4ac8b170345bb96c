"""The index on disk: one lock, a journal for interrupted writers, pages, check and rebuild.

Every writer (publish, yank, rebuild) holds `.publish.lock` and, on taking it, first finishes
whatever an interrupted writer left: a journal names the pages that writer was about to
regenerate, so they are regenerated from the ledger (pages are pure functions of it), a torn
ledger line is cut, and stray temp files go. Files are never rewritten or removed.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from wheelsmith import ledger, pages
from wheelsmith.files import atomic_write_bytes, exclusive_lock, sha256_file
from wheelsmith.ledger import IndexState

log = logging.getLogger(__name__)

LOCK = ".publish.lock"
JOURNAL = ".journal.json"
TMP_PREFIX = ".tmp-"


@contextlib.contextmanager
def locked(root: Path) -> Iterator[IndexState]:
    """Hold the publish lock, recover from any interrupted writer, yield the ledger state."""
    root.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(root / LOCK):
        recover(root)
        yield ledger.read(root)


def recover(root: Path) -> list[str]:
    """Finish what an interrupted writer left. Caller holds the lock. Returns what was done."""
    done = []
    if ledger.repair_torn_tail(root):
        done.append("cut a torn last ledger line")
    journal = root / JOURNAL
    if journal.is_file():
        targets = json.loads(journal.read_text() or "[]")
        state = ledger.read(root)
        for channel, project in targets:
            write_pages(root, state, channel, project)
        journal.unlink()
        done.append(f"regenerated the pages of an interrupted write: {targets}")
    for stray in root.rglob(f"{TMP_PREFIX}*"):
        stray.unlink(missing_ok=True)
        done.append(f"removed {stray.relative_to(root)}")
    for line in done:
        log.warning("index recovery: %s", line)
    return done


@contextlib.contextmanager
def journal(root: Path, targets: list[tuple[str, str]]) -> Iterator[None]:
    """Record the pages about to change; removed once they have been written."""
    atomic_write_bytes(root / JOURNAL, json.dumps(targets).encode())
    yield
    (root / JOURNAL).unlink()


def write_pages(root: Path, state: IndexState, channel: str, project: str) -> None:
    """Regenerate one project's pages, its channel's list and the root page."""
    wanted = pages.project_pages(state, channel, project) if project in state.channels.get(
        channel, {}) else {}
    wanted.update(pages.channel_pages(state, channel))
    wanted[Path("index.html")] = pages.root_html(sorted(state.channels))
    _write_changed(root, wanted)


def _write_changed(root: Path, wanted: dict[Path, bytes]) -> None:
    for relative, data in wanted.items():
        target = root / relative
        if target.is_file() and target.read_bytes() == data:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(target, data)


def rebuild(root: Path) -> int:
    """Regenerate every page from the ledger; returns how many pages the ledger implies."""
    with locked(root) as state:
        wanted = pages.all_pages(state)
        _write_changed(root, wanted)
        return len(wanted)


@dataclass(slots=True)
class CheckReport:
    files: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def check(root: Path) -> CheckReport:
    """Re-verify every file against the ledger and every page against what it implies."""
    report = CheckReport()
    root.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(root / LOCK):
        report.notes += [f"recovered: {line}" for line in recover(root)]
        state = ledger.read(root)
        for record in state.by_filename.values():
            report.files += 1
            report.problems += _check_file(root, record)
        wanted = pages.all_pages(state)
        for relative, data in sorted(wanted.items()):
            target = root / relative
            if not target.is_file():
                report.problems.append(f"page {relative} is missing (run `wheelsmith index "
                                       "rebuild`)")
            elif target.read_bytes() != data:
                report.problems.append(f"page {relative} differs from the ledger (run "
                                       "`wheelsmith index rebuild`)")
        report.problems += [f"page {p.relative_to(root)} is not implied by the ledger"
                            for p in _page_files(root) if p.relative_to(root) not in wanted]
        known = {root / r.path for r in state.by_filename.values()}
        known |= {p.with_name(p.name + ".metadata") for p in known}
        report.notes += [f"{p.relative_to(root)} is not in the ledger (left by an interrupted "
                         "publish; harmless)" for p in _stored_files(root) if p not in known]
    return report


def _check_file(root: Path, record: ledger.FileRecord) -> list[str]:
    path = root / record.path
    if not path.is_file():
        return [f"{record.path} is missing"]
    problems = []
    if path.stat().st_size != record.size:
        problems.append(f"{record.path}: size {path.stat().st_size}, the ledger says "
                        f"{record.size}")
    if sha256_file(path) != record.sha256:
        problems.append(f"{record.path}: sha256 differs from the ledger (the file was altered)")
    metadata = path.with_name(path.name + ".metadata")
    if not metadata.is_file() or sha256_file(metadata) != record.metadata_sha256:
        problems.append(f"{record.path}.metadata is missing or differs from the ledger")
    return problems


def _page_files(root: Path) -> list[Path]:
    found = list(root.glob("*/simple/index.*")) + list(root.glob("*/simple/*/index.*"))
    return sorted(p for p in found if p.suffix in (".html", ".json"))


def _stored_files(root: Path) -> list[Path]:
    return sorted(p for p in (root / "files").glob("*/*/*") if p.is_file())
