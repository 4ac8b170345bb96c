"""Where wheelsmith finds its data (recipes, patches, toolchain profiles) and keeps its caches."""

from __future__ import annotations

import os
from pathlib import Path

from wheelsmith.errors import UsageError

_DATA_DIRS = ("recipes", "toolchains")


def _is_project(path: Path) -> bool:
    return all((path / d).is_dir() for d in _DATA_DIRS)


def project_root() -> Path:
    """The directory holding recipes/, patches/ and toolchains/.

    Order: $WHEELSMITH_HOME, the current directory or one of its parents, then the checkout
    this package was installed from (editable installs).
    """
    env = os.environ.get("WHEELSMITH_HOME")
    if env:
        root = Path(env).resolve()
        if not _is_project(root):
            raise UsageError(f"WHEELSMITH_HOME={env} has no recipes/ and toolchains/ directories")
        return root
    cwd = Path.cwd().resolve()
    for candidate in (cwd, *cwd.parents):
        if _is_project(candidate):
            return candidate
    checkout = Path(__file__).resolve().parents[2]
    if _is_project(checkout):
        return checkout
    raise UsageError(
        "cannot find recipes/ and toolchains/ directories",
        hint="run wheelsmith inside a wheelsmith checkout or set WHEELSMITH_HOME",
    )


def cache_dir() -> Path:
    """$WHEELSMITH_CACHE, else $XDG_CACHE_HOME/wheelsmith, else ~/.cache/wheelsmith."""
    env = os.environ.get("WHEELSMITH_CACHE")
    if env:
        return Path(env).resolve()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return (base / "wheelsmith").resolve()
