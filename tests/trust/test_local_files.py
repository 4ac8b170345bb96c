"""Local files others may have written (an index's ledger, lock, watermark, pages and files; a
wheel given to verify, verify --rebuild or publish) are opened only as regular files and read
within a bound (untrusted/local.py): a FIFO, a socket, a device or a directory where a file
belongs is one error naming the path and what it is (exit 22), never a hang or an empty read;
a ledger, page or sidecar of any size is an error or a comparison by size, never a
MemoryError (every run has a 2 GiB address space); every ledger field a page carries to pip is
checked where the line is parsed; and a publish or yank refused for a place it would write
has written nothing. Every CLI run is bounded in time (run_bounded kills it)."""

from __future__ import annotations

import codecs
import hashlib
import json
import os
import shutil
import socket
import stat
import tempfile
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from packaging.specifiers import SpecifierSet
from packaging.utils import parse_wheel_filename
from packaging.version import Version

from tests.hostile import Outcome, assert_orderly, returned_or_raised, run_bounded, sentinel
from tests.trust.test_ledger_lines import CHANNEL, HINT, published
from tests.trust.test_wheel_provenance import RECORD, stamped
from tests.wheels import make_wheel
from wheelsmith.errors import IndexDriftError
from wheelsmith.index import ledger, pages
from wheelsmith.index import store as index
from wheelsmith.untrusted import CHUNK, local

NOT_REGULAR = ("hint: wheelsmith opens only regular files there (a FIFO or a device could "
               "block it or never end): name a regular file, or move this one out of the way")
LEADS_OUT = ("hint: a path taken from data never leaves its root: the data is damaged or "
             "hostile; nothing was read or written there")
DEMO = "demo_ext-1.0.0-cp311-cp311-linux_x86_64.whl"
PAGE = f"{CHANNEL}/simple/demo-ext/index.html"


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _socket(path: Path) -> None:
    """A socket file at `path`, bound where its name fits (108 bytes) and moved there."""
    short = Path(tempfile.mkdtemp(dir="/tmp")) / "s"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(short))
    short.rename(path)
    short.parent.rmdir()


