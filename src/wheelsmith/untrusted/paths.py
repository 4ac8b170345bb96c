"""A path taken from data, joined to its root only after checking it stays there."""

from __future__ import annotations

import os
import stat
from pathlib import Path, PurePath

from wheelsmith.errors import UntrustedDataError


def inside(root: Path, relative: str | Path) -> Path:
    """`root / relative`, after checking that it resolves inside `root` (links included)."""
    base = root.resolve()
    try:
        ok = _stays_in(base, PurePath(relative).parts)
    except (RuntimeError, OSError):  # a loop of links
        ok = False
    if not ok:
        raise UntrustedDataError(str(relative), f"leads outside {root}",
                                 hint="a path taken from data never leaves its root: the data "
                                      "is damaged or hostile; nothing was read or written there")
    return root / relative


def _stays_in(base: Path, parts: tuple[str, ...]) -> bool:
    """Whether `base` joined with `parts` resolves inside `base` (resolved): when every part
    is a plain name, each is looked at (lstat) until one is a link, from where the rest is
    resolved whole, or one is not there (no link lies past it, nor a `..`); any other path
    is resolved whole."""
    if any(part in ("", ".", "..") or "/" in part for part in parts):
        return (base / PurePath(*parts)).resolve().is_relative_to(base)
    current = str(base)
    for at, part in enumerate(parts):
        current = f"{current.rstrip('/')}/{part}"
        try:
            if stat.S_ISLNK(os.lstat(current).st_mode):
                return Path(current, *parts[at + 1:]).resolve().is_relative_to(base)
        except (FileNotFoundError, NotADirectoryError):
            return True
    return True
