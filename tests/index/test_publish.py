"""Publishing: validated wheels only, identical bytes are a no-op, other bytes are refused,
yanks, and `index check`/`index rebuild` against the ledger."""

from __future__ import annotations

import hashlib
import html
import json
import os
import re
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import wheelsmith
from tests.hostile import returned_or_raised
from tests.wheels import make_wheel, wheel_with_provenance
from wheelsmith import untrusted
from wheelsmith.errors import FileConflictError, PublishError, UsageError, WheelsmithError
from wheelsmith.index import ledger
from wheelsmith.index import publish as publish_module
from wheelsmith.index import store as index
from wheelsmith.index.publish import publish, yank

CHANNEL = "cu130-torch2.14"


@pytest.fixture
def wheels(tmp_path: Path) -> Path:
    directory = tmp_path / "wheels"
    directory.mkdir()
    return directory


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "index"


def test_publish_writes_file_sidecar_ledger_and_pages(wheels: Path, root: Path) -> None:
    wheel = make_wheel(wheels, "demo-ext", "1.0.0")
    result = publish(wheel, root, channel=CHANNEL)
    assert (result.status, result.page) == ("published", f"{CHANNEL}/simple/demo-ext/")
    state = ledger.read(root)
    record = state.by_filename[wheel.name]
    assert (root / record.path).read_bytes() == wheel.read_bytes()
    assert (root / (record.path + ".metadata")).read_bytes().startswith(b"Metadata-Version")
    page = json.loads((root / CHANNEL / "simple" / "demo-ext" / "index.json").read_text())
    assert [f["filename"] for f in page["files"]] == [wheel.name]
    assert page["meta"] == {"api-version": "1.1"}
    assert index.check(root).problems == []


def test_identical_republish_is_a_no_op(wheels: Path, root: Path) -> None:
    wheel = make_wheel(wheels, "demo-ext", "1.0.0")
    publish(wheel, root, channel=CHANNEL)
    before = (root / "ledger.jsonl").read_bytes()
    assert publish(wheel, root, channel=CHANNEL).status == "already published"
    assert (root / "ledger.jsonl").read_bytes() == before


def test_same_filename_with_other_bytes_is_refused(tmp_path: Path, wheels: Path,
                                                   root: Path) -> None:
    first = make_wheel(wheels, "demo-ext", "1.0.0")
    publish(first, root, channel=CHANNEL)
    other_dir = tmp_path / "rebuilt"
    other_dir.mkdir()
    second = make_wheel(other_dir, "demo-ext", "1.0.0", files={"demo_ext/__init__.py": b"x=2\n"})
    with pytest.raises(FileConflictError) as caught:
        publish(second, root, channel=CHANNEL)
    record = ledger.read(root).by_filename[first.name]
    assert caught.value.exit_code == 13
    assert caught.value.message == (
        f"{first.name} was published on {record.upload_time} with sha256 {record.sha256}; this "
        f"file has {hashlib.sha256(second.read_bytes()).hexdigest()}")
    assert (root / record.path).read_bytes() == first.read_bytes()


@pytest.mark.parametrize(
    ("breakage", "message"),
    [
        ("not-a-zip", "refusing to publish demo_ext-1.0.0-cp311-cp311-linux_x86_64.whl: it is not "
         "a valid wheel: not a readable zip file: File is not a zip file"),
        ("tampered", "refusing to publish demo_ext-1.0.0-cp311-cp311-linux_x86_64.whl: it is not "
         "a valid wheel: RECORD hash of demo_ext/__init__.py does not match its content"),
        ("dotdot", "refusing to publish demo_ext-1.0.0-cp311-cp311-linux_x86_64.whl: it is not a "
         "valid wheel: unsafe member path: ../evil.py"),
        ("renamed", "refusing to publish demo_ext-1.0.0-cp311-cp311-linux_x86_64.whl: it is not "
         "a valid wheel: METADATA Name 'other-pkg' does not match the filename"),
    ],
)
def test_invalid_wheel_is_refused_and_nothing_is_written(wheels: Path, root: Path,
                                                         breakage: str, message: str) -> None:
    wheel = wheels / "demo_ext-1.0.0-cp311-cp311-linux_x86_64.whl"
    if breakage == "not-a-zip":
        wheel.write_text("hello")
    elif breakage == "renamed":
        make_wheel(wheels, "other-pkg", "1.0.0").rename(wheel)
    else:
        source = make_wheel(wheels, "demo-ext", "1.0.0")
        with zipfile.ZipFile(source) as zin:
            items = {n: zin.read(n) for n in zin.namelist()}
        if breakage == "tampered":
            items["demo_ext/__init__.py"] = b"import os; os.system('evil')\n"
        else:
            items["../evil.py"] = b"x"
        with zipfile.ZipFile(wheel, "w") as zout:
            for name, data in items.items():
                zout.writestr(name, data)
    with pytest.raises(PublishError) as caught:
        publish(wheel, root, channel=CHANNEL)
    assert caught.value.message == message
    assert not (root / "ledger.jsonl").exists()
    assert not (root / "files").exists()


