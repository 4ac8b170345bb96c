"""Which toolchain serves a request: the one place that decides.

By name (`--toolchain`), `system`, or, for a target environment (`--python PATH`), the profile
whose torch and CUDA match the target's (probe → select → ensure). Without either: the
default profile. A target no profile serves gets the nearest ones and the `toolchain new`
command that makes one."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path

from packaging.version import Version

from wheelsmith import locations
from wheelsmith.errors import MissingToolkitError, ToolchainError, UsageError
from wheelsmith.toolchain import driver, target
from wheelsmith.toolchain.env import Toolchain, system_toolchain
from wheelsmith.toolchain.platform import ensure_target_site, host_machine
from wheelsmith.toolchain.preflight import cross_root, cross_tools
from wheelsmith.toolchain.profile import (
    SYSTEM,
    Profile,
    default_profile_name,
    find_profile,
    load_profiles,
)
from wheelsmith.toolchain.target import Target
from wheelsmith.toolchain.venv import ensure_profile

log = logging.getLogger(__name__)


def profile_named(name: str | None) -> Profile:
    """A profile from the profile directories (None: the default, else the newest)."""
    toolchains = locations.profile_dirs()
    return find_profile(toolchains, name or default_profile_name(toolchains))


def resolve_toolchain(name: str | None, python: Path, *, for_target: bool = False,
                      say: Callable[[str], None] = log.info, machine: str | None = None,
                      compiles: bool = True) -> Toolchain:
    """The toolchain called `name`; without a name, the one for the target environment
    `python` (for_target; `say` is told which profile was chosen and why) or else the
    default profile. `machine`: the CPU the wheels are for, when not this machine's (a cross
    build: the profile's venv plus its pins for that CPU, platform.py); `compiles`: whether
    the recipe compiles (a pure one needs no cross compiler)."""
    if machine is not None and machine != host_machine():
        return cross_toolchain(name, python, machine, for_target=for_target, compiles=compiles)
    if name == SYSTEM:
        return system_toolchain(python)
    if name is None and for_target:
        found = target.probe(python)
        profiles = load_profiles(locations.profile_dirs())
        profile = select_profile(found, profiles)
        torch, cuda = found.cuda_torch()
        say(f"{profile.name}, chosen for {python} (Python {found.version}, torch {torch}, "
            f"CUDA {cuda})")
        return _ensure(profile, python, python_named=True)
    return _ensure(profile_named(name), python)


def _ensure(profile: Profile, python: Path, *, python_named: bool = False) -> Toolchain:
    """`ensure_profile`; a profile whose CUDA toolkit is not installed also gets the other way
    out: a CUDA 13 profile, where the driver runs CUDA 13."""
    try:
        return ensure_profile(profile, python, locations.cache_dir())
    except MissingToolkitError as exc:
        exc.hint = "\n".join(filter(None, [exc.hint, _newer_cuda(profile, python,
                                                                  python_named)]))
        raise


def _newer_cuda(profile: Profile, python: Path, python_named: bool) -> str | None:
    profiles = load_profiles(locations.profile_dirs())
    newer = [p for p in profiles if p.cuda.major > profile.cuda.major
             and p.cuda.major in driver.MIN_DRIVER and not p.installed_compiler]
    if not newer:
        return None
    nearest = min(newer, key=lambda p: (abs(p.torch.minor - profile.torch.minor), p.cuda))
    found = driver.find_driver()
    here = f"this machine's: {found.version}" if found.version else "no driver found here"
    use = (f"install torch {nearest.torch} built for CUDA {nearest.cuda} into {python} and build "
           "again" if python_named else f"build with --toolchain {nearest.name}")
    return (f"or, with an NVIDIA {driver.needs(nearest.cuda.major)}; {here}: {use} (torch "
            f"{nearest.torch.major}.{nearest.torch.minor}, whose CUDA compiler PyPI ships)")


def cross_toolchain(name: str | None, python: Path, machine: str, *, for_target: bool,
                    compiles: bool = True) -> Toolchain:
    """A profile's toolchain that builds for `machine` from this one."""
    if name == SYSTEM or for_target:
        what = "an installed toolkit ('system')" if name == SYSTEM else "--python PATH"
        raise UsageError(f"--platform {machine} cannot be built from {what}: a cross build "
                         f"needs a profile, whose pins are fetched for {machine}",
                         hint="name a profile with --toolchain (or none: the default), and "
                              "--python X.Y")
    profile = profile_named(name)
    profile.require_platform(machine)
    cross_tools(machine, compiles=compiles)  # before anything is fetched for it
    toolchain = _ensure(profile, python)
    cross_root(machine, toolchain.python_version, locations.cache_dir())  # before its GBs
    site = ensure_target_site(profile, toolchain.python, toolchain.python_version, machine,
                              locations.cache_dir())
    return dataclasses.replace(toolchain, platform=machine, target_site=site)


def select_profile(target: Target, profiles: list[Profile]) -> Profile:
    """The profile that builds for `target`: the same torch minor and CUDA major (the same
    CUDA minor preferred), which must also cover its Python."""
    torch, cuda = target.cuda_torch()
    matches = [p for p in profiles if (p.torch.major, p.torch.minor) == (torch.major, torch.minor)
               and p.cuda.major == cuda.major]
    if not matches:
        raise ToolchainError(
            f"no toolchain profile builds for {target.python}: its torch {torch} uses CUDA "
            f"{cuda}, and a wheel must match torch {torch.major}.{torch.minor} and CUDA "
            f"{cuda.major}.x; closest: {', '.join(closest(torch, cuda, profiles))}",
            hint=f"create it: {new_profile_command(torch, cuda, target.torch_dist)}")
    chosen = max(matches, key=lambda p: ((p.cuda.major, p.cuda.minor) == (cuda.major,
                                                                            cuda.minor),
                                         p.cuda, p.torch))
    chosen.require_python(target.version)
    return chosen


def closest(torch: Version, cuda: Version, profiles: list[Profile], count: int = 3) -> list[str]:
    """Profile names nearest to (torch, CUDA): same CUDA major first, then nearest torch."""
    def distance(p: Profile) -> tuple[int, int]:
        return (p.cuda.major != cuda.major,
                abs((p.torch.major * 100 + p.torch.minor) - (torch.major * 100 + torch.minor)))
    return [p.name for p in sorted(profiles, key=distance)[:count]]


def new_profile_command(torch: Version, cuda: Version, dist: Version | None = None) -> str:
    """The one command that creates the missing profile, for the torch release as installed:
    its distribution's version `dist` when known (PyPI's CUDA wheel is 2.8.0 although
    torch.__version__ says 2.8.0+cu128), else `torch`. Only a release with a local label came
    from another index (a per-CUDA root), which `--index` must name."""
    release = dist or torch
    command = f"wheelsmith toolchain new --torch {release} --cuda {cuda.major}.{cuda.minor}"
    if release.local:
        command += " --index URL   (URL: the index that torch came from)"
    return command

