"""File helpers shared by every stage: hashing, atomic writes, no-clobber placement, locks."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from wheelsmith import procs
from wheelsmith.untrusted import local

log = logging.getLogger(__name__)

CHUNK = 1 << 20
SCRATCH = ".tmp-"
SCRATCH_RE = re.compile(rf"^{re.escape(SCRATCH)}(\d+\.\d+)-")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def set_times(root: Path, when: int, select: Callable[[Path], bool], *,
              directories: bool) -> None:
    """`when` as the access and modification time of every file under `root` that `select`
    picks (and of directories, with `directories`); a symlink's own time, never its
    target's. The one walker of the toolchain's fixed times and the patched tree's clamp."""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*filenames, *(dirnames if directories else [])]:
            path = Path(dirpath, name)
            if select(path):
                os.utime(path, (when, when), follow_symlinks=False)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def scratch_dir(parent: Path) -> Iterator[Path]:
    """A temporary directory in `parent` (same filesystem), named after this process so that
    one a killed process left behind can be told from one in use (`remove_stale_scratch`)."""
    with tempfile.TemporaryDirectory(dir=parent, prefix=f"{SCRATCH}{procs.own_ident()}-") as name:
        yield Path(name)


def remove_stale_scratch(parent: Path) -> list[Path]:
    """Remove the scratch directories in `parent` whose process is gone; return them."""
    stale = [path for path in sorted(parent.glob(f"{SCRATCH}*"))
             if (owner := SCRATCH_RE.match(path.name)) and not procs.alive(owner[1])]
    for path in stale:
        log.info("removing %s, left by a process that is gone", path)
        shutil.rmtree(path, ignore_errors=True)
    return stale


@contextlib.contextmanager
def naming(path: Path) -> Iterator[None]:
    """An OSError raised while writing `path` names it (a failed write() names no file), so a
    full disk is reported with the file it stopped."""
    try:
        yield
    except OSError as error:
        if error.filename is None:
            error.filename = str(path)
        raise


@contextlib.contextmanager
def temp_file_in(directory: Path, suffix: str = "") -> Iterator[Path]:
    """A temporary file next to its final place (same filesystem); removed unless moved away."""
    directory.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=suffix)
    os.close(fd)
    path = Path(name)
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)


def atomic_write_bytes(path: Path, data: bytes, tmp_dir: Path | None = None, *,
                       durable: bool = True) -> None:
    """Replace `path` with `data` so that readers see either the old or the new file, never half.

    The temp file lives in `tmp_dir` (same filesystem) or next to `path`. The data is always
    fsynced before the rename; `durable=False` skips the directory fsync after it, for files
    that can be regenerated (after a power loss the old version may come back, never a torn one).
    """
    with temp_file_in(tmp_dir or path.parent) as tmp, naming(path):
        with tmp.open("wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        tmp.chmod(0o644)
        tmp.replace(path)
    if durable:
        fsync_dir(path.parent)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def place_no_clobber(tmp: Path, final: Path) -> bool:
    """Move a finished temp file to `final` unless a file already exists there.

    Uses link(2), which fails instead of overwriting. Returns False when `final` existed.
    """
    tmp.chmod(0o644)
    try:
        os.link(tmp, final)
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(final.parent)
    return True


def store_no_clobber(final: Path, write: Callable[[Path], object],
                     tmp_dir: Path | None = None) -> bool:
    """Create `final` via a temp file that `write` fills, fsynced, without ever overwriting.

    Returns False (and writes nothing) when `final` already exists.
    """
    if final.exists():
        return False
    with temp_file_in(tmp_dir or final.parent) as tmp, naming(final):
        write(tmp)
        with tmp.open("rb") as handle:
            os.fsync(handle.fileno())
        return place_no_clobber(tmp, final)


@contextlib.contextmanager
def exclusive_lock(path: Path, on_busy: Callable[[], None] | None = None, *,
                   follow: bool = True) -> Iterator[None]:
    """Hold an exclusive flock on `path` (created if missing) for the duration of the block.
    When another process holds it, `on_busy` runs before waiting (and may raise instead).
    The file is opened as a regular file (untrusted.local: a FIFO there never blocks the
    open, a device or a directory is refused naming it); `follow=False`: not through a link."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with local.open_regular(path, "lock", follow=follow) as handle, \
            _flocked(handle.fileno(), fcntl.LOCK_EX, on_busy):
        yield


@contextlib.contextmanager
def shared_lock(path: Path, *, follow: bool = True) -> Iterator[None]:
    """Hold a shared flock on `path` for the block, as a reader beside `exclusive_lock`'s
    writers (it waits while one writes; writers wait while it reads). Nothing is written:
    the file is opened for reading, and where there is none, no writer has ever run and
    the block runs without one. Opened as `exclusive_lock` opens it."""
    with contextlib.ExitStack() as stack:
        try:
            handle = stack.enter_context(local.open_regular(path, "read", follow=follow))
        except FileNotFoundError:
            handle = None
        if handle is not None:
            stack.enter_context(_flocked(handle.fileno(), fcntl.LOCK_SH, None))
        yield


@contextlib.contextmanager
def _flocked(fd: int, kind: int, on_busy: Callable[[], None] | None) -> Iterator[None]:
    try:
        fcntl.flock(fd, kind | fcntl.LOCK_NB)
    except BlockingIOError:
        if on_busy is not None:
            on_busy()
        fcntl.flock(fd, kind)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