def test_wheel_without_provenance_needs_a_channel(wheels: Path, root: Path) -> None:
    wheel = make_wheel(wheels, "demo-ext", "1.0.0")
    with pytest.raises(PublishError) as caught:
        publish(wheel, root)
    assert caught.value.message == (f"{wheel.name} has no wheelsmith provenance, so its channel "
                                    "is unknown")
    assert caught.value.hint == "pass --channel, e.g. --channel cu130-torch2.14"


def test_same_bytes_can_be_listed_in_two_channels(wheels: Path, root: Path) -> None:
    wheel = make_wheel(wheels, "fla-core", "0.6.0", tags="py3-none-any")
    publish(wheel, root, channel="cu130-torch2.14")
    publish(wheel, root, channel="cu130-torch2.13")
    for channel in ("cu130-torch2.14", "cu130-torch2.13"):
        page = json.loads((root / channel / "simple" / "fla-core" / "index.json").read_text())
        assert [f["filename"] for f in page["files"]] == [wheel.name]
    assert len(list((root / "files").glob("*/*/*.whl"))) == 1


def test_a_second_arch_set_of_a_version_in_a_channel_is_refused_in_publishs_words(
        wheels: Path, root: Path) -> None:
    held = wheel_with_provenance(wheels / "a", "demo-ext", "1.0.0+cu.13.0.torch.2.14.sm.120",
                                 channel=CHANNEL, archs="12.0")
    publish(held, root)
    other = wheel_with_provenance(wheels / "b", "demo-ext", "1.0.0+cu.13.0.torch.2.14.sm.90.120",
                                  channel=CHANNEL, archs="9.0;12.0", key="e" * 64)
    with pytest.raises(PublishError) as caught:
        publish(other, root)
    assert (caught.value.exit_code, caught.value.message, caught.value.hint) == (12, (
        f"channel {CHANNEL} already holds demo-ext 1.0.0 for archs 12.0; this wheel is for "
        "9.0;12.0"), "pip would pick between them by label, not by your GPU: publish one arch "
        f"set per version per channel (e.g. --channel {CHANNEL}-sm9.0-12.0)")
    assert publish(other, root, channel=f"{CHANNEL}-sm9.0-12.0").status == "published"
    assert [r.filename for r in ledger.read(root).by_filename.values()] == [held.name,
                                                                           other.name]


def test_yank_marks_pages_and_can_be_undone(wheels: Path, root: Path) -> None:
    wheel = make_wheel(wheels, "demo-ext", "1.0.0")
    publish(wheel, root, channel=CHANNEL)
    yank(root, wheel.name, "wrong results on sm_103")
    page = root / CHANNEL / "simple" / "demo-ext"
    assert json.loads((page / "index.json").read_text())["files"][0]["yanked"] == (
        "wrong results on sm_103")
    assert 'data-yanked="wrong results on sm_103"' in (page / "index.html").read_text()
    yank(root, wheel.name, None)
    assert json.loads((page / "index.json").read_text())["files"][0]["yanked"] is False
    assert (root / ledger.read(root).by_filename[wheel.name].path).is_file()


OLD_NS = 1_000_000_000 * 10**9  # 2001-09-09


