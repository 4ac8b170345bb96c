"""The machine's own refusals (a file where a directory belongs, a read-only file system, a full
disk, a loop of links, a name too long), met by every command that writes: one line naming
the option, the path and what to do, with its exit code (22, or 19 for space), checked before
any work starts where the path comes from an option or the cache; never a traceback, and
nothing left half-written. Made for real: files in the way, read-only mounts and a tiny tmpfs
in a mount namespace of the test's own (tests run as root, so permissions alone refuse
nothing)."""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import SMALL_FS, add_variant, wheelsmith_on_small_fs
from tests.hostile import Outcome, assert_orderly, run_bounded
from tests.wheels import make_wheel
from wheelsmith import locations
from wheelsmith.builder import diagnose, pathview
from wheelsmith.errors import DiskFullError, FileSystemError, machine_error

OTHER = "move it out of the way or use another directory"
IN_THE_WAY_KINDS: dict[str, tuple[Callable[[Path], object], str]] = {  # what stands in the way
    "file": (lambda path: path.write_text("a file\n"), "a file"),
    "FIFO": (os.mkfifo, "a FIFO (named pipe)"),
    "link to a device": (lambda path: path.symlink_to("/dev/null"), "a character device"),
}
READ_ONLY = "use a directory on a writable file system"
CACHE = "; it is wheelsmith's cache: set WHEELSMITH_CACHE to a writable directory"


def listing(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size if p.is_file() else -1
            for p in sorted(root.rglob("*"))}


def run(*args: str, cwd: Path, env: dict[str, str] | None = None,
        read_only: tuple[Path, ...] = ()) -> Outcome:
    outcome = run_bounded(*args, cwd=cwd, seconds=120, read_only=read_only,
                          env={**os.environ, **(env or {})})
    assert_orderly(outcome, seconds=120)
    return outcome


def error_lines(outcome: Outcome) -> list[str]:
    lines = outcome.stderr.splitlines()
    return lines[next(i for i, line in enumerate(lines) if line.startswith("error: ")):]


# --- a file where a directory belongs --------------------------------------------------------

# (the command, the option that names a directory, the directory it is given below a file)
IN_THE_WAY: list[tuple[tuple[str, ...], str, str]] = [
    (("build", "causal-conv1d"), "--out", ""),
    (("build", "causal-conv1d"), "--work-dir", "/work"),
    (("build", "causal-conv1d", "--publish"), "--index", "/index/deeper"),
    (("verify", "--rebuild", "x.whl"), "--work-dir", ""),
    (("install", "causal-conv1d", "--python", "/usr/bin/python3"), "--out", "/out"),
    (("install", "causal-conv1d", "--python", "/usr/bin/python3"), "--publish", "/index"),
    (("nightly",), "--report", ""),
    (("nightly", "--no-publish"), "--work-dir", "/w"),
    (("toolchain", "new", "--torch", "2.14.1"), "--dir", ""),
    (("publish", "x.whl"), "--index", ""),
    (("yank", "x.whl", "--reason", "bad"), "--index", "/i"),
    (("index", "rebuild"), "--index", ""),
    (("index", "check"), "--index", "/i"),
    (("serve", "--port", "0"), "--index", ""),
    (("index", "export", "out"), "--index", ""),
    (("recipe", "new", "causal-conv1d"), "--recipes", "/mine"),
]


@pytest.mark.parametrize("kind", ["file", "FIFO"])
@pytest.mark.parametrize(("command", "option", "below"), IN_THE_WAY,
                         ids=[f"{' '.join(c[:2])} {o}" for c, o, _ in IN_THE_WAY])
def test_what_is_no_directory_where_one_belongs_is_named_before_any_work(
        tmp_path: Path, command: tuple[str, ...], option: str, below: str, kind: str) -> None:
    """Named as what it is, at its own path: never a path below it that cannot exist."""
    make, said = IN_THE_WAY_KINDS[kind]
    make(tmp_path / "in-the-way")
    (tmp_path / "x.whl").write_text("never read: the directories are checked first\n")
    value = str(tmp_path / "in-the-way") + below
    before = listing(tmp_path)
    outcome = run(*command, option, value, cwd=tmp_path)
    culprit = f" ({tmp_path / 'in-the-way'})" if below else ""
    assert (outcome.returncode, error_lines(outcome)) == (FileSystemError.exit_code, [
        f"error: {option} {value}: it is {said}, not a directory{culprit}",
        f"hint: {OTHER}"])
    assert listing(tmp_path) == before


