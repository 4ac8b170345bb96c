"""What an ELF shared object needs from others, as its dynamic section says: the libraries it
names (DT_NEEDED), the symbols it leaves undefined, and the version each of those asks for
(`.gnu.version` and `.gnu.version_r`: `__libc_single_threaded` at GLIBC_2.32 of libc.so.6).

Read within bounds like `untrusted.elf`: a table that does not fit its file, a count or a link
that points outside its table, ends the read with what was read so far or with None ("no
linkage to show"), never an exception or a read past a bound. A version-needs chain is walked
at most as many steps as its section has room for, so a chain that loops ends.
"""

from __future__ import annotations

import shutil
import struct
from dataclasses import dataclass
from pathlib import Path

from wheelsmith import cmd
from wheelsmith.errors import CommandError, UntrustedDataError
from wheelsmith.untrusted import tool_bounds
from wheelsmith.untrusted.elf import SHN_UNDEF, SHT_DYNSYM, Tables, string_at, tables

SHT_DYNAMIC = 6
SHT_GNU_VERNEED = 0x6FFFFFFE
SHT_GNU_VERSYM = 0x6FFFFFFF
DT_NULL, DT_NEEDED, DT_RPATH, DT_RUNPATH = 0, 1, 15, 29
IMPORTED_BINDINGS = {1: False, 2: True}  # STB_GLOBAL, STB_WEAK (weak: may stay unresolved)
VERSION_INDEX = 0x7FFF  # the low bits of a .gnu.version entry (0x8000: hidden)
AUX_SIZE = 16  # Elf_Verneed and Elf_Vernaux, either class


@dataclass(frozen=True, slots=True)
class Import:
    """A symbol the object uses and does not define."""

    name: str  # as the object names it (mangled)
    version: str | None  # the version it asks for ("GLIBC_2.32"); None: unversioned
    library: str | None  # the library that version belongs to (`.gnu.version_r`'s file)
    weak: bool  # a weak reference: the loader leaves it null where nothing defines it


@dataclass(frozen=True, slots=True)
class Linkage:
    """An object's dynamic linkage."""

    needed: tuple[str, ...]  # DT_NEEDED, in order
    imports: tuple[Import, ...]
    versions: dict[str, tuple[str, ...]]  # library -> the versions it is asked for
    runpath: tuple[str, ...] = ()  # DT_RUNPATH (else DT_RPATH), as written: `$ORIGIN/../lib`


def linkage(path: Path) -> Linkage | None:
    """The linkage of the ELF file at `path`; None when it is no ELF file or its dynamic
    symbol table cannot be read within bounds (an object with no `.dynamic` needs nothing)."""
    with tables(path) as found:
        if found is None:
            return None
        needs = _version_needs(found)
        versym = found.of_type(SHT_GNU_VERSYM)
        indices = found.contents(versym) if versym is not None else None
        imports = []
        read_any = False
        for index, name, info, _, shndx in found.symbols():
            read_any = True
            if shndx != SHN_UNDEF or info >> 4 not in IMPORTED_BINDINGS:
                continue
            version, library = needs.get(_version_index(found, indices, index), (None, None))
            imports.append(Import(name, version, library, IMPORTED_BINDINGS[info >> 4]))
        if not read_any and found.of_type(SHT_DYNSYM) is not None:
            return None
        versions: dict[str, list[str]] = {}
        for version, library in needs.values():
            versions.setdefault(library, []).append(version)
        dynamic = _dynamic(found)
        paths = dynamic.get(DT_RUNPATH) or dynamic.get(DT_RPATH) or []
        return Linkage(tuple(dynamic.get(DT_NEEDED, [])), tuple(imports),
                       {lib: tuple(sorted(v)) for lib, v in sorted(versions.items())},
                       tuple(part for path in paths for part in path.split(":") if part))


def _version_index(found: Tables, indices: bytes | None, symbol: int) -> int:
    if indices is None or 2 * symbol + 2 > len(indices):
        return 1  # unversioned
    return int(struct.unpack_from(found.layout.order + "H", indices, 2 * symbol)[0]) & \
        VERSION_INDEX


def _dynamic(found: Tables) -> dict[int, list[str]]:
    """The names DT_NEEDED, DT_RPATH and DT_RUNPATH entries give, in order, up to DT_NULL or
    the section's end."""
    dynamic = found.of_type(SHT_DYNAMIC)
    data = found.contents(dynamic) if dynamic is not None else None
    strings = found.linked(dynamic) if dynamic is not None else None
    if dynamic is None or data is None or strings is None:
        return {}
    entry = struct.Struct(found.layout.order + ("qQ" if found.layout.wide else "iI"))
    names: dict[int, list[str]] = {}
    for start in range(0, len(data) - entry.size + 1, entry.size):
        tag, value = entry.unpack_from(data, start)
        if tag == DT_NULL:
            break
        if tag in (DT_NEEDED, DT_RPATH, DT_RUNPATH) and 0 <= value < len(strings):
            names.setdefault(tag, []).append(string_at(strings, value))
    return names


def _version_needs(found: Tables) -> dict[int, tuple[str, str]]:
    """Each version index `.gnu.version_r` defines -> (version, library)."""
    section = found.of_type(SHT_GNU_VERNEED)
    data = found.contents(section) if section is not None else None
    strings = found.linked(section) if section is not None else None
    if section is None or data is None or strings is None:
        return {}
    order = found.layout.order
    needs: dict[int, tuple[str, str]] = {}
    at, steps = 0, len(data) // AUX_SIZE
    for _ in range(min(section[7], steps)):  # sh_info: the number of entries
        if at + AUX_SIZE > len(data):
            break
        _, count, file, aux, following = struct.unpack_from(order + "HHIII", data, at)
        library = string_at(strings, file) if file < len(strings) else "?"
        where = at + aux
        for _ in range(min(count, steps)):
            if where + AUX_SIZE > len(data):
                break
            _, _, index, name, step = struct.unpack_from(order + "IHHII", data, where)
            if name < len(strings):
                needs[index & VERSION_INDEX] = (string_at(strings, name), library)
            if step == 0:
                break
            where += step
        if following == 0:
            break
        at += following
    return needs


def demangle(symbols: list[str]) -> dict[str, str]:
    """Each C++ symbol's demangled name, by c++filt (binutils); names as they are where it
    is not installed or fails."""
    tool = shutil.which("c++filt")
    if not symbols or tool is None:
        return {}
    try:
        answer = cmd.run([tool, *symbols], stream=False, what=f"c++filt ({tool})",
                         bounds=tool_bounds())
    except (CommandError, UntrustedDataError):
        return {}
    lines = answer.stdout.splitlines()
    return dict(zip(symbols, lines, strict=False)) if len(lines) == len(symbols) else {}
