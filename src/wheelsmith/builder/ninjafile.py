"""A generated build.ninja as wheelsmith reads it, whichever generator wrote it.

torch's BuildExtension writes one per extension, with two compile rules: `compile` (the host
C++) and `cuda_compile`. CMake's Ninja generator writes one per project, its rules in
CMakeFiles/rules.ninja and named per target and language: `CXX_COMPILER__<target>_<config>`,
`C_COMPILER__...`, `CUDA_COMPILER__...` (the config part differs between CMake releases). Both
give each object's flags on its statement or in its rule, so the arch targets of the CUDA
objects are read from the same text (`--generate-code=arch=compute_120,code=[sm_120]` from
CMake, `-gencode=arch=compute_120,code=sm_120` from torch; gencode.gencode_targets).

Every compile statement is read as its object, its source and its kind, named by torch's rule
names whichever generator wrote it (HOST `compile`, CUDA `cuda_compile`), so the pre-build
check, the sample compile, longest first and the run facts serve both. CMake also runs ninja
for the small projects of its configure checks (try_compile, in CMakeFiles/CMakeScratch or
CMakeTmp): those are CMake's own and handed straight to the real ninja.

Standard library only: it runs inside the package's build, in the launcher's Python.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

HOST = "compile"
CUDA = "cuda_compile"
_DRY_RUN_STEP_RE = re.compile(r"^\[\d+/(\d+)\]", re.MULTILINE)
_STATEMENT_RE = re.compile(
    r"^build ((?:[^\s$:]|\$.)+): (cuda_compile|compile|(?:CUDA|CXX|C)_COMPILER__\S*) "
    r"((?:[^\s$]|\$.)+)", re.MULTILINE)
_CMAKE_RE = re.compile(r"^include CMakeFiles/rules\.ninja$", re.MULTILINE)
_LINK_RE = re.compile(r"^build ((?:[^\s$:]|\$.)+): \w+_(?:SHARED|MODULE)_LIBRARY_LINKER__\S* "
                      r"([^|\n]*)", re.MULTILINE)
_TARGET_RE = re.compile(r"(?:^|/)CMakeFiles/([^/]+)\.dir/")
_NAME_RE = re.compile(r"-DTORCH_EXTENSION_NAME=(\w+)")
TRY_COMPILE_DIRS = ("CMakeScratch", "CMakeTmp")  # CMake's configure checks build here


@dataclass(frozen=True, slots=True)
class Unit:
    """One compile statement."""

    output: str  # the object, as build.ninja names it (its escapes undone)
    source: str
    rule: str  # HOST or CUDA, whichever generator wrote the statement

    def as_dict(self, build_dir: Path) -> dict[str, str]:
        return {"object": self.output.split(f"/{build_dir.name}/", 1)[-1],
                "path": str(build_dir / self.output), "source": self.source, "rule": self.rule}


def unescape(text: str) -> str:
    return re.sub(r"\$(.)", r"\1", text)


def _kind(rule: str) -> str:
    return CUDA if rule == CUDA or rule.startswith("CUDA_COMPILER__") else HOST


def units(ninja_text: str) -> list[Unit]:
    """The compile statements, in the file's order."""
    return [Unit(unescape(m[1]), unescape(m[3]), _kind(m[2]))
            for m in _STATEMENT_RE.finditer(ninja_text)]


def output_of(statement: str) -> str | None:
    """The object a compile statement (a `build` line and its indented lines) makes."""
    match = _STATEMENT_RE.match(statement)
    return unescape(match[1]) if match else None


def count_units(ninja_text: str) -> tuple[int, int]:
    """CUDA and host translation units."""
    kinds = [unit.rule for unit in units(ninja_text)]
    return kinds.count(CUDA), kinds.count(HOST)


def has_cuda(ninja_text: str) -> bool:
    return any(unit.rule == CUDA for unit in units(ninja_text))


def from_cmake(ninja_text: str) -> bool:
    """Whether CMake's Ninja generator wrote it."""
    return _CMAKE_RE.search(ninja_text) is not None


def try_compile(ninja_file: Path) -> bool:
    """A build.ninja of one of CMake's configure checks."""
    return any(part in TRY_COMPILE_DIRS for part in ninja_file.resolve().parts)


def extension_name(ninja_text: str) -> str | None:
    """What a build.ninja builds: torch's -DTORCH_EXTENSION_NAME (a CMake project that links
    torch may define it too), else the CMake targets with CUDA objects (`ggml-cuda`)."""
    match = _NAME_RE.search(ninja_text)
    if match:
        return match[1]
    targets = [m[1] for unit in units(ninja_text) if unit.rule == CUDA
               for m in [_TARGET_RE.search(unit.output)] if m]
    return ", ".join(dict.fromkeys(targets)) or None


def host_libraries(ninja_text: str) -> list[str]:
    """The file names of the shared libraries a CMake project links from no CUDA object (its
    CPU parts beside the CUDA one: llama.cpp's libllama.so beside libggml-cuda.so): they carry
    no device code on purpose."""
    cuda = {unit.output for unit in units(ninja_text) if unit.rule == CUDA}
    return [Path(unescape(m[1])).name.split(".so")[0] + ".so"  # its version dropped
            for m in _LINK_RE.finditer(ninja_text)
            if not cuda & {unescape(i) for i in m[2].split()}]


DRY_RUN_S = 300.0  # ninja's dry run of a build.ninja: it compiles nothing


def already_built(real: str, argv: list[str], ninja_file: Path) -> str | None:
    """`K/N objects already built` when an unfinished build left K of the N compiles done
    (resume.py), else None. ninja's own dry run says what it will compile: an object whose
    compiler did not exit 0 has no entry in .ninja_log and is compiled again. A dry run past
    DRY_RUN_S says nothing either (the build then compiles what ninja finds to do)."""
    if not (ninja_file.parent / ".ninja_log").is_file():
        return None
    total = sum(count_units(ninja_file.read_text(errors="replace")))
    try:
        dry = subprocess.run([real, "-n", *argv], capture_output=True, text=True,  # noqa: TID251 - inside the package's build, stdlib only
                             check=False, timeout=DRY_RUN_S)
    except subprocess.TimeoutExpired:
        return None
    if dry.returncode != 0:
        return None
    steps = _DRY_RUN_STEP_RE.search(dry.stdout)
    done = total - (int(steps[1]) if steps else 0)
    return f"{done}/{total} objects already built" if 0 < done <= total else None
