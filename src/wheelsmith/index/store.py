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
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from wheelsmith.errors import NotRegularFileError, UntrustedDataError, UsageError, in_the_way
from wheelsmith.files import (
    atomic_write_bytes,
    exclusive_lock,
    fsync_dir,
    shared_lock,
    temp_file_in,
)
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
def locked(root: Path, *, project: str | None = None, filename: str | None = None,
           every_page: bool = False) -> Iterator[IndexState]:
    """Hold the publish lock, recover from any interrupted writer, yield the ledger state
    (only the lines about `project`/`filename` when given: O(1) work per publish).
    `every_page`: the holder writes every page, so recovery writes none."""
    root.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(inside(root, LOCK), follow=False):
        recover(root, pages=not every_page)
        yield ledger.read(root, project=project, filename=filename)


def pages_done(root: Path) -> None:
    """Record that the pages reflect the whole ledger (a hint: no fsync; if it is lost, the
    next writer regenerates a little more than needed)."""
    with temp_file_in(tmp_dir(root)) as tmp:
        tmp.write_text(str(ledger.size(root)))
        tmp.replace(root / WATERMARK)


def _watermark(root: Path) -> int | None:
    """The watermark: the ledger's size in ASCII digits, as pages_done writes it; None (every
    page is to be written again) when there is none or it holds anything else (`-5`, `٣`,
    `1_0`, 32 bytes of text)."""
    try:
        with local.open_regular(inside(root, WATERMARK), follow=False) as handle:
            text = handle.read(32).strip()  # a ledger's size: a few digits
    except OSError:
        return None
    return int(text) if re.fullmatch(rb"[0-9]{1,20}", text) else None


def recover(root: Path, *, pages: bool = True) -> list[str]:
    """Finish what an interrupted writer left (without `pages`, the caller writes every
    page). Caller holds the lock. Returns what was done."""
    done = []
    if ledger.repair_torn_tail(root):
        done.append("cut a torn last ledger line")
    mark, size = _watermark(root) or 0, ledger.size(root)
    if pages and mark != size:
        state = ledger.read(root)
        targets = ledger.touched_since(root, mark if mark < size else 0, state)
        _write_touched(root, state, targets)
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
    wanted = _project_pages(state, channel, project)
    if lists:
        wanted.update(pages.channel_pages(state, channel))
        wanted[Path("index.html")] = pages.root_html(sorted(state.channels))
    _write_changed(root, wanted)


def _write_touched(root: Path, state: IndexState, touched: list[tuple[str, str]]) -> None:
    """Regenerate the pages of every (channel, project) in `touched`, then each of their
    channels' lists once and the root page once (`state`: the whole ledger)."""
    for channel, project in touched:
        _write_changed(root, _project_pages(state, channel, project))
    if touched:
        lists = {path: page for channel in dict.fromkeys(c for c, _ in touched)
                 for path, page in pages.channel_pages(state, channel).items()}
        _write_changed(root, {**lists, Path("index.html"): pages.root_html(
            sorted(state.channels))})


def _project_pages(state: IndexState, channel: str, project: str) -> dict[Path, bytes]:
    """A project's pages; none when the ledger lists no file of it in `channel`."""
    listed = project in state.channels.get(channel, {})
    return pages.project_pages(state, channel, project) if listed else {}


def page_places(root: Path, channel: str, project: str, *, lists: bool) -> None:
    """Check every place `write_pages` would write (check_place), before anything is."""
    for relative in pages.page_paths(channel, project, lists=lists):
        local.check_place(root, relative)


def _write_changed(root: Path, wanted: dict[Path, bytes]) -> None:
    """Write the pages that differ; every place is checked first (nothing is written when
    one is refused), and a page is read only up to its wanted size."""
    places = {relative: local.check_place(root, relative) for relative in wanted}
    for relative, target in places.items():
        _write_page(root, target, wanted[relative])


def _write_page(root: Path, target: Path, data: bytes) -> None:
    """The page at `target` (its place checked) holds `data`: written when it differs."""
    if not local.same_bytes(target, data, follow=False):
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(target, data, tmp_dir(root), durable=False)  # pages are derived


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
    """Regenerate every page from the ledger, one held at a time, after checking every place
    (nothing is written when one is refused); returns how many pages the ledger implies."""
    with locked(root, every_page=True) as state:
        for relative in pages.each_path(state):
            local.check_place(root, relative)
        count = 0
        for relative, data in pages.each_page(state):
            count += 1
            _write_page(root, root / relative, data)
        pages_done(root)
        return count


@dataclass(frozen=True, slots=True)
class CheckReport:
    files: int
    problems: list[str]
    notes: list[str]
    behind: int = 0  # pages an interrupted writer left for the next one (the notes name them)


def check(root: Path) -> CheckReport:
    """Re-verify every file against the ledger and every page against what it implies.
    Nothing is written: what an interrupted writer left (a torn last line, pages behind the
    ledger, partial files) is noted for the next writer or `index rebuild` to finish. Under
    a shared lock (writers wait for it and it for them); one pass over the ledger, one page
    held at a time."""
    if (blocked := in_the_way(root)) is not None:
        raise blocked
    if not root.is_dir():
        raise UsageError(f"no index at {root}: nothing to check",
                         hint="pass the directory you publish into (--index DIR)")
    with shared_lock(inside(root, LOCK), follow=False):
        local.check_place(root, WATERMARK)  # what every writer writes: a FIFO there is named
        notes = _unfinished(root)
        state = ledger.read(root)
        problems = [problem for record in state.by_filename.values()
                    for problem in _check_file(root, record)]
        drifted, behind = _check_pages(root, state)
        notes += sorted(f"{p.relative_to(root)} is not in the ledger (left by an interrupted "
                        "publish; harmless)" for p in _stored_files(root)
                        if not _known(state, p))
    return CheckReport(files=len(state.by_filename), problems=problems + drifted,
                       notes=notes + behind, behind=len(behind))


