"""The host libraries an sdist's build needs (`build.libraries`, recipes/libraries.py), found in
its own sources: an `#include <nccl.h>` in its C++ and CUDA files, a `find_package(NCCL)` or
`find_library(... nccl)` in its CMake files, a `libraries=["nccl"]` in its Python build
scripts. Each library of the table is one NVIDIA publishes as a wheel per CUDA major (NCCL,
cuDNN, the CUDA math libraries, NVTX, the profiler API's header) or one no wheel provides
(HDF5, MPI): `recipe new` writes the entry of the first, with a comment naming the file:line
that needs it, and a finding for the second, saying what to do.

Which entry: the toolchain's copy (a bare name) where the toolchain's profile pins the wheel
(torch's NCCL); nothing where the library is the CUDA toolkit's own and the profile holds it
(cuBLAS in nvidia/cu13); else the wheel pinned as pip resolves it against the index the
machine's pip uses (a toolkit library within the toolchain's CUDA minor). A header the sdist
holds itself is its own, and needs nothing.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from wheelsmith.errors import WheelsmithError
from wheelsmith.recipes.patch import lines_of, read_exactly
from wheelsmith.scaffold.aten_api import own_sources
from wheelsmith.scaffold.buildsystem import held
from wheelsmith.scaffold.owntree import own_files
from wheelsmith.toolchain import overlay
from wheelsmith.toolchain.profile import Profile


@dataclass(frozen=True, slots=True)
class Known:
    """A library a build may need: its headers, CMake package and linker names, and its wheel
    for each CUDA major (none: no wheel provides it)."""

    name: str
    headers: tuple[str, ...]
    packages: tuple[str, ...] = ()  # find_package names, lower case
    links: tuple[str, ...] = ()  # -l names
    wheels: tuple[tuple[int, str], ...] = ()
    toolkit: bool = False  # one of the CUDA toolkit's own libraries
    instead: str = ""  # for one no wheel provides: what to do

    def wheel(self, major: int) -> str | None:
        return dict(self.wheels).get(major)


def _cuda(name: str, headers: tuple[str, ...], links: tuple[str, ...], wheel: str) -> Known:
    return Known(name, headers, (), links, ((12, f"{wheel}-cu12"), (13, wheel)), toolkit=True)


def _no_wheel(name: str) -> str:
    return (f"give build.libraries an archive of its install prefix (archive: {{url, sha256}}, "
            f"name: {name}), or patch the package to build without it")


KNOWN = (
    Known("NCCL", ("nccl.h",), ("nccl",), ("nccl",),
          ((12, "nvidia-nccl-cu12"), (13, "nvidia-nccl-cu13"))),
    Known("cuDNN", ("cudnn.h",), ("cudnn",), ("cudnn",),
          ((12, "nvidia-cudnn-cu12"), (13, "nvidia-cudnn-cu13"))),
    _cuda("cuBLAS", ("cublas_v2.h", "cublas.h", "cublasLt.h"), ("cublas", "cublasLt"),
          "nvidia-cublas"),
    _cuda("cuSPARSE", ("cusparse.h",), ("cusparse",), "nvidia-cusparse"),
    _cuda("cuRAND", ("curand.h", "curand_kernel.h"), ("curand",), "nvidia-curand"),
    _cuda("cuFFT", ("cufft.h",), ("cufft",), "nvidia-cufft"),
    _cuda("cuSOLVER", ("cusolverDn.h",), ("cusolver",), "nvidia-cusolver"),
    _cuda("NVTX", ("nvToolsExt.h", "nvtx3/nvToolsExt.h", "nvtx3/nvtx3.hpp"), ("nvToolsExt",),
          "nvidia-nvtx"),
    _cuda("the CUDA profiler API", ("cuda_profiler_api.h",), (), "nvidia-cuda-profiler-api"),
    Known("HDF5", ("hdf5.h", "H5Cpp.h"), ("hdf5",), ("hdf5", "hdf5_cpp"),
          instead=_no_wheel("hdf5")),
    Known("MPI", ("mpi.h",), ("mpi",), ("mpi",),
          instead=_no_wheel("mpi")),
)
INCLUDE = re.compile(r"\s*#\s*include\s*[<\"]([^>\"]+)[>\"]")
FIND_PACKAGE = re.compile(r"\bfind_package\s*\(([^)]*)", re.IGNORECASE)
FIND_LIBRARY = re.compile(r"\bfind_library\s*\(([^)]*)", re.IGNORECASE)
PY_LINKED = re.compile(r"\blibraries\s*=\s*\[([^\]]*)\]")
QUOTED = re.compile(r"[\"']([\w+.-]+)[\"']")


@dataclass(frozen=True, slots=True)
class Needed:
    """A library the sdist's build needs, where it says so first, and what recipe new makes of
    it: the entry's wheel (`NAME==VERSION`, or NAME: the toolchain's copy), or why none."""

    known: Known
    where: str  # csrc/comm.cu:3
    what: str  # "includes nccl.h", "find_package(NCCL)"
    wheel: str | None = None
    note: str = ""  # why no entry: the toolkit has it, pip could not pin it, no wheel

    def entry_line(self) -> str:
        return f'    - wheel: "{self.wheel}"  # {self.where} {self.what}'

    def finding(self) -> str:
        head = f"{self.where}: it needs {self.known.name} ({self.what})"
        if self.wheel is not None:
            return f"{head}: build.libraries {self.wheel}"
        return f"{head}: {self.note}"


def detect(tree: Path, profile: Profile) -> tuple[Needed, ...]:
    """What the sdist at `tree` needs of the table's libraries, each once, in the table's
    order, with the entry recipe new writes for the toolchain of `profile`."""
    always, guarded = _in_sources(tree)
    cmake, optional = _in_cmake(tree)
    found = {**_in_python(tree), **cmake, **always}  # sources first
    guarded = {**optional, **guarded}
    ours = {path.name for path in tree.rglob("*.h")} | {
        path.relative_to(tree).as_posix() for path in tree.rglob("*.h*")}
    return tuple(_entry(known, *found[known.name], profile) if known.name in found else
                 _guarded(known, *guarded[known.name])
                 for known in KNOWN
                 if (known.name in found or known.name in guarded) and not _own(known, ours))


def _guarded(known: Known, where: str, what: str) -> Needed:
    """A library only included under a preprocessor condition (`#ifdef GGML_USE_NCCL`) or
    found by CMake without REQUIRED: the build goes without it, so no entry (its wheel would
    become a requirement of the package's wheel); what to do where the build turns it on."""
    return Needed(known, where, what, note="the build goes on without it (a condition or an "
                  "optional find_package): no entry; where the recipe turns it on, add "
                  f"build.libraries for {known.name}")


def _own(known: Known, ours: set[str]) -> bool:
    return any(h in ours or any(o.endswith("/" + h) for o in ours) for h in known.headers)


def _in_sources(tree: Path) -> tuple[dict[str, tuple[str, str]], dict[str, tuple[str, str]]]:
    """Where each library's header is first included: always, and only inside a preprocessor
    conditional (an include guard is no condition)."""
    always: dict[str, tuple[str, str]] = {}
    guarded: dict[str, tuple[str, str]] = {}
    for path in own_sources(tree):
        lines = lines_of(read_exactly(path))
        for number, condition, line in _conditions(lines):
            if (match := INCLUDE.match(line)) is None:
                continue
            for known in KNOWN:
                if match[1] in known.headers:
                    where = f"{path.relative_to(tree)}:{number}"
                    if condition is None:
                        always.setdefault(known.name, (where, f"includes {match[1]}"))
                    else:
                        guarded.setdefault(known.name, (where, f"includes {match[1]} under "
                                                               f"{condition}"))
    return always, guarded


CONDITIONAL = re.compile(r"\s*#\s*(if|ifdef|ifndef|elif|else|endif)\b\s*(.*)")
DEFINE = re.compile(r"\s*#\s*define\s+(\w+)")


def _conditions(lines: list[str]) -> list[tuple[int, str | None, str]]:
    """Each line with its number and the innermost preprocessor condition it lies under
    (`#ifdef X`), None outside any; `#ifndef X` directly followed by `#define X` is an
    include guard, not a condition."""
    stack: list[str | None] = []
    out = []
    for index, line in enumerate(lines):
        match = CONDITIONAL.match(line)
        if match is None:
            current = next((c for c in reversed(stack) if c is not None), None)
            out.append((index + 1, current, line))
            continue
        kind, rest = match[1], match[2].split("//")[0].strip()
        if kind in ("if", "ifdef", "ifndef"):
            following = next((n for n in lines[index + 1:] if n.strip()), "")
            guard = kind == "ifndef" and (defined := DEFINE.match(following)) is not None \
                and defined[1] == rest
            stack.append(None if guard else f"#{kind} {rest}".strip())
        elif kind == "endif" and stack:
            stack.pop()
        elif kind in ("elif", "else") and stack:
            stack[-1] = f"#{kind} {rest}".strip()
    return out


def _in_cmake(tree: Path) -> tuple[dict[str, tuple[str, str]], dict[str, tuple[str, str]]]:
    """Where each library is first asked for by the sdist's CMake files: required, and optional
    (a find_package without REQUIRED: the build goes on without it). Find modules
    (Find*.cmake) say how to find one, not that the build needs it."""
    always: dict[str, tuple[str, str]] = {}
    optional: dict[str, tuple[str, str]] = {}
    for path in own_files(tree, lambda p: p.name == "CMakeLists.txt" or (
            p.suffix == ".cmake" and not p.name.startswith("Find"))):
        text = read_exactly(path)
        for match in [*FIND_PACKAGE.finditer(text), *FIND_LIBRARY.finditer(text)]:
            where = f"{path.relative_to(tree)}:{text.count(chr(10), 0, match.start()) + 1}"
            words = match[1].split()
            for known in KNOWN:
                if match.re is FIND_PACKAGE and words and words[0].lower() in known.packages:
                    into = always if "REQUIRED" in words[1:] else optional
                    into.setdefault(known.name, (where, f"find_package({' '.join(words)})"))
                elif match.re is FIND_LIBRARY and set(words[1:]) & set(known.links):
                    always.setdefault(known.name, (where, f"find_library({' '.join(words)})"))
    return always, optional


def _in_python(tree: Path) -> dict[str, tuple[str, str]]:
    found: dict[str, tuple[str, str]] = {}
    for path in own_files(tree, lambda p: p.suffix == ".py", also_not={"build"}):
        text = read_exactly(path)
        for match in PY_LINKED.finditer(text):
            names = set(QUOTED.findall(match[1]))
            where = f"{path.relative_to(tree)}:{text.count(chr(10), 0, match.start()) + 1}"
            for known in KNOWN:
                if names & set(known.links):
                    found.setdefault(known.name, (where, "links it (libraries=)"))
    return found


def _entry(known: Known, where: str, what: str, profile: Profile) -> Needed:
    major = profile.cuda.major
    wheel = known.wheel(major)
    if wheel is None:
        why = (f"no wheel provides it (it is no NVIDIA wheel): {known.instead}"
               if known.instead else f"no wheel of it for CUDA {major}")
        return Needed(known, where, what, note=why)
    holds = held(profile)
    if canonicalize_name(wheel) in holds:
        if known.toolkit:
            return Needed(known, where, what, note=f"the toolchain {profile.name}'s CUDA "
                          f"provides it ({wheel} {holds[canonicalize_name(wheel)]})")
        return Needed(known, where, what, wheel=wheel)
    wanted = f"{wheel}=={profile.cuda.major}.{profile.cuda.minor}.*" if known.toolkit else wheel
    try:
        resolved = overlay.resolution(sys.executable, [wanted], ignore_installed=True,
                                      what=f"pip's resolution of {wanted}")
    except WheelsmithError as exc:
        return Needed(known, where, what, note=f"pip could not pin {wanted}: {exc.message}; "
                      f"add build.libraries wheel: {wheel}==VERSION by hand")
    version = next(v for name, v in resolved if canonicalize_name(name) == canonicalize_name(
        wheel))
    return Needed(known, where, what, wheel=f"{wheel}=={version}")


def entry_lines(needed: tuple[Needed, ...]) -> list[str]:
    """build.libraries as recipe new writes it (under `build:`)."""
    entries = [n.entry_line() for n in needed if n.wheel is not None]
    return ["  libraries:", *entries] if entries else []
