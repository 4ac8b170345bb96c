"""The sample compile (`build --check`, `recipe new`'s check): a configured build shown to
compile, for the price of its host objects and a few CUDA ones per extension.

Configuring proves little: a package's flags can still fail at its first object (mamba-ssm's
`-std=c++17` against torch 2.14's headers, which need C++20). With WHEELSMITH_SAMPLE_COMPILE
the pre-build check (prebuild.py), once it has read an extension's build.ninja in a
configure-only build, has the real ninja compile some of its objects with build.ninja's own
flags: every host (C++) object (cheap beside the CUDA ones), the cheapest CUDA object, and the
cheapest CUDA object that reads each file of the package's own defining a function named as one
C++20 gave std (diagnose.CXX20_NAMES: `lerp` clashes with std::lerp where a call also finds
std's; only compiling it shows whether it does). The cheapest by an earlier run's
seconds when the work directory holds them (resume.earlier_object_seconds), else by source
size counted with the headers it includes from its own tree (`#include "..."`: mamba-ssm's nine
`.cu` files are 400-byte wrappers of a forward or a much heavier backward kernel header). The
rest of the build is stood in for as in any configure-only build. A sample that fails stops
the build with a line that names the object, its source and the compiler's first error
(file:line); the caller checks the CUDA sample's device code with cuobjdump (compile.py).

Standard library only: it runs inside the package's build, in the launcher's Python.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from wheelsmith.builder.diagnose import CXX20_NAMES, first_error
from wheelsmith.builder.ninjafile import CUDA, HOST, Unit, units

SAMPLE = "WHEELSMITH_SAMPLE_COMPILE"
FAILED = 89
STARTED_LINE = "wheelsmith sample compile: "
FAILED_LINE = "wheelsmith sample compile failed: "
RULES = (HOST, CUDA)  # a host and a CUDA object, whichever generator wrote build.ninja
MAX_HEADERS = 2000  # a bound on the include walk of one source

_INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)
_FAILED_RE = re.compile(r"^FAILED: (?:\[code=\d+\] )?(\S+)", re.MULTILINE)  # ninja 1.11, 1.12+
_INCLUDE_DIR_RE = re.compile(r"(?:^|\s)-I\s*(\S+)")


def include_dirs(ninja_text: str) -> list[Path]:
    """The -I directories of build.ninja's flags, in order."""
    return [Path(m[1].strip("'\"")) for m in _INCLUDE_DIR_RE.finditer(ninja_text)]


def own_files(source: Path, search: list[Path]) -> list[Path]:
    """`source` and every header it includes with quotes, found beside the file that includes
    it or in `search` (each once): the package's own code the compiler front end reads."""
    seen: dict[Path, None] = {}
    todo = [source]
    while todo and len(seen) < MAX_HEADERS:
        path = todo.pop()
        if path in seen or not path.is_file():
            continue
        seen[path] = None
        for name in _INCLUDE_RE.findall(path.read_text(errors="replace")):
            found = next((d / name for d in [path.parent, *search] if (d / name).is_file()),
                         None)
            if found is not None:
                todo.append(found.resolve())
    return list(seen)


def weight(source: Path, search: list[Path]) -> int:
    """Bytes of `source` and of its own headers (`own_files`)."""
    return sum(len(path.read_bytes()) for path in own_files(source, search))


# a definition (a body follows its parameter list) of a function named as one C++20 added to
# std: `__device__ inline float lerp(float a, float b, float t) {`
_DEFINES_RE = re.compile(r"^[^\n;#=]*?\b(" + "|".join(CXX20_NAMES) +
                         r")\s*\([^;{}]*\)\s*(?:const\s*)?(?:noexcept\s*)?\{", re.MULTILINE)


def clash_at_risk(source: Path, search: list[Path]) -> tuple[Path, int, str] | None:
    """Where the package's own code of `source` (the source and its own headers) defines a
    function with the name of one C++20 added to std (diagnose.CXX20_NAMES): (file, line,
    name); None when it defines none."""
    for path in own_files(source, search):
        text = path.read_text(errors="replace")
        found = _DEFINES_RE.search(text)
        if found:
            return path, text.count("\n", 0, found.start(1)) + 1, found[1]
    return None


def choose(ninja_text: str, directory: Path, seconds: Mapping[str, float]) -> tuple[Unit, ...]:
    """What the check compiles of one build.ninja: every host object (cheap beside the CUDA
    ones), the cheapest CUDA object, and, for each of the package's own files that defines a
    function with a C++20 std name (`clash_at_risk`), the cheapest CUDA object that reads it
    (that clash compiles in no other object the sample would pick). Cheapest: by `seconds`
    (keyed by the object's path under the build directory, as resume.object_seconds names
    them) where some are timed, else by `weight`; ties go to the first in build.ninja."""
    every = units(ninja_text)
    search = include_dirs(ninja_text)

    def cost(unit: Unit) -> tuple[int, float]:
        timed = seconds.get(unit.as_dict(directory)["object"])
        return (0, timed) if timed is not None else (1, weight(directory / unit.source, search))

    cuda = sorted((u for u in every if u.rule == CUDA), key=cost)
    chosen = [u for u in every if u.rule == HOST] + cuda[:1]
    risky: dict[Path, Unit] = {}
    for unit in cuda:
        found = clash_at_risk(directory / unit.source, search)
        if found is not None:
            risky.setdefault(found[0], unit)  # cuda is cheapest first
    return tuple(dict.fromkeys([*chosen, *risky.values()]))


def compile_sample(real_ninja: str, argv: list[str], ninja_file: Path,
                   chosen: tuple[Unit, ...], extension: str) -> int:
    """Compile `chosen` with the real ninja as torch asked for the whole build (`argv`: its
    -v, -j and any -C), so with build.ninja's own commands; the output goes to the build log
    line by line as ninja writes it (its `[N/M]` lines are the check's progress), after the
    line that names the extension and its samples. 0, or FAILED after the line that says which
    object failed and the compiler's first error."""
    if not chosen:
        return 0
    names = ", ".join(Path(u.output).name for u in chosen)
    sys.stderr.write(f"{STARTED_LINE}{extension}: {names} of {ninja_file.resolve()}\n")
    sys.stderr.flush()
    with subprocess.Popen([real_ninja, *argv, *(u.output for u in chosen)],  # noqa: TID251 - a launcher inside the package's build, stdlib only
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace") as done:
        said: list[str] = []
        for line in done.stdout or ():
            said.append(line)
            sys.stderr.write(line)
            sys.stderr.flush()
    output = "".join(said)
    if done.returncode == 0:
        return 0
    stopped = _FAILED_RE.search(output)  # the step ninja saw fail first, and its output
    failed = next((u for u in chosen if stopped and stopped[1] == u.output), chosen[-1])
    step = output[stopped.end():] if stopped else output
    error = first_error(step) or f"ninja exited {done.returncode}"
    where = failed.as_dict(ninja_file.parent.resolve())["object"]
    sys.stderr.write(f"{FAILED_LINE}{where} ({failed.source}): {error}\n")
    return FAILED


def sampled_text(record: dict[str, Any]) -> str:
    """`, compiled a.o and b.o` for an extension whose sample compiled (build --check)."""
    names = [Path(unit["object"]).name for unit in record.get("samples", [])]
    return f", compiled {' and '.join(names)}" if names else ""
