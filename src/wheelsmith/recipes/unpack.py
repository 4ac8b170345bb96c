"""Unpack a source archive (an sdist, a source URL's tarball) that others made: checked whole
before anything is extracted, so a refusal leaves nothing behind (and an archive that fails
part way, cut short or on a full disk, has what it extracted removed).

- Each member: no absolute path, `..`, drive or backslash; no device file or FIFO; a link only
  where it resolves inside the tree (tar's `data` filter then checks links through links); a
  zip's members share no bytes and lie inside the file (`open_zip`, `untrusted.ziplayout`).
- The whole: at most UNPACK_MAX_MEMBERS members and UNPACK_MAX_BYTES, and no more than
  `untrusted.local.BOMB_RATIO` times the archive's size once past UNPACK_FLOOR (gzip makes
  1000:1 of zeros; source code packs 5 to 15:1). A tar's headers are read one at a time, so a
  bomb is refused at the header that passes a bound, before its data is decompressed.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tarfile
import zipfile
from pathlib import Path, PurePosixPath

from wheelsmith.errors import SourceError
from wheelsmith.files import naming
from wheelsmith.untrusted import describe_size
from wheelsmith.untrusted.local import BOMB_RATIO, expands_too_far, open_zip
from wheelsmith.untrusted.ziplayout import LayoutError
from wheelsmith.wheelfile import ZIP_DAMAGE

UNPACK_MAX_MEMBERS = 200_000  # the largest sdist wheelsmith has met holds 20,000
UNPACK_MAX_BYTES = 16 << 30  # ... and unpacks to 886 MiB
UNPACK_FLOOR = 1 << 30  # below this, any ratio: a small archive of generated data is fine
HOSTILE_HINT = "the archive is malformed or hostile; nothing was extracted"


def unpack(archive: Path, dest: Path) -> Path:
    """Extract a tar or zip archive into `dest` after checking every member and the whole;
    an archive that fails part way (cut short, a full disk) leaves `dest` as it was."""
    before = set(dest.iterdir()) if dest.is_dir() else set()
    try:
        _extract(archive, dest)
    except BaseException:
        for entry in set(dest.iterdir()) - before if dest.is_dir() else ():
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
        raise
    entries = list(dest.iterdir())
    return entries[0] if len(entries) == 1 and entries[0].is_dir() else dest


def _extract(archive: Path, dest: Path) -> None:
    try:
        if tarfile.is_tarfile(archive):
            with tarfile.open(archive) as tar:
                _check_tar(archive, tar)
                with naming(dest):
                    tar.extractall(dest, filter="data")
        elif zipfile.is_zipfile(archive):
            with open_zip(archive) as zf:
                _check_zip(archive, zf)
                with naming(dest):
                    zf.extractall(dest)  # noqa: S202 - every member was checked above
        else:
            raise SourceError(f"{archive} is neither a tar nor a zip archive")
    except tarfile.FilterError as exc:  # a link that resolves outside through other links
        raise _refuse(archive, f"member '{exc.tarinfo.name}' is refused: {exc}") from None
    except LayoutError as exc:  # members that share bytes, or lie outside the file's
        raise _refuse(archive, str(exc)) from None
    except (tarfile.TarError, *ZIP_DAMAGE) as exc:
        raise SourceError(f"cannot unpack {archive.name}: {exc}",
                          hint="the archive is damaged; delete it from the download cache and "
                               "fetch it again") from None


def _check_tar(archive: Path, tar: tarfile.TarFile) -> None:
    """Every member and the whole, header by header (`tar` keeps the members it read, which
    `extractall` then takes)."""
    count = total = 0
    packed = archive.stat().st_size
    for member in tar:
        _check_tar_member(archive, member)
        count, total = count + 1, total + member.size
        _check_whole(archive, count, total, packed)


def _check_zip(archive: Path, zf: zipfile.ZipFile) -> None:
    """Every member and the whole (a zip's sizes are its directory's, and extraction stops
    at each member's declared size)."""
    infos = zf.infolist()
    for info in infos:
        _check_zip_member(archive, info)
    _check_whole(archive, len(infos), sum(i.file_size for i in infos), archive.stat().st_size)


def _check_whole(archive: Path, count: int, total: int, packed: int) -> None:
    if count > UNPACK_MAX_MEMBERS:
        raise _refuse(archive, f"it holds more than {UNPACK_MAX_MEMBERS} members")
    if total > UNPACK_MAX_BYTES:
        raise _refuse(archive, f"it unpacks to more than {describe_size(UNPACK_MAX_BYTES)}")
    if expands_too_far(total, packed, UNPACK_FLOOR):
        raise _refuse(archive, f"it unpacks to {total} bytes or more from {packed}, over "
                               f"{BOMB_RATIO} times its size: an archive bomb")


def _refuse(archive: Path, reason: str) -> SourceError:
    return SourceError(f"refusing to unpack {archive.name}: {reason}", hint=HOSTILE_HINT)


def _escapes(path: str) -> bool:
    pure = PurePosixPath(path)
    return pure.is_absolute() or ".." in pure.parts


def _check_tar_member(archive: Path, member: tarfile.TarInfo) -> None:
    name = member.name
    if not name.strip("/"):
        raise _refuse(archive, f"member {member.offset} has no name")
    if _escapes(name):
        raise _refuse(archive, f"member '{name}' has an absolute path or '..'")
    if member.isdev() or member.isfifo():
        raise _refuse(archive, f"member '{name}' is a device file or FIFO")
    if member.issym():
        target = os.path.normpath(PurePosixPath(name).parent / member.linkname)
        if PurePosixPath(member.linkname).is_absolute() or _escapes(target):
            raise _refuse(archive, f"member '{name}' is a link pointing outside "
                                   f"({member.linkname})")
    if member.islnk() and _escapes(os.path.normpath(member.linkname)):
        raise _refuse(archive, f"member '{name}' is a hard link pointing outside "
                               f"({member.linkname})")


def _check_zip_member(archive: Path, info: zipfile.ZipInfo) -> None:
    name = info.filename
    if not name.strip("/"):  # zipfile ends a name at a NUL: "\0x" is read as ""
        raise _refuse(archive, f"member {info.header_offset} has no name")
    if "\\" in name or re.match(r"^[A-Za-z]:", name) or _escapes(name):
        raise _refuse(archive, f"member '{name}' has an absolute path, a drive, a backslash or "
                               "'..'")
    if stat.S_ISLNK(info.external_attr >> 16):
        raise _refuse(archive, f"member '{name}' is a symbolic link")
