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


def read(root: Path) -> IndexState:
    state = IndexState()
    path = root / LEDGER
    if not path.is_file():
        return state
    for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
        if line.endswith("\n"):
            _apply(state, json.loads(line))
    return state


def _apply(state: IndexState, entry: dict[str, Any]) -> None:
    action = entry.pop("action")
    if action == "publish":
        record = FileRecord(**entry)
        state.project(record.channel, record.project).files[record.filename] = record
        state.by_filename[record.filename] = record
        return
    record = state.by_filename[entry["filename"]]
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


def yank_entry(filename: str, reason: str | None) -> dict[str, Any]:
    if reason is None:
        return {"action": "unyank", "filename": filename, "time": now()}
    return {"action": "yank", "filename": filename, "reason": reason, "time": now()}


def normalize(name: str) -> str:
    return str(canonicalize_name(name))
