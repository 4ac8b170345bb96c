"""Zip archives written byte by byte, for the layouts no zip writer makes: central directory
entries that point anywhere (members that share bytes, a header that is not there), and the
overlapping archive of the red team's (every member's data running over the local headers of
all members after it and one large block), with CRCs that hold, so that a reader which
trusts the directory reads it all."""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, replace

from wheelsmith.wheelfile import record_hash

LOCAL = struct.Struct("<4s5H3L2H")
CENTRAL = struct.Struct("<4s6H3L5H2L")
END = struct.Struct("<4s4H2LH")
INFO = "demo-1.0.0.dist-info"
WHEEL_NAME = "demo-1.0.0-py3-none-any.whl"


@dataclass(frozen=True)
class Entry:
    """One central directory entry of a stored member: where its local header is, and the
    sizes and CRC the directory gives it."""

    name: str
    offset: int
    size: int
    crc: int


def local_header(name: str, size: int = 0, crc: int = 0) -> bytes:
    encoded = name.encode()
    return LOCAL.pack(b"PK\x03\x04", 20, 0, 0, 0, 0x21, crc, size, size, len(encoded),
                      0) + encoded


def finish(body: bytes, entries: list[Entry]) -> bytes:
    """`body` (the members' part) and a central directory of `entries` after it."""
    directory = b"".join(
        CENTRAL.pack(b"PK\x01\x02", 20, 20, 0, 0, 0, 0x21, e.crc, e.size, e.size,
                     len(e.name.encode()), 0, 0, 0, 0, 0o100644 << 16, e.offset) + e.name.encode()
        for e in entries)
    end = END.pack(b"PK\x05\x06", 0, 0, len(entries), len(entries), len(directory), len(body),
                   0)
    return body + directory + end


def stored(members: dict[str, bytes], start: bytes = b"") -> tuple[bytes, list[Entry]]:
    """The members' part of a well-formed stored zip after `start`, and its entries."""
    body, entries = bytearray(start), []
    for name, data in members.items():
        crc = zlib.crc32(data)
        entries.append(Entry(name, len(body), len(data), crc))
        body += local_header(name, len(data), crc) + data
    return bytes(body), entries


def wheel_members(files: dict[str, bytes]) -> dict[str, bytes]:
    """`files` and the .dist-info a valid wheel of demo 1.0.0 needs (its RECORD matching)."""
    contents = {**files,
                f"{INFO}/METADATA": b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0.0\n",
                f"{INFO}/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\n"
                                 b"Tag: py3-none-any\n"}
    rows = "".join(f"{n},{record_hash(d)},{len(d)}\n" for n, d in contents.items())
    return {**contents, f"{INFO}/RECORD": (rows + f"{INFO}/RECORD,,\n").encode()}


def with_entry(entries: list[Entry], at: int, *, offset: int | None = None,
               size: int | None = None) -> list[Entry]:
    """`entries` with entry `at` given another offset or size."""
    changed = replace(entries[at], offset=entries[at].offset if offset is None else offset,
                      size=entries[at].size if size is None else size)
    return [changed if i == at else e for i, e in enumerate(entries)]


# CRC-32 of a concatenation from the CRCs of its parts (zlib's crc32_combine): the operators
# that append 2**k zero bytes to a CRC register, as 32x32 matrices over GF(2).
def _times(matrix: list[int], vector: int) -> int:
    total, row = 0, 0
    while vector:
        if vector & 1:
            total ^= matrix[row]
        vector >>= 1
        row += 1
    return total


def _square(matrix: list[int]) -> list[int]:
    return [_times(matrix, matrix[n]) for n in range(32)]


def _zero_bytes() -> list[list[int]]:
    matrix = [0xEDB88320] + [1 << n for n in range(31)]  # one zero bit
    for _ in range(3):
        matrix = _square(matrix)
    found = [matrix]
    while len(found) < 48:
        found.append(_square(found[-1]))
    return found


_ZEROS = _zero_bytes()


def crc_combine(first: int, second: int, second_length: int) -> int:
    """The CRC-32 of A + B from crc32(A), crc32(B) and len(B)."""
    at = 0
    while second_length:
        if second_length & 1:
            first = _times(_ZEROS[at], first)
        second_length >>= 1
        at += 1
    return first ^ second


def overlapping_wheel(count: int, block: int) -> bytes:
    """The red team's wheel: `count` stored members whose local headers come one after
    another, then `block` zero bytes; each member's data runs from its header's end to the
    block's end (the local headers of all members after it, and the block), its declared
    size equal to its compressed size and its CRC the true one. The .dist-info follows,
    well-formed, its RECORD listing every member (so a reader hashes each)."""
    names = [f"demo/m{i:05d}.py" for i in range(count)]
    headers = [local_header(name) for name in names]
    crcs, length, crc = [0] * count, block, zlib.crc32(bytes(block))
    for i in range(count - 1, -1, -1):  # member i's data: the headers after it, the block
        crcs[i] = crc
        crc = crc_combine(zlib.crc32(headers[i]), crc, length)
        length += len(headers[i])
    body = bytearray()
    entries = []
    for name, header, member_crc in zip(names, headers, crcs, strict=True):
        entries.append(Entry(name, len(body), 0, member_crc))
        body += header
    end = len(body) + block
    entries = [replace(e, size=end - e.offset - len(h)) for e, h in zip(entries, headers,
                                                                           strict=True)]
    body += bytes(block)
    rows = "".join(f"{n},sha256=x,0\n" for n in names).encode()
    info = wheel_members({})
    info[f"{INFO}/RECORD"] = rows + info[f"{INFO}/RECORD"]
    rest, tail = stored(info, bytes(body))
    return finish(rest, entries + tail)
