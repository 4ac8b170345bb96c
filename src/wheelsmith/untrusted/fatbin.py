"""The CUDA fat binaries an ELF file holds (its `.nv_fatbin` section), read for what cuobjdump's
listing does not say: which cubins are family targets (`sm_120f`), which arch-specific
(`sm_120a`). cuobjdump lists a family cubin as `sm_120`, like a plain one.

The section is data: its containers and their entries' headers are read in place, within the
section and within bounds (no payload is read), and any magic, size or count that does not fit
ends the walk with what was read so far, or None: the caller then goes by cuobjdump's names.

A container: magic 0xBA55ED50, version, header size, and the size of its entries. An entry:
its kind (1 PTX, 2 ELF), header and payload sizes; at byte 24 the code version (minor, then
major: a PTX entry's PTX ISA version, 9.0 from CUDA 13.0; a cubin's ELF ABI, `code version =
[1,8]` in `cuobjdump -elf`), the compute capability at byte 28 (120), and at byte 40 flags
whose 0x100000 bit marks an arch-specific target, 0x200000 a family one (as `cuobjdump -elf`
names them: `arch = sm_120a`, `arch = sm_120f`), and 0x8000 (0x2000 in older toolkits) a
compressed payload.

A cubin says which toolkit compiled it in its `.note.nv.cuinfo` note (`cuobjdump -elf` prints
it as `toolkit=13.0`): owner "NVIDIA Corp", type 1000, and a description of a u16 note
version, the u16 compute capability and a u32 toolkit version times ten (130). An entry whose
payload is not compressed is that cubin, read in place (`toolkit_of`).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from wheelsmith.untrusted.elf import Tables, Window, section_span, tables
from wheelsmith.untrusted.local import open_regular

MAGIC = 0xBA55ED50
_CONTAINER = struct.Struct("<IHHQ")  # magic, version, header size, entries' size
_ENTRY = struct.Struct("<HHIQ")  # kind, version, header size, payload size
ENTRY_MIN = 48  # up to and including the flags
ENTRY_MAX = 4096
KINDS = {1: "PTX", 2: "ELF"}
ARCH_SPECIFIC, FAMILY = 0x100000, 0x200000
COMPRESSED = 0x8000 | 0x2000
NOTE_OWNER = b"NVIDIA Corp\0"
CUINFO_TYPE = 1000
ALIGN = 8
SCAN = 64  # bytes looked through for the next container past a container's end
MAX_ENTRIES = 1 << 20


@dataclass(frozen=True, slots=True)
class Entry:
    """One entry of a fat binary."""

    kind: str  # "ELF" (a cubin) or "PTX"
    arch: str  # "sm_120f"
    version: tuple[int, int]  # (major, minor): PTX ISA for PTX, the cubin's ELF ABI for ELF
    compressed: bool
    payload: tuple[int, int]  # (offset in the file, size)


def targets(path: Path) -> frozenset[tuple[str, str]] | None:
    """(`ELF` or `PTX`, `sm_120f`) for every entry of every fat binary in the ELF file at
    `path`; None where it holds no `.nv_fatbin` section that can be read."""
    found = entries(path)
    return None if found is None else frozenset((e.kind, e.arch) for e in found)


def entries(path: Path) -> frozenset[Entry] | None:
    """Every entry of every fat binary in the ELF file at `path`; None where it holds no
    `.nv_fatbin` section that can be read."""
    span = section_span(path, ".nv_fatbin")
    if span is None:
        return None
    with open_regular(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        start, length = span
        if start + length > size:
            return None
        return _walk(handle, start, start + length)


def toolkit_of(path: Path, entry: Entry) -> tuple[int, int] | None:
    """The toolkit (major, minor) the cubin of `entry` in the file at `path` was compiled by,
    read in place from its `.note.nv.cuinfo`; None for a compressed or PTX entry, or a note
    that cannot be read within bounds."""
    if entry.kind != "ELF" or entry.compressed:
        return None
    with open_regular(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        offset, length = entry.payload
        if offset + length > size:
            return None
        return cuinfo_toolkit(Tables.read(Window(handle, offset, length)))


def cubin_toolkit(path: Path) -> tuple[int, int] | None:
    """The toolkit (major, minor) of a cubin file (one `cuobjdump -xelf` extracted)."""
    with tables(path) as found:
        return cuinfo_toolkit(found)


def cuinfo_toolkit(found: Tables | None) -> tuple[int, int] | None:
    """The toolkit version a cubin's `.note.nv.cuinfo` note records."""
    section = found.named(".note.nv.cuinfo") if found is not None else None
    note = found.contents(section) if found is not None and section is not None else None
    if note is None or len(note) < 12:
        return None
    name_size, desc_size, kind = struct.unpack_from("<III", note)
    name_end = 12 + (name_size + 3) // 4 * 4
    if note[12:12 + name_size] != NOTE_OWNER or kind != CUINFO_TYPE or desc_size < 8 or \
            name_end + 8 > len(note):
        return None
    tenths = struct.unpack_from("<I", note, name_end + 4)[0]
    return (tenths // 10, tenths % 10) if 0 < tenths < 10000 else None


def _walk(handle: BinaryIO, pos: int, end: int) -> frozenset[Entry] | None:
    found: set[Entry] = set()
    read_any = False
    while pos + _CONTAINER.size <= end and len(found) < MAX_ENTRIES:
        head = _at(handle, pos, _CONTAINER.size)
        magic, _, header, entries = _CONTAINER.unpack(head)
        if magic != MAGIC:
            pos = _next_container(handle, pos, end)
            if pos < 0:
                break
            continue
        if header < _CONTAINER.size or pos + header + entries > end:
            return frozenset(found) if read_any else None
        found |= _entries(handle, pos + header, pos + header + entries)
        read_any = True
        pos += header + entries
    return frozenset(found) if read_any else None


def _next_container(handle: BinaryIO, pos: int, end: int) -> int:
    """The offset of the next container's magic within SCAN bytes of `pos` (aligned), or -1."""
    aligned = (pos + ALIGN - 1) // ALIGN * ALIGN
    window = _at(handle, aligned, min(SCAN, max(0, end - aligned)))
    for step in range(0, len(window) - 3, ALIGN):
        if struct.unpack_from("<I", window, step)[0] == MAGIC and aligned + step != pos:
            return aligned + step
    return -1


def _entries(handle: BinaryIO, pos: int, end: int) -> set[Entry]:
    found = set()
    while pos + ENTRY_MIN <= end:
        head = _at(handle, pos, ENTRY_MIN)
        kind, _, header, payload = _ENTRY.unpack_from(head)
        if not ENTRY_MIN <= header <= ENTRY_MAX or pos + header + payload > end:
            break
        minor, major, arch = struct.unpack_from("<HHI", head, 24)
        flags = struct.unpack_from("<Q", head, 40)[0]
        suffix = "a" if flags & ARCH_SPECIFIC else "f" if flags & FAMILY else ""
        if kind in KINDS:
            found.add(Entry(KINDS[kind], f"sm_{arch}{suffix}", (major, minor),
                            bool(flags & COMPRESSED), (pos + header, payload)))
        pos += header + payload
    return found


def _at(handle: BinaryIO, offset: int, length: int) -> bytes:
    handle.seek(offset)
    data = handle.read(length)
    return data if len(data) == length else b"\0" * length