def _unfinished(root: Path) -> list[str]:
    """What an interrupted writer left that the next one finishes (`recover`), as notes."""
    notes = ["ledger.jsonl ends in a torn line (a writer was interrupted writing it; every "
             "reader leaves it out, the next writer cuts it)"] if ledger.torn_tail(root) else []
    scratch = inside(root, TMP_DIR)
    return notes + [f"{stray.relative_to(root)} is a partial file an interrupted writer left "
                    "(the next writer removes it)" for stray in sorted(scratch.glob("*"))]


def _check_pages(root: Path, state: IndexState) -> tuple[list[str], list[str]]:
    """The problems of the pages (each against the ledger, then those it implies none of),
    and, as notes, the differing pages of the projects the ledger's lines past the watermark
    touched: an interrupted writer's, which the next one writes."""
    if not (root / ledger.LEDGER).exists():  # nothing was ever published: no page is owed
        return [], []
    drifted = [(relative, problem) for relative, data in pages.each_page(state)
               if (problem := _check_page(root, relative, data)) is not None]
    late = _behind(root, state) if drifted else set()
    channels = {channel for channel, _ in late}
    behind = {relative for relative, _ in drifted if _touched(relative, late, channels)}
    problems = [problem for relative, problem in sorted(drifted) if relative not in behind]
    problems += sorted(f"page {p.relative_to(root)} is not implied by the ledger"
                       for p in _page_files(root) if not _implied(state, p.relative_to(root)))
    return problems, [f"page {relative} is behind the ledger: a writer was interrupted before "
                      "it wrote it (the next publish or yank, or `wheelsmith index rebuild`, "
                      "writes it)" for relative in sorted(behind)]


def _behind(root: Path, state: IndexState) -> set[tuple[str, str]]:
    """(channel, project) pairs the ledger's lines past the watermark touched: a writer was
    interrupted after its commit point. None when the watermark is missing or unreadable (a
    page that differs then is drift)."""
    mark = _watermark(root)
    if mark is None or mark >= ledger.size(root):
        return set()
    return set(ledger.touched_since(root, mark, state))


def _touched(relative: Path, late: set[tuple[str, str]], channels: set[str]) -> bool:
    """Whether the page at `relative` is one a writer that touched `late` writes."""
    parts = relative.parts
    if len(parts) == 4:  # <channel>/simple/<project>/index.*
        return (parts[0], parts[2]) in late
    return parts[0] in channels if len(parts) == 3 else bool(late)  # a list; the root page


def _implied(state: IndexState, relative: Path) -> bool:
    """Whether the ledger implies a page at `relative` (<channel>/simple/[<project>/]index.*)."""
    channel, *rest = relative.parts
    return channel in state.channels and (len(rest) == 2 or rest[1] in state.channels[channel])


def _known(state: IndexState, stored: Path) -> bool:
    """Whether `stored` (files/<sha[:2]>/<sha>/<name>) is a file of the ledger or its
    sidecar."""
    record = state.by_filename.get(stored.name.removesuffix(".metadata"))
    return record is not None and stored.parent.name == record.sha256 and \
        stored.parent.parent.name == record.sha256[:2]


def _check_page(root: Path, relative: Path, data: bytes) -> str | None:
    problems: list[str] = []
    target = _inside_or(root, relative, problems)
    if target is None:
        return problems[0]
    try:
        same = local.same_bytes(target, data, follow=False)
    except NotRegularFileError as exc:
        return (f"page {relative}: {exc.reason} (move it away, then run `wheelsmith index "
                "rebuild`)")
    if same is None:
        return f"page {relative} is missing (run `wheelsmith index rebuild`)"
    if not same:
        return f"page {relative} differs from the ledger (run `wheelsmith index rebuild`)"
    return None


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
    if path is None:
        return problems
    metadata = path.with_name(f"{path.name}.metadata")  # beside it, never read through a link
    try:
        with local.open_regular(path, follow=False) as handle:
            size = os.fstat(handle.fileno()).st_size
            if size != record.size:
                problems.append(f"{record.path}: size {size}, the ledger says {record.size}")
            elif local.sha256_read(handle) != record.sha256:
                problems.append(f"{record.path}: sha256 differs from the ledger (the file "
                                "was altered)")
    except FileNotFoundError:
        return [f"{record.path} is missing"]
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


def _page_files(root: Path) -> Iterator[Path]:
    for pattern in ("*/simple/index.*", "*/simple/*/index.*"):
        yield from (p for p in root.glob(pattern) if p.suffix in (".html", ".json"))


def _stored_files(root: Path) -> Iterator[Path]:
    try:
        files = inside(root, "files")
    except UntrustedDataError:  # a link out: what is there is not the index's
        return
    yield from (p for p in files.glob("*/*/*") if p.is_file())
