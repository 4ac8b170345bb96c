"""The new recipe's configure-only build: setup.py up to its build.ninja, then the pre-build
check; run only when it is cheap (the default toolchain is already created here). What it
reads back goes into the recipe: an extension whose build.ninja has only C++ rules (a
CUDAExtension of .cpp files that setup.py globs at run time) is host_only."""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wheelsmith import locations
from wheelsmith.build import orchestrate
from wheelsmith.build.compile import configured_name
from wheelsmith.build.request import BuildRequest
from wheelsmith.errors import WheelsmithError
from wheelsmith.recipes import repos
from wheelsmith.scaffold.sdist import Sdist
from wheelsmith.toolchain import select
from wheelsmith.toolchain.venv import MARKER, venv_root

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Checked:
    line: str  # the outcome in one line
    host_modules: tuple[str, ...] = ()  # the extensions whose build.ninja has only C++ rules


def configure_check(sdist: Sdist, repo: Path, work: Path) -> Checked | None:
    """Its outcome; None when it was not run."""
    profile = select.profile_named(None)
    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if not (venv_root(profile, python, locations.cache_dir()) / MARKER).is_file():
        log.info("configure-only check skipped: the %s toolchain is not created here", profile.name)
        return None
    repos.use_option([repo])
    request = BuildRequest(recipe=sdist.project, version=sdist.version, configure_only=True,
                           work_dir=work / "build", out_dir=work / "out")
    try:
        result = orchestrate.build(request)
    except WheelsmithError as exc:
        return Checked(f"configure-only check: {exc.message}")
    return Checked(f"configure-only check: {configured_line(result.configured)}",
                   result.host_modules)


def configured_line(configured: tuple[dict[str, Any], ...]) -> str:
    targets = "; ".join(f"{configured_name(c)}: SASS {', '.join(c['sass'])}" for c in configured)
    return f"build.ninja targets {targets}" if targets else "no build.ninja with CUDA rules"