def _device(path: Path) -> None:
    try:
        os.mknod(path, 0o644 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's: reads empty
    except PermissionError:
        pytest.skip("this machine lets no test make a device file")


def _directory(path: Path) -> None:
    path.mkdir()


KINDS: dict[str, Callable[[Path], None]] = {
    "a FIFO (named pipe)": _fifo, "a socket": _socket, "a character device": _device,
    "a directory": _directory}


def listing(root: Path) -> dict[str, str]:
    """Every path under `root` with the sha256 of a regular file, else its kind."""
    found = {}
    for path in sorted(root.rglob("*")):
        mode = path.lstat().st_mode
        found[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest() \
            if stat.S_ISREG(mode) else oct(stat.S_IFMT(mode))
    return found


def cli(command: str, root: Path, wheels: Path, cwd: Path) -> Outcome:
    """`command` (index check, index rebuild, publish: a new project, yank) on `root`, bounded:
    a run that hangs is killed at 60 s and fails `assert_orderly`."""
    args = [*command.split(), "--index", str(root)]
    if command == "publish":
        args[1:1] = [str(make_wheel(wheels, "other-ext", "1.0.0")), "--channel", CHANNEL]
    if command == "yank":
        args[1:1] = [DEMO, "--reason", "bad"]
    outcome = run_bounded(*args, cwd=cwd, seconds=60)
    assert_orderly(outcome, seconds=30)
    return outcome


COMMANDS = ["index check", "index rebuild", "publish", "yank"]


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("place", [index.LOCK, ledger.LEDGER, index.WATERMARK])
@pytest.mark.parametrize("command", COMMANDS)
def test_what_is_not_a_regular_file_in_an_index_is_named_and_nothing_is_written(
        tmp_path: Path, command: str, place: str, kind: str) -> None:
    """A FIFO as the lock or the ledger hung every command; /dev/null's device as the ledger
    read as an empty one (and rebuild rewrote the root page without the channel)."""
    root, wheels, _ = published(tmp_path)
    (root / place).unlink(missing_ok=True)
    KINDS[kind](root / place)
    before = listing(root)
    with sentinel(tmp_path / "site" / "outside"):
        outcome = cli(command, root, wheels, tmp_path)
    assert (outcome.returncode, outcome.stderr.splitlines()) == (22, [
        f"error: {root}/{place}: it is {kind}, not a regular file", NOT_REGULAR])
    assert listing(root) == before


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("command", ["index check", "index rebuild", "yank"])
def test_what_is_not_a_regular_file_where_a_page_belongs_is_named_and_nothing_is_written(
        tmp_path: Path, command: str, kind: str) -> None:
    root, wheels, _ = published(tmp_path)
    (root / PAGE).unlink()
    KINDS[kind](root / PAGE)
    before = listing(root)
    outcome = cli(command, root, wheels, tmp_path)
    if command == "index check":
        assert outcome.returncode == 14
        assert f"  page {PAGE}: it is {kind}, not a regular file (move it away, then run " \
               "`wheelsmith index rebuild`)" in outcome.stderr.splitlines()
    else:  # yank: refused before its ledger line is written
        assert (outcome.returncode, outcome.stderr.splitlines()) == (22, [
            f"error: {root}/{PAGE}: it is {kind}, not a regular file", NOT_REGULAR])
    assert listing(root) == before


# --- sizes ------------------------------------------------------------------------------------

def _grow(path: Path, size: int) -> None:
    """`path` made `size` bytes long with zeros past its end (sparse: no disk is used)."""
    with path.open("r+b") as handle:
        handle.truncate(size)


@pytest.mark.parametrize("command", COMMANDS)
def test_a_ledger_of_4_gib_without_a_newline_is_damage_named_and_not_cut(
        tmp_path: Path, command: str) -> None:
    root, wheels, _ = published(tmp_path)
    _grow(root / ledger.LEDGER, 4 << 30)
    before = listing(root / "files")
    outcome = cli(command, root, wheels, tmp_path)
    assert (outcome.returncode, outcome.stderr.splitlines()) == (14, [
        f"error: {root}/ledger.jsonl: it ends in a line longer than 64 KiB: damage, not a "
        "line a dying writer tore", HINT])
    assert (root / ledger.LEDGER).stat().st_size == 4 << 30
    assert listing(root / "files") == before


@pytest.mark.parametrize("command", COMMANDS)
def test_a_4_gib_line_inside_the_ledger_is_named_by_its_number(tmp_path: Path,
                                                               command: str) -> None:
    root, wheels, _ = published(tmp_path)
    ledger_path = root / ledger.LEDGER
    _grow(ledger_path, ledger_path.stat().st_size + (4 << 30))
    with ledger_path.open("ab") as handle:
        handle.write(b"\n")
    outcome = cli(command, root, wheels, tmp_path)
    assert (outcome.returncode, outcome.stderr.splitlines()) == (14, [
        f"error: {root}/ledger.jsonl:2: a line longer than 64 KiB (publish writes a few "
        "hundred bytes)", HINT])


@pytest.fixture(scope="module")
def one_line(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    root, _, _ = published(tmp_path_factory.mktemp("ledger"))
    return root, (root / ledger.LEDGER).read_bytes()


@given(pad=st.integers(0, ledger.MAX_LINE - 500), length=st.integers(ledger.MAX_LINE - 3,
                                                         ledger.MAX_LINE + 3) | st.integers(
    2, 3 * CHUNK))
def test_lines_are_read_in_pieces_and_one_past_the_cap_is_named(
        tmp_path_factory: pytest.TempPathFactory, one_line: tuple[Path, bytes], pad: int,
        length: int) -> None:
    """Line 1 (padded with spaces: still the same JSON) puts line 2 anywhere across the
    reader's pieces; line 2 is `length` bytes: at most MAX_LINE is read as JSON."""
    source, line = one_line
    root = tmp_path_factory.mktemp("index")
    (root / ledger.LEDGER).write_bytes(b" " * pad + line + b" " * (length - 2) + b"{}\n")
    with pytest.raises(IndexDriftError) as raised:
        ledger.read(root)
    said = "'action' is missing" if length <= ledger.MAX_LINE else \
        "a line longer than 64 KiB (publish writes a few hundred bytes)"
    assert raised.value.message == f"{root}/ledger.jsonl:2: {said}"
    assert source.is_dir()


@pytest.mark.parametrize("what", ["page", "sidecar"])
def test_a_4_gib_page_or_sidecar_is_compared_by_size_never_read_whole(
        tmp_path: Path, what: str) -> None:
    root, wheels, record = published(tmp_path)
    stored = f"files/{record['sha256'][:2]}/{record['sha256']}/{record['filename']}.metadata"
    _grow(root / (PAGE if what == "page" else stored), 4 << 30)
    check = cli("index check", root, wheels, tmp_path)
    said = f"page {PAGE} differs from the ledger (run `wheelsmith index rebuild`)" \
        if what == "page" else f"{stored[:-len('.metadata')]}.metadata differs from the ledger"
    assert check.returncode == 14
    assert f"  {said}" in check.stderr.splitlines()
    for command in ("index rebuild", "yank"):
        assert cli(command, root, wheels, tmp_path).returncode == 0
    if what == "page":  # rewritten from the ledger
        assert (root / PAGE).read_bytes() == pages.all_pages(ledger.read(root))[Path(PAGE)]


# --- ledger fields a page carries to pip --------------------------------------------------------

FIELD_CASES = {  # a field of line 1, its value, and what index check says of it
    "an upload time that is markup": (
        "upload_time", "</script>x",
        "upload_time: '</script>x' is not a UTC time as publish writes it "
        "(YYYY-MM-DDTHH:MM:SS.ffffffZ)"),
    "an upload time in month 13": (
        "upload_time", "2026-13-01T00:00:00.000000Z",
        "upload_time: '2026-13-01T00:00:00.000000Z' is not a UTC time as publish writes it "
        "(YYYY-MM-DDTHH:MM:SS.ffffffZ)"),
    "a Requires-Python that is no specifier": (
        "requires_python", ">=3.8,<",
        "requires_python: '>=3.8,<' is not a version specifier (Requires-Python)"),
    "a file of another project": (
        "filename", "other_ext-1.0.0-cp311-cp311-linux_x86_64.whl",
        "filename: 'other_ext-1.0.0-cp311-cp311-linux_x86_64.whl' is not a file of demo-ext "
        "1.0.0, as the line's project and version say"),
    "a content key that is a path": ("key", "../x", "key: '../x' is not a content key"),
    "a size past any file's": ("size", 1 << 64,
                               f"size: {1 << 64} is not the size of a file"),
}


def _edit(root: Path, line: dict[str, Any], **fields: Any) -> None:
    (root / ledger.LEDGER).write_text(json.dumps({**line, **fields}, sort_keys=True,
                                                 separators=(",", ":")) + "\n")


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("case", sorted(FIELD_CASES))
def test_a_ledger_field_pip_would_choke_on_is_named_by_line_and_key(
        tmp_path: Path, case: str, command: str) -> None:
    """An upload time of '</script>x' passed index check and rebuild, and pip died on the
    page (Invalid isoformat string)."""
    root, wheels, line = published(tmp_path)
    key, value, said = FIELD_CASES[case]
    _edit(root, line, **{key: value})
    before = listing(root)
    outcome = cli(command, root, wheels, tmp_path)
    assert (outcome.returncode, outcome.stderr.splitlines()) == (14, [
        f"error: {root}/ledger.jsonl:1: {said}", HINT])
    assert listing(root) == before


PAGE_FIELDS = ("upload_time", "requires_python", "filename", "version", "project", "key",
               "archs", "size", "sha256", "metadata_sha256")
VALUES = st.sampled_from([
    "2026-12-04T10:00:00.000000Z", "2026-12-04T10:00:00Z", "2026-12-04", "</script>x",
    "2026-02-30T00:00:00.000000Z", "\uff12026-12-04T10:00:00.000000Z", ">=3.8", ">=3.8,<",
    "~=3", "", None, "1.0.0", "1.0", "demo-ext", "other-ext", "12.0", "12.0;9.0", "ab" * 32,
    "AB" * 32, DEMO, "demo_ext-1.0-cp311-cp311-linux_x86_64.whl", "x" * 300, 0, -1, 1 << 63,
    1.5, [">=3.8"]]) | st.text(max_size=16) | st.integers()


@given(st.data())
def test_what_the_ledger_accepts_is_what_pip_parses_from_the_page(
        tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    root, _, line = published(tmp_path_factory.mktemp("fields"))
    fields = data.draw(st.dictionaries(st.sampled_from(PAGE_FIELDS), VALUES, min_size=1,
                                       max_size=3))
    _edit(root, line, **fields)
    state = returned_or_raised(lambda: ledger.read(root), IndexDriftError)
    if isinstance(state, IndexDriftError):
        assert state.message.startswith(f"{root}/ledger.jsonl:1: ")
        return
    (record,) = state.by_filename.values()
    datetime.fromisoformat(record.upload_time)  # what pip does with upload-time
    if record.requires_python is not None:
        SpecifierSet(record.requires_python)
    name, version = parse_wheel_filename(record.filename)[:2]
    assert (name, version) == (record.project, Version(record.version))
    page = pages.all_pages(state)[Path(f"{CHANNEL}/simple/{record.project}/index.json")]
    (shown,) = json.loads(page)["files"]
    assert shown["upload-time"] == record.upload_time


# --- a publish or yank refused for a place it writes has written nothing ----------------------

PLACES = {  # what is replaced by a link out of the index, and which command meets it
    "the channel's directory": (CHANNEL, "publish", "{channel}/simple/other-ext/index.html"),
    "the channel's simple/": (f"{CHANNEL}/simple", "publish",
                              "{channel}/simple/other-ext/index.html"),
    "the project's directory (yank)": (f"{CHANNEL}/simple/demo-ext", "yank",
                                       "{channel}/simple/demo-ext/index.html"),
    "the channel's simple/ (yank)": (f"{CHANNEL}/simple", "yank",
                                     "{channel}/simple/demo-ext/index.html"),
    "files/": ("files", "publish", "{stored}"),
}


@pytest.mark.parametrize("case", sorted(PLACES))
def test_a_link_out_where_publish_or_yank_writes_is_refused_before_the_ledger_line(
        tmp_path: Path, case: str) -> None:
    """A channel's simple/ linked out of the index: publish said 'nothing was read or written
    there' with its ledger line written and its file stored."""
    root, wheels, _ = published(tmp_path)
    moved, command, named = PLACES[case]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.move(root / moved, elsewhere / "moved")
    (root / moved).symlink_to(elsewhere / "moved")
    other = make_wheel(wheels, "other-ext", "1.0.0")
    digest = hashlib.sha256(other.read_bytes()).hexdigest()
    before, outside = listing(root), listing(elsewhere)
    with sentinel(tmp_path / "site" / "outside"):
        outcome = cli(command, root, wheels, tmp_path)
    path = named.format(channel=CHANNEL, stored=f"files/{digest[:2]}/{digest}/{other.name}")
    assert (outcome.returncode, outcome.stderr.splitlines()) == (21, [
        f"error: {path}: leads outside {root}", LEADS_OUT])
    assert listing(root) == before
    assert listing(elsewhere) == outside


@pytest.mark.parametrize("kind", ["a FIFO (named pipe)", "a directory"])
def test_what_is_not_a_file_where_a_new_project_s_page_goes_is_refused_before_anything(
        tmp_path: Path, kind: str) -> None:
    root, wheels, _ = published(tmp_path)
    page = root / CHANNEL / "simple" / "other-ext" / "index.json"
    page.parent.mkdir()
    KINDS[kind](page)
    before = listing(root)
    outcome = cli("publish", root, wheels, tmp_path)
    assert (outcome.returncode, outcome.stderr.splitlines()) == (22, [
        f"error: {page}: it is {kind}, not a regular file", NOT_REGULAR])
    assert listing(root) == before


# --- a wheel that is not a regular file ---------------------------------------------------------

def _wheel_as(kind: str, directory: Path) -> Path:
    if kind == "/dev/zero":
        return Path("/dev/zero")
    path = directory / DEMO
    if kind == "a link to a FIFO":
        os.mkfifo(directory / "fifo")
        path.symlink_to(directory / "fifo")
    else:
        KINDS[kind](path)
    return path


WHEEL_KINDS = {"a FIFO (named pipe)": "a FIFO (named pipe)", "a socket": "a socket",
               "/dev/zero": "a character device", "a link to a FIFO": "a FIFO (named pipe)"}
WHEEL_COMMANDS = {"verify": ("verify", "{wheel}", "--arch", "12.0"),
                  "verify --rebuild": ("verify", "--rebuild", "{wheel}", "--work-dir", "{w}"),
                  "publish": ("publish", "{wheel}", "--index", "{i}", "--channel", CHANNEL)}


@pytest.mark.parametrize("kind", sorted(WHEEL_KINDS))
@pytest.mark.parametrize("command", sorted(WHEEL_COMMANDS))
def test_a_wheel_that_is_not_a_regular_file_is_named_never_read(
        tmp_path: Path, command: str, kind: str) -> None:
    """verify /dev/zero was a MemoryError, a FIFO hung it; verify --rebuild and publish said
    'no such file'."""
    wheel = _wheel_as(kind, tmp_path)
    args = [a.format(wheel=wheel, w=tmp_path / "w", i=tmp_path / "i")
            for a in WHEEL_COMMANDS[command]]
    outcome = run_bounded(*args, cwd=tmp_path, seconds=60)
    assert_orderly(outcome, seconds=30)
    assert (outcome.returncode, outcome.stderr.splitlines()) == (22, [
        f"error: {wheel}: it is {WHEEL_KINDS[kind]}, not a regular file", NOT_REGULAR])
    assert not (tmp_path / "w").exists()
    assert not (tmp_path / "i").exists()


def test_a_directory_given_to_publish_as_a_wheel_is_named(tmp_path: Path) -> None:
    (tmp_path / DEMO).mkdir()
    outcome = run_bounded("publish", str(tmp_path / DEMO), "--index", str(tmp_path / "i"),
                          cwd=tmp_path, seconds=60)
    assert_orderly(outcome, seconds=30)
    assert (outcome.returncode, outcome.stderr.splitlines()) == (22, [
        f"error: {tmp_path / DEMO}: it is a directory, not a regular file", NOT_REGULAR])
    assert not (tmp_path / "i").exists()


# --- JSON read from a wheel is plain UTF-8 ---------------------------------------------------

ENCODINGS = ["utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le",
             "utf-32-be"]


def _encoding_problem(data: bytes) -> str:
    for mark, name in ((codecs.BOM_UTF8, "UTF-8"), (codecs.BOM_UTF32_LE, "UTF-32"),
                       (codecs.BOM_UTF32_BE, "UTF-32"), (codecs.BOM_UTF16_LE, "UTF-16"),
                       (codecs.BOM_UTF16_BE, "UTF-16")):
        if data.startswith(mark):
            return f"not plain UTF-8 (byte 1: a {name} byte order mark)"
    return f"not UTF-8 (byte {data.index(0) + 1} is NUL: UTF-16 or UTF-32?)"


@pytest.mark.parametrize("command", ["verify", "publish"])
@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_provenance_with_a_byte_order_mark_or_in_utf_16_is_refused(
        tmp_path: Path, encoding: str, command: str) -> None:
    """json.loads takes bytes in UTF-16, UTF-32 or with a UTF-8 mark; pip's and other readers
    do not: such a wheelsmith.json was published."""
    data = json.dumps(RECORD).encode(encoding)
    wheel = stamped(tmp_path / "w", data)
    args = ("--arch", "12.0") if command == "verify" else ("--index", str(tmp_path / "i"),
                                                           "--channel", CHANNEL)
    outcome = run_bounded(command, str(wheel), *args, cwd=tmp_path, seconds=60)
    assert_orderly(outcome, seconds=30)
    assert outcome.returncode == 21
    assert outcome.stderr.splitlines()[0] == (
        f"error: the provenance of {wheel.name}: {_encoding_problem(data)}")
    assert not (tmp_path / "i").exists()


def _to_zero(path: Path) -> None:
    path.symlink_to("/dev/zero")


NAMED_KINDS = {"a FIFO (named pipe)": _fifo, "a character device": _to_zero}


def _support_dir(tmp_path: Path, place: Path) -> list[str]:
    return ["support-table", str(place.parent)]


def _support_readme(tmp_path: Path, place: Path) -> list[str]:
    reports = tmp_path / "reports"
    reports.mkdir()
    shutil.copy(REPORT, reports / "nightly.json")
    return ["support-table", str(reports), "--readme", str(place)]


USER_FILES: dict[str, tuple[str, Callable[[Path, Path], list[str]]]] = {
    # the file the user names, or one in a directory they name; the command that reads it
    "a recipe in a repository": ("repo/recipes/x.yaml",
                                 lambda t, _p: ["check-recipes", "--recipes", str(t / "repo")]),
    "a matrix": ("matrix.yaml", lambda _t, p: ["matrix", "--matrix", str(p)]),
    "a report among the reports": ("reports/a.json", _support_dir),
    "the README whose table is rewritten": ("README.md", _support_readme),
    "a checkpoint's config.json": ("model/config.json", lambda _t, p: [
        "doctor", "--arch", "9.0", "--model", str(p.parent), "--index", DEAD_INDEX]),
}
DEAD_INDEX = "http://127.0.0.1:9/simple/"  # doctor's fixes are checked against it: none answers
REPORT = Path(__file__).parents[2] / "docs" / "evidence" / "reports" / \
    "2026-12-04-2-core-support-nightly.json"


@pytest.mark.parametrize("kind", sorted(NAMED_KINDS))
@pytest.mark.parametrize("case", sorted(USER_FILES))
def test_a_file_the_user_names_that_is_no_regular_file_is_refused_and_never_read(
        tmp_path: Path, case: str, kind: str) -> None:
    """A FIFO (it hung check-recipes, matrix and support-table) or a link to /dev/zero (a
    MemoryError in support-table): one error naming the file, within the run's bound and its
    2 GiB address space."""
    relative, command = USER_FILES[case]
    place = tmp_path / relative
    place.parent.mkdir(parents=True, exist_ok=True)
    NAMED_KINDS[kind](place)
    outcome = run_bounded(*command(tmp_path, place), cwd=tmp_path, seconds=60)
    assert_orderly(outcome, seconds=30)
    assert outcome.returncode in (3, 4, 22), outcome.describe()  # YAML; input; the machine's
    shown = "a FIFO (named pipe)" if kind == "a FIFO (named pipe)" else "a character device"
    assert f"it is {shown}, not a regular file" in outcome.stderr, outcome.describe()
    assert str(place.name) in outcome.stderr


@pytest.mark.parametrize("kind", sorted(NAMED_KINDS))
def test_known_bad_rules_that_are_no_regular_file_are_refused_never_taken_for_none(
        tmp_path: Path, kind: str) -> None:
    """A FIFO or a link to /dev/zero as known-bad.yaml read as "no rules": doctor and build
    ran as if nothing were known bad."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "toolchains").symlink_to(Path(__file__).parents[2] / "toolchains")
    NAMED_KINDS[kind](home / "known-bad.yaml")
    outcome = run_bounded("doctor", "--arch", "9.0", "--index", DEAD_INDEX, cwd=tmp_path,
                          env={**os.environ, "WHEELSMITH_HOME": str(home)}, seconds=60)
    assert_orderly(outcome, seconds=30)
    shown = "a FIFO (named pipe)" if kind == "a FIFO (named pipe)" else "a character device"
    assert (outcome.returncode, outcome.stderr.splitlines()) == (3, [
        f"error: 1 problem in {home / 'known-bad.yaml'}",
        f"  {home / 'known-bad.yaml'}:1:1: cannot read: it is {shown}, not a regular file",
        "    hint: wheelsmith reads its YAML (recipes, profiles, matrix, known-bad rules) only "
        "from regular files: name one, or move this one out of the way"]), outcome.describe()


@pytest.mark.parametrize("mode", ["read", "append"])
def test_an_interrupt_as_the_file_object_is_made_stays_the_interrupt(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: local.Mode) -> None:
    """Ctrl-C just after os.fdopen made the file object, before open_regular holds it: the
    object, collected, closes the descriptor, and the interrupt, not EBADF from closing it
    again, reaches the command (exit 130, one line: test_interrupts.py's start-up sweep)."""
    target = tmp_path / "f"
    target.write_bytes(b"x")
    real = os.fdopen

    def interrupted(fd: int, mode: str) -> object:
        real(fd, mode).close()
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fdopen", interrupted)
    with pytest.raises(KeyboardInterrupt), local.open_regular(target, mode):
        pass