def test_publishing_touches_only_that_projects_pages(wheels: Path, root: Path) -> None:
    for name in ("alpha", "beta", "gamma"):
        publish(make_wheel(wheels, name, "1.0.0"), root, channel=CHANNEL)
    others = [root / CHANNEL / "simple" / n / f for n in ("alpha", "gamma")
              for f in ("index.html", "index.json")]
    for page in others:  # an old time: a write in the same clock tick cannot go unseen
        os.utime(page, ns=(OLD_NS, OLD_NS))
    publish(make_wheel(wheels, "beta", "1.1.0"), root, channel=CHANNEL)
    assert {p: p.stat().st_mtime_ns for p in others} == {p: OLD_NS for p in others}


def test_check_reports_drift_and_rebuild_fixes_pages_only(wheels: Path, root: Path) -> None:
    wheel = make_wheel(wheels, "demo-ext", "1.0.0")
    publish(wheel, root, channel=CHANNEL)
    record = ledger.read(root).by_filename[wheel.name]
    page = root / CHANNEL / "simple" / "demo-ext" / "index.html"
    page.write_text("<html>edited by hand</html>")
    (root / record.path).write_bytes(b"corrupted")
    report = index.check(root)
    assert report.problems == [  # another size cannot have the ledger's sha256: not hashed
        f"{record.path}: size 9, the ledger says {record.size}",
        f"page {CHANNEL}/simple/demo-ext/index.html differs from the ledger (run `wheelsmith "
        "index rebuild`)"]
    index.rebuild(root)
    assert index.check(root).problems == [f"{record.path}: size 9, the ledger says {record.size}"]
    (root / record.path).write_bytes(b"x" * record.size)
    assert index.check(root).problems == [f"{record.path}: sha256 differs from the ledger (the "
                                          "file was altered)"]


def test_an_index_nothing_was_published_to_owes_no_page(root: Path) -> None:
    # what a publisher killed right after making the index's directory leaves: an empty root
    root.mkdir()
    assert index.check(root).problems == []


