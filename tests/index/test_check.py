"""`index check` only reads: on a drifted index it names every problem (exit 14) and leaves
every byte and every time of the index as it was (repairs are `index rebuild`); what an
interrupted writer left is noted for the next writer. It reads beside other readers and
waits for a writer. Recovery writes each channel's list once, however many projects it
regenerates."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import wheelsmith
from tests.wheels import make_wheel
from wheelsmith.index import ledger, pages
from wheelsmith.index import publish as publish_module
from wheelsmith.index import store as index
from wheelsmith.index.publish import publish

CHANNEL = "cu130-torch2.14"
Snapshot = dict[str, tuple[int, int, int, bytes | str | None]]


def snapshot(root: Path) -> Snapshot:
    """Every path under `root` (and `root`): its type and mode, size, mtime in ns, and its
    bytes (a file), its target (a link) or None (a directory)."""
    found: Snapshot = {}
    for path in [root, *root.rglob("*")]:
        info = path.lstat()
        content: bytes | str | None = None
        if path.is_symlink():
            content = str(path.readlink())
        elif path.is_file():
            content = path.read_bytes()
        found[str(path.relative_to(root))] = (info.st_mode, info.st_size, info.st_mtime_ns,
                                             content)
    return found


def drifted_index(tmp_path: Path) -> tuple[Path, list[str]]:
    """An index with every kind of drift and every kind of unfinished write, and the lines
    `index check` says of its problems (after `error: N problem(s) in ROOT`)."""
    wheels, root = tmp_path / "wheels", tmp_path / "index"
    wheels.mkdir()
    alpha = publish(make_wheel(wheels, "alpha", "1.0.0"), root, channel=CHANNEL)
    publish(make_wheel(wheels, "beta", "1.0.0"), root, channel=CHANNEL)
    late = publish_module.inspect(make_wheel(wheels, "beta", "1.1.0"), CHANNEL)
    publish_module._store(root, late)  # a publisher killed after its commit point
    ledger.append(root, ledger.publish_entry(late.record), late.wheel.name)
    stored = root / ledger.read(root).by_filename[alpha.filename].path
    stored.write_bytes(b"\0" * stored.stat().st_size)  # altered, same size
    (root / CHANNEL / "simple" / "alpha" / "index.html").write_text("edited by hand")
    (root / CHANNEL / "simple" / "gone").mkdir()
    (root / CHANNEL / "simple" / "gone" / "index.json").write_text("{}")
    (root / ".tmp" / "partial.whl").write_bytes(b"half")
    with (root / ledger.LEDGER).open("a") as handle:
        handle.write('{"action":"publish","chan')  # a writer killed mid-line
    relative = stored.relative_to(root)
    return root, [f"  {relative}: sha256 differs from the ledger (the file was altered)",
                  f"  page {CHANNEL}/simple/alpha/index.html differs from the ledger (run "
                  "`wheelsmith index rebuild`)",
                  f"  page {CHANNEL}/simple/gone/index.json is not implied by the ledger"]


@pytest.mark.parametrize("as_json", [False, True])
def test_check_of_a_drifted_index_writes_nothing_and_exits_14(tmp_path: Path,
                                                              as_json: bool) -> None:
    root, said = drifted_index(tmp_path)
    before = snapshot(root)
    time.sleep(0.01)  # a write in the same clock tick as the snapshot cannot go unseen
    result = wheelsmith("index", "check", "--index", str(root), *(["--json"] * as_json),
                        cwd=tmp_path)
    assert result.returncode == 14, result.stderr
    assert snapshot(root) == before
    lines = result.stderr.splitlines()
    assert lines[lines.index(f"error: 3 problem(s) in {root}") + 1:][:3] == said
    if not as_json:
        notes = [line for line in lines if line.startswith("note: ")]
        assert notes[0] == ("note: ledger.jsonl ends in a torn line (a writer was interrupted "
                            "writing it; every reader leaves it out, the next writer cuts it)")
        assert notes[1] == ("note: .tmp/partial.whl is a partial file an interrupted writer "
                            "left (the next writer removes it)")
        assert [n.split(" is behind")[0] for n in notes[2:]] == [
            f"note: page {CHANNEL}/simple/beta/index.{kind}" for kind in ("html", "json")]


def test_rebuild_repairs_what_check_reported(tmp_path: Path) -> None:
    root, _ = drifted_index(tmp_path)
    wheelsmith("index", "rebuild", "--index", str(root), cwd=tmp_path, check=True)
    result = wheelsmith("index", "check", "--index", str(root), cwd=tmp_path)
    assert result.returncode == 14  # a file's bytes come only from a backup
    assert result.stderr.count("\n  ") == 2  # the altered file; the page of no project
    assert "note: " not in result.stderr  # torn line cut, partial file gone, pages written


def _hold(root: Path, kind: int) -> int:
    fd = os.open(root / index.LOCK, os.O_RDWR)
    fcntl.flock(fd, kind)
    return fd


def _check_in_background(root: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "wheelsmith", "index", "check", "--index",
                             str(root)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def test_check_reads_beside_a_reader_and_waits_for_a_writer(tmp_path: Path) -> None:
    root = tmp_path / "index"
    (tmp_path / "wheels").mkdir()
    publish(make_wheel(tmp_path / "wheels", "alpha", "1.0.0"), root, channel=CHANNEL)
    reader = _hold(root, fcntl.LOCK_SH)
    try:
        beside = _check_in_background(root)
        said = beside.communicate(timeout=60)
        assert beside.returncode == 0, said
    finally:
        os.close(reader)
    writer = _hold(root, fcntl.LOCK_EX)
    try:
        waiting = _check_in_background(root)
        with pytest.raises(subprocess.TimeoutExpired):
            waiting.communicate(timeout=3)
    finally:
        os.close(writer)
    said = waiting.communicate(timeout=60)
    assert waiting.returncode == 0, said


def test_recovery_writes_each_channel_list_once(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A ledger of many projects whose pages were never written (a writer killed before its
    first watermark, or lines written by hand) is recovered in time linear in its length: it
    rendered the channel's list, of every project, again for each project."""
    root, wheels = tmp_path / "index", tmp_path / "wheels"
    wheels.mkdir()
    for n in range(30):
        publish(make_wheel(wheels, f"project-{n}", "1.0.0"), root, channel=CHANNEL)
    (root / index.WATERMARK).unlink()
    rendered: list[str] = []
    channel_pages = pages.channel_pages

    def counted(state: ledger.IndexState, channel: str) -> dict[Path, bytes]:
        rendered.append(channel)
        return channel_pages(state, channel)

    monkeypatch.setattr(pages, "channel_pages", counted)
    done = index.recover(root)
    assert rendered == [CHANNEL]
    assert done == [f"regenerated pages the last writer did not finish: "
                    f"{[(CHANNEL, f'project-{n}') for n in range(30)]}"]
    assert index.check(root) == index.CheckReport(files=30, problems=[], notes=[])