CACHE_USERS = [("build", "causal-conv1d"), ("verify", "--rebuild", "x.whl"),
               ("install", "causal-conv1d", "--python", "/usr/bin/python3"), ("nightly",),
               ("recipe", "new", "causal-conv1d", "--recipes", "mine"),
               ("image", "build"), ("toolchain", "ensure")]


@pytest.mark.parametrize("command", CACHE_USERS, ids=[" ".join(c[:2]) for c in CACHE_USERS])
def test_a_cache_that_is_a_file_is_refused_before_any_work(tmp_path: Path,
                                                          command: tuple[str, ...]) -> None:
    cache = tmp_path / "cache"
    cache.write_text("not a directory\n")
    (tmp_path / "x.whl").write_text("never read: the directories are checked first\n")
    before = listing(tmp_path)
    outcome = run(*command, cwd=tmp_path, env={"WHEELSMITH_CACHE": str(cache)})
    assert (outcome.returncode, error_lines(outcome)) == (FileSystemError.exit_code, [
        f"error: wheelsmith's cache {cache}: it is a file, not a directory",
        f"hint: {OTHER}{CACHE}"])
    assert listing(tmp_path) == before


# --- read-only file systems --------------------------------------------------------------------

READ_ONLY_CASES: list[tuple[tuple[str, ...], str, str]] = [
    (("build", "causal-conv1d"), "--out", "/out"),
    (("build", "causal-conv1d"), "--work-dir", ""),
    (("build", "causal-conv1d", "--publish"), "--index", "/index"),
    (("nightly",), "--report", "/nightly"),
    (("toolchain", "new", "--torch", "2.14.1"), "--dir", ""),
    (("publish", "x.whl"), "--index", "/index"),
]


@SMALL_FS
@pytest.mark.parametrize(("command", "option", "below"), READ_ONLY_CASES,
                         ids=[f"{' '.join(c[:2])} {o}" for c, o, _ in READ_ONLY_CASES])
def test_a_read_only_directory_is_refused_before_any_work(
        tmp_path: Path, command: tuple[str, ...], option: str, below: str) -> None:
    frozen = tmp_path / "frozen"
    frozen.mkdir()
    value = str(frozen) + below
    outcome = run(*command, option, value, cwd=tmp_path, read_only=(frozen,))
    culprit = f" ({frozen})" if below else ""
    assert (outcome.returncode, error_lines(outcome)) == (FileSystemError.exit_code, [
        f"error: {option} {value}: the file system is read-only{culprit}",
        f"hint: {READ_ONLY}"])
    assert list(frozen.iterdir()) == []


@SMALL_FS
def test_a_read_only_cache_is_refused_before_any_work(tmp_path: Path) -> None:
    frozen = tmp_path / "cache"
    frozen.mkdir()
    outcome = run("build", "causal-conv1d", cwd=tmp_path, read_only=(frozen,),
                  env={"WHEELSMITH_CACHE": str(frozen)})
    assert (outcome.returncode, error_lines(outcome)) == (FileSystemError.exit_code, [
        f"error: wheelsmith's cache {frozen}: the file system is read-only",
        f"hint: {READ_ONLY}{CACHE}"])


@SMALL_FS
def test_a_directory_that_turns_read_only_in_the_middle_is_one_line_naming_it(
        tmp_path: Path) -> None:
    """The index is writable, the directory its files go to is not: the refusal comes from
    the publish itself (no check beforehand could see it), through the same mapping."""
    index = tmp_path / "index"
    first = make_wheel(tmp_path, "first")
    assert run("publish", "--index", str(index), "--channel", "t", str(first),
               cwd=tmp_path).returncode == 0
    files = index / "files"
    before = listing(index)
    second = make_wheel(tmp_path, "second")
    outcome = run("publish", "--index", str(index), "--channel", "t", str(second),
                  cwd=tmp_path, read_only=(files,))
    assert outcome.returncode == FileSystemError.exit_code, outcome.describe()
    message, hint = error_lines(outcome)
    assert message.startswith(f"error: {files}/"), message
    assert message.endswith(": the file system is read-only"), message
    assert hint == f"hint: {READ_ONLY}"
    assert listing(index) == before  # no ledger line, no page, no scratch