def test_cli_publish_conflict_and_check_exit_codes(tmp_path: Path, wheels: Path,
                                                   root: Path) -> None:
    wheel = make_wheel(wheels, "demo-ext", "1.0.0")
    ok = wheelsmith("publish", str(wheel), "--index", str(root), "--channel", CHANNEL,
                    cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout == f"published: {wheel.name} -> {root}/{CHANNEL}/simple/demo-ext/\n"
    rebuilt = tmp_path / "rebuilt"
    rebuilt.mkdir()
    other = make_wheel(rebuilt, "demo-ext", "1.0.0", files={"demo_ext/__init__.py": b"x=3\n"})
    conflict = wheelsmith("publish", str(other), "--index", str(root), "--channel", CHANNEL,
                          cwd=tmp_path)
    assert conflict.returncode == 13
    assert conflict.stderr.startswith(f"error: {wheel.name} was published on ")
    assert wheelsmith("index", "check", "--index", str(root), cwd=tmp_path).returncode == 0
    record = ledger.read(root).by_filename[wheel.name]
    (root / record.path).write_bytes(b"x")
    drift = wheelsmith("index", "check", "--index", str(root), cwd=tmp_path)
    assert drift.returncode == 14
    assert drift.stderr.splitlines()[:2] == [  # another size: not hashed
        f"error: 1 problem(s) in {root}", f"  {record.path}: size 1, the ledger says "
                                          f"{record.size}"]


def test_checking_an_index_that_does_not_exist_says_so_and_creates_nothing(
        tmp_path: Path) -> None:
    result = wheelsmith("index", "check", "--index", "nowhere", cwd=tmp_path)
    assert result.returncode == UsageError.exit_code
    assert result.stderr == ("error: no index at nowhere: nothing to check\n"
                             "hint: pass the directory you publish into (--index DIR)\n")
    assert not (tmp_path / "nowhere").exists()


def test_there_is_no_delete_command(tmp_path: Path) -> None:
    result = wheelsmith("delete", "x.whl", cwd=tmp_path)
    assert result.returncode == 2
    assert "No such command 'delete'" in result.stderr


def test_interrupted_publish_is_finished_by_the_next_writer(wheels: Path, root: Path) -> None:
    publish(make_wheel(wheels, "demo-ext", "1.0.0"), root, channel=CHANNEL)
    second = make_wheel(wheels, "demo-ext", "1.1.0")
    candidate = publish_module.inspect(second, CHANNEL)
    publish_module._store(root, candidate)  # a publisher killed right after its commit point:
    ledger.append(root, ledger.publish_entry(candidate.record), second.name)  # pages not yet
    page = root / CHANNEL / "simple" / "demo-ext" / "index.json"
    assert second.name not in page.read_text()
    report = index.check(root)  # says so, and leaves it to a writer
    assert (report.problems, report.behind) == ([], 2)
    assert report.notes == [f"page {CHANNEL}/simple/demo-ext/index.{kind} is behind the ledger: "
                            "a writer was interrupted before it wrote it (the next publish or "
                            "yank, or `wheelsmith index rebuild`, writes it)"
                            for kind in ("html", "json")]
    assert second.name not in page.read_text()
    assert index.recover(root) == ["regenerated pages the last writer did not finish: "
                                   "[('cu130-torch2.14', 'demo-ext')]"]
    assert second.name in page.read_text()
    assert index.check(root) == index.CheckReport(files=2, problems=[], notes=[])


def test_torn_ledger_line_is_cut_by_the_next_writer(wheels: Path, root: Path) -> None:
    publish(make_wheel(wheels, "demo-ext", "1.0.0"), root, channel=CHANNEL)
    with (root / "ledger.jsonl").open("a") as handle:
        handle.write('{"action":"publish","chan')  # a writer died mid-line
    assert len(ledger.read(root).by_filename) == 1
    publish(make_wheel(wheels, "demo-ext", "1.1.0"), root, channel=CHANNEL)
    lines = (root / "ledger.jsonl").read_text().splitlines()
    assert [json.loads(line)["version"] for line in lines] == ["1.0.0", "1.1.0"]


def test_filtered_ledger_read_sees_exactly_one_projects_lines(wheels: Path, root: Path) -> None:
    for name, version in [("alpha", "1.0.0"), ("alpha-beta", "1.0.0"), ("alpha", "1.1.0")]:
        publish(make_wheel(wheels, name, version), root, channel=CHANNEL)
    yank(root, "alpha-1.1.0-cp311-cp311-linux_x86_64.whl", "broken")
    full = ledger.read(root)
    only = ledger.read(root, project="alpha")
    assert only.channels == {CHANNEL: {"alpha": full.channels[CHANNEL]["alpha"]}}
    assert only.channels[CHANNEL]["alpha"].yanked == {
        "alpha-1.1.0-cp311-cp311-linux_x86_64.whl": "broken"}


SPECIFIERS = st.lists(st.sampled_from([">=3.8", "<4", "!=3.9.*", "~=3.10", "==3.11.*"]),
                      min_size=1, max_size=20_000).map(",".join)
CHANNELS = st.one_of(st.sampled_from(sorted(untrusted.INDEX_ROOT_NAMES)),
                     st.from_regex(r"[a-z0-9][a-z0-9._-]{0,140}", fullmatch=True),
                     st.text(max_size=20))
REASONS = st.one_of(st.text(max_size=40), st.just("x" * 70_000),
                    st.binary(max_size=20).map(lambda b: b.decode("utf-8", "surrogateescape")))


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(requires_python=SPECIFIERS, channel=CHANNELS, reason=REASONS)
def test_whatever_publish_and_yank_take_the_index_still_reads(
        tmp_path_factory: pytest.TempPathFactory, requires_python: str, channel: str,
        reason: str) -> None:
    """A wheel's Requires-Python of any length, a channel of any name (the index's own file
    names too), a yank's reason of any text: publish and yank write only ledger lines that
    every reader takes, or refuse before writing. It was: a 120 KB Requires-Python published
    and then every command stopped at its line; a channel named index.html or ledger.jsonl
    committed and its pages could never be written; an ESC or a byte that is not UTF-8 in a
    reason written, then a traceback in every later command."""
    base = tmp_path_factory.mktemp("index")
    root, wheels = base / "index", base / "wheels"
    wheels.mkdir()
    first = publish(make_wheel(wheels, "demo-ext", "1.0.0"), root, channel=CHANNEL)
    wheel = make_wheel(wheels, "demo-ext", "1.1.0",
                       headers=(f"Requires-Python: {requires_python}",))
    for step in (lambda: publish(wheel, root, channel=channel),
                 lambda: yank(root, first.filename, reason)):
        before = (root / "ledger.jsonl").read_bytes()
        outcome = returned_or_raised(step, WheelsmithError)
        if isinstance(outcome, WheelsmithError):
            assert outcome.exit_code in (4, 12, 21), outcome
            assert (root / "ledger.jsonl").read_bytes() == before, outcome  # nothing written
        state = ledger.read(root)  # every reader takes what was written
        assert index.check(root).problems == []
        index.rebuild(root)
        assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) == sorted(
            {*state.channels, "files", "index.html", "ledger.jsonl"})


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mark=st.one_of(st.binary(max_size=40), st.integers(-(10**30), 10**30).map(
    lambda n: str(n).encode()), st.sampled_from([b"-5", "\u0663".encode(), b"1_0", b" 7\n"])))
