"""An index directory may have been prepared by others (publish, yank, index check, index
rebuild, serve): every part of it that wheelsmith reads, writes, cuts or removes (the ledger,
the lock, the writers' scratch directory, the files, the sidecars, the pages) is used only
where it resolves inside the index. One replaced by a link out of it is one error naming it,
or a problem `index check` lists, or a 404; nothing outside is written, cut, removed or
served. (Recovery removed every file in the directory `.tmp` led to; the ledger's torn-tail
repair cut the file it led to; publish stored wheels where `files/` led.)"""

from __future__ import annotations

import shutil
import socket
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import serve
from tests.hostile import assert_orderly, returned_or_raised, run_bounded, sentinel
from tests.wheels import make_wheel
from wheelsmith.errors import UntrustedDataError
from wheelsmith.index import ledger
from wheelsmith.index.publish import publish
from wheelsmith.untrusted import inside

CHANNEL = "cu130-torch2.14"
INFO = "demo_ext-1.0.0-cp311-cp311-linux_x86_64.whl"


def _index(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """An index holding one wheel, and its parts by what they are: each a path relative to
    the index, as wheelsmith lays it out."""
    root, wheels = tmp_path / "index", tmp_path / "wheels"
    wheels.mkdir()
    publish(make_wheel(wheels, "demo-ext"), root, channel=CHANNEL)
    stored = next((root / "files").glob("*/*/*.whl")).relative_to(root)
    return root, {
        "the writers' scratch directory": ".tmp", "the lock": ".publish.lock",
        "the ledger": ledger.LEDGER, "the files": "files",
        "a file's hash directory": str(stored.parent.parent), "a file": str(stored),
        "a sidecar": f"{stored}.metadata", "a channel": CHANNEL,
        "a project's pages": f"{CHANNEL}/simple/demo-ext",
        "a page": f"{CHANNEL}/simple/demo-ext/index.html"}


def _link_out(root: Path, relative: str, outside: Path) -> None:
    """Replace `relative` with a link to a twin in `outside` (same kind, same layout below:
    what the link leads to looks like the index's own)."""
    part, twin = root / relative, outside / "twin" / relative
    twin.parent.mkdir(parents=True, exist_ok=True)
    if part.is_dir():
        shutil.copytree(part, twin)
        (twin / "precious.txt").write_text("keep me")  # a scratch directory's "stray"
        shutil.rmtree(part)
    else:
        twin.write_bytes(part.read_bytes().rstrip(b"\n") if part.is_file() else b"keep me")
        part.unlink(missing_ok=True)
    part.symlink_to(twin)


Args = Callable[[Path, Path], tuple[str, ...]]
COMMANDS: dict[str, Args] = {
    "publish": lambda tmp, root: ("publish", str(make_wheel(tmp / "more", "other-ext")),
                                  "--index", str(root), "--channel", CHANNEL),
    "yank": lambda _, root: ("yank", INFO, "--index", str(root), "--reason", "r"),
    "index check": lambda _, root: ("index", "check", "--index", str(root)),
    "index rebuild": lambda _, root: ("index", "rebuild", "--index", str(root)),
}
PARTS = ["the writers' scratch directory", "the lock", "the ledger", "the files",
         "a file's hash directory", "a file", "a sidecar", "a channel", "a project's pages",
         "a page"]


@pytest.mark.parametrize("part", PARTS)
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_part_of_the_index_linked_out_of_it_is_never_written_through(
        tmp_path: Path, part: str, command: str) -> None:
    root, parts = _index(tmp_path)
    (tmp_path / "more").mkdir()
    args = COMMANDS[command](tmp_path, root)
    _link_out(root, parts[part], tmp_path / "outside")
    with sentinel(tmp_path / "outside"):
        outcome = run_bounded(*args, cwd=tmp_path, seconds=60)
    assert_orderly(outcome, seconds=30)
    assert outcome.returncode in (0, 12, 14, 21), outcome.describe()
    if outcome.returncode == 21:
        assert outcome.stderr.splitlines()[-2].endswith(f": leads outside {root}")


@pytest.mark.parametrize(("part", "command", "said"), [
    ("the writers' scratch directory", "index check", ".tmp"),
    ("the ledger", "publish", ledger.LEDGER),
    ("the files", "publish", "files/"),
])
def test_the_part_linked_out_is_named(tmp_path: Path, part: str, command: str,
                                      said: str) -> None:
    root, parts = _index(tmp_path)
    (tmp_path / "more").mkdir()
    args = COMMANDS[command](tmp_path, root)
    _link_out(root, parts[part], tmp_path / "outside")
    outcome = run_bounded(*args, cwd=tmp_path, seconds=60)
    assert outcome.returncode == 21
    error, hint = outcome.stderr.splitlines()[-2:]
    assert error.startswith(f"error: {said}")
    assert error.endswith(f": leads outside {root}")
    assert hint == ("hint: a path taken from data never leaves its root: the data is damaged "
                    "or hostile; nothing was read or written there")


def _get(url: str, path: str) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(f"GET {path} HTTP/1.0\r\nAccept: text/html\r\n\r\n".encode())
        reply = b""
        while chunk := sock.recv(1 << 16):
            reply += chunk
    return reply


@pytest.mark.parametrize(("part", "through"), [
    ("the files", "a file"), ("a file's hash directory", "a file"),
    ("a channel", "a page"), ("a project's pages", "a page")])
def test_serve_answers_404_for_what_a_link_out_of_the_index_leads_to(
        tmp_path: Path, part: str, through: str) -> None:
    root, parts = _index(tmp_path)
    _link_out(root, parts[part], tmp_path / "outside")
    (tmp_path / "outside" / "twin" / parts[through]).write_bytes(b"SECRET from outside")
    paths = {"a file": f"/{parts['a file']}", "a page": f"/{CHANNEL}/simple/demo-ext/"}
    with serve(root, tmp_path / "serve.log") as server:
        replies = {what: _get(server.url, path) for what, path in paths.items()}
    assert replies[through].split(b"\r\n", 1)[0] == b"HTTP/1.0 404 Not Found"
    assert [r.split(b"\r\n", 1)[0] for w, r in replies.items() if w != through] == [
        b"HTTP/1.0 200 OK"]
    assert not any(b"SECRET" in reply for reply in replies.values())


def test_serve_redirects_only_a_page_path_it_serves(tmp_path: Path) -> None:
    """`$` matched before a final newline: `/c/simple%0a` was sent to `/c/simple%0a/`."""
    root, _ = _index(tmp_path)
    with serve(root, tmp_path / "serve.log") as server:
        answers = [_get(server.url, path).split(b"\r\n", 1)[0] for path in (
            f"/{CHANNEL}/simple%0a", f"/{CHANNEL}/simple/demo-ext%0a", f"/{CHANNEL}/simple")]
    assert answers == [b"HTTP/1.0 404 Not Found", b"HTTP/1.0 404 Not Found",
                       b"HTTP/1.0 301 Moved Permanently"]


# --- inside: each part looked at, links resolved --------------------------------------------

NAMES = st.sampled_from(["a", "b", "c"])
TARGETS = st.sampled_from(["a", "b/c", "..", "../out", "/", ".", "a/../..", "c", "b"])
TREES = st.lists(st.tuples(st.lists(NAMES, min_size=1, max_size=3).map("/".join),
                           st.sampled_from(["dir", "file", "link"]), TARGETS), max_size=8)
RELATIVES = st.lists(st.sampled_from(["a", "b", "c", ".", "..", ""]), min_size=1,
                     max_size=5).map("/".join)


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tree=TREES, relative=RELATIVES)
def test_inside_accepts_a_path_exactly_when_it_resolves_inside_its_root(
        tmp_path_factory: pytest.TempPathFactory, tree: list[tuple[str, str, str]],
        relative: str) -> None:
    """`inside` looks at each part and resolves from the first link on (the index check
    hashes a file per ledger line through it): it says what resolving the whole path says,
    for directories, files, links in and out of the root, to the root itself and in loops."""
    root = tmp_path_factory.mktemp("inside") / "root"
    root.mkdir()
    for place, kind, target in tree:
        path = root / place
        if path.parent.is_dir() and not path.parent.is_symlink() and not path.exists() \
                and not path.is_symlink():
            if kind == "dir":
                path.mkdir()
            elif kind == "file":
                path.touch()
            else:
                path.symlink_to(target)
    try:
        expected = (root / relative).resolve().is_relative_to(root.resolve())
    except (RuntimeError, OSError):  # a loop of links
        expected = False
    outcome = returned_or_raised(lambda: inside(root, relative), UntrustedDataError)
    assert isinstance(outcome, Path) == expected, (tree, relative)