# --- a full disk ---------------------------------------------------------------------------------

@SMALL_FS
def test_publishing_to_a_full_disk_is_exit_19_naming_the_file_and_keeps_nothing(
        tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "big", files={"big/data.bin": os.urandom(64 << 10)})
    mount = tmp_path / "index"
    result = wheelsmith_on_small_fs(mount, "32k", "publish", "--index", str(mount),
                                    "--channel", "t", str(wheel), cwd=tmp_path)
    assert result.returncode == DiskFullError.exit_code, result.stderr
    assert "Traceback" not in result.stderr
    message = result.stderr.splitlines()[0]
    assert message.startswith(f"error: no space left on the device writing {mount}/"), message
    left = (tmp_path / "index.left").read_text().split()
    assert not [name for name in left if name.endswith(".whl") or "ledger" in name], left


# --- the mapping itself, from real refusals ----------------------------------------------------

def _a_directory(root: Path) -> None:
    (root / "d").mkdir()
    (root / "d").write_text("")


def _exists(root: Path) -> None:
    (root / "d").mkdir()
    (root / "d").mkdir()


def _a_loop(root: Path) -> None:
    (root / "loop").symlink_to("loop")
    (root / "loop" / "x").write_text("")


def _too_long(root: Path) -> None:
    (root / ("n" * 300)).write_text("")


REFUSED: dict[str, tuple[Callable[[Path], None], int, str, str]] = {
    "directory in the way": (_a_directory, errno.EISDIR, "it is a directory, not a file",
                             "move it out of the way or use another directory"),
    "exists": (_exists, errno.EEXIST, "it exists already (a file where a directory belongs?)",
               "move it out of the way or use another directory"),
    "loop of links": (_a_loop, errno.ELOOP,
                      "too many symbolic links (a link that leads back to itself?)",
                      "fix or remove the link or use another directory"),
    "name too long": (_too_long, errno.ENAMETOOLONG, "the name is too long for the file system",
                      "use a shorter path"),
}


@pytest.mark.parametrize("case", list(REFUSED))
@pytest.mark.parametrize("in_cache", [False, True])
def test_each_refusal_of_the_machine_is_one_line_naming_the_path(tmp_path: Path, case: str,
                                                                 in_cache: bool) -> None:
    make, code, reason, todo = REFUSED[case]
    with pytest.raises(OSError) as raised:  # noqa: PT011 - which one is the point
        make(tmp_path)
    assert raised.value.errno == code
    cache = tmp_path if in_cache else tmp_path / "elsewhere"
    error = machine_error(raised.value, cache)
    assert isinstance(error, FileSystemError)
    assert (error.message, error.hint, error.exit_code) == (
        f"{raised.value.filename}: {reason}", todo + (CACHE if in_cache else ""), 22)


@pytest.mark.parametrize("kind", sorted(IN_THE_WAY_KINDS))
@given(depth=st.integers(0, 6), at=st.integers(0, 6), deeper=st.integers(0, 3))
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=20)
def test_a_path_below_what_is_no_directory_names_what_stands_in_the_way(
        tmp_path: Path, kind: str, depth: int, at: int, deeper: int) -> None:
    """Whatever the path and however deep below it the refused operation was, the error names
    the first of its parts that is there and no directory, and what that is."""
    make, said = IN_THE_WAY_KINDS[kind]
    root = Path(tempfile.mkdtemp(dir=tmp_path))
    parents = [f"d{i}" for i in range(min(at, depth))]
    (root.joinpath(*parents)).mkdir(parents=True, exist_ok=True)
    blocker = root.joinpath(*parents, "in-the-way")
    make(blocker)
    below = blocker.joinpath(*[f"x{i}" for i in range(deeper + 1)])
    with pytest.raises(OSError) as raised:  # noqa: PT011 - which one is the point
        below.mkdir(parents=True)
    error = machine_error(raised.value, tmp_path / "elsewhere")
    assert isinstance(error, FileSystemError)
    assert (error.message, error.hint) == (f"{blocker}: it is {said}, not a directory", OTHER)


