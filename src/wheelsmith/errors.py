"""One error hierarchy. Domain code raises these; only the CLI turns them into messages.

Every class has its own exit code (documented in docs/cli.md, "Exit codes"). Click uses 2 for usage
errors, so ours start at 3.
"""

from __future__ import annotations

import errno
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar


class WheelsmithError(Exception):
    """Base of every error a user can cause or fix; `hint` says what to do next.

    Errors raised for a failed subprocess also carry the tail of its output and its log file.
    """

    exit_code: ClassVar[int] = 1

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        tail: Sequence[str] = (),
        returncode: int | None = None,
        log_file: Path | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.tail = list(tail)
        self.returncode = returncode
        self.log_file = log_file

    def details(self) -> list[str]:
        """Extra lines shown after the message (output tail, list of problems)."""
        lines = []
        if self.tail:
            lines += ["--- output ---", *self.tail]
        if self.log_file is not None:
            lines.append(f"--- full log: {self.log_file}")
        return lines


@dataclass(frozen=True, slots=True)
class Problem:
    """One finding in a file, located by line and column (1-based) and a dotted key path."""

    file: str
    line: int
    column: int
    message: str
    hint: str | None = None

    def render(self) -> str:
        text = f"{self.file}:{self.line}:{self.column}: {self.message}"
        if self.hint:
            text += f"\n    hint: {self.hint}"
        return text


class RecipeError(WheelsmithError):
    """A recipe, toolchain profile or other input file is invalid; carries every problem found."""

    exit_code = 3

    def __init__(self, problems: list[Problem], *, hint: str | None = None) -> None:
        files = sorted({p.file for p in problems})
        count = len(problems)
        noun = "problem" if count == 1 else "problems"
        super().__init__(f"{count} {noun} in {', '.join(files)}", hint=hint)
        self.problems = problems

    def details(self) -> list[str]:
        return listed([p.render() for p in self.problems])


class UsageError(WheelsmithError):
    """A command-line value is wrong (bad --arch, unknown recipe, ...)."""

    exit_code = 4


class SourceError(WheelsmithError):
    """Fetching or unpacking a source failed (download, sha256 mismatch, hostile archive)."""

    exit_code = 5


class PatchError(WheelsmithError):
    """A patch is missing, changed, no longer applies, or changes nothing."""

    exit_code = 6


class ToolchainError(WheelsmithError):
    """The build toolchain could not be created or failed its pre-flight check."""

    exit_code = 7


class MissingToolkitError(ToolchainError):
    """A profile needs an installed CUDA toolkit (PyPI ships no nvcc for its CUDA major) and
    none is installed here; nightly skips such cells instead of failing them."""


class CommandError(WheelsmithError):
    """A helper command (git, cuobjdump, pip) failed; carries the tail of its output."""

    exit_code = 8


class CompileError(WheelsmithError):
    """The package's own build failed; the hint names a known cause when one matched."""

    exit_code = 9


class NoDeviceCodeError(CompileError):
    """A check whose build generated nothing to compile for the GPU: the package decided
    while it built not to compile CUDA (a switch of its own, no GPU seen)."""


class CompileFarmError(CompileError):
    """The compile farm could not be used, or lost compiles to local fallback, and it was
    required (--compile-farm-required); without that the build compiles here instead."""


