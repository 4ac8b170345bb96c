"""The index ledger: an append-only JSON-lines record of every published file and every yank.

It is the source of truth: pages are derived from it, `index check` verifies files against it,
and nothing ever rewrites or removes a line. One line is written with one `write` call and
fsynced; a torn last line (a writer killed mid-line) is ignored by readers and cut off by the
next writer under the publish lock.

It is data others may have written: it is opened only as a regular file (untrusted.local: a
FIFO, a device or a directory there is refused, never read as an empty ledger), read as a
stream of lines of at most MAX_LINE bytes (never whole), and every field of every line is
checked by type and form (`_entry`), by the same code that checks a line before publish writes
it (`check_entry`).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from sys import intern
from typing import Any, BinaryIO

from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from wheelsmith.errors import IndexDriftError, UntrustedDataError
from wheelsmith.untrusted import (
    CHUNK,
    Node,
    channel_name,
    clip,
    describe_size,
    inside,
    local,
    name_problem,
    parse_json,
)
from wheelsmith.untrusted.provenance import check_summary

LEDGER = "ledger.jsonl"
MAX_LINE = 64 << 10  # bytes in one line: publish writes a few hundred (a file name: <= 255)
PROJECT_RE = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")  # a normalized name (PEP 503)
SHA256_RE = re.compile(r"[0-9a-f]{64}")
TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"  # what `now` writes
TIME_RE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z")
KEY_RE = re.compile(r"[0-9A-Za-z]{1,128}")  # a content key (sha256 hex, as builder/plan.py makes)
ARCHS_RE = re.compile(r"[0-9A-Za-z.;,+ ]{0,200}")  # an arch set as --arch takes it
MAX_SIZE = (1 << 63) - 1


def at(root: Path) -> Path:
    """The ledger of the index at `root`: its file there, never one a link there leads to (it
    is read, appended to and cut)."""
    return inside(root, LEDGER)


def now() -> str:
    """ISO-8601 UTC with microseconds, as PEP 700 writes `upload-time`."""
    return datetime.now(timezone.utc).strftime(TIME_FORMAT)


@dataclass(frozen=True, kw_only=True, slots=True)
class FileRecord:
    """One published file."""

    channel: str
    project: str  # normalized name
    filename: str
    sha256: str
    size: int
    upload_time: str
    metadata_sha256: str
    requires_python: str | None
    version: str
    key: str | None = None  # the wheelsmith content key, when the wheel has provenance
    archs: str | None = None  # the arch set it was built for, when the wheel has provenance
    binaries: dict[str, Any] | None = None  # its binary audit's summary (provenance.py)

    @property
    def path(self) -> str:
        """Where the file lives under the index root (content-addressed)."""
        return f"files/{self.sha256[:2]}/{self.sha256}/{self.filename}"


@dataclass(slots=True)
class ProjectState:
    files: dict[str, FileRecord] = field(default_factory=dict)  # by filename, publish order
    yanked: dict[str, str] = field(default_factory=dict)  # filename -> reason


@dataclass(slots=True)
class IndexState:
    """The ledger folded: channel -> project -> files and yanks."""

    channels: dict[str, dict[str, ProjectState]] = field(default_factory=dict)
    by_filename: dict[str, FileRecord] = field(default_factory=dict)  # its latest publish
    # a file published in more than one channel: the channels besides its latest publish's
    elsewhere: dict[str, dict[str, None]] = field(default_factory=dict)  # (an ordered set)

    def project(self, channel: str, project: str) -> ProjectState:
        return self.channels.setdefault(channel, {}).setdefault(project, ProjectState())

    def add(self, record: FileRecord) -> None:
        self.project(record.channel, record.project).files[record.filename] = record
        earlier = self.by_filename.get(record.filename)
        if earlier is not None and earlier.channel != record.channel:
            others = self.elsewhere.setdefault(record.filename, {})
            others[earlier.channel] = None
            others.pop(record.channel, None)
        self.by_filename[record.filename] = record

    def channels_of(self, filename: str) -> list[str]:
        """Every channel that lists `filename` (none when it was never published)."""
        record = self.by_filename.get(filename)
        return [] if record is None else [record.channel, *self.elsewhere.get(filename, ())]


@dataclass(frozen=True, slots=True)
class Yank:
    """A yank (with its reason) or an unyank (reason None) of a published file."""

    filename: str
    reason: str | None


def parse_line(raw: bytes, where: str) -> FileRecord | Yank:
    """One ledger line, every field checked (the ledger is data others may have written or
    damaged): anything else is one IndexDriftError located at `where` (`ledger.jsonl:N`)."""
    try:
        return _entry(parse_json(raw, where))
    except UntrustedDataError as exc:
        raise _drift(where, exc.problem) from None


def check_entry(entry: dict[str, Any], source: str) -> bytes:
    """The line `entry` makes, read back as the ledger's readers read it (its length, then
    every field) before it is written: what they would refuse is one UntrustedDataError naming
    `source` (a wheel, an option), and nothing is written. Every writer writes through here
    (`append`): a line no reader takes would stop every later command at it."""
    line = json.dumps(entry, sort_keys=True, separators=(",", ":")).encode()
    if len(line) > MAX_LINE:
        raise UntrustedDataError(source, f"its ledger line would be {len(line)} bytes, longer "
                                         f"than the {describe_size(MAX_LINE)} a line may hold")
    _entry(parse_json(line, source))
    return line + b"\n"


def _entry(node: Node) -> FileRecord | Yank:
    """Every field the pages, publish's rules and nightly use, by type and form: what pip and
    uv parse from a page (a version, a specifier, an ISO 8601 time, a file name that is a
    wheel's of this project and version) is parsed here first."""
    action = node["action"].text()
    if action in ("yank", "unyank"):
        return Yank(node["filename"].name(),
                    node["reason"].text() if action == "yank" else None)
    if action != "publish":
        raise node["action"].fail(f"'{clip(action)}' is not publish, yank or unyank")
    project = node["project"].text(PROJECT_RE, "a normalized project name")
    version = node["version"].parsed(Version, "a version")
    filename, name, filed = node["filename"].parsed(_wheel_filename, "a wheel's file name")
    if (name, filed) != (project, version):
        raise node["filename"].fail(f"'{clip(filename)}' is not a file of {project} "
                                    f"{clip(str(version))}, as the line's project and "
                                    "version say")
    size = node["size"].integer()
    if size > MAX_SIZE:
        raise node["size"].fail(f"{size} is not the size of a file")
    return FileRecord(  # the values many lines share are held once (sys.intern)
        channel=intern(node["channel"].parsed(channel_name, "a channel name")),
        project=intern(project), filename=filename,
        sha256=node["sha256"].text(SHA256_RE, "a sha256"), size=size,
        upload_time=node["upload_time"].parsed(_upload_time, "a UTC time as publish writes "
                                               "it (YYYY-MM-DDTHH:MM:SS.ffffffZ)"),
        metadata_sha256=node["metadata_sha256"].text(SHA256_RE, "a sha256"),
        requires_python=node.optional("requires_python", lambda n: intern(n.parsed(
            _specifier, "a version specifier (Requires-Python)"))),
        version=intern(node["version"].text()),  # checked above, kept as it was written
        key=node.optional("key", lambda n: n.text(KEY_RE, "a content key")),
        archs=node.optional("archs", lambda n: intern(n.text(ARCHS_RE, "an arch set"))),
        binaries=node.optional("binaries", check_summary))


def _upload_time(text: str) -> str:
    if not (text.isascii() and TIME_RE.fullmatch(text)):
        raise ValueError(text)
    datetime.fromisoformat(text[:-1])  # the form TIME_FORMAT writes; a month 13: ValueError
    return text


@functools.lru_cache(maxsize=64)  # a few Requires-Python values, on many lines
def _specifier(text: str) -> str:
    SpecifierSet(text)  # InvalidSpecifier is a ValueError
    return text


def _wheel_filename(text: str) -> tuple[str, str, Version]:
    """`text`, the project and the version it names (a plain name that is a wheel's)."""
    problem = name_problem(text)
    if problem is not None:
        raise ValueError(problem)
    name, version = parse_wheel_filename(text)[:2]  # InvalidWheelFilename is a ValueError
    return text, name, version


def _drift(where: str, problem: str) -> IndexDriftError:
    return IndexDriftError(
        f"{where}: {problem}",
        hint="only `wheelsmith publish` and `yank` write the ledger: this line was damaged or "
             "written by hand; restore ledger.jsonl from a backup. Nothing in the index was "
             "changed")


def read(root: Path, *, project: str | None = None, filename: str | None = None
         ) -> IndexState:
    """Fold the ledger (none yet: an empty state). With `project`/`filename`, only the lines
    that mention them are parsed (found by substring search, so a publish does not parse the
    whole ledger). A malformed line is an IndexDriftError naming it (`ledger.jsonl:N`)."""
    state = IndexState()
    needles = [n for n in (_needle("project", project), _needle("filename", filename)) if n]
    with contextlib.ExitStack() as stack:
        path, handle = _opened(stack, root)
        if handle is None:
            return state
        for number, line in _lines(handle, path):
            if not needles or any(needle in line for needle in needles):
                _apply(state, parse_line(line, f"{path}:{number}"), f"{path}:{number}")
    return state


def _opened(stack: contextlib.ExitStack, root: Path, mode: local.Mode = "read"
            ) -> tuple[Path, BinaryIO | None]:
    """The ledger's path and, unless there is none, its file open (untrusted.local: a
    regular file, not through a link)."""
    path = at(root)
    try:
        return path, stack.enter_context(local.open_regular(path, mode, follow=False))
    except FileNotFoundError:
        return path, None


def _lines(handle: BinaryIO, path: Path, first: int = 1) -> Iterator[tuple[int, bytes]]:
    """(number, line) of each whole line from where `handle` is (line `first`), read in
    pieces; a last line without a newline was torn by a dying writer and is left out. A line
    longer than MAX_LINE: an IndexDriftError naming it (a file of zeros is not read whole)."""
    number, pending = first, b""
    while chunk := handle.read(CHUNK):
        *whole, pending = (pending + chunk).split(b"\n")
        for line in whole:
            if len(line) > MAX_LINE:
                raise _too_long(f"{path}:{number}")
            yield number, line
            number += 1
        if len(pending) > MAX_LINE:
            raise _too_long(f"{path}:{number}")


def _too_long(where: str) -> IndexDriftError:
    return _drift(where, f"a line longer than {describe_size(MAX_LINE)} (publish writes a few "
                         "hundred bytes)")


def _needle(key: str, value: str | None) -> bytes | None:
    """The exact text `append` writes for key=value (sorted keys, compact separators)."""
    return None if value is None else \
        json.dumps({key: value}, separators=(",", ":"))[1:-1].encode()


def _apply(state: IndexState, entry: FileRecord | Yank, where: str) -> None:
    if isinstance(entry, FileRecord):
        earlier = state.by_filename.get(entry.filename)
        if earlier is not None and earlier.sha256 != entry.sha256:  # publish refuses it
            raise _drift(where, f"publishes {entry.filename} again with sha256 "
                                f"{entry.sha256}; an earlier line gave it {earlier.sha256} "
                                "(a file name has one content in the whole index)")
        state.add(entry)
        return
    record = state.by_filename.get(entry.filename)
    if record is None:
        return  # a yank of a file outside a filtered read
    yanked = state.project(record.channel, record.project).yanked
    if entry.reason is not None:
        yanked[record.filename] = entry.reason
    else:
        yanked.pop(record.filename, None)


def repair_torn_tail(root: Path) -> bool:
    """Cut a last line that has no newline (its writer died mid-write). Caller holds the lock.
    Only the last MAX_LINE bytes are read: an end without a newline in them is no torn line
    but damage (an IndexDriftError), and nothing is cut."""
    with contextlib.ExitStack() as stack:
        path, handle = _opened(stack, root, "update")
        cut = None if handle is None else _torn_at(handle.fileno(), path)
        if handle is None or cut is None:
            return False
        handle.truncate(cut)
        os.fsync(handle.fileno())
    return True


def torn_tail(root: Path) -> bool:
    """Whether the ledger ends in a torn line (`repair_torn_tail` would cut it); nothing is
    written."""
    with contextlib.ExitStack() as stack:
        path, handle = _opened(stack, root)
        return handle is not None and _torn_at(handle.fileno(), path) is not None


def _torn_at(fd: int, path: Path) -> int | None:
    """Where a torn last line starts (None: the ledger ends in a newline, or is empty)."""
    size = os.fstat(fd).st_size
    start = max(0, size - MAX_LINE - 1)
    tail = os.pread(fd, size - start, start)
    if not tail or tail.endswith(b"\n"):
        return None
    cut = tail.rfind(b"\n")
    if cut == -1 and start > 0:
        raise _drift(str(path), f"it ends in a line longer than {describe_size(MAX_LINE)}: "
                                "damage, not a line a dying writer tore")
    return start + cut + 1


def size(root: Path) -> int:
    return local.size_of(at(root), follow=False) or 0


def touched_since(root: Path, offset: int, state: IndexState) -> list[tuple[str, str]]:
    """(channel, project) pairs whose pages the ledger lines after byte `offset` change (an
    offset inside a line, as a ledger edited by hand leaves it, counts from the start);
    `state`: the whole ledger folded. Each file's channels are looked up once."""
    with contextlib.ExitStack() as stack:
        path, handle = _opened(stack, root)
        if handle is None:
            return []
        fd = handle.fileno()
        if offset > os.fstat(fd).st_size or (offset and os.pread(fd, 1, offset - 1) != b"\n"):
            offset = 0
        first = sum(os.pread(fd, min(CHUNK, offset - at_), at_).count(b"\n")
                    for at_ in range(0, offset, CHUNK)) + 1
        handle.seek(offset)
        touched: dict[tuple[str, str], None] = {}
        seen: set[str] = set()  # each file's channels once, however many lines name it
        for number, line in _lines(handle, path, first):
            name = parse_line(line, f"{path}:{number}").filename
            if name not in seen and (record := state.by_filename.get(name)) is not None:
                seen.add(name)
                touched.update(dict.fromkeys((c, record.project)
                                             for c in state.channels_of(name)))
    return list(touched)


def append(root: Path, entry: dict[str, Any], source: str) -> None:
    """Append one line durably, with one write(2), once `check_entry` takes it (`source`
    names what it comes from). Caller holds the publish lock."""
    line = check_entry(entry, source)
    with local.open_regular(at(root), "append", follow=False) as handle:
        os.write(handle.fileno(), line)
        os.fsync(handle.fileno())


def publish_entry(record: FileRecord) -> dict[str, Any]:
    """A publish line: the record's fields, `binaries` only where the wheel has them."""
    fields = asdict(record)
    if fields["binaries"] is None:
        del fields["binaries"]
    return {"action": "publish", **fields}


def yank_entry(record: FileRecord, reason: str | None) -> dict[str, Any]:
    entry = {"filename": record.filename, "project": record.project, "time": now()}
    if reason is None:
        return {"action": "unyank", **entry}
    return {"action": "yank", "reason": reason, **entry}


def normalize(name: str) -> str:
    return str(canonicalize_name(name))
