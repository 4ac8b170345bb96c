"""ELF files a build wrote or a wheel holds: whether a file is one, and the symbols its dynamic
symbol table defines (what `dlsym` finds in it: a Python extension module defines
`PyInit_<name>`, a shared library does not).

The file is data: its header, its section table and its `.dynsym` and string table are read
within bounds, and any offset, size or count that does not fit the file is "no symbols to
show" (None), never an exception or a read past a bound. 32- and 64-bit, either byte order:
a cross build's aarch64 objects are read like the host's.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from wheelsmith.untrusted.local import open_regular, read_at_most

ELF_MAGIC = b"\x7fELF"
TABLE_MAX_BYTES = 64 << 20  # a .dynsym or its strings; a large torch extension's are a few MB
SECTIONS_MAX = 1 << 16
SHT_DYNSYM = 11
SHN_UNDEF = 0
EXPORTED_BINDINGS = (1, 2, 10)  # STB_GLOBAL, STB_WEAK, STB_GNU_UNIQUE
EXPORTED_VISIBILITIES = (0, 3)  # STV_DEFAULT, STV_PROTECTED


def is_elf(path: Path, *, follow: bool = True) -> bool:
    """Whether the regular file at `path` starts with the ELF magic."""
    return read_at_most(path, len(ELF_MAGIC), follow=follow).startswith(ELF_MAGIC)


@dataclass(frozen=True, slots=True)
class _Layout:
    """The struct formats of one ELF class and byte order."""

    header: struct.Struct  # after e_ident: e_type .. e_shstrndx
    section: struct.Struct  # sh_name .. sh_entsize
    symbol: struct.Struct  # st_name, st_info, st_other, st_shndx (st_value, st_size skipped)
    wide: bool

    @classmethod
    def of(cls, ident: bytes) -> _Layout | None:
        """The layout e_ident names (EI_CLASS, EI_DATA); None for another file."""
        if len(ident) < 16 or not ident.startswith(ELF_MAGIC) or ident[4] not in (1, 2) \
                or ident[5] not in (1, 2):
            return None
        order, wide = "<" if ident[5] == 1 else ">", ident[4] == 2
        return cls(header=struct.Struct(order + ("HHIQQQIHHHHHH" if wide else "HHIIIIIHHHHHH")),
                   section=struct.Struct(order + ("IIQQQQIIQQ" if wide else "IIIIIIIIII")),
                   symbol=struct.Struct(order + ("IBBHQQ" if wide else "IIIBBH")), wide=wide)

    def symbol_fields(self, entry: bytes) -> tuple[int, int, int, int]:
        """(st_name, st_info, st_other, st_shndx) of one symbol table entry."""
        fields = self.symbol.unpack(entry)
        return (fields[0], fields[1], fields[2], fields[3]) if self.wide else (
            fields[0], fields[3], fields[4], fields[5])


def dynamic_symbols(path: Path) -> frozenset[str] | None:
    """The names the ELF file at `path` exports from its dynamic symbol table (defined, global
    or weak, visible); None when it is no ELF file or its tables cannot be read within bounds.
    A name that is not UTF-8 is kept with its bytes escaped."""
    with open_regular(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        return _exported(handle, size)


def defines(path: Path, symbol: str) -> bool:
    """Whether the ELF file at `path` exports `symbol` (the evidence; False where none, or
    no file)."""
    try:
        return symbol in (dynamic_symbols(path) or frozenset())
    except FileNotFoundError:
        return False


def section_span(path: Path, name: str) -> tuple[int, int] | None:
    """(offset, size) of the section called `name` in the ELF file at `path` (its contents are
    not read: a fat binary section runs to hundreds of MB); None where there is none or the
    tables cannot be read within bounds."""
    with open_regular(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        layout = _Layout.of(_read(handle, size, 0, 16) or b"")
        sections = _sections(handle, size, layout) if layout is not None else None
        head = _read(handle, size, 16, layout.header.size) if layout is not None else None
        if layout is None or sections is None or head is None:
            return None
        names_index = layout.header.unpack(head)[-1]  # e_shstrndx
        if not 0 <= names_index < len(sections):
            return None
        names = _read(handle, size, sections[names_index][4], sections[names_index][5])
        wanted = name.encode() + b"\0"
        for section in sections:
            at = section[0]
            if names is not None and names[at:at + len(wanted)] == wanted:
                return (section[4], section[5]) if section[4] + section[5] <= size else None
    return None


def _read(handle: BinaryIO, size: int, offset: int, length: int) -> bytes | None:
    """`length` bytes at `offset`, or None where they are not all in the file or past the
    table bound."""
    if offset < 0 or length < 0 or length > TABLE_MAX_BYTES or offset + length > size:
        return None
    handle.seek(offset)
    data = handle.read(length)
    return data if len(data) == length else None


def _exported(handle: BinaryIO, size: int) -> frozenset[str] | None:
    layout = _Layout.of(_read(handle, size, 0, 16) or b"")
    sections = _sections(handle, size, layout) if layout is not None else None
    if layout is None or sections is None:
        return None
    dynsym = next((s for s in sections if s[1] == SHT_DYNSYM), None)
    if dynsym is None or not 0 <= dynsym[6] < len(sections):
        return None
    strings_section = sections[dynsym[6]]  # sh_link: its string table
    symbols = _read(handle, size, dynsym[4], dynsym[5])
    strings = _read(handle, size, strings_section[4], strings_section[5])
    if symbols is None or strings is None:
        return None
    return _names(layout, symbols, strings)


def _sections(handle: BinaryIO, size: int, layout: _Layout) -> list[tuple[int, ...]] | None:
    """The section header table, each entry (sh_name, sh_type, ..., sh_entsize)."""
    head = _read(handle, size, 16, layout.header.size)
    if head is None:
        return None
    *_, shoff, _, _, _, _, shentsize, shnum, _ = layout.header.unpack(head)
    if shentsize != layout.section.size or not 0 < shnum <= SECTIONS_MAX:
        return None
    table = _read(handle, size, shoff, shnum * shentsize)
    if table is None:
        return None
    return [layout.section.unpack_from(table, i * shentsize) for i in range(shnum)]


def _names(layout: _Layout, symbols: bytes, strings: bytes) -> frozenset[str]:
    found = set()
    for start in range(0, len(symbols) - layout.symbol.size + 1, layout.symbol.size):
        name, info, other, shndx = layout.symbol_fields(
            symbols[start:start + layout.symbol.size])
        if shndx == SHN_UNDEF or info >> 4 not in EXPORTED_BINDINGS or \
                other & 3 not in EXPORTED_VISIBILITIES or not 0 < name < len(strings):
            continue
        end = strings.find(b"\0", name)
        found.add(strings[name:end if end >= 0 else len(strings)].decode(
            "utf-8", "backslashreplace"))
    return frozenset(found)