class VerifyError(WheelsmithError):
    """A wheel does not contain the device code that was asked for, or is not a valid wheel."""

    exit_code = 10

    def __init__(self, message: str, *, findings: Sequence[str] = (), **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.findings = list(findings)

    def details(self) -> list[str]:
        return [*listed(self.findings), *super().details()]


class OutputError(WheelsmithError):
    """Writing the result would lose or overwrite something."""

    exit_code = 11


class PublishError(WheelsmithError):
    """A wheel cannot be published (invalid, no channel, against the channel's rules)."""

    exit_code = 12


class FileConflictError(WheelsmithError):
    """A file of this name was published before with other bytes; published files never change."""

    exit_code = 13


class IndexDriftError(VerifyError):
    """`index check` found files or pages that disagree with the ledger."""

    exit_code = 14


class DoctorError(VerifyError):
    """`doctor` found a missing kernel, a PTX-only fallback or a fast-path module that fails."""

    exit_code = 15


class KnownBadError(WheelsmithError):
    """The combination is in the known-bad table with action `refuse`."""

    exit_code = 16


class NightlyError(VerifyError):
    """At least one nightly cell failed (the others ran; the report says which and why)."""

    exit_code = 17


class BuildLockedError(WheelsmithError):
    """Another build of the same content key holds the work directory (and --no-wait)."""

    exit_code = 18


class DiskFullError(WheelsmithError):
    """A file system ran out of space (ENOSPC or a quota); nothing half-written is kept."""

    exit_code = 19


class OutOfTimeError(WheelsmithError):
    """A build ran out of its time limit; its work directory keeps the objects it finished,
    and the same build resumes from them. `progress`: `N/M objects` or `stopped before
    compiling`."""

    exit_code = 20

    def __init__(self, message: str, *, progress: str, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.progress = progress


class UntrustedDataError(SourceError):
    """Data from outside (an index page, a ledger line, a wheel's provenance, an interpreter's
    probe answer, a server's reply) is malformed or exceeds its bounds (wheelsmith/untrusted.py).
    `source` names where it came from (a URL, `file:line`, "the probe of PATH"); `status` is
    the HTTP status a server answered, when it answered one."""

    exit_code = 21

    def __init__(self, source: str, problem: str, *, status: int | None = None,
                 **kwargs: Any) -> None:
        super().__init__(f"{source}: {problem}", **kwargs)
        self.source = source
        self.problem = problem
        self.status = status


class FileSystemError(WheelsmithError):
    """The machine refused a file operation: no permission, a read-only file system, a file
    where a directory belongs (or the other way), a name too long, a loop of links."""

    exit_code = 22


MAX_LISTED = 50  # problems or findings an error lists; the rest are counted


def listed(lines: Sequence[str]) -> list[str]:
    """At most MAX_LISTED of `lines`, then `... and N more`: no input prints without bound."""
    if len(lines) <= MAX_LISTED:
        return list(lines)
    return [*lines[:MAX_LISTED], f"... and {len(lines) - MAX_LISTED} more"]


_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
ELSEWHERE = "or use another directory"
# errno: what it means for the path, and what to do
REFUSALS: dict[int, tuple[str, str]] = {
    errno.EACCES: ("permission denied", f"give this user write access to it {ELSEWHERE}"),
    errno.EPERM: ("operation not permitted", f"give this user write access to it {ELSEWHERE}"),
    errno.EROFS: ("the file system is read-only", "use a directory on a writable file system"),
    errno.ENOTDIR: ("a file is where a directory belongs",
                    f"move that file out of the way {ELSEWHERE}"),
    errno.EISDIR: ("it is a directory, not a file", f"move it out of the way {ELSEWHERE}"),
    errno.EEXIST: ("it exists already (a file where a directory belongs?)",
                   f"move it out of the way {ELSEWHERE}"),
    errno.ELOOP: ("too many symbolic links (a link that leads back to itself?)",
                  f"fix or remove the link {ELSEWHERE}"),
    errno.ENAMETOOLONG: ("the name is too long for the file system", "use a shorter path"),
}


# What stands where a regular file belongs, by its file type bits (stat.S_IFMT)
KINDS = {stat.S_IFREG: "a file", stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO (named pipe)",
         stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a character device",
         stat.S_IFBLK: "a block device", stat.S_IFLNK: "a symbolic link"}


class NotRegularFileError(FileSystemError):
    """`path`, where a regular file belongs, is something else: `reason` says what (a FIFO, a
    device, a socket, a directory, a link where none may be). The one error for it, however
    it was found (wheelsmith/untrusted/local.py)."""

    def __init__(self, path: Path, kind: int, *, directory: bool = False) -> None:
        self.path = path
        wanted, plural = ("directory", "directories") if directory else (
            "regular file", "regular files")
        self.reason = f"it is {KINDS.get(kind, 'something else')}, not a {wanted}"
        super().__init__(
            f"{path}: {self.reason}",
            hint=f"wheelsmith opens only {plural} there (a FIFO or a device could block it or "
                 f"never end): name a {wanted}, or move this one out of the way")


def machine_error(error: OSError, cache: Path, *, given: tuple[str, Path] | None = None
                  ) -> WheelsmithError | None:
    """The OSError of a full disk or of a refused file operation as one error naming the path
    and what to do; None for any other OSError (a bug: let it show its traceback). `given`:
    the option and value the path came from (`--out`, wheelhouse), named first. `cache`:
    wheelsmith's cache, named where the path is in it."""
    full = disk_full(error, cache)
    if full is not None or error.errno not in REFUSALS:
        return full
    reason, todo = REFUSALS[error.errno]
    paths = [str(p) for p in (error.filename, error.filename2) if p is not None]
    blocker = _not_a_directory(Path(paths[0])) if error.errno == errno.ENOTDIR and paths \
        else None
    if blocker is not None:  # name what stands in the way, not a path that cannot exist
        path, kind = blocker
        paths, reason, todo = [str(path)], *_in_the_way(kind)
    where = " -> ".join(paths)
    if given is not None:
        option, value = given
        culprit = "" if paths == [str(value.absolute())] else f" ({where})"
        where, reason = f"{option} {value}", reason + culprit
    if paths and _inside(Path(paths[0]), cache):
        todo += "; it is wheelsmith's cache: set WHEELSMITH_CACHE to a writable directory"
    return FileSystemError(f"{where}: {reason}" if where else reason, hint=todo)


def in_the_way(path: Path) -> FileSystemError | None:
    """The error for `path` or one of its ancestors being there and no directory (a file, a
    FIFO, a device); None where each is a directory or missing."""
    blocker = _not_a_directory(path)
    if blocker is None:
        return None
    reason, todo = _in_the_way(blocker[1])
    return FileSystemError(f"{blocker[0]}: {reason}", hint=todo)


def _in_the_way(kind: int) -> tuple[str, str]:
    return f"it is {KINDS.get(kind, 'a file')}, not a directory", \
        f"move it out of the way {ELSEWHERE}"


def _not_a_directory(path: Path) -> tuple[Path, int] | None:
    """The first of `path`'s ancestors (or itself) that is there and no directory: what an
    ENOTDIR about `path` means, and its file type bits."""
    for candidate in reversed([path, *path.parents]):
        try:
            mode = candidate.stat().st_mode
        except OSError:
            return None
        if not stat.S_ISDIR(mode):
            return candidate, stat.S_IFMT(mode)
    return None


def _inside(path: Path, root: Path) -> bool:
    try:
        return path.resolve().is_relative_to(root)
    except (OSError, RuntimeError):  # a loop of links cannot be resolved
        return path.is_relative_to(root)


_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def disk_full(error: OSError, cache: Path) -> DiskFullError | None:
    """The OSError of a full disk as a DiskFullError naming the file and where space can be
    made; None for any other OSError (a bug: let it show its traceback). A copy's or a link's
    error names its source first: the file it was writing is the second name."""
    if error.errno not in _DISK_FULL:
        return None
    written = error.filename2 or error.filename
    where = Path(written) if written else None
    shown = f" writing {where}" if where else ""
    folder = where.parent if where else Path.cwd()
    return DiskFullError(
        f"no space left on the device{shown}",
        hint=f"free space where it was writing (df -h {folder}); wheelsmith's caches are in "
             f"{cache} (its toolchains/ are made again when needed); then run the "
             "same command again: a build resumes from the objects it had finished")
