"""Where wheelsmith finds its data and keeps its caches.

The data root holds toolchains/, the built-in recipes/ and patches/, known-bad.yaml,
matrix.yaml, the Dockerfile and images.lock: $WHEELSMITH_HOME, else a wheelsmith checkout (the
current directory or one of its parents, then the checkout this package runs from), else the
copy inside the installed package (`wheelsmith/data`, put there when the wheel is built). User
recipe repositories layer on top of its recipes (`repos.py`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from wheelsmith.errors import UsageError

PACKAGED = Path(__file__).resolve().parent / "data"  # the data a built wheel ships
# scripts run by other Pythons (the probe, the smoke check, the fast-path ops): stdlib only
RESOURCES = Path(__file__).resolve().parent / "resources"


@dataclass(frozen=True, slots=True)
class DataRoot:
    path: Path
    origin: str  # "WHEELSMITH_HOME", "checkout" or "package"

    @property
    def packaged(self) -> bool:
        """The copy inside an installed package (read-only data: nothing is written there)."""
        return self.origin == "package"


def _is_checkout(path: Path) -> bool:
    return (path / "recipes").is_dir() and (path / "toolchains").is_dir()


def data_root() -> DataRoot:
    """The data root: $WHEELSMITH_HOME, a checkout around the current directory, the checkout
    this package runs from (editable installs), else the data inside the package."""
    env = os.environ.get("WHEELSMITH_HOME")
    if env:
        root = Path(env).resolve()
        if not (root / "toolchains").is_dir():
            raise UsageError(f"WHEELSMITH_HOME={env} has no toolchains/ directory",
                             hint="point it at a wheelsmith checkout, or unset it to use the "
                                  "data installed with wheelsmith")
        return DataRoot(root, "WHEELSMITH_HOME")
    cwd = Path.cwd().resolve()
    for candidate in (cwd, *cwd.parents, Path(__file__).resolve().parents[2]):
        if _is_checkout(candidate):
            return DataRoot(candidate, "checkout")
    if (PACKAGED / "toolchains").is_dir():
        return DataRoot(PACKAGED, "package")
    raise UsageError(
        "cannot find wheelsmith's data (toolchains/): this installation has none",
        hint="reinstall wheelsmith from its wheel or a checkout (pipx install PATH), or set "
             "WHEELSMITH_HOME to a wheelsmith checkout",
    )


def project_root() -> Path:
    """The data root's directory (see `data_root`)."""
    return data_root().path


def profile_dirs() -> tuple[Path, ...]:
    """Where toolchain profiles are read, first match wins: the data root's toolchains/; where
    that is the installed package's read-only copy, the user's own profiles (written there by
    `toolchain new`) come first."""
    root = data_root()
    own = root.path / "toolchains"
    return (user_profiles(), own) if root.packaged else (own,)


def new_profile_dir() -> Path:
    """Where `toolchain new` writes: the data root's toolchains/, or the user's own profiles
    when the data root is the installed package (never into site-packages)."""
    root = data_root()
    return user_profiles() if root.packaged else root.path / "toolchains"


def user_profiles() -> Path:
    return config_dir() / "toolchains"


def cache_dir() -> Path:
    """$WHEELSMITH_CACHE, else $XDG_CACHE_HOME/wheelsmith, else ~/.cache/wheelsmith."""
    env = os.environ.get("WHEELSMITH_CACHE")
    if env:
        return Path(env).resolve()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return (base / "wheelsmith").resolve()


def config_dir() -> Path:
    """$XDG_CONFIG_HOME/wheelsmith, else ~/.config/wheelsmith: what an installed wheelsmith
    writes that a checkout keeps in its own tree (the base image pins)."""
    xdg = os.environ.get("XDG_CONFIG_HOME")
    base = Path(xdg) if xdg else Path.home() / ".config"
    return (base / "wheelsmith").resolve()
