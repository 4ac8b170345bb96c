"""`wheelsmith index export DIR`: the index as a static tree. Its pages are the index's own
(one renderer), every file a page links is in place before the page (even when the export is
killed at random moments), and a second export writes only what changed (inodes and mtimes of
everything else stay)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.index.test_publish_faults import assert_reader_view_consistent, make_batch
from tests.wheels import make_wheel
from wheelsmith.index import ledger, pages
from wheelsmith.index.export import export
from wheelsmith.index.publish import publish, yank

CHANNEL = "cu130-torch2.14"


def wheelsmith(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wheelsmith", *args], capture_output=True,
                          text=True, check=False)


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under `root` (the export's own dot files left out): (inode, mtime_ns)."""
    return {str(p.relative_to(root)): (p.stat().st_ino, p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file() and not p.name.startswith(".")}


def test_a_second_export_rewrites_only_what_changed(tmp_path: Path) -> None:
    index, dest, wheels = tmp_path / "index", tmp_path / "site", tmp_path / "wheels"
    wheels.mkdir()
    first = make_wheel(wheels, "alpha", "1.0.0", tags="py3-none-any")
    publish(first, index, channel=CHANNEL)
    publish(make_wheel(wheels, "beta", "1.0.0", tags="py3-none-any"), index, channel=CHANNEL)

    done = wheelsmith("index", "export", str(dest), "--index", str(index))
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"ok: 2 file(s) (2 new), 7 page(s) (7 rewritten) in {dest}\n"
    before = snapshot(dest)

    again = wheelsmith("index", "export", str(dest), "--index", str(index))
    assert again.stdout == f"ok: 2 file(s) (0 new), 7 page(s) (0 rewritten) in {dest}\n"
    assert snapshot(dest) == before

    gamma = make_wheel(wheels, "gamma", "1.0.0", tags="py3-none-any")
    publish(gamma, index, channel=CHANNEL)
    yank(index, first.name, "broken")
    third = wheelsmith("index", "export", str(dest), "--index", str(index))
    assert third.stdout == f"ok: 3 file(s) (1 new), 9 page(s) (6 rewritten) in {dest}\n"
    after = snapshot(dest)
    changed = sorted(k for k in after if before.get(k) != after[k])
    simple = f"{CHANNEL}/simple"
    gamma_file = next(k for k in after if k.endswith(gamma.name))
    assert changed == sorted([
        f"{simple}/alpha/index.html", f"{simple}/alpha/index.json",  # the yank
        f"{simple}/gamma/index.html", f"{simple}/gamma/index.json",  # the new project
        f"{simple}/index.html", f"{simple}/index.json",  # the channel's list
        gamma_file, gamma_file + ".metadata"])
    assert_reader_view_consistent(dest)


@given(projects=st.lists(st.tuples(st.sampled_from(["a-b", "C_d", "e.f", "g"]),
                                   st.integers(0, 3), st.booleans()), min_size=1, max_size=6,
                         unique=True))
def test_the_export_pages_are_the_index_pages(projects: list[tuple[str, int, bool]]) -> None:
    """Without --base-url the tree is the index's own pages and files, byte for byte."""
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        index, dest = root / "index", root / "site"
        (root / "w").mkdir()
        for name, minor, pure in projects:
            wheel = make_wheel(root / "w", name, f"1.{minor}.0+cu.13.0.torch.2.14.sm.120",
                               tags="py3-none-any" if pure else "cp311-cp311-linux_x86_64")
            publish(wheel, index, channel=CHANNEL)
        export(index, dest)
        for relative in [p.relative_to(index) for p in index.rglob("index.*")]:
            assert (dest / relative).read_bytes() == (index / relative).read_bytes(), relative
        for stored in (index / "files").rglob("*"):
            if stored.is_file():
                copy = dest / stored.relative_to(index)
                assert copy.read_bytes() == stored.read_bytes()
        assert_reader_view_consistent(dest)


def test_links_point_at_the_base_url(tmp_path: Path) -> None:
    index, wheels = tmp_path / "index", tmp_path / "wheels"
    wheels.mkdir()
    wheel = make_wheel(wheels, "demo-ext", "1.0.0+cu.13.0.torch.2.14.sm.120", tags="py3-none-any")
    record = publish(wheel, index, channel=CHANNEL)
    export(index, tmp_path / "bucket-site", "https://bucket.example/wheels/")
    page = (tmp_path / "bucket-site" / record.page / "index.html").read_text()
    stored = next((index / "files").rglob("*.whl")).relative_to(index)
    assert f'href="https://bucket.example/wheels/{str(stored).replace("+", "%2B")}#sha256=' in page
    export(index, tmp_path / "assets-site", "https://example.org/download/v1/{filename}")
    page = (tmp_path / "assets-site" / record.page / "index.html").read_text()
    assert (f'href="https://example.org/download/v1/{wheel.name.replace("+", "%2B")}#sha256='
            in page)
    assert (tmp_path / "assets-site" / "files" / wheel.name).read_bytes() == wheel.read_bytes()
    assert (tmp_path / "assets-site" / "files" / f"{wheel.name}.metadata").is_file()


def test_a_bad_base_url_or_a_missing_index_is_refused(tmp_path: Path) -> None:
    bad = wheelsmith("index", "export", str(tmp_path / "site"), "--index", str(tmp_path),
                     "--base-url", "s3://bucket/wheels")
    assert bad.returncode == 4
    assert bad.stderr.startswith("error: --base-url: 's3://bucket/wheels' is not an http:// or "
                                 "https:// URL\n")
    missing = wheelsmith("index", "export", str(tmp_path / "site"), "--index",
                         str(tmp_path / "nothing"))
    assert missing.returncode == 4
    assert missing.stderr.startswith(f"error: no index at {tmp_path / 'nothing'} (no "
                                     "ledger.jsonl): nothing to export\n")


def test_an_export_killed_at_random_moments_never_lists_a_missing_file(tmp_path: Path) -> None:
    index, dest = tmp_path / "index", tmp_path / "site"
    for wheel in make_batch(tmp_path / "w", "many", 12) + make_batch(tmp_path / "v", "more", 12):
        publish(wheel, index, channel=CHANNEL)
    rng = random.Random(35)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    for _ in range(8):
        proc = subprocess.Popen([sys.executable, "-m", "wheelsmith", "index", "export",
                                 str(dest), "--index", str(index)], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.2, 1.5))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if dest.is_dir():
            assert_reader_view_consistent(dest)
    final = wheelsmith("index", "export", str(dest), "--index", str(index))
    assert final.returncode == 0, final.stderr
    assert_reader_view_consistent(dest)
    assert sorted(p.name for p in dest.rglob("*.whl")) == sorted(
        p.name for p in index.rglob("*.whl"))
    assert not (dest / ".tmp").exists()
    assert pages.API_VERSION in (dest / CHANNEL / "simple" / "many" / "index.json").read_text()


