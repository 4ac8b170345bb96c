"""The sample compile (`build --check`, `recipe new`'s check): a configured build shown to
compile, for the price of two objects per extension.

Configuring proves little: a package's flags can still fail at its first object (mamba-ssm's
`-std=c++17` against torch 2.14's headers, which need C++20). With WHEELSMITH_SAMPLE_COMPILE
the pre-build check (prebuild.py), once it has read an extension's build.ninja in a
configure-only build, has the real ninja compile two of its objects with build.ninja's own
flags: the cheapest host (C++) object and the cheapest CUDA object, each by an earlier run's
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

from wheelsmith.build.diagnose import first_error
from wheelsmith.build.ninjafile import CUDA, HOST, Unit, units

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


def weight(source: Path, search: list[Path]) -> int:
    """Bytes of `source` and of every header it includes with quotes, found beside the file
    that includes it or in `search` (each counted once): what the compiler front end reads of
    the package's own code."""
    seen: set[Path] = set()
    todo = [source]
    total = 0
    while todo and len(seen) < MAX_HEADERS:
        path = todo.pop()
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        text = path.read_text(errors="replace")
        total += len(text.encode())
        for name in _INCLUDE_RE.findall(text):
            found = next((d / name for d in [path.parent, *search] if (d / name).is_file()),
                         None)
            if found is not None:
                todo.append(found.resolve())
    return total


def choose(ninja_text: str, directory: Path, seconds: Mapping[str, float]) -> tuple[Unit, ...]:
    """The cheapest object of each rule: by `seconds` (keyed by the object's path under the
    build directory, as resume.object_seconds names them) where some are timed, else by
    `weight`; ties go to the first in build.ninja."""
    every = units(ninja_text)
    search = include_dirs(ninja_text)
    chosen = []
    for rule in RULES:
        candidates = [u for u in every if u.rule == rule]
        timed = [u for u in candidates if u.as_dict(directory)["object"] in seconds]
        if timed:
            chosen.append(min(timed, key=lambda u: seconds[u.as_dict(directory)["object"]]))
        elif candidates:
            chosen.append(min(candidates, key=lambda u: weight(directory / u.source, search)))
    return tuple(chosen)


def compile_sample(real_ninja: str, argv: list[str], ninja_file: Path,
                   chosen: tuple[Unit, ...]) -> int:
    """Compile `chosen` with the real ninja as torch asked for the whole build (`argv`: its
    -v, -j and any -C), so with build.ninja's own commands; the output goes to the build log.
    0, or FAILED after the line that says which object failed and the compiler's first
    error."""
    if not chosen:
        return 0
    names = ", ".join(Path(u.output).name for u in chosen)
    sys.stderr.write(f"{STARTED_LINE}{names} of {ninja_file.resolve()}\n")
    sys.stderr.flush()
    done = subprocess.run([real_ninja, *argv, *(u.output for u in chosen)],  # noqa: TID251 - a launcher inside the package's build, stdlib only
                          capture_output=True, text=True, check=False)
    output = done.stdout + done.stderr
    sys.stderr.write(output)
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
