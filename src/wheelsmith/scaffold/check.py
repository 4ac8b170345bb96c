"""The new recipe's check: `build --check` of it (setup.py up to its build.ninja, the pre-build
check, then the cheapest host and CUDA object of each extension compiled for real:
builder/sample.py), with the default toolchain of the recipe's kind, made first where this
machine lacks it: a recipe written unchecked misses what only a configured build shows (a
package that builds the arch-specific variant of the arch it is given). What it reads back
goes into the recipe: an extension whose build.ninja has only C++ rules (a CUDAExtension of
.cpp files that setup.py globs at run time) is host_only. A check that fails
keeps its error, which `recipe new` raises once it has said what it wrote.

Which C++ standard the toolchain's torch needs is read from its headers where its venv is made
here (torch 2.14's ATen.h refuses anything older than C++20; 2.11-2.13 take C++17), else from
its release."""

from __future__ import annotations

import json
import logging
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from packaging.version import Version

from wheelsmith import locations, locks
from wheelsmith.arch import ArchSet
from wheelsmith.builder import orchestrate
from wheelsmith.builder.configured import arch_specific, configured_name, own_targets
from wheelsmith.builder.request import BuildRequest, BuildResult, Reporter
from wheelsmith.builder.sample import sampled_text
from wheelsmith.errors import VerifyError, WheelsmithError
from wheelsmith.recipes import repos
from wheelsmith.scaffold.sdist import Sdist
from wheelsmith.toolchain import select
from wheelsmith.toolchain.profile import Profile, default_cuda_only_name
from wheelsmith.toolchain.venv import MARKER, venv_root

log = logging.getLogger(__name__)

CXX20_TORCH = Version("2.14")  # the first torch whose headers refuse C++17 (2.12, 2.13 take it)
_REFUSES_RE = re.compile(r"__cplusplus < (\d+)L")


@dataclass(frozen=True, slots=True)
class Checked:
    line: str  # the outcome in one line
    host_modules: tuple[str, ...] = ()  # the extensions whose build.ninja has only C++ rules
    error: WheelsmithError | None = None  # why the check failed
    archs: str | None = None  # the arch-specific default the package builds (12.0a), if so
    rewrite: bool = False  # it compiles a -gencode list of its own: arch.rewrite
    # the extensions (TORCH_EXTENSION_NAME) the check's build configured; () where one of its
    # build files names none (a CMake project's)
    extensions: tuple[str, ...] = ()


def _venv(profile: Profile) -> Path | None:
    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    root = venv_root(profile, python, locations.cache_dir())
    return root if (root / MARKER).is_file() else None


def torch_needs_cxx20(profile: Profile | None = None) -> bool:
    """Whether the (default) profile's torch refuses a C++ standard older than 20: its
    ATen.h's `__cplusplus` floor where the venv is made here, else its release."""
    profile = profile or select.profile_named(None)
    if profile.cuda_only:
        return False  # no torch headers to compile against
    venv = _venv(profile)
    header = next(venv.glob("lib/python*/site-packages/torch/include/ATen/ATen.h"), None) \
        if venv else None
    floors = _REFUSES_RE.findall(header.read_text(errors="replace")) if header else []
    if floors:
        return max(map(int, floors)) >= 202002
    return profile.torch.release[:2] >= CXX20_TORCH.release


