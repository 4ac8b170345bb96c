"""What an sdist's pyproject.toml asks its build environment to hold ([build-system] requires,
PEP 518) that the toolchain does not: wheelsmith builds with the toolchain's packages, never an
isolated environment it downloads, so a build that imports one of them fails
(vllm 0.34.0: `setup.py:21: ModuleNotFoundError: No module named 'setuptools_rust'`)."""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from wheelsmith.build import cmakebuild
from wheelsmith.errors import UntrustedDataError, WheelsmithError
from wheelsmith.scaffold.imports import caught_imports
from wheelsmith.toolchain import overlay
from wheelsmith.toolchain.profile import Profile
from wheelsmith.untrusted import parse_python

MAX_BYTES = 1 << 20  # of pyproject.toml read (an sdist is untrusted)
# read as cmakebuild reads its build-backend (no TOML parser before Python 3.11): the table's
# text up to the next table, its requires array, the strings in it
_SECTION_RE = re.compile(r"^\[build-system\][ \t]*$(.*?)(?=^\[|\Z)", re.MULTILINE | re.DOTALL)
_REQUIRES_RE = re.compile(r"^requires\s*=\s*\[((?:\"[^\"\n]*\"|'[^'\n]*'|[^\]\"'])*)\]",
                          re.MULTILINE)
_STRING_RE = re.compile(r'"([^"\n]*)"|\'([^\'\n]*)\'')


def requires(tree: Path) -> tuple[str, ...]:
    """The names pyproject.toml's [build-system] requires lists whose markers hold here
    (none when it has no such table)."""
    return tuple(dict.fromkeys(r.name for r in requirements(tree)))


def requirements(tree: Path) -> tuple[Requirement, ...]:
    """pyproject.toml's [build-system] requires whose markers hold here (a string that is no
    requirement is left out: the build's frontend would refuse it)."""
    path = tree / "pyproject.toml"
    if not path.is_file() or path.stat().st_size > MAX_BYTES:
        return ()
    section = _SECTION_RE.search(path.read_text(errors="replace"))
    listed = _REQUIRES_RE.search(section[1]) if section else None
    found = []
    for quoted in _STRING_RE.finditer(listed[1] if listed else ""):
        try:
            requirement = Requirement(quoted[1] or quoted[2])
        except InvalidRequirement:
            continue
        if requirement.marker is None or requirement.marker.evaluate():
            found.append(requirement)
    return tuple(found)


def held(profile: Profile) -> dict[str, str]:
    """What the toolchain's pins hold here: canonical name -> version (its markers for this
    Python)."""
    versions: dict[str, str] = {}
    for pin in (*profile.requirements, *profile.tools):
        requirement = Requirement(pin.replace("===", "=="))
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        version = next((s.version for s in requirement.specifier if s.operator == "=="), "")
        versions[canonicalize_name(requirement.name)] = version
    return versions


def lacking(tree: Path, profile: Profile) -> tuple[str, ...]:
    """The build requirements `profile`'s toolchain does not hold, as pyproject.toml names
    them."""
    have = held(profile)
    return tuple(name for name in requires(tree) if canonicalize_name(name) not in have)


def excluded(tree: Path, profile: Profile) -> tuple[tuple[str, str], ...]:
    """The build requirements the toolchain holds at a version they exclude (vllm's
    `setuptools>=77.0.3,<81.0.0` beside setuptools 84, `torch == 2.14.0` beside 2.14.1):
    (the requirement as written, the version held)."""
    have = held(profile)
    return tuple((str(r), have[canonicalize_name(r.name)]) for r in requirements(tree)
                 if have.get(canonicalize_name(r.name)) and r.specifier
                 and not r.specifier.contains(have[canonicalize_name(r.name)], prereleases=True))


def unheld_imports(tree: Path, profile: Profile) -> tuple[tuple[str, str, int], ...]:
    """What setup.py imports, outside a `try:` that catches its ImportError, of the build
    requirements the toolchain lacks: (module, requirement, line). A requirement setup.py
    never imports (natten's `build`, a frontend) or that wheelsmith provides itself (the
    scikit-build backends of a CMake build) is no finding."""
    wanted = {canonicalize_name(name): name for name in lacking(tree, profile)
              if name.replace("-", "_").lower() not in cmakebuild.BACKENDS}
    setup = tree / "setup.py"
    if not wanted or not setup.is_file() or setup.stat().st_size > MAX_BYTES:
        return ()
    try:
        module = parse_python(setup.read_text(errors="replace"), "setup.py")
    except UntrustedDataError:
        return ()
    caught = caught_imports(module)
    found = []
    for node in ast.walk(module):
        if isinstance(node, ast.Import) and id(node) not in caught:
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and id(node) not in caught and node.module \
                and not node.level:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            requirement = wanted.get(canonicalize_name(top))
            if requirement is not None:
                found.append((top, requirement, node.lineno))
    return tuple(sorted(dict.fromkeys(found), key=lambda f: f[2]))


@dataclass(frozen=True, slots=True)
class Pinned:
    """What `recipe new` writes as build.requires: the pins (the build requirements the
    toolchain lacks, with every package they need that it lacks too), or why there are
    none."""

    pins: tuple[str, ...] = ()
    failed: str = ""


NOTHING_PINNED = Pinned()


# what installs or runs a build, never imported by one (natten lists `build`): wheelsmith is
# the frontend
FRONTENDS = ("build", "pip", "installer", "pyproject-hooks")


def pinned(tree: Path, profile: Profile) -> Pinned:
    """pyproject.toml's build requirements the toolchain lacks (not the CMake backends
    wheelsmith provides, nor a frontend), resolved by pip against the index it uses, wheels
    only, for this Python: each `NAME==VERSION`, the toolchain's own packages left out."""
    wanted = [str(r) for r in requirements(tree)
              if canonicalize_name(r.name) not in held(profile)
              and canonicalize_name(r.name) not in FRONTENDS
              and r.name.replace("-", "_").lower() not in cmakebuild.BACKENDS]
    if not wanted:
        return NOTHING_PINNED
    try:
        found = overlay.resolution(sys.executable, wanted, ignore_installed=True,
                                   what="pip's resolution of the build requirements")
    except WheelsmithError as exc:
        return Pinned(failed=f"{', '.join(wanted)}: {exc.message}")
    have = held(profile)
    return Pinned(pins=tuple(sorted(f"{canonicalize_name(name)}=={version}"
                                    for name, version in found
                                    if canonicalize_name(name) not in have)))
