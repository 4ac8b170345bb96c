"""A zip's layout, checked before any member is read (`local.open_zip`), and a budget on the
bytes read from it.

A zip's central directory says where each member is; nothing in the format stops two entries
from naming the same bytes. An archive whose members overlap makes a small file read as a
large one: 20,000 members each spanning the local headers after it and one 8 MB block read
as 160 GB from 11 MB, with every declared size equal to its compressed size, so no ratio rule
sees it. So each member's extent (its local header, its data, its data descriptor) must lie
inside the file, before the central directory, and share no byte with another member's: one
`LayoutError` naming the first pair that does. With no bytes shared, reading every member
once reads at most the file; `Budgeted` holds a reader of the archive to a few times that
(`budget`), whatever reads it.
"""

from __future__ import annotations

import itertools
import struct
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from wheelsmith.untrusted.text import clip, describe_size

LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")  # APPNOTE 4.3.7, zipfile's structFileHeader
LOCAL_SIGNATURE = b"PK\x03\x04"
DESCRIPTOR_SIGNATURE = b"PK\x07\x08"  # optional before a data descriptor (APPNOTE 4.3.9)
HAS_DESCRIPTOR = 0x08  # a general purpose flag bit: sizes and CRC follow the data
ZIP64_EXTRA = 0x0001  # the extra field whose presence makes a descriptor's sizes 8 bytes
ZIP64_LIMIT = 0xFFFFFFFF
READ_FACTOR = 4  # an archive is read at most this many times its size ...
READ_SLACK = 64 << 20  # ... and this much more (its small members read whole again)


class LayoutError(zipfile.BadZipFile):
    """A zip whose members overlap, lie outside the file or its members' part, or one read
    past its budget: refused before (or instead of) reading on."""


@dataclass(frozen=True, slots=True)
class Extent:
    """Where one member lies: from its local header to the end of its data descriptor."""

    name: str
    start: int
    end: int  # exclusive

    def shown(self) -> str:
        return f"{clip(self.name, 100)} (bytes {self.start} to {self.end - 1})"


def check_layout(zf: zipfile.ZipFile, fp: BinaryIO) -> None:
    """Every member of `zf` (read from `fp`) lies before its central directory and shares no
    byte with another; else LayoutError naming the first member at fault."""
    start_dir: int = zf.start_dir  # where zipfile found the central directory
    extents = sorted((_extent(fp, info, start_dir) for info in zf.infolist()),
                     key=lambda extent: (extent.start, extent.end))
    for before, after in itertools.pairwise(extents):
        if after.start < before.end:
            raise LayoutError(f"member {after.shown()} overlaps member {before.shown()}: the "
                              "archive's members share bytes")


def _extent(fp: BinaryIO, info: zipfile.ZipInfo, start_dir: int) -> Extent:
    name, offset = info.filename, info.header_offset
    if not 0 <= offset <= start_dir - LOCAL_HEADER.size:
        raise LayoutError(f"member {clip(name, 100)}: its local header at byte {offset} is "
                          f"not among the members (bytes 0 to {start_dir - 1})")
    fp.seek(offset)
    header = LOCAL_HEADER.unpack(fp.read(LOCAL_HEADER.size))
    if header[0] != LOCAL_SIGNATURE:
        raise LayoutError(f"member {clip(name, 100)}: there is no local header at byte "
                          f"{offset}, where the central directory says it is")
    name_length, extra_length = header[10], header[11]
    data = offset + LOCAL_HEADER.size + name_length + extra_length
    end = data + info.compress_size
    if (info.flag_bits | header[3]) & HAS_DESCRIPTOR and end <= start_dir:
        end += _descriptor_size(fp, info, data - extra_length, extra_length, end)
    extent = Extent(name, offset, end)
    if end > start_dir:
        raise LayoutError(f"member {extent.shown()} runs into the central directory at byte "
                          f"{start_dir}")
    return extent


def _descriptor_size(fp: BinaryIO, info: zipfile.ZipInfo, extra_at: int, extra_length: int,
                     data_end: int) -> int:
    """The size of the data descriptor after a member's data: its signature when it has one,
    the CRC, and the two sizes (8 bytes each in a zip64 member, else 4)."""
    fp.seek(extra_at)
    zip64 = max(info.compress_size, info.file_size) >= ZIP64_LIMIT or \
        ZIP64_EXTRA in _extra_ids(fp.read(extra_length))
    fp.seek(data_end)
    signed = fp.read(len(DESCRIPTOR_SIGNATURE)) == DESCRIPTOR_SIGNATURE
    return (4 if signed else 0) + 4 + (16 if zip64 else 8)


def _extra_ids(extra: bytes) -> Iterator[int]:
    """The header ids of an extra field's blocks (APPNOTE 4.5.1)."""
    at = 0
    while at + 4 <= len(extra):
        block, size = struct.unpack_from("<2H", extra, at)
        yield block
        at += 4 + size


def budget(size: int) -> int:
    """The bytes one opening of an archive of `size` bytes may read."""
    return READ_FACTOR * size + READ_SLACK


class Budgeted:
    """The file an archive is read from, as zipfile reads it (read, seek, tell), counting the
    bytes: past `limit`, LayoutError (a BadZipFile: the archive is refused as damaged)."""

    def __init__(self, handle: BinaryIO, limit: int) -> None:
        self._handle, self.limit, self.spent = handle, limit, 0

    def read(self, n: int = -1) -> bytes:
        data = self._handle.read(n)
        self.spent += len(data)
        if self.spent > self.limit:
            raise LayoutError(f"it was read past {self.limit} bytes, {READ_FACTOR} times its "
                              f"size and {describe_size(READ_SLACK)} more")
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._handle.seek(offset, whence)

    def tell(self) -> int:
        return self._handle.tell()

    def seekable(self) -> bool:
        return True

    def close(self) -> None:
        """The handle is its opener's to close."""