def sample_check(sdist: Sdist, repo: Path, report: Reporter, *, cuda_only: bool = False,
                 pure: bool = False, rewrite: Callable[[], None] | None = None) -> Checked:
    """Its outcome, its build's stages told to `report`. Its work directory (in the cache)
    stays after a failure, for the log and the patched source the error names. `cuda_only`:
    the recipe is of kind cuda (its toolchain is the default CUDA-only profile); `pure`: of
    kind pure, whose whole build (seconds) and smoke test are the check."""
    profile = select.profile_named(
        default_cuda_only_name(locations.profile_dirs()) if cuda_only else None)
    report.stage("check", f"`wheelsmith build {sdist.project} --check` with {profile.name}: "
                 + ("the whole build and its smoke test" if pure else
                    "configured, then a host and a CUDA object of each extension compiled"))
    if _venv(profile) is None:
        report.stage("check", f"the {profile.name} toolchain is made first (once on this "
                     "machine, a few minutes)")
    repos.use_option([repo])
    work = locations.cache_dir() / "recipe-check" / f"{sdist.project}-{sdist.version}"
    work.parent.mkdir(parents=True, exist_ok=True)

    def busy(holder: locks.Holder | None) -> None:
        report.stage("waiting", f"another check of {sdist.project} {sdist.version} is running "
                     f"({holder.describe() if holder else 'its holder wrote no record'}); this "
                     "one starts when it ends")

    with locks.hold(work.with_name(f"{work.name}.lock"), on_busy=busy,
                    on_takeover=lambda *_: None):
        return _checked_in(work, sdist, report, pure=pure, rewrite=rewrite)


def _checked_in(work: Path, sdist: Sdist, report: Reporter, *, pure: bool,
                rewrite: Callable[[], None] | None) -> Checked:
    """The check in `work`, which no other check uses meanwhile. A package that turns 12.0
    into 12.0a itself is checked for that; one that compiles a -gencode list of its own is
    checked again with the recipe's arch.rewrite (written by `rewrite`) on."""
    try:
        return _passed(_build(sdist, work, None, report, whole=pure), work)
    except VerifyError as exc:
        records, default = _records(work), repos.resolve_recipe(sdist.project,
                                                                sdist.version).arch.default
        specific = arch_specific(records, default)
        if specific is None and not (rewrite is not None and own_targets(records, default)):
            return Checked(f"check: {exc.message}", error=exc)
        if specific is None and rewrite is not None:
            rewrite()
            report.stage("check", f"{sdist.project} compiles CUDA targets of its own, not the "
                         "arch list: again, with arch.rewrite")
        try:
            result = _build(sdist, work, specific, report)
            return replace(_passed(result, work, str(specific) if specific else None),
                           rewrite=specific is None)
        except WheelsmithError as again:
            return Checked(f"check: {again.message}", error=again, rewrite=specific is None)
    except WheelsmithError as exc:
        return Checked(f"check: {exc.message}", error=exc)


def _build(sdist: Sdist, work: Path, archs: ArchSet | None, report: Reporter, *,
           whole: bool = False) -> BuildResult:
    shutil.rmtree(work, ignore_errors=True)
    return orchestrate.build(BuildRequest(recipe=sdist.project, version=sdist.version,
                                          check=not whole, archs=archs,
                                          work_dir=work / "build", out_dir=work / "out"), report)


def _passed(result: BuildResult, work: Path, archs: str | None = None) -> Checked:
    shutil.rmtree(work, ignore_errors=True)
    if result.wheel is not None and not result.configured:  # a whole build: a pure recipe's
        return Checked(f"check: built {result.wheel.name} and passed its smoke test")
    names = tuple(str(c.get("extension") or "") for c in result.configured)
    return Checked(f"check: {configured_line(result.configured)}", result.host_modules,
                   archs=archs, extensions=names if all(names) else ())


def _records(work: Path) -> tuple[dict[str, Any], ...]:
    """What the pre-build check recorded of the build.ninja files the check's build wrote."""
    reports = sorted(work.glob("build/*/prebuild.jsonl"))
    if not reports:
        return ()
    return tuple(json.loads(line) for line in reports[-1].read_text().splitlines() if line)


def configured_line(configured: tuple[dict[str, Any], ...]) -> str:
    targets = "; ".join(f"{configured_name(c)}: SASS {', '.join(c['sass'])}{sampled_text(c)}"
                        for c in configured)
    return f"build.ninja targets {targets}" if targets else "no build.ninja with CUDA rules"
