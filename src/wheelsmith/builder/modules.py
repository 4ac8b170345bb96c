"""A wheel's compiled extension modules, for its smoke test: every shared object its RECORD
lists, as the dotted name Python imports it by, told apart from shared libraries that are
no Python module (`libfoo.so`, loaded by the modules that link it or by ctypes).

A shared object is a module where its path names one (folders that are package names, then
`NAME.so` or `NAME.<ABI tag>.so`: `name.cpython-311-x86_64-linux-gnu.so`, `name.abi3.so`) and
it exports `PyInit_NAME` (untrusted/elf.py): the name alone is no evidence, since a ctypes
library built as a setuptools Extension gets the ABI tag too (tiny-cmake's
`libtinycmake.cpython-311-x86_64-linux-gnu.so`). A Windows `.pyd` (a PE file, not read here)
is a module by its name. Anything under a folder that is no package name (`pkg.libs/`,
`.dist-info/`), or whose name is no identifier, cannot be imported by a dotted name: a library.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from wheelsmith.errors import VerifyError
from wheelsmith.inventory import is_shared_object
from wheelsmith.untrusted import elf

# the name's ABI tag: CPython's (cpython-311-x86_64-linux-gnu, cp311-win_amd64), the stable
# ABI's (abi3) or PyPy's (pypy39-pp73-x86_64-linux-gnu)
_TAGGED = re.compile(r"(?P<stem>[^.]+)\.(?:cpython-[^.]+|cp\d+-[^.]+|abi3|pypy[^.]+)\.(?:so|pyd)")
_PLAIN = re.compile(r"(?P<stem>[^.]+)\.(?:so|pyd)")

Evidence = Callable[[str, str], bool]  # (RECORD path, symbol): whether the file exports it


@dataclass(frozen=True, slots=True)
class Module:
    """A compiled extension module: its dotted name and its RECORD path."""

    name: str
    path: str


@dataclass(frozen=True, slots=True)
class Library:
    """A shared object that is no Python module: its RECORD path and how that is known."""

    path: str
    why: str


@dataclass(frozen=True, slots=True)
class Compiled:
    """The shared objects of a RECORD: the extension modules (by name) and the libraries."""

    modules: tuple[Module, ...]
    libraries: tuple[Library, ...]


def record_paths(record: str) -> list[str]:
    """The paths a RECORD (CSV: path, hash, size) lists, in its order."""
    return [row[0] for row in csv.reader(io.StringIO(record)) if row and row[0]]


def module_name(path: str, exports: Evidence) -> str | None:
    """The dotted name Python imports the shared object at RECORD `path` by, or None for a
    library (see the module's docstring)."""
    named = _named(path)
    if named is None or (path.endswith(".so") and not exports(path, f"PyInit_{named[1]}")):
        return None
    return named[0]


def why_no_module(path: str) -> str:
    """Why the shared object at `path`, which `module_name` found no module, is a library."""
    named = _named(path)
    if named is None:
        return "its path names no module a dotted name imports"
    return f"it exports no PyInit_{named[1]}"


def _named(path: str) -> tuple[str, str] | None:
    """The dotted name and the last part that `path` would be imported by as an extension
    module, or None where no import reaches it."""
    *folders, base = path.split("/")
    match = _TAGGED.fullmatch(base) or _PLAIN.fullmatch(base)
    if match is None or not all(part.isascii() and part.isidentifier()
                                for part in [*folders, match["stem"]]):
        return None
    return ".".join([*folders, match["stem"]]), match["stem"]


def compiled(record: str, exports: Evidence) -> Compiled:
    """The RECORD's shared objects and `.pyd` files: each module (one per name, by name) and
    each library (by path)."""
    modules: dict[str, Module] = {}
    libraries = []
    for path in record_paths(record):
        if not (is_shared_object(path) or path.endswith(".pyd")):
            continue
        name = module_name(path, exports)
        if name is None:
            libraries.append(Library(path, why_no_module(path)))
        else:
            modules.setdefault(name, Module(name, path))
    return Compiled(tuple(sorted(modules.values(), key=lambda m: m.name)),
                    tuple(sorted(libraries, key=lambda library: library.path)))


def installed(site: Path) -> Compiled:
    """The compiled modules and libraries of the one distribution pip installed into `site`
    (`--target`), by its RECORD, each plain `.so` judged by the symbols it exports."""
    records = sorted(site.glob("*.dist-info/RECORD"))
    if len(records) != 1:
        raise VerifyError(f"pip installed {len(records)} distributions into {site}, expected "
                          "the wheel's one", findings=[str(r.parent.name) for r in records])
    return compiled(records[0].read_text(encoding="utf-8"),
                    lambda path, symbol: elf.defines(site / path, symbol))
