"""What an sdist's pyproject.toml asks its build environment to hold ([build-system] requires,
PEP 518) that the toolchain does not: wheelsmith builds with the toolchain's packages, never an
isolated environment it downloads, so a build that imports one of them fails
(vllm 0.34.0: `setup.py:21: ModuleNotFoundError: No module named 'setuptools_rust'`)."""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from packaging.markers import InvalidMarker, UndefinedComparison, UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from wheelsmith.errors import UntrustedDataError, WheelsmithError
from wheelsmith.scaffold.imports import caught_imports, outside_imports
from wheelsmith.scaffold.owntree import own_files
from wheelsmith.scaffold.setup_py import read_setup
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


def setup_requires(tree: Path) -> tuple[Requirement, ...]:
    """setup.py's setup_requires (which the standard patch drops: setuptools would download
    them in the offline build), as requirements: setuptools_scm, whose absence makes
    `use_scm_version` a silent 0.0.0."""
    found = read_setup(tree).setup_requires if (tree / "setup.py").is_file() else None
    named = []
    for name in found[0] if found else ():
        try:
            named.append(Requirement(name))
        except InvalidRequirement:
            continue
    return tuple(named)


NUMPY_COMPONENT_RE = re.compile(r"^[^#\n]*\bfind_package\s*\(\s*Python3?\b[^)#]*\bNumPy\b",
                                re.IGNORECASE | re.MULTILINE)


def cmake_numpy(tree: Path) -> tuple[Requirement, ...]:
    """numpy, where the package's own CMake files ask find_package(Python3) for its NumPy
    component (cuda-float-compress 0.2.3: `Python3::NumPy ... the target was not found`): CMake
    finds it with the toolchain's Python, so the build needs it importable."""
    for file in own_files(tree, lambda path: path.name == "CMakeLists.txt"
                          or path.suffix == ".cmake"):
        if file.stat().st_size <= MAX_BYTES and \
                NUMPY_COMPONENT_RE.search(file.read_text(errors="replace")):
            return (Requirement("numpy"),)
    return ()


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


