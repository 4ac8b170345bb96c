"""The index on disk: one lock, recovery from interrupted writers, pages, check and rebuild.

Every writer (publish, yank, rebuild) holds `.publish.lock`. The ledger is the commit point;
pages are regenerated after it. A watermark (`.pages-at`, the ledger size the pages were last
brought up to) tells the next lock holder whether a writer died in between: if the ledger is
longer, the pages of the projects in the lines past the watermark are regenerated (pages are
pure functions of the ledger). A torn ledger line is cut and stray temp files go. Files are
never rewritten or removed.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from wheelsmith.errors import UntrustedDataError, UsageError
from wheelsmith.files import (
    atomic_write_bytes,
    exclusive_lock,
    fsync_dir,
    sha256_file,
    temp_file_in,
)
from wheelsmith.index import ledger, pages
from wheelsmith.index.ledger import IndexState
from wheelsmith.untrusted import inside

log = logging.getLogger(__name__)

LOCK = ".publish.lock"
WATERMARK = ".pages-at"
TMP_DIR = ".tmp"  # every writer's temp files, so recovery need not walk the tree


def tmp_dir(root: Path) -> Path:
    path = root / TMP_DIR
    path.mkdir(exist_ok=True)
    return path


@contextlib.contextmanager
def locked(root: Path, **only: str) -> Iterator[IndexState]:
    """Hold the publish lock, recover from any interrupted writer, yield the ledger state
    (only the lines about `project=`/`filename=` when given: O(1) work per publish)."""
    root.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(root / LOCK):
        recover(root)
        yield ledger.read(root, **only)


def pages_done(root: Path) -> None:
    """Record that the pages reflect the whole ledger (a hint: no fsync; if it is lost, the
    next writer regenerates a little more than needed)."""
    with temp_file_in(tmp_dir(root)) as tmp:
        tmp.write_text(str(ledger.size(root)))
        tmp.replace(root / WATERMARK)


def _watermark(root: Path) -> int:
    try:
        return int((root / WATERMARK).read_text())
    except (OSError, ValueError):
        return 0


def recover(root: Path) -> list[str]:
    """Finish what an interrupted writer left. Caller holds the lock. Returns what was done."""
    done = []
    if ledger.repair_torn_tail(root):
        done.append("cut a torn last ledger line")
    mark, size = _watermark(root), ledger.size(root)
    if mark != size:
        targets = ledger.touched_since(root, mark if mark < size else 0)
        state = ledger.read(root)
        for channel, project in targets:
            write_pages(root, state, channel, project)
        pages_done(root)
        if targets:
            done.append(f"regenerated pages the last writer did not finish: {targets}")
    for stray in sorted((root / TMP_DIR).glob("*")):
        stray.unlink(missing_ok=True)
        done.append(f"removed the partial file {stray.relative_to(root)}")
    for line in done:
        log.warning("index recovery: %s", line)
    return done


def write_pages(root: Path, state: IndexState, channel: str, project: str, *,
                lists: bool = True) -> None:
    """Regenerate one project's pages and, with `lists`, its channel's list and the root page
    (which need the whole ledger in `state`; a project's pages need only its own lines)."""
    wanted = pages.project_pages(state, channel, project) if project in state.channels.get(
        channel, {}) else {}
    if lists:
        wanted.update(pages.channel_pages(state, channel))
        wanted[Path("index.html")] = pages.root_html(sorted(state.channels))
    _write_changed(root, wanted)


def _write_changed(root: Path, wanted: dict[Path, bytes]) -> None:
    for relative, data in wanted.items():
        target = inside(root, relative)
        if target.is_file() and target.read_bytes() == data:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(target, data, tmp_dir(root), durable=False)  # pages are derived


def create(root: Path) -> bool:
    """Make `root` an empty index if it does not exist or is an empty directory (the ledger,
    then its pages); False when it is something else (left alone)."""
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        return False
    root.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(root / LOCK):
        (root / ledger.LEDGER).touch()
        fsync_dir(root)
    rebuild(root)
    return True


def rebuild(root: Path) -> int:
    """Regenerate every page from the ledger; returns how many pages the ledger implies."""
    with locked(root) as state:
        wanted = pages.all_pages(state)
        _write_changed(root, wanted)
        pages_done(root)
        return len(wanted)


@dataclass(slots=True)
class CheckReport:
    files: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def check(root: Path) -> CheckReport:
    """Re-verify every file against the ledger and every page against what it implies."""
    if not root.is_dir():
        raise UsageError(f"no index at {root}: nothing to check",
                         hint="pass the directory you publish into (--index DIR)")
    report = CheckReport()
    with exclusive_lock(root / LOCK):
        report.notes += [f"recovered: {line}" for line in recover(root)]
        state = ledger.read(root)
        for record in state.by_filename.values():
            report.files += 1
            report.problems += _check_file(root, record)
        # nothing was ever published (a publisher killed while starting): no page is owed
        wanted = pages.all_pages(state) if (root / ledger.LEDGER).exists() else {}
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
    try:
        path = inside(root, record.path)
    except UntrustedDataError as exc:  # a directory of the index replaced by a link
        return [f"{exc.message}: a link? it is not hashed"]
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
