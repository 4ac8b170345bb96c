"""The index ledger: an append-only JSON-lines record of every published file and every yank.

It is the source of truth: pages are derived from it, `index check` verifies files against it,
and nothing ever rewrites or removes a line. One line is written with one `write` call and
fsynced; a torn last line (a writer killed mid-line) is ignored by readers and cut off by the
next writer under the publish lock.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

LEDGER = "ledger.jsonl"


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


def read(root: Path, *, project: str | None = None, filename: str | None = None
         ) -> IndexState:
    """Fold the ledger. With `project`/`filename`, only the lines that mention them are parsed
    (located by substring search, so a publish does not parse the whole ledger)."""
    state = IndexState()
    path = root / LEDGER
    if not path.is_file():
        return state
    text = path.read_text(encoding="utf-8")
    needles = [n for n in (_needle("project", project), _needle("filename", filename)) if n]
    for line in _lines_with(text, needles) if needles else text.splitlines(keepends=True):
        if line.endswith("\n"):  # a line without one was torn by a dying writer
            _apply(state, json.loads(line))
    return state


def _lines_with(text: str, needles: list[str]) -> list[str]:
    starts: set[int] = set()
    for needle in needles:
        position = text.find(needle)
        while position != -1:
            starts.add(text.rfind("\n", 0, position) + 1)
            position = text.find(needle, position + len(needle))
    lines = []
    for start in sorted(starts):
        end = text.find("\n", start)
        lines.append(text[start:] if end == -1 else text[start:end + 1])
    return lines


def _needle(key: str, value: str | None) -> str | None:
    """The exact text `append` writes for key=value (sorted keys, compact separators)."""
    return None if value is None else json.dumps({key: value}, separators=(",", ":"))[1:-1]


def _apply(state: IndexState, entry: dict[str, Any]) -> None:
    action = entry.pop("action")
    if action == "publish":
        state.add(FileRecord(**entry))
        return
    record = state.by_filename.get(entry["filename"])
    if record is None:
        return  # a yank of a file outside a filtered read
    yanked = state.project(record.channel, record.project).yanked
    if action == "yank":
        yanked[record.filename] = entry["reason"]
    elif action == "unyank":
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
    """(channel, project) pairs whose pages the ledger lines after byte `offset` change."""
    path = root / LEDGER
    if not path.is_file():
        return []
    with path.open("rb") as handle:
        handle.seek(offset)
        tail = handle.read().decode()
    state = read(root)
    touched: dict[tuple[str, str], None] = {}
    for line in tail.splitlines():
        entry = json.loads(line)
        record = state.by_filename.get(entry["filename"])
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