def runtime_lacking(requires: tuple[str, ...], profile: Profile) -> tuple[str, ...]:
    """What the package needs at run time (its Requires-Dist, no extra) that `profile`'s
    toolchain does not hold: a smoke test of its Python side there would fail on it."""
    have = held(profile)
    lacks = []
    for text in requires:
        try:
            requirement = Requirement(text)
            wanted = requirement.marker is None or requirement.marker.evaluate({"extra": ""})
        except (InvalidRequirement, InvalidMarker, UndefinedComparison, UndefinedEnvironmentName):
            continue  # a requirement pip could not read either: not the smoke test's concern
        if wanted and canonicalize_name(requirement.name) not in have:
            lacks.append(requirement.name)
    return tuple(dict.fromkeys(lacks))


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
    never imports (natten's `build`, a frontend) is no finding; a CMake backend
    (scikit-build-core) is one where the toolchain's profile does not hold it."""
    wanted = {canonicalize_name(name): name for name in lacking(tree, profile)}
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
class Imported:
    """A module setup.py runs an import of (itself, or a module of its own it imports) that no
    build requirement names and the toolchain lacks: the requirement pip is asked for in its
    place and where it is first imported."""

    module: str
    requirement: str
    where: str


@dataclass(frozen=True, slots=True)
class Pinned:
    """What `recipe new` writes as build.requires: the pins (the build requirements the
    toolchain lacks, and what setup.py imports that none names, with every package they need
    that it lacks too), or why there are none."""

    pins: tuple[str, ...] = ()
    failed: str = ""
    imported: tuple[Imported, ...] = ()  # pinned with the rest, unless `unpinned` says why not
    unpinned: str = ""
    distutils: str = ""  # where setup.py imports numpy.distutils: no numpy is pinned for it


NOTHING_PINNED = Pinned()


# what installs or runs a build, never imported by one (natten lists `build`): wheelsmith is
# the frontend
FRONTENDS = ("build", "pip", "installer", "pyproject-hooks")
# a module whose project has another name (the others are named as their module: numpy, pybind11)
PROJECTS = {"yaml": "pyyaml", "PIL": "pillow", "cv2": "opencv-python-headless",
            "sklearn": "scikit-learn", "attr": "attrs", "dateutil": "python-dateutil",
            "git": "gitpython", "pkg_resources": "setuptools", "distutils": "setuptools",
            "_distutils_hack": "setuptools", "google": "protobuf", "skbuild": "scikit-build",
            "scikit_build_core": "scikit-build-core"}
NUMPY_DISTUTILS = "numpy.distutils"  # NumPy 2 removed it; no NumPy has it for Python 3.12
_PROJECT_RE = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?")


def imported(tree: Path, profile: Profile) -> tuple[tuple[Imported, ...], str]:
    """What setup.py runs imports of (imports.py) that no build requirement of pyproject.toml
    names and the toolchain lacks (nor a package of it: `nvidia` of nvidia-cublas), each once;
    and where it imports numpy.distutils ("": nowhere), for which numpy is not taken."""
    taken = {*held(profile), *(canonicalize_name(r.name) for r in requirements(tree)),
             *FRONTENDS}
    found: dict[str, Imported] = {}
    outside = outside_imports(tree)
    for module in outside:
        project = canonicalize_name(PROJECTS.get(module.top, module.top))
        if _PROJECT_RE.fullmatch(project) and project not in taken and \
                not any(h.startswith(f"{project}-") for h in taken):
            found.setdefault(project, Imported(module.top, project, module.where))
    distutils = next((m.where for m in outside if m.name == NUMPY_DISTUTILS
                      or m.name.startswith(f"{NUMPY_DISTUTILS}.")), "")
    return tuple(i for i in found.values() if not (distutils and i.requirement == "numpy")), \
        distutils


def pinned(tree: Path, profile: Profile) -> Pinned:
    """pyproject.toml's build requirements the toolchain lacks (its CMake backend too, where
    the profile holds none: the torch profiles hold no scikit-build-core), not a frontend,
    and what setup.py imports that none names
    (`imported`), resolved by pip against the index it uses, wheels only, for this Python:
    each `NAME==VERSION`, the toolchain's own packages left out. Where pip cannot resolve them
    together, pyproject.toml's are resolved alone (a module's project may have another name)."""
    listed = [*requirements(tree), *setup_requires(tree), *cmake_numpy(tree)]
    wanted = list(dict.fromkeys(str(r) for r in listed
                                if canonicalize_name(r.name) not in held(profile)
                                and canonicalize_name(r.name) not in FRONTENDS))
    modules, distutils = imported(tree, profile)
    both = replace(_resolved(wanted + [m.requirement for m in modules], profile),
                   imported=modules, distutils=distutils)
    if not both.failed or not modules:
        return both
    return replace(_resolved(wanted, profile), imported=modules, distutils=distutils,
                   unpinned=both.failed)


def _resolved(wanted: list[str], profile: Profile) -> Pinned:
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


def requires_lines(requires: Pinned, toolchain: str) -> list[str]:
    """`recipe new`'s findings on build.requires: what it pins and why (for the toolchain
    named), what pip could not pin, numpy.distutils."""
    imported = requires.imported if not requires.unpinned else ()
    pins = {overlay.pin_name(pin): pin for pin in requires.pins}
    lines = [f"build.requires: {', '.join(requires.pins)}: the build requirements the "
             f"toolchain {toolchain} lacks, with what they need (pyproject.toml, setup_requires"
             f"{'; what setup.py imports' if imported else ''}), installed beside it for each "
             "build"] if requires.pins else []
    lines += [f"{i.where}: it imports {i.module}, which no build requirement names and the "
              f"toolchain {toolchain} lacks: build.requires {pins[i.requirement]}"
              for i in imported if i.requirement in pins]
    lines += [f"build.requires: not written, pip could not pin {requires.failed}"
              ] if requires.failed else []
    lines += ["build.requires: pip could not pin what setup.py imports ("
              + ", ".join(f"{i.module} at {i.where}" for i in requires.imported)
              + f"): {requires.unpinned}; add each module's project to build.requires "
              "(NAME==VERSION), or patch setup.py to build without it"] \
        if requires.unpinned else []
    lines += [f"{requires.distutils}: patch needed: it imports numpy.distutils, which NumPy 2 "
              "removed (no NumPy has it for Python 3.12 or later), so no numpy is pinned for "
              "it: port setup.py to setuptools (numpy.get_include() gives NumPy's headers) "
              "in a patch"] if requires.distutils else []
    return lines
