"""CMake builds through the same machinery as torch's: a package whose build runs CMake
(scikit-build-core, scikit-build, or a setup.py that calls `cmake`) gets an environment in
which CMake writes a build.ninja that the pre-build check reads and the real ninja runs.

- `CMAKE_GENERATOR=Ninja` (CMake's default is Makefiles: no build.ninja to check, no ninja to
  stop). CMake finds `ninja` on PATH, where the pre-build check's launcher comes first;
  scikit-build-core names the `ninja` module's binary itself (CMAKE_MAKE_PROGRAM), so CMAKE_ARGS,
  which it passes after its own options, names the launcher again.
- one build directory, `build/cmake` in the source tree (SKBUILD_BUILD_DIR, and the recipe's
  `build.build_dir_env`, e.g. NATTEN_BUILD_DIR; else a temporary directory): an unfinished
  build resumes from it, its paths are the path view's, and the run facts read its ninja log.
- nvcc from the toolchain (CUDACXX), through the compile cache's or farm's wrapper where one
  is on (CMAKE_CUDA_COMPILER_LAUNCHER; the host compilers are the `c++`/`g++` launchers first
  on PATH), the prefix maps for the host compiles (CMake reads CFLAGS and CXXFLAGS, not
  CPPFLAGS), and `cmake --build`'s jobs from the plan (CMAKE_BUILD_PARALLEL_LEVEL; the
  launcher also sets ninja's -j).
- the arch list in CMake's words when the recipe says `arch.format: cmake` (model.py).
"""

from __future__ import annotations

import ast
import re
import shlex
from collections.abc import Mapping
from pathlib import Path

from wheelsmith.errors import UntrustedDataError
from wheelsmith.untrusted import parse_python

BUILD_DIR = Path("build") / "cmake"
BACKENDS = ("scikit_build_core", "skbuild")
ARGS = "CMAKE_ARGS"  # the options scikit-build(-core) passes to CMake's configure
_SKBUILD_SETUP_RE = re.compile(r"^\s*from skbuild import", re.MULTILINE)
# [build-system]'s key (read as text: no TOML parser in Python 3.10's standard library)
_BACKEND_RE = re.compile(r"""^build-backend\s*=\s*["']([\w.:]+)["']""", re.MULTILINE)


def backend(source: Path) -> str | None:
    """pyproject.toml's build-backend, or None."""
    try:
        match = _BACKEND_RE.search((source / "pyproject.toml").read_text(errors="replace"))
    except OSError:
        return None
    return match[1] if match else None


def cmake_call_line(setup_py: Path) -> int | None:
    """The first setup.py line that runs `cmake` (a list or string starting with it, or
    scikit-build's setup), else None. Read with ast, never run."""
    try:
        text = setup_py.read_text(errors="replace")
        module = parse_python(text, setup_py.name)
    except (OSError, UntrustedDataError):
        return None
    found = [n.lineno for n in ast.walk(module) if isinstance(n, ast.List | ast.Tuple)
             and n.elts and isinstance(n.elts[0], ast.Constant)
             and n.elts[0].value in ("cmake", "cmake3")]
    skbuild = _SKBUILD_SETUP_RE.search(text)
    if skbuild:
        found.append(text[:skbuild.start()].count("\n") + 1)
    return min(found, default=None)


def uses_cmake(source: Path) -> bool:
    """Whether the package's build runs CMake."""
    name = backend(source) or ""
    return name.split(".")[0] in BACKENDS or cmake_call_line(source / "setup.py") is not None


def cmake_env(env: Mapping[str, str], *, source: Path, nvcc: Path, jobs: int,
              launchers: Path | None, build_dir_env: str | None,
              prefix_flags: list[str]) -> dict[str, str]:
    """The variables a CMake build gets on top of `env` (the build's own, with the recipe's
    and the arch list's: a CMAKE_ARGS there is kept, after ours)."""
    build_dir = source / BUILD_DIR
    build_dir.mkdir(parents=True, exist_ok=True)  # natten takes NATTEN_BUILD_DIR only if it is
    wrapped = shlex.split(env.get("PYTORCH_NVCC", ""))
    ours = {"CMAKE_GENERATOR": "Ninja", "SKBUILD_BUILD_DIR": str(build_dir),
            "CUDACXX": str(nvcc), "CMAKE_BUILD_PARALLEL_LEVEL": str(jobs),
            "CFLAGS": " ".join([env.get("CFLAGS", ""), *prefix_flags]).strip(),
            "CXXFLAGS": " ".join([env.get("CXXFLAGS", ""), *prefix_flags]).strip()}
    if build_dir_env:
        ours[build_dir_env] = str(build_dir)
    if len(wrapped) == 2:  # the compile cache's or farm's `ccache nvcc`
        ours["CMAKE_CUDA_COMPILER_LAUNCHER"] = wrapped[0]
    options = [f"-DCMAKE_MAKE_PROGRAM={launchers / 'ninja'}"] \
        if launchers is not None and (launchers / "ninja").is_file() else []
    ours[ARGS] = " ".join([*options, env.get(ARGS, "")]).strip()
    return ours