def test_a_refusal_that_names_no_path_is_its_reason() -> None:
    error = machine_error(OSError(errno.EACCES, "Permission denied"), Path("/c"))
    assert isinstance(error, FileSystemError)
    assert (error.message, error.hint) == ("permission denied", "give this user write access "
                                           "to it or use another directory")


def test_an_error_that_is_not_the_machines_refusal_is_left_to_show_itself() -> None:
    assert machine_error(OSError(errno.ENOENT, "No such file", "/x"), Path("/c")) is None
    assert machine_error(OSError(errno.ECONNREFUSED, "refused"), Path("/c")) is None


# --- a work directory that fills up during the compile -----------------------------------------

FILLS_THE_DISK = '''import os


def _fill_the_disk():
    """Write until the file system is full, remove the partial output and fail, as a compiler
    does when its object no longer fits."""
    os.makedirs("build", exist_ok=True)
    path = os.path.abspath("build/big.o")
    try:
        with open(path, "wb") as out:
            while True:
                out.write(b"\\\\0" * (1 << 16))
                out.flush()
    except OSError as exc:
        os.remove(path)
        raise OSError(exc.errno, exc.strerror, path) from None


_fill_the_disk()
setup('''


@SMALL_FS
@pytest.mark.toolchain
def test_a_work_directory_that_fills_up_during_the_compile_is_exit_19_not_a_compile_failure(
        project: Path, toolchain: object) -> None:
    """The package's build fails because its output does not fit (the log still does: the
    compiler removed what it wrote): disk full, exit 19, naming the file where it really is
    (not the build's fixed view of it), never exit 9's 'read the full log'."""
    add_variant(project, "tiny-ext", edit=("\nsetup(", "\n" + FILLS_THE_DISK))
    work = project / "work"
    result = wheelsmith_on_small_fs(work, "2m", "build", "tiny-ext", "--arch", "12.0",
                                    "--work-dir", str(work), "--compile-cache", "off",
                                    cwd=project)
    assert result.returncode == DiskFullError.exit_code, result.stderr
    assert "Traceback (most recent call last)" not in result.stderr.split("--- output ---")[0]
    lines = result.stderr.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("error: "))
    message, *details = lines[start:]
    written = Path(message.removeprefix("error: no space left on the device writing "))
    slug, *where = written.relative_to(work).parts  # the work directory (gone with its tmpfs)
    assert slug.startswith("tiny-ext-0.1.0-"), message
    assert where == ["src", "tiny-ext", "build", "big.o"], message
    source = work / slug / "src" / "tiny-ext"
    assert details[:2] == ["  --- output ---", "  OSError: [Errno 28] No space left on device: "
                           f"'{pathview.ROOT}/source/build/big.o'"]
    assert details[2] == f"  --- full log: {work / slug}/build.log"
    assert details[3] == (f"hint: free space where it was writing (df -h {source}/build); "
                          f"wheelsmith's caches are in {locations.cache_dir()} (its toolchains/ "
                          "are made again when needed); then run the same command again: a "
                          "build resumes from the objects it had finished")
    assert not (project / "wheelhouse").exists()


LOG_LINES = {
    "cc1plus: fatal error: error writing to /tmp/ccX1.s: No space left on device": "/tmp/ccX1.s",
    "/usr/bin/ld: final link failed: No space left on device": None,  # the linker's own name
    "OSError: [Errno 28] No space left on device: '/w/src/build/a.o'": "/w/src/build/a.o",
    "ptxas fatal   : Could not write '/w/k.cubin': Disk quota exceeded": "/w/k.cubin",
    "OSError: [Errno 122] Disk quota exceeded": None,
}


@pytest.mark.parametrize("line", list(LOG_LINES))
def test_a_build_log_that_ran_out_of_space_is_recognised_with_the_file_it_wrote(
        line: str) -> None:
    text = f"[1/3] c++ -c a.cpp\n{line}\nninja: build stopped: subcommand failed.\n"
    named = LOG_LINES[line]
    assert diagnose.disk_full(text) == (line, Path(named) if named else None)
    assert diagnose.disk_full(text.replace(line, "error: expected ';' before '}'")) is None
