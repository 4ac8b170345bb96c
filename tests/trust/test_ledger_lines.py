"""An index's ledger may have been written or damaged by others (index check, index rebuild,
publish): every line is parsed into a typed record whose names are plain; a malformed line is
one error naming it (`ledger.jsonl:N`, exit 14), and no file outside the index is ever hashed,
linked or listed."""

from __future__ import annotations

import functools
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.hostile import assert_orderly, returned_or_raised, run_bounded, sentinel
from tests.wheels import make_wheel
from wheelsmith.errors import IndexDriftError
from wheelsmith.index import ledger
from wheelsmith.index import store as index
from wheelsmith.index.publish import publish

CHANNEL = "cu130-torch2.14"
HINT = ("hint: only `wheelsmith publish` and `yank` write the ledger: this line was damaged or "
        "written by hand; restore ledger.jsonl from a backup. Nothing in the index was changed")


def published(tmp_path: Path) -> tuple[Path, Path, dict[str, Any]]:
    """An index in `tmp_path/site/index` holding one wheel; its wheels directory and the
    wheel's ledger line. The sentinel directory `tmp_path/site/outside` sits beside it."""
    wheels = tmp_path / "wheels"
    wheels.mkdir(exist_ok=True)
    root = tmp_path / "site" / "index"
    publish(make_wheel(wheels, "demo-ext", "1.0.0"), root, channel=CHANNEL)
    line = json.loads((root / "ledger.jsonl").read_text().splitlines()[0])
    return root, wheels, line


BAD_LINES = {  # a line appended as line 2, and what is said of it
    "not JSON": ("publish demo-ext", "not valid JSON (Expecting value: line 1 column 1 (char "
                                     "0))"),
    "an empty object": ("{}", "'action' is missing"),
    "a list": ("[1]", "expected an object, found a list"),
    "a size that is text": ({"size": "big"}, "size: expected a whole number, found a string "
                                             "(\"big\")"),
    "a name that leaves the index": (
        {"filename": "../../outside/nested/X.whl"},
        "filename: '../../outside/nested/X.whl' is not a wheel's file name"),
    "a channel that leaves the index": ({"channel": "../x"},
                                        "channel: '../x' is not a channel name"),
    "a sha256 that is a path": ({"sha256": "../" * 21 + "a"},
                                f"sha256: '{'../' * 19}..…' is not a sha256"),
    "not UTF-8": (b"{\xff}", "not UTF-8 (byte 2)"),
    "UTF-16": (b"\xff\xfe{\x00}\x00", "not plain UTF-8 (byte 1: a UTF-16 byte order mark)"),
    # a file name has one content in the whole index: `check` verified only the later line's
    "a published name again with other bytes": (
        {"channel": "cu130-torch2.13", "sha256": "ab" * 32},
        "publishes {filename} again with sha256 " + "ab" * 32 + "; an earlier line gave it "
        "{sha256} (a file name has one content in the whole index)"),
}


def _append(root: Path, line: Any, record: dict[str, Any]) -> None:
    if isinstance(line, dict):
        line = json.dumps({**record, **line}, sort_keys=True, separators=(",", ":"))
    raw = line if isinstance(line, bytes) else line.encode()
    with (root / "ledger.jsonl").open("ab") as handle:
        handle.write(raw + b"\n")


@pytest.mark.parametrize("case", sorted(BAD_LINES))
@pytest.mark.parametrize("command", ["index check", "index rebuild", "publish"])
def test_a_malformed_ledger_line_is_named_with_exit_14_and_nothing_is_done(
        tmp_path: Path, case: str, command: str) -> None:
    root, wheels, record = published(tmp_path)
    line, said = BAD_LINES[case]
    _append(root, line, record)
    before = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    args = [*command.split(), "--index", str(root)]
    if command == "publish":  # a new project: its channel's list needs the whole ledger
        args[1:1] = [str(make_wheel(wheels, "other-ext", "1.0.0")), "--channel", CHANNEL]
    with sentinel(tmp_path / "site" / "outside"):
        outcome = run_bounded(*args, cwd=tmp_path, seconds=60)
    assert_orderly(outcome, seconds=30)
    assert outcome.returncode == 14
    assert outcome.stderr.splitlines() == [
        f"error: {root}/ledger.jsonl:2: {said.format(**record)}", HINT]
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*")) == before


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                               max_size=3),
    max_leaves=10)
HOSTILE_TEXT = st.sampled_from([
    "../../outside/nested/X.whl", "/etc/passwd", "..", "a/b", "x\0y", "", "demo-ext",
    "demo_ext-1.0.0-cp311-cp311-linux_x86_64.whl", "ab" * 32, "../" * 21 + "a", "1.0.0",
    "not a version", CHANNEL, "publish", "yank", "unyank"])


def _lines(record: dict[str, Any]) -> st.SearchStrategy[bytes]:
    """A real line with fields replaced by hostile names, any JSON, or bytes."""
    fields = {key: st.just(value) | HOSTILE_TEXT | JSON for key, value in record.items()}
    edited = st.fixed_dictionaries({}, optional=fields).map(
        lambda line: json.dumps(line).encode())
    return edited | JSON.map(lambda value: json.dumps(value).encode()) | st.binary(max_size=64)


@pytest.fixture(scope="module")
def clean_site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    base = tmp_path_factory.mktemp("ledger")
    root, _, record = published(base)
    return root.parent, record


@given(st.data())
def test_any_line_is_read_as_a_record_or_named_and_nothing_outside_is_touched(
        tmp_path_factory: pytest.TempPathFactory, clean_site: tuple[Path, dict[str, Any]],
        data: st.DataObject) -> None:
    site, record = clean_site
    copy = tmp_path_factory.mktemp("site") / "site"
    shutil.copytree(site, copy)
    root = copy / "index"
    line = data.draw(_lines(record).filter(lambda raw: b"\n" not in raw))
    _append(root, line, record)
    with sentinel(copy / "outside"):
        steps: list[Callable[[Path], object]] = [index.check, index.rebuild, ledger.read]
        for step in steps:
            done = returned_or_raised(functools.partial(step, root), IndexDriftError)
            if isinstance(done, IndexDriftError):
                assert done.message.startswith(f"{root}/ledger.jsonl:2: ")
        for page in copy.rglob("index.*"):
            assert page.is_relative_to(root)
            assert "outside" not in page.read_text()


def test_a_link_inside_the_index_that_leads_out_is_never_followed(tmp_path: Path) -> None:
    """Names that are plain still join into a path through the index's own directories: one
    replaced by a link to elsewhere is a problem `index check` names, not a file it hashes."""
    root, _, record = published(tmp_path)
    with sentinel(tmp_path / "site" / "outside") as guard:
        folder = root / "files" / record["sha256"][:2]
        shutil.rmtree(folder)
        folder.symlink_to(guard.root)
        report = index.check(root)
    stored = f"files/{record['sha256'][:2]}/{record['sha256']}/{record['filename']}"
    assert report.problems == [f"{stored}: leads outside {root}: a link? it is not read"]
