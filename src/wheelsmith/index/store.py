"""The index on disk: one lock, recovery from interrupted writers, pages, check and rebuild.

Every writer (publish, yank, rebuild) holds `.publish.lock`. The ledger is the commit point;
pages are regenerated after it. A watermark (`.pages-at`, the ledger size the pages were last
brought up to) tells the next lock holder whether a writer died in between: if the ledger is
longer, the pages of the projects in the lines past the watermark are regenerated (pages are
pure functions of the ledger). A torn ledger line is cut and stray temp files go. Files are
never rewritten or removed.

Every part of the index is opened through untrusted.local (the index may have been prepared
by others): a regular file inside the index and not a link, or one error naming it; what is
read is bounded (a page is never read past the size of the page it is compared with, a file is
hashed only when its size is the ledger's, a sidecar at most MEMBER_MAX_BYTES).
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from wheelsmith.errors import NotRegularFileError, UntrustedDataError, UsageError, in_the_way
from wheelsmith.files import atomic_write_bytes, exclusive_lock, fsync_dir, temp_file_in
from wheelsmith.index import ledger, pages
from wheelsmith.index.ledger import IndexState
from wheelsmith.untrusted import inside, local

log = logging.getLogger(__name__)

LOCK = ".publish.lock"
WATERMARK = ".pages-at"
TMP_DIR = ".tmp"  # every writer's temp files, so recovery need not walk the tree


def tmp_dir(root: Path) -> Path:
    """Every writer's scratch directory (recovery removes what is in it): inside the index,
    never through a link out of it."""
    path = inside(root, TMP_DIR)
    path.mkdir(exist_ok=True)
    return path


@contextlib.contextmanager
def locked(root: Path, **only: str) -> Iterator[IndexState]:
    """Hold the publish lock, recover from any interrupted writer, yield the ledger state
    (only the lines about `project=`/`filename=` when given: O(1) work per publish)."""
    root.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(inside(root, LOCK), follow=False):
        recover(root)
        yield ledger.read(root, **only)


def pages_done(root: Path) -> None:
    """Record that the pages reflect the whole ledger (a hint: no fsync; if it is lost, the
    next writer regenerates a little more than needed)."""
    with temp_file_in(tmp_dir(root)) as tmp:
        tmp.write_text(str(ledger.size(root)))
        tmp.replace(root / WATERMARK)


def _watermark(root: Path) -> int:
    """The watermark: the ledger's size in ASCII digits, as pages_done writes it; 0
    (regenerate every page) when it is anything else (`-5`, `٣`, `1_0`, 32 bytes of text)."""
    try:
        with local.open_regular(inside(root, WATERMARK), follow=False) as handle:
            text = handle.read(32).strip()  # a ledger's size: a few digits
    except OSError:
        return 0
    return int(text) if re.fullmatch(rb"[0-9]{1,20}", text) else 0


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
    for stray in sorted(tmp_dir(root).glob("*")):  # a link among them: the link goes
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


def page_places(root: Path, channel: str, project: str, *, lists: bool) -> None:
    """Check every place `write_pages` would write (check_place), before anything is."""
    for relative in pages.page_paths(channel, project, lists=lists):
        local.check_place(root, relative)


def _write_changed(root: Path, wanted: dict[Path, bytes]) -> None:
    """Write the pages that differ; every place is checked first (nothing is written when
    one is refused), and a page is read only up to its wanted size."""
    places = {relative: local.check_place(root, relative) for relative in wanted}
    changed = [relative for relative, target in places.items()
               if not local.same_bytes(target, wanted[relative], follow=False)]
    for relative in changed:
        places[relative].parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(places[relative], wanted[relative], tmp_dir(root),
                           durable=False)  # pages are derived


def create(root: Path) -> bool:
    """Make `root` an empty index if it does not exist or is an empty directory (the ledger,
    then its pages); False when it is something else (left alone)."""
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        return False
    root.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(inside(root, LOCK), follow=False):
        ledger.at(root).touch()
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
    if (blocked := in_the_way(root)) is not None:
        raise blocked
    if not root.is_dir():
        raise UsageError(f"no index at {root}: nothing to check",
                         hint="pass the directory you publish into (--index DIR)")
    report = CheckReport()
    with exclusive_lock(inside(root, LOCK), follow=False):
        report.notes += [f"recovered: {line}" for line in recover(root)]
        state = ledger.read(root)
        for record in state.by_filename.values():
            report.files += 1
            report.problems += _check_file(root, record)
        # nothing was ever published (a publisher killed while starting): no page is owed
        wanted = pages.all_pages(state) if (root / ledger.LEDGER).exists() else {}
        for relative, data in sorted(wanted.items()):
            report.problems += _check_page(root, relative, data)
        report.problems += [f"page {p.relative_to(root)} is not implied by the ledger"
                            for p in _page_files(root) if p.relative_to(root) not in wanted]
        known = {root / r.path for r in state.by_filename.values()}
        known |= {p.with_name(p.name + ".metadata") for p in known}
        report.notes += [f"{p.relative_to(root)} is not in the ledger (left by an interrupted "
                         "publish; harmless)" for p in _stored_files(root) if p not in known]
    return report


def _check_page(root: Path, relative: Path, data: bytes) -> list[str]:
    problems: list[str] = []
    target = _inside_or(root, relative, problems)
    if target is None:
        return problems
    try:
        same = local.same_bytes(target, data, follow=False)
    except NotRegularFileError as exc:
        return [f"page {relative}: {exc.reason} (move it away, then run `wheelsmith index "
                "rebuild`)"]
    if same is None:
        return [f"page {relative} is missing (run `wheelsmith index rebuild`)"]
    if not same:
        return [f"page {relative} differs from the ledger (run `wheelsmith index rebuild`)"]
    return []


def _inside_or(root: Path, relative: str | Path, problems: list[str]) -> Path | None:
    """`inside(root, relative)`; None, with the problem added, where it leads out (a part of
    the index replaced by a link: nothing is read through it)."""
    try:
        return inside(root, relative)
    except UntrustedDataError as exc:
        problems.append(f"{exc.message}: a link? it is not read")
        return None


def _check_file(root: Path, record: ledger.FileRecord) -> list[str]:
    """The file and its sidecar against the ledger: a file is hashed only when its size is
    the ledger's (another size cannot have its sha256), a sidecar only up to MEMBER_MAX_BYTES
    (publish never stores a larger one)."""
    problems: list[str] = []
    path = _inside_or(root, record.path, problems)
    metadata = _inside_or(root, f"{record.path}.metadata", problems) if path else None
    if path is None or metadata is None:
        return problems
    try:
        size = local.size_of(path, follow=False)
        if size is None:
            return [f"{record.path} is missing"]
        if size != record.size:
            problems.append(f"{record.path}: size {size}, the ledger says {record.size}")
        elif local.sha256_of(path, follow=False) != record.sha256:
            problems.append(f"{record.path}: sha256 differs from the ledger (the file was "
                            "altered)")
    except NotRegularFileError as exc:
        return [f"{record.path}: {exc.reason}"]
    try:
        if local.sha256_at_most(metadata, local.MEMBER_MAX_BYTES, follow=False
                                ) != record.metadata_sha256:
            problems.append(f"{record.path}.metadata differs from the ledger")
    except FileNotFoundError:
        problems.append(f"{record.path}.metadata is missing")
    except NotRegularFileError as exc:
        problems.append(f"{record.path}.metadata: {exc.reason}")
    return problems


def _page_files(root: Path) -> list[Path]:
    found = list(root.glob("*/simple/index.*")) + list(root.glob("*/simple/*/index.*"))
    return sorted(p for p in found if p.suffix in (".html", ".json"))


def _stored_files(root: Path) -> list[Path]:
    try:
        files = inside(root, "files")
    except UntrustedDataError:  # a link out: what is there is not the index's
        return []
    return sorted(p for p in files.glob("*/*/*") if p.is_file())