def exported_once(root: Path) -> tuple[Path, Path]:
    """An index with one wheel, exported once into root/site: (index, site)."""
    index, dest, wheels = root / "index", root / "site", root / "wheels"
    wheels.mkdir()
    publish(make_wheel(wheels, "alpha", "1.0.0", tags="py3-none-any"), index, channel=CHANNEL)
    assert wheelsmith("index", "export", str(dest), "--index", str(index)).returncode == 0
    return index, dest


@given(which=st.sampled_from(["", ".metadata"]), offset=st.floats(0, 1),
       byte=st.integers(0, 255))
@settings(max_examples=max(10, settings().max_examples // 4))  # an index exported per example
def test_a_file_in_dir_with_other_bytes_of_the_same_size_is_refused_and_kept(
        tmp_path_factory: pytest.TempPathFactory, which: str, offset: float, byte: int) -> None:
    """docs/cli.md: a file in DIR that differs from the ledger is exit 14 (its size alone
    said nothing: one changed byte passed as ok)."""
    index, dest = exported_once(tmp_path_factory.mktemp("tampered"))
    target = next(p for p in (dest / "files").rglob("*.whl")).with_name(
        next((dest / "files").rglob("*.whl")).name + which)
    data = bytearray(target.read_bytes())
    at = min(int(offset * len(data)), len(data) - 1)
    if data[at] == byte:
        byte = (byte + 1) % 256
    data[at] = byte
    target.write_bytes(bytes(data))
    again = wheelsmith("index", "export", str(dest), "--index", str(index))
    assert again.returncode == 14, again.stderr
    assert again.stderr.startswith(f"error: {target} is not the file the ledger of {index} "
                                   "names (sha256 ")
    assert target.read_bytes() == bytes(data)  # nothing is overwritten


@given(part=st.sampled_from([".export.lock", ".tmp", "files", "files/{xx}",
                             f"{CHANNEL}", f"{CHANNEL}/simple", "index.html"]))
def test_nothing_is_written_through_a_link_out_of_dir(
        tmp_path_factory: pytest.TempPathFactory, part: str) -> None:
    """A link in DIR (its lock, .tmp, files/, a channel's directory, a page) that leads
    outside it is refused by name (exit 14); nothing is written outside."""
    root = tmp_path_factory.mktemp("links")
    index, wheels, dest = root / "index", root / "wheels", root / "site"
    wheels.mkdir()
    wheel = make_wheel(wheels, "alpha", "1.0.0", tags="py3-none-any")
    publish(wheel, index, channel=CHANNEL)
    record = next(iter(ledger.read(index).by_filename.values()))
    relative = part.replace("{xx}", record.path.split("/")[1])  # files/<sha256[:2]>
    outside = root / "outside"
    outside.mkdir()
    (dest / relative).parent.mkdir(parents=True, exist_ok=True)
    (dest / relative).symlink_to(outside / "there", target_is_directory=True)
    done = wheelsmith("index", "export", str(dest), "--index", str(index))
    assert done.returncode == 14, done.stderr
    assert f"leads outside {dest} through a link: not exported" in done.stderr
    assert list(outside.iterdir()) == []
