"""The CUDA fat binaries an ELF file holds (its `.nv_fatbin` section), read for what cuobjdump's
listing does not say: which cubins are family targets (`sm_120f`), which arch-specific
(`sm_120a`). cuobjdump lists a family cubin as `sm_120`, like a plain one.

The section is data: its containers and their entries' headers are read in place, within the
section and within bounds (no payload is read), and any magic, size or count that does not fit
ends the walk with what was read so far, or None: the caller then goes by cuobjdump's names.

A container: magic 0xBA55ED50, version, header size, and the size of its entries. An entry:
its kind (1 PTX, 2 ELF), header and payload sizes; the compute capability at byte 28 (120),
and at byte 40 flags whose 0x100000 bit marks an arch-specific target, 0x200000 a family one
(as `cuobjdump -elf` names them: `arch = sm_120a`, `arch = sm_120f`).
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import BinaryIO

from wheelsmith.untrusted.elf import section_span
from wheelsmith.untrusted.local import open_regular

MAGIC = 0xBA55ED50
_CONTAINER = struct.Struct("<IHHQ")  # magic, version, header size, entries' size
_ENTRY = struct.Struct("<HHIQ")  # kind, version, header size, payload size
ENTRY_MIN = 48  # up to and including the flags
ENTRY_MAX = 4096
KINDS = {1: "PTX", 2: "ELF"}
ARCH_SPECIFIC, FAMILY = 0x100000, 0x200000
ALIGN = 8
SCAN = 64  # bytes looked through for the next container past a container's end
MAX_ENTRIES = 1 << 20


def targets(path: Path) -> frozenset[tuple[str, str]] | None:
    """(`ELF` or `PTX`, `sm_120f`) for every entry of every fat binary in the ELF file at
    `path`; None where it holds no `.nv_fatbin` section that can be read."""
    span = section_span(path, ".nv_fatbin")
    if span is None:
        return None
    with open_regular(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        start, length = span
        if start + length > size:
            return None
        return _walk(handle, start, start + length)


def _walk(handle: BinaryIO, pos: int, end: int) -> frozenset[tuple[str, str]] | None:
    found: set[tuple[str, str]] = set()
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


def _entries(handle: BinaryIO, pos: int, end: int) -> set[tuple[str, str]]:
    found = set()
    while pos + ENTRY_MIN <= end:
        head = _at(handle, pos, ENTRY_MIN)
        kind, _, header, payload = _ENTRY.unpack_from(head)
        if not ENTRY_MIN <= header <= ENTRY_MAX or pos + header + payload > end:
            break
        arch = struct.unpack_from("<I", head, 28)[0]
        flags = struct.unpack_from("<Q", head, 40)[0]
        suffix = "a" if flags & ARCH_SPECIFIC else "f" if flags & FAMILY else ""
        if kind in KINDS:
            found.add((KINDS[kind], f"sm_{arch}{suffix}"))
        pos += header + payload
    return found


def _at(handle: BinaryIO, offset: int, length: int) -> bytes:
    handle.seek(offset)
    data = handle.read(length)
    return data if len(data) == length else b"\0" * length
