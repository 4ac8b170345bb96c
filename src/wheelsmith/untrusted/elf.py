"""ELF files a build wrote or a wheel holds: whether a file is one, the symbols its dynamic
symbol table defines (what `dlsym` finds in it: a Python extension module defines
`PyInit_<name>`, a shared library does not), and its sections (one by name; a cubin inside a
fat binary is read in place, as a window of the file that holds it). What it needs from other
libraries (DT_NEEDED, undefined symbols and their versions) is `untrusted.linkage`'s.

The file is data: its header, its section table and its `.dynsym` and string table are read
within bounds, and any offset, size or count that does not fit the file is "no symbols to
show" (None), never an exception or a read past a bound. 32- and 64-bit, either byte order:
a cross build's aarch64 objects are read like the host's.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Iterator
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
class Layout:
    """The struct formats of one ELF class and byte order."""

    header: struct.Struct  # after e_ident: e_type .. e_shstrndx
    section: struct.Struct  # sh_name .. sh_entsize
    symbol: struct.Struct  # st_name, st_info, st_other, st_shndx (st_value, st_size skipped)
    wide: bool
    order: str  # "<" or ">"

    @classmethod
    def of(cls, ident: bytes) -> Layout | None:
        """The layout e_ident names (EI_CLASS, EI_DATA); None for another file."""
        if len(ident) < 16 or not ident.startswith(ELF_MAGIC) or ident[4] not in (1, 2) \
                or ident[5] not in (1, 2):
            return None
        order, wide = "<" if ident[5] == 1 else ">", ident[4] == 2
        return cls(header=struct.Struct(order + ("HHIQQQIHHHHHH" if wide else "HHIIIIIHHHHHH")),
                   section=struct.Struct(order + ("IIQQQQIIQQ" if wide else "IIIIIIIIII")),
                   symbol=struct.Struct(order + ("IBBHQQ" if wide else "IIIBBH")), wide=wide,
                   order=order)

    def symbol_fields(self, entry: bytes) -> tuple[int, int, int, int]:
        """(st_name, st_info, st_other, st_shndx) of one symbol table entry."""
        fields = self.symbol.unpack(entry)
        return (fields[0], fields[1], fields[2], fields[3]) if self.wide else (
            fields[0], fields[3], fields[4], fields[5])


class Window:
    """`size` bytes of an open file from `base` on: the whole file, or an ELF file inside
    another (a cubin in a fat binary). Every read is checked against the window and the
    table bound."""

    def __init__(self, handle: BinaryIO, base: int, size: int) -> None:
        self.handle, self.base, self.size = handle, base, size

    def read(self, offset: int, length: int) -> bytes | None:
        """`length` bytes at `offset`, or None where they are not all in the window or past
        the table bound."""
        if offset < 0 or length < 0 or length > TABLE_MAX_BYTES or offset + length > self.size:
            return None
        self.handle.seek(self.base + offset)
        data = self.handle.read(length)
        return data if len(data) == length else None


@dataclass(frozen=True, slots=True)
class Tables:
    """An ELF file's layout and section table, each entry (sh_name, sh_type, sh_flags,
    sh_addr, sh_offset, sh_size, sh_link, sh_info, sh_addralign, sh_entsize)."""

    file: Window
    layout: Layout
    sections: list[tuple[int, ...]]

    @classmethod
    def read(cls, file: Window) -> Tables | None:
        layout = Layout.of(file.read(0, 16) or b"")
        sections = _sections(file, layout) if layout is not None else None
        return cls(file, layout, sections) if layout is not None and sections is not None \
            else None

    def contents(self, section: tuple[int, ...]) -> bytes | None:
        return self.file.read(section[4], section[5])

    def linked(self, section: tuple[int, ...]) -> bytes | None:
        """The contents of the section `section`'s sh_link names (its string table)."""
        return self.contents(self.sections[section[6]]) if 0 <= section[6] < len(
            self.sections) else None

    def of_type(self, kind: int) -> tuple[int, ...] | None:
        return next((s for s in self.sections if s[1] == kind), None)

    def named(self, name: str) -> tuple[int, ...] | None:
        head = self.file.read(16, self.layout.header.size)
        names_index = self.layout.header.unpack(head)[-1] if head else -1  # e_shstrndx
        if not 0 <= names_index < len(self.sections):
            return None
        names = self.contents(self.sections[names_index])
        wanted = name.encode() + b"\0"
        return next((s for s in self.sections
                     if names is not None and names[s[0]:s[0] + len(wanted)] == wanted), None)

    def symbols(self) -> Iterator[tuple[int, str, int, int, int]]:
        """(index, name, st_info, st_other, st_shndx) of each `.dynsym` entry whose name is
        in its string table; nothing where the table cannot be read."""
        dynsym = self.of_type(SHT_DYNSYM)
        data = self.contents(dynsym) if dynsym is not None else None
        strings = self.linked(dynsym) if dynsym is not None else None
        if data is None or strings is None:
            return
        size = self.layout.symbol.size
        for index, start in enumerate(range(0, len(data) - size + 1, size)):
            name, info, other, shndx = self.layout.symbol_fields(data[start:start + size])
            if 0 < name < len(strings):
                yield index, string_at(strings, name), info, other, shndx


def string_at(strings: bytes, offset: int) -> str:
    """The NUL-terminated string at `offset` (to the table's end where none ends it); bytes
    that are not UTF-8 escaped."""
    end = strings.find(b"\0", offset)
    return strings[offset:end if end >= 0 else len(strings)].decode("utf-8", "backslashreplace")


@contextlib.contextmanager
def tables(path: Path) -> Iterator[Tables | None]:
    """The tables of the ELF file at `path` (None: no ELF file, or not within bounds)."""
    with open_regular(path) as handle:
        yield Tables.read(Window(handle, 0, os.fstat(handle.fileno()).st_size))


def dynamic_symbols(path: Path) -> frozenset[str] | None:
    """The names the ELF file at `path` exports from its dynamic symbol table (defined, global
    or weak, visible); None when it is no ELF file or its tables cannot be read within bounds.
    A name that is not UTF-8 is kept with its bytes escaped."""
    with tables(path) as found:
        dynsym = found.of_type(SHT_DYNSYM) if found is not None else None
        if found is None or dynsym is None or found.contents(dynsym) is None or \
                found.linked(dynsym) is None:
            return None
        return frozenset(name for _, name, info, other, shndx in found.symbols()
                         if shndx != SHN_UNDEF and info >> 4 in EXPORTED_BINDINGS
                         and other & 3 in EXPORTED_VISIBILITIES)


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
    with tables(path) as found:
        section = found.named(name) if found is not None else None
        if found is None or section is None or section[4] + section[5] > found.file.size:
            return None
        return section[4], section[5]


def _sections(file: Window, layout: Layout) -> list[tuple[int, ...]] | None:
    """The section header table, each entry (sh_name, sh_type, ..., sh_entsize)."""
    head = file.read(16, layout.header.size)
    if head is None:
        return None
    *_, shoff, _, _, _, _, shentsize, shnum, _ = layout.header.unpack(head)
    if shentsize != layout.section.size or not 0 < shnum <= SECTIONS_MAX:
        return None
    table = file.read(shoff, shnum * shentsize)
    if table is None:
        return None
    return [layout.section.unpack_from(table, i * shentsize) for i in range(shnum)]
