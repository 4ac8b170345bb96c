"""The toolchain venvs in the cache, as they are on disk: each one's profile, Python, pin key,
size and standing (the profile's current venv, one of pins no profile has now, or a creation
that never finished), and their removal.

A venv in use is never removed: every process that builds with a venv holds a shared lock on
its lock file (venv.hold) until it exits, and removal takes that lock exclusively without
waiting.
A venv made under an older key with the same pins is a link to the first (venv.py): its size
is counted once, and removing the first removes its links.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import logging
import os
import re
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from wheelsmith.errors import ToolchainError
from wheelsmith.toolchain.profile import Profile
from wheelsmith.toolchain.venv import MARKER, lock_path
from wheelsmith.untrusted import local

log = logging.getLogger(__name__)

_NAME = re.compile(r"(?P<profile>.+)-py(?P<python>\d+\.\d+)-(?P<key>[0-9a-f]{16})")
_BESIDE = (".lock", ".log", ".requirements.txt")  # files venv.py keeps beside a venv


@dataclass(frozen=True, slots=True)
class CachedVenv:
    path: Path
    profile: str
    python: str
    key: str
    size: int  # bytes on disk (0 for a link to another venv)
    standing: str  # current | stale (no profile has these pins now) | unfinished
    link_to: str | None = None  # the venv this one is a link to

    def as_dict(self) -> dict[str, object]:
        return {"path": str(self.path), "profile": self.profile, "python": self.python,
                "key": self.key, "size_bytes": self.size, "standing": self.standing,
                "link_to": self.link_to}


def root(cache: Path) -> Path:
    return cache / "toolchains"


def cached(cache: Path, profiles: Sequence[Profile]) -> list[CachedVenv]:
    """Every venv under the cache's toolchains/, sorted by name. A venv of an older key that a
    current one links to is current too."""
    where = root(cache)
    if not where.is_dir():
        return []
    keys = {p.name: p for p in profiles}
    found = []
    for entry in sorted(where.iterdir()):
        named = _NAME.fullmatch(entry.name)
        if named is None or not (entry.is_dir() or entry.is_symlink()):
            continue
        link = entry.readlink().name if entry.is_symlink() else None
        profile = keys.get(named["profile"])
        if not (entry / MARKER).is_file():
            standing = "unfinished"
        elif profile is not None and profile.key(named["python"]) == named["key"]:
            standing = "current"
        else:
            standing = "stale"
        found.append(CachedVenv(entry, named["profile"], named["python"], named["key"],
                                0 if link else tree_size(entry), standing, link))
    linked = {v.link_to for v in found if v.standing == "current" and v.link_to}
    return [dataclasses.replace(v, standing="current") if v.path.name in linked else v
            for v in found]


def tree_size(path: Path) -> int:
    """Bytes on disk under `path` (links not followed, hard links counted once)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for directory, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                stat = (Path(directory) / name).lstat()
                if (stat.st_dev, stat.st_ino) not in seen:
                    seen.add((stat.st_dev, stat.st_ino))
                    total += stat.st_blocks * 512
    return total


def remove(venv: CachedVenv, everything: Sequence[CachedVenv]) -> list[Path]:
    """Remove `venv`, the links to it and the files beside them; returns what was removed. A
    venv a process builds with (or is creating) is refused, naming it."""
    with local.open_regular(lock_path(venv.path), "lock") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ToolchainError(
                f"{venv.path} is in use: a build, or its creation, holds it",
                hint="remove it once that build has ended") from None
        links = [v for v in everything if v.link_to == venv.path.name]
        removed = [*(_unlink(v.path) for v in links), _unlink(venv.path)]
    for path in removed:
        for suffix in _BESIDE:
            with contextlib.suppress(FileNotFoundError):
                (path.parent / f"{path.name}{suffix}").unlink()
    return removed


def _unlink(path: Path) -> Path:
    """A link is unlinked; a venv is renamed aside first, so that no half-removed venv is ever
    taken for one (its marker goes with it), then deleted."""
    if path.is_symlink():
        path.unlink()
        return path
    aside = path.with_name(f".removing-{path.name}")
    path.rename(aside)
    shutil.rmtree(aside)
    return path


def removable(venvs: Sequence[CachedVenv]) -> Iterator[CachedVenv]:
    """What `prune` removes: stale and unfinished venvs, and links to them."""
    gone = {v.path.name for v in venvs if v.standing != "current"}
    for venv in venvs:
        if venv.path.name in gone or (venv.link_to is not None and venv.link_to in gone):
            yield venv


def human(size: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"
