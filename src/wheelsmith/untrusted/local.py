"""Local files that data names or that others wrote (an index's ledger, lock, pages, files and
sidecars; a wheel given to `verify` or `publish`): opened only as regular files, read within a
bound (docs/security.md, "Local files").

- Opening never blocks and never opens what is not a file: the path is looked at first, then
  opened with O_NONBLOCK (a FIFO without a writer, a device) and checked again on the open
  descriptor (fstat: nothing can be swapped in between). A FIFO, a device, a socket or a
  directory is one error naming the path (`errors.NotRegularFileError`, exit 22), never a
  hang, an endless read or "no such file". With `follow=False` (an index's own parts: its
  layout holds no links) the last component must not be a link either.
- A place about to be written (`check_place`) is checked the same way before anything is
  written, so that a refusal leaves nothing behind.
- Reads are bounded: `same_bytes` never reads past the size of what it compares with,
  `sha256_of` streams, and a zip (a wheel, an sdist) is opened only as a regular file
  (`open_zip`: the one reader of archives), its members checked to share no bytes before one
  is read, its reads held to a few times its size, a member read whole at most
  MEMBER_MAX_BYTES (`read_member`). Nothing here reads a file whole without a bound.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import stat
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Literal, cast

from wheelsmith.errors import NotRegularFileError
from wheelsmith.untrusted import CHUNK, describe_size, inside
from wheelsmith.untrusted.ziplayout import Budgeted, budget, check_layout

MEMBER_MAX_BYTES = 16 << 20  # a zip member read whole: METADATA, RECORD are KBs to a few MB
BOMB_RATIO = 50  # unpacked : packed past which an archive is a bomb (gzip makes 1000:1 of zeros)
Mode = Literal["read", "append", "update", "lock"]
_FLAGS: dict[Mode, tuple[int, str]] = {  # os.open flags and the file object's mode
    "read": (os.O_RDONLY, "rb"),
    "append": (os.O_WRONLY | os.O_APPEND | os.O_CREAT, "ab"),  # the ledger's new lines
    "update": (os.O_RDWR, "r+b"),  # the ledger's torn tail, cut
    "lock": (os.O_RDWR | os.O_CREAT, "r+b"),  # an flock's file (O_RDWR: a FIFO never waits)
}


def _kind(path: Path, *, follow: bool) -> int | None:
    """The file type bits of `path` (stat, or lstat without `follow`); None when it does not
    exist (FileNotFoundError is left to the caller: each says "no such" its own way)."""
    try:
        return stat.S_IFMT(path.stat(follow_symlinks=follow).st_mode)
    except FileNotFoundError:
        return None


@contextlib.contextmanager
def open_regular(path: Path, mode: Mode = "read", *, follow: bool = True
                 ) -> Iterator[BinaryIO]:
    """`path` open as a regular file (see the module's docstring); what is not one: a
    FileSystemError naming it. A missing file: FileNotFoundError (`append` and `lock` create
    it)."""
    kind = _kind(path, follow=follow)
    if kind is not None and kind != stat.S_IFREG:
        raise NotRegularFileError(path, kind)
    flags, file_mode = _FLAGS[mode]
    flags |= os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:  # swapped since it was looked at: a FIFO without a reader (ENXIO),
        again = _kind(path, follow=follow) if exc.errno in _SWAPPED else None  # a socket...
        if again is not None and again != stat.S_IFREG:
            raise NotRegularFileError(path, again) from None
        raise
    try:
        kind = stat.S_IFMT(os.fstat(fd).st_mode)
        if kind != stat.S_IFREG:
            raise NotRegularFileError(path, kind)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        handle = cast("BinaryIO", os.fdopen(fd, file_mode))
    except BaseException:
        # an interrupt just after fdopen made the file object leaves none to close: the
        # object, collected, has closed fd already, and EBADF must not replace the interrupt
        with contextlib.suppress(OSError):
            os.close(fd)
        raise
    with handle:
        yield handle


_SWAPPED = (errno.ENXIO, errno.EISDIR, errno.ELOOP, errno.EOPNOTSUPP, errno.ENODEV)


def size_of(path: Path, *, follow: bool = True) -> int | None:
    """The size of the regular file at `path`; None when there is none (what is there and is
    not a regular file: FileSystemError)."""
    try:
        with open_regular(path, follow=follow) as handle:
            return os.fstat(handle.fileno()).st_size
    except FileNotFoundError:
        return None


def same_bytes(path: Path, data: bytes, *, follow: bool = True) -> bool | None:
    """Whether the regular file at `path` holds exactly `data` (never read past its size: a
    file of another size differs unread); None when there is no file."""
    try:
        with open_regular(path, follow=follow) as handle:
            if os.fstat(handle.fileno()).st_size != len(data):
                return False
            return handle.read(len(data) + 1) == data
    except FileNotFoundError:
        return None


def read_at_most(path: Path, max_bytes: int, *, follow: bool = True) -> bytes:
    """The regular file at `path`, whole when it holds at most `max_bytes` (else its first
    `max_bytes + 1`: the caller says it is too large). A missing file: FileNotFoundError."""
    with open_regular(path, follow=follow) as handle:
        return handle.read(max_bytes + 1)


def sha256_of(path: Path, *, follow: bool = True) -> str:
    """The sha256 of the regular file at `path`, read in pieces. A missing file:
    FileNotFoundError."""
    found = sha256_at_most(path, None, follow=follow)
    assert found is not None  # no cap: always read
    return found


def sha256_at_most(path: Path, max_bytes: int | None, *, follow: bool = True) -> str | None:
    """`sha256_of`, or None when the file is larger than `max_bytes` (it is then not read
    past the cap: it cannot be what the caller expects)."""
    with open_regular(path, follow=follow) as handle:
        if max_bytes is not None and os.fstat(handle.fileno()).st_size > max_bytes:
            return None
        return sha256_read(handle, max_bytes)


def sha256_read(handle: BinaryIO, max_bytes: int | None = None) -> str | None:
    """The sha256 of what is left to read of `handle`, read in pieces; None as soon as more
    than `max_bytes` were read."""
    digest = hashlib.sha256()
    read = 0
    while chunk := handle.read(CHUNK):
        read += len(chunk)
        if max_bytes is not None and read > max_bytes:
            return None
        digest.update(chunk)
    return digest.hexdigest()


def check_place(root: Path, relative: str | Path) -> Path:
    """`root / relative`, a regular file about to be written (or created): it must resolve
    inside `root` (`inside`), every directory on the way must be one (or not exist yet), and
    what is there must be a regular file, not a link (or nothing). A writer checks each of its
    places with this before it writes any, so a refusal leaves nothing behind."""
    target = inside(root, relative)
    for directory in reversed(target.relative_to(root).parents[:-1]):
        kind = _kind(root / directory, follow=True)
        if kind is not None and kind != stat.S_IFDIR:
            raise NotRegularFileError(root / directory, kind, directory=True)
    kind = _kind(target, follow=False)
    if kind is not None and kind != stat.S_IFREG:
        raise NotRegularFileError(target, kind)
    return target


@contextlib.contextmanager
def open_zip(path: Path) -> Iterator[zipfile.ZipFile]:
    """`path` open as a zip, when it is a regular file (`open_regular`: else a
    FileSystemError naming it; a missing one: FileNotFoundError), its layout checked before
    any member is read and its reads held to a budget (`ziplayout`: members that overlap, or
    lie outside the file, are a LayoutError). A directory that names a member in bytes that
    are not the UTF-8 its flag promises: BadZipFile, as any other damage (zipfile raises
    UnicodeDecodeError)."""
    with open_regular(path) as handle:
        reader = Budgeted(handle, budget(os.fstat(handle.fileno()).st_size))
        try:
            opened = zipfile.ZipFile(cast("BinaryIO", reader))
        except UnicodeDecodeError as exc:
            raise zipfile.BadZipFile(f"a member's name is not the UTF-8 its flag says "
                                     f"({exc.reason} at byte {exc.start})") from None
        with opened as zf:
            check_layout(zf, cast("BinaryIO", reader))
            yield zf


class MemberTooLarge(ValueError):
    """A member read whole is larger than MEMBER_MAX_BYTES."""


def read_member(zf: zipfile.ZipFile, member: str) -> bytes:
    """The whole of `member`, at most MEMBER_MAX_BYTES (what its entry says, and what it
    unpacks to); larger: MemberTooLarge. A missing member: KeyError."""
    if zf.getinfo(member).file_size > MEMBER_MAX_BYTES:
        raise MemberTooLarge(f"{member} is larger than {describe_size(MEMBER_MAX_BYTES)}")
    with zf.open(member) as handle:
        data = handle.read(MEMBER_MAX_BYTES + 1)
    if len(data) > MEMBER_MAX_BYTES:
        raise MemberTooLarge(f"{member} is larger than {describe_size(MEMBER_MAX_BYTES)}")
    return data


def expands_too_far(unpacked: int, packed: int, floor: int) -> bool:
    """An archive from outside (a wheel, an sdist) that unpacks past `floor` bytes and to more
    than BOMB_RATIO times its packed size: a bomb, refused before anything is extracted."""
    return unpacked > floor and unpacked > BOMB_RATIO * max(packed, 1)
