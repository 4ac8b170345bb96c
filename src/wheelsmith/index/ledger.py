"""The index ledger: an append-only JSON-lines record of every published file and every yank.

It is the source of truth: pages are derived from it, `index check` verifies files against it,
and nothing ever rewrites or removes a line. One line is written with one `write` call and
fsynced; a torn last line (a writer killed mid-line) is ignored by readers and cut off by the
next writer under the publish lock.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from wheelsmith.errors import IndexDriftError, UntrustedDataError
from wheelsmith.untrusted import Node, clip, name_problem, parse_json
from wheelsmith.wheelfile import CHANNEL_RE

LEDGER = "ledger.jsonl"
PROJECT_RE = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")  # a normalized name (PEP 503)
SHA256_RE = re.compile(r"[0-9a-f]{64}")


def now() -> str:
    """ISO-8601 UTC with microseconds, as PEP 700 writes `upload-time`."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


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
    by_filename: dict[str, FileRecord] = field(default_factory=dict)

    def project(self, channel: str, project: str) -> ProjectState:
        return self.channels.setdefault(channel, {}).setdefault(project, ProjectState())

    def add(self, record: FileRecord) -> None:
        self.project(record.channel, record.project).files[record.filename] = record
        self.by_filename[record.filename] = record


@dataclass(frozen=True, slots=True)
class Yank:
    """A yank (with its reason) or an unyank (reason None) of a published file."""

    filename: str
    reason: str | None


def parse_line(raw: bytes, where: str) -> FileRecord | Yank:
    """One ledger line, every field checked (the ledger is data others may have written or
    damaged): anything else is one IndexDriftError located at `where` (`ledger.jsonl:N`)."""
    try:
        text = raw.decode()
    except UnicodeDecodeError as exc:
        raise _drift(where, f"not UTF-8 (byte {exc.start + 1})") from None
    try:
        return _entry(parse_json(text, where))
    except UntrustedDataError as exc:
        raise _drift(where, exc.problem) from None


def _entry(node: Node) -> FileRecord | Yank:
    action = node["action"].text()
    if action in ("yank", "unyank"):
        return Yank(node["filename"].name(),
                    node["reason"].text() if action == "yank" else None)
    if action != "publish":
        raise node["action"].fail(f"'{clip(action)}' is not publish, yank or unyank")

    def optional(key: str) -> str | None:
        return node.optional(key, Node.text)

    node["version"].parsed(Version, "a version")  # checked, and kept as it was written
    return FileRecord(
        channel=node["channel"].text(CHANNEL_RE, "a channel name"),
        project=node["project"].text(PROJECT_RE, "a normalized project name"),
        filename=node["filename"].parsed(_wheel_filename, "a wheel's file name"),
        sha256=node["sha256"].text(SHA256_RE, "a sha256"), size=node["size"].integer(),
        upload_time=node["upload_time"].text(),
        metadata_sha256=node["metadata_sha256"].text(SHA256_RE, "a sha256"),
        requires_python=optional("requires_python"),
        version=node["version"].text(),
        key=optional("key"), archs=optional("archs"))


def _wheel_filename(text: str) -> str:
    problem = name_problem(text)
    if problem is not None:
        raise ValueError(problem)
    parse_wheel_filename(text)  # InvalidWheelFilename is a ValueError
    return text


def _drift(where: str, problem: str) -> IndexDriftError:
    return IndexDriftError(
        f"{where}: {problem}",
        hint="only `wheelsmith publish` and `yank` write the ledger: this line was damaged or "
             "written by hand; restore ledger.jsonl from a backup. Nothing in the index was "
             "changed")


def read(root: Path, *, project: str | None = None, filename: str | None = None
         ) -> IndexState:
    """Fold the ledger. With `project`/`filename`, only the lines that mention them are parsed
    (located by substring search, so a publish does not parse the whole ledger). A malformed
    line is an IndexDriftError naming it (`ledger.jsonl:N`)."""
    state = IndexState()
    path = root / LEDGER
    if not path.is_file():
        return state
    data = path.read_bytes()
    needles = [n for n in (_needle("project", project), _needle("filename", filename)) if n]
    for number, line in _lines_with(data, needles) if needles else _numbered(data, 0):
        _apply(state, parse_line(line, f"{path}:{number}"))
    return state


def _numbered(data: bytes, offset: int) -> list[tuple[int, bytes]]:
    """(number, line) of each whole line from byte `offset` (a line start) on; a last line
    without a newline was torn by a dying writer and is left out."""
    first = data.count(b"\n", 0, offset) + 1
    lines = data[offset:].split(b"\n")[:-1]
    return [(first + i, line) for i, line in enumerate(lines)]


def _lines_with(data: bytes, needles: list[bytes]) -> list[tuple[int, bytes]]:
    starts: set[int] = set()
    for needle in needles:
        position = data.find(needle)
        while position != -1:
            starts.add(data.rfind(b"\n", 0, position) + 1)
            position = data.find(needle, position + len(needle))
    lines = []
    for start in sorted(starts):
        end = data.find(b"\n", start)
        if end != -1:  # else torn
            lines.append((data.count(b"\n", 0, start) + 1, data[start:end]))
    return lines


def _needle(key: str, value: str | None) -> bytes | None:
    """The exact text `append` writes for key=value (sorted keys, compact separators)."""
    return None if value is None else \
        json.dumps({key: value}, separators=(",", ":"))[1:-1].encode()


def _apply(state: IndexState, entry: FileRecord | Yank) -> None:
    if isinstance(entry, FileRecord):
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
    """Cut a last line that has no newline (its writer died mid-write). Caller holds the lock."""
    path = root / LEDGER
    if not path.is_file():
        return False
    data = path.read_bytes()
    if not data or data.endswith(b"\n"):
        return False
    with path.open("r+b") as handle:
        handle.truncate(data.rfind(b"\n") + 1)
        os.fsync(handle.fileno())
    return True


def size(root: Path) -> int:
    path = root / LEDGER
    return path.stat().st_size if path.is_file() else 0


def touched_since(root: Path, offset: int) -> list[tuple[str, str]]:
    """(channel, project) pairs whose pages the ledger lines after byte `offset` change (an
    offset inside a line, as a ledger edited by hand leaves it, counts from the start)."""
    path = root / LEDGER
    if not path.is_file():
        return []
    data = path.read_bytes()
    if offset > len(data) or (offset and data[offset - 1:offset] != b"\n"):
        offset = 0
    state = read(root)
    touched: dict[tuple[str, str], None] = {}
    for number, line in _numbered(data, offset):
        entry = parse_line(line, f"{path}:{number}")
        record = state.by_filename.get(entry.filename)
        if record is None:
            continue
        for channel, projects in state.channels.items():
            if record.filename in projects.get(record.project, ProjectState()).files:
                touched[(channel, record.project)] = None
    return list(touched)


def append(root: Path, entry: dict[str, Any]) -> None:
    """Append one line durably. Caller holds the publish lock."""
    line = (json.dumps(entry, sort_keys=True, separators=(",", ":")) + "\n").encode()
    fd = os.open(root / LEDGER, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def publish_entry(record: FileRecord) -> dict[str, Any]:
    return {"action": "publish", **asdict(record)}


def yank_entry(record: FileRecord, reason: str | None) -> dict[str, Any]:
    entry = {"filename": record.filename, "project": record.project, "time": now()}
    if reason is None:
        return {"action": "unyank", **entry}
    return {"action": "yank", "reason": reason, **entry}


def normalize(name: str) -> str:
    return str(canonicalize_name(name))