def test_whatever_the_watermark_holds_every_index_command_runs(
        tmp_path_factory: pytest.TempPathFactory, mark: bytes) -> None:
    """The pages' watermark (.pages-at) is the ledger's size in digits, or it is read as none
    and every page is written again: `-5` was an OSError traceback from every command."""
    base = tmp_path_factory.mktemp("index")
    root, wheels = base / "index", base / "wheels"
    wheels.mkdir()
    first = publish(make_wheel(wheels, "demo-ext", "1.0.0"), root, channel=CHANNEL)
    (root / index.WATERMARK).write_bytes(mark)
    assert index.check(root).problems == []
    (root / index.WATERMARK).write_bytes(mark)
    publish(make_wheel(wheels, "demo-ext", "1.1.0"), root, channel=CHANNEL)
    (root / index.WATERMARK).write_bytes(mark)
    yank(root, first.filename, "broken")
    page = json.loads((root / CHANNEL / "simple" / "demo-ext" / "index.json").read_text())
    assert [(f["filename"], f.get("yanked", False)) for f in page["files"]] == [
        (first.filename, "broken"), ("demo_ext-1.1.0-cp311-cp311-linux_x86_64.whl", False)]


FOLDS = st.lists(st.tuples(st.sampled_from(["\n", "\r\n", "\r"]), st.sampled_from([" ", "\t"]),
                           st.text(" \t", max_size=2)), min_size=1, max_size=4)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(st.sampled_from([">=3.8", "<4", "!=3.9.*", "~=3.10"]), min_size=2,
                      max_size=5), folds=FOLDS)
def test_a_folded_requires_python_reaches_the_pages_as_one_line(
        tmp_path_factory: pytest.TempPathFactory, parts: list[str],
        folds: list[tuple[str, str, str]]) -> None:
    """METADATA's headers may be folded over lines (RFC 5322, as email writes long ones): the
    value is unfolded before it reaches the ledger and the pages, which carried the line
    break inside requires-python and data-requires-python."""
    base = tmp_path_factory.mktemp("index")
    root, wheels = base / "index", base / "wheels"
    wheels.mkdir()
    text = parts[0]
    for (brk, space, more), part in zip(folds * len(parts), parts[1:], strict=False):
        text += f",{brk}{space}{more}{part}"
    wheel = make_wheel(wheels, "demo-ext", "1.0.0", headers=(f"Requires-Python: {text}",))
    publish(wheel, root, channel=CHANNEL)
    unfolded = re.sub(r"\r\n|\r|\n", "", text)
    page = root / CHANNEL / "simple" / "demo-ext"
    listed = json.loads((page / "index.json").read_text())["files"][0]["requires-python"]
    assert listed == unfolded
    assert f'data-requires-python="{html.escape(unfolded)}"' in (page / "index.html").read_text()
    assert json.loads((root / "ledger.jsonl").read_text())["requires_python"] == unfolded
