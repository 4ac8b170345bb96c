"""The tools that read built wheels (cuobjdump, auditwheel): the toolchain's own, an
installed toolkit's, else a profile's small tools venv (installed from PyPI on first use, no
torch in it)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from wheelsmith import inventory, locations
from wheelsmith.errors import ToolchainError
from wheelsmith.files import atomic_write_text, exclusive_lock
from wheelsmith.toolchain.env import Toolchain, find_cuobjdump, system_cuobjdump
from wheelsmith.toolchain.profile import SYSTEM, Profile
from wheelsmith.toolchain.select import profile_named
from wheelsmith.toolchain.venv import MARKER, install_pinned

log = logging.getLogger(__name__)


def cuobjdump_for(toolchain: Toolchain | None, python: Path) -> Path:
    """Which cuobjdump reads device code, first found of: $WHEELSMITH_CUOBJDUMP, the
    toolchain's own, an installed CUDA toolkit's, else the default profile's pinned tools venv
    (installed from PyPI on first use)."""
    explicit = os.environ.get(inventory.CUOBJDUMP_ENV)
    if explicit:
        return Path(explicit)
    if toolchain is not None and toolchain.cuobjdump is not None:
        return toolchain.cuobjdump
    installed = system_cuobjdump()
    if installed is not None:
        return installed
    return default_tools(python).cuobjdump


def auditwheel_for(toolchain: Toolchain | None, python: Path) -> Path | None:
    """The profile's auditwheel: in the toolchain venv, else on PATH, else in the tools venv
    (installed on first use). None when none can be had (an offline machine building with a
    system toolchain): the platform check is then recorded as not done, never guessed."""
    if toolchain is not None and toolchain.name != SYSTEM:
        candidate = toolchain.python.parent / "auditwheel"
        if candidate.is_file():
            return candidate
    on_path = shutil.which("auditwheel")
    if on_path is not None:
        return Path(on_path)
    try:
        return default_tools(python).auditwheel
    except ToolchainError as exc:
        log.warning("the platform tag is not checked: no auditwheel (%s)", exc)
        return None


def default_tools(python: Path) -> Tools:
    """The default profile's tools venv (cuobjdump, auditwheel), installed on first use."""
    return ensure_tools(profile_named(None), python, locations.cache_dir())


@dataclass(frozen=True, slots=True)
class Tools:
    """The wheel-checking tools of a profile's small tools venv."""

    cuobjdump: Path
    auditwheel: Path | None


def ensure_tools(profile: Profile, python: Path, cache: Path) -> Tools:
    """A small venv with only the profile's tools (cuobjdump, auditwheel), for checking wheels
    without torch."""
    key = hashlib.sha256("\n".join(profile.tools).encode()).hexdigest()[:16]
    root = cache / "tools" / key
    with exclusive_lock(root.parent / f"{key}.lock"):
        marker = root / MARKER
        if not marker.is_file():
            log.info("installing %s into %s (once)", ", ".join(profile.tools), root)
            install_pinned(python, root, profile.tools, profile)
            atomic_write_text(marker, json.dumps({"tools": profile.tools}) + "\n")
    found = find_cuobjdump(root)
    if found is None:
        raise ToolchainError(f"cuobjdump is missing from {root}",
                             hint=f"the tools of {profile.file} must include nvidia-cuda-cuobjdump")
    auditwheel = root / "bin" / "auditwheel"
    return Tools(found, auditwheel if auditwheel.is_file() else None)

