"""Binaries the sdist ships: recorded with the prepared source, refused in the wheel; and the
shared objects of the build's host libraries (builder/hostlibs.py), refused likewise.

wheelsmith builds wheels from source. A wheel member that is, byte for byte, an ELF file (a
shared object, an object file, a cubin) of the fetched and patched source was not built: the
package's build passed it through. bitsandbytes 0.42.0's sdist holds 21 prebuilt
`libbitsandbytes_cuda*.so` files and its setup.py only packs them. The record is written
before anything is built, beside the prepared source's marker (a resumed build's own objects
are never in it; --fresh drops both), and the host's checks of the wheel read it.

A host library is the user's to install: the wheel requires its wheel, so
a wheel member that is one of its shared objects, by name (libnccl.so.2) or byte for byte, is
a copy the package's build made of it, and is refused.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path, PurePosixPath

from wheelsmith.builder import resume
from wheelsmith.builder.hostlibs import ARCHIVE, Provided, linker_name
from wheelsmith.errors import VerifyError
from wheelsmith.files import atomic_write_text
from wheelsmith.untrusted import local
from wheelsmith.untrusted.elf import ELF_MAGIC, is_elf

RECORD = "wheelsmith-shipped-binaries.json"
NAMED = 5  # members named in the error; the rest counted


def elf_files(root: Path) -> list[Path]:
    """The ELF files under `root` (regular files, no link followed), in sorted order."""
    return [path for path in sorted(root.rglob("*")) if not path.is_symlink() and path.is_file()
            and is_elf(path, follow=False)]


def record(source: Path, work: Path) -> None:
    """Record the sha256 and path of every ELF file under the prepared `source`."""
    shipped: dict[str, str] = {}
    for path in elf_files(source):
        shipped.setdefault(local.sha256_of(path, follow=False),
                           path.relative_to(source).as_posix())
    atomic_write_text(resume.source_dir(work) / RECORD,
                      json.dumps(shipped, indent=1, sort_keys=True) + "\n")


def recorded(work: Path) -> dict[str, str]:
    """What `record` wrote for the source in `work`; {} where nothing was recorded (a
    source prepared elsewhere, or by a wheelsmith before the record)."""
    try:
        data = json.loads((resume.source_dir(work) / RECORD).read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def refuse_passed_through(wheel: Path, work: Path) -> None:
    """A VerifyError when the wheel holds an ELF file the sdist shipped."""
    shipped = recorded(work)
    if not shipped:
        return
    with local.open_zip(wheel) as zf:
        passed = [(info.filename, shipped[digest]) for info in zf.infolist()
                  if (digest := _elf_digest(zf, info)) in shipped]
    if not passed:
        return
    named = "; ".join(member if member == origin else f"{member} (the sdist's {origin})"
                      for member, origin in passed[:NAMED])
    more = f"; and {len(passed) - NAMED} more" if len(passed) > NAMED else ""
    raise VerifyError(
        f"{wheel.name} holds {len(passed)} binary file(s) the sdist ships prebuilt, byte for "
        f"byte: {named}{more}; nothing in this build compiled them",
        hint="wheelsmith builds from source: the recipe needs a patch that deletes the prebuilt "
             "files and builds them (the package's Makefile or CMake build), or the package "
             "has no source build to offer")


def _elf_digest(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> str | None:
    """The sha256 of an ELF member, read in pieces; None for any other member."""
    if info.is_dir():
        return None
    digest = hashlib.sha256()
    with zf.open(info) as member:
        head = member.read(len(ELF_MAGIC))
        if head != ELF_MAGIC:
            return None
        digest.update(head)
        while chunk := member.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def refuse_vendored(wheel: Path, libraries: tuple[Provided, ...]) -> None:
    """A VerifyError when the wheel holds a shared object of one of its host libraries: by
    its name, or its bytes under another name."""
    by_name = {name: (found, so) for found in libraries for so in found.shared
               for name in (so.name, linker_name(so.name))}
    if not by_name:
        return
    by_size: dict[int, list[tuple[Provided, Path]]] = {}
    for found, so in by_name.values():
        by_size.setdefault(so.stat().st_size, []).append((found, so))
    with local.open_zip(wheel) as zf:
        for info in zf.infolist():
            hit = by_name.get(PurePosixPath(info.filename).name) or _same_bytes(
                zf, info, by_size.get(info.file_size, []))
            if hit is not None:
                raise _vendored(wheel, info.filename, *hit)


def _same_bytes(zf: zipfile.ZipFile, info: zipfile.ZipInfo,
                candidates: list[tuple[Provided, Path]]) -> tuple[Provided, Path] | None:
    if not candidates or (digest := _elf_digest(zf, info)) is None:
        return None
    return next(((found, so) for found, so in candidates
                 if local.sha256_of(so, follow=True) == digest), None)


def _vendored(wheel: Path, member: str, found: Provided, so: Path) -> VerifyError:
    what = f"{found.what} ({found.library.where})"
    if found.origin == ARCHIVE:
        instead = "link its static library (lib*.a) instead, or leave it out of the wheel"
    else:
        instead = f"the wheel requires {found.requirement()} instead: a user's pip installs it"
    return VerifyError(
        f"{wheel.name} holds {member}, {so.name} of the host library {what}: a wheel does not "
        "carry a library the build was given",
        hint=f"{instead}; patch the package's build so that it does not copy the library into "
             "the wheel (package_data, a CMake install() of it)")
