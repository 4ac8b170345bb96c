"""A zip's central directory says where each member's bytes are, and nothing in the format
stops two entries from naming the same bytes: a wheel (verify, publish) or an sdist (build,
recipe new) whose members overlap, or lie outside its members' part, is refused when it is
opened, before a member is read, in one line naming the member (untrusted/ziplayout.py).
Layouts are generated: members grown over the next, entries sharing a header, a header hidden
in another member's data, entries pointing past the directory or at no header, and the red
team's wheel of 20,000 members each reading as 8 MB; and well-formed archives of every kind a
writer makes (data descriptors, zip64, empty members, directories, a stub before the archive,
a comment, the wheels Python bundles) still pass."""

from __future__ import annotations

import ensurepip
import io
import re
import zipfile
from pathlib import Path
from typing import IO, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.hostile import assert_orderly, returned_or_raised, run_bounded, sentinel
from tests.zips import (
    INFO,
    WHEEL_NAME,
    Entry,
    finish,
    local_header,
    overlapping_wheel,
    stored,
    wheel_members,
    with_entry,
)
from wheelsmith.errors import SourceError
from wheelsmith.recipes.unpack import HOSTILE_HINT, unpack
from wheelsmith.untrusted import ziplayout
from wheelsmith.untrusted.local import open_zip
from wheelsmith.wheelfile import Flaw, examine

FILES = st.dictionaries(st.sampled_from(["demo/__init__.py", "demo/a.py", "demo/_C.so",
                                         "demo/data/x.bin", "demo/empty.txt"]),
                        st.binary(max_size=3000), max_size=4)
SHARE = re.compile(r"member .+ \(bytes \d+ to \d+\) overlaps member .+ \(bytes \d+ to \d+\): "
                   r"the archive's members share bytes")
INTO = re.compile(r"member .+ \(bytes \d+ to \d+\) runs into the central directory at byte \d+")
OUTSIDE = re.compile(r"member .+: its local header at byte \d+ is not among the members "
                     r"\(bytes 0 to \d+\)")
NO_HEADER = re.compile(r"member .+: there is no local header at byte \d+, where the central "
                       r"directory says it is")


def refusals(root: Path, data: bytes) -> tuple[str, str]:
    """What examine says of `data` as a wheel (verify, publish) and unpack as an sdist (build,
    recipe new), after their prefixes; each is one refusal, and unpack left nothing."""
    wheel = root / WHEEL_NAME
    wheel.write_bytes(data)
    flaw, problems = examine(wheel)
    assert flaw is Flaw.ARCHIVE, problems
    assert len(problems) == 1, problems
    assert "\n" not in problems[0], problems
    sdist = root / "demo-1.0.zip"
    sdist.write_bytes(data)
    (root / "out").mkdir()
    refused = returned_or_raised(lambda: unpack(sdist, root / "out"), SourceError)
    assert isinstance(refused, SourceError), refused
    assert refused.hint == HOSTILE_HINT
    assert list((root / "out").iterdir()) == []
    prefix = "not a readable zip file: "
    assert problems[0].startswith(prefix), problems
    assert refused.message.startswith("refusing to unpack demo-1.0.zip: "), refused.message
    return problems[0].removeprefix(prefix), refused.message.split(": ", 1)[1]


def _grown(body: bytes, entries: list[Entry], at: int, by: int) -> tuple[bytes, re.Pattern[str]]:
    """Member `at` read `by` bytes longer: into the next member, or into the directory."""
    entry = entries[at]
    end = entry.offset + len(local_header(entry.name)) + entry.size + by
    return finish(body, with_entry(entries, at, size=entry.size + by)), \
        SHARE if end <= len(body) else INTO


def _shared(body: bytes, entries: list[Entry], at: int, other: int) -> tuple[bytes,
                                                                          re.Pattern[str]]:
    """Member `at`'s entry pointing at member `other`'s local header."""
    header = len(local_header(entries[other].name))
    end = entries[other].offset + header + entries[at].size
    return finish(body, with_entry(entries, at, offset=entries[other].offset)), \
        SHARE if end <= len(body) else INTO


def _second(body: bytes, entries: list[Entry], at: int) -> tuple[bytes, re.Pattern[str]]:
    """A second entry, of another name, for member `at`'s bytes."""
    return finish(body, [*entries, Entry("demo/again.py", entries[at].offset, entries[at].size,
                                         entries[at].crc)]), SHARE


def _hidden(files: dict[str, bytes], payload: bytes) -> tuple[bytes, re.Pattern[str]]:
    """A member whose data holds a whole local header and data, and an entry for those."""
    inner = local_header("demo/hidden.py", len(payload)) + payload
    body, entries = stored(wheel_members({**files, "demo/carrier.bin": inner}))
    carrier = next(e for e in entries if e.name == "demo/carrier.bin")
    start = carrier.offset + len(local_header(carrier.name))
    return finish(body, [*entries, Entry("demo/hidden.py", start, len(payload), 0)]), SHARE


@given(files=FILES, how=st.sampled_from(["grown", "shared", "second", "hidden", "past",
                                         "no header"]),
       at=st.integers(0, 100), other=st.integers(1, 100), by=st.integers(1, 5000),
       payload=st.binary(max_size=100))
def test_members_that_share_bytes_or_lie_outside_are_refused_in_one_line(
        tmp_path_factory: pytest.TempPathFactory, files: dict[str, bytes], how: str, at: int,
        other: int, by: int, payload: bytes) -> None:
    root = tmp_path_factory.mktemp("layout")
    body, entries = stored(wheel_members(files))
    at, other = at % len(entries), (at + other % (len(entries) - 1) + 1) % len(entries)
    if how == "grown":
        data, said = _grown(body, entries, at, by)
    elif how == "shared":
        data, said = _shared(body, entries, at, other)
    elif how == "second":
        data, said = _second(body, entries, at)
    elif how == "hidden":
        data, said = _hidden(files, payload)
    elif how == "past":
        data, said = finish(body, with_entry(entries, at, offset=len(body) + by)), OUTSIDE
    else:  # into a member's data, which holds no header: METADATA's text, say
        metadata = next(e for e in entries if e.name == f"{INFO}/METADATA")
        start = metadata.offset + len(local_header(metadata.name)) + by % metadata.size
        data, said = finish(body, with_entry(entries, at, offset=start)), NO_HEADER
    as_wheel, as_sdist = refusals(root, data)
    assert said.fullmatch(as_wheel), as_wheel
    assert as_sdist == as_wheel


WRITERS = st.fixed_dictionaries({
    "compression": st.sampled_from([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED]),
    "descriptors": st.booleans(), "zip64": st.booleans(), "prefix": st.binary(max_size=80),
    "comment": st.binary(max_size=80), "directories": st.booleans()})


class _Unseekable:
    """A stream zipfile cannot seek in: it writes a data descriptor after each member."""

    def __init__(self) -> None:
        self.data = io.BytesIO()

    def write(self, chunk: bytes) -> int:
        return self.data.write(chunk)

    def flush(self) -> None:
        return None


def written(members: dict[str, bytes], writer: dict[str, object]) -> bytes:
    """`members` as zipfile writes them with `writer`'s choices."""
    sink = _Unseekable() if writer["descriptors"] else io.BytesIO()
    compression = writer["compression"]
    assert isinstance(compression, int)
    with zipfile.ZipFile(cast("IO[bytes]", sink), "w", compression=compression) as zf:
        zf.comment = cast("bytes", writer["comment"])
        if writer["directories"]:
            zf.writestr(zipfile.ZipInfo("demo/"), b"")
        for name, data in members.items():
            with zf.open(zipfile.ZipInfo(name), "w", force_zip64=bool(writer["zip64"])) as out:
                out.write(data)
    raw = sink.data.getvalue() if isinstance(sink, _Unseekable) else sink.getvalue()
    return cast("bytes", writer["prefix"]) + raw


@given(files=FILES, writer=WRITERS)
def test_well_formed_archives_of_every_kind_pass(tmp_path_factory: pytest.TempPathFactory,
                                                 files: dict[str, bytes],
                                                 writer: dict[str, object]) -> None:
    """Data descriptors (16 bytes, 24 in zip64), zip64 extras, empty members, directories, a
    stub before the archive (a self-extracting zip) and a comment after it."""
    root = tmp_path_factory.mktemp("written")
    data = written(wheel_members(files), writer)
    wheel = root / WHEEL_NAME
    wheel.write_bytes(data)
    assert examine(wheel) == (None, [])
    sdist = root / "demo-1.0.zip"
    sdist.write_bytes(data)
    unpacked = unpack(sdist, root / "out")
    for name, content in files.items():
        assert (unpacked / name).read_bytes() == content


def test_the_wheels_python_bundles_pass() -> None:
    """Wheels as bdist_wheel writes them, to the byte: pip's and setuptools' that ensurepip
    installs from."""
    wheels = sorted((Path(ensurepip.__file__).parent / "_bundled").glob("*.whl"))
    assert wheels, "this Python bundles no wheels"
    for wheel in wheels:
        assert examine(wheel) == (None, []), wheel


def test_the_reads_of_one_opening_are_held_to_its_budget(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Four times the archive's size (and 64 MiB more, here none): a reader that goes back to
    a member again and again stops at its fifth reading, whatever the layout."""
    monkeypatch.setattr(ziplayout, "READ_SLACK", 0)
    body, entries = stored({"demo/big.bin": bytes(1 << 20)})
    archive = tmp_path / "a.zip"
    archive.write_bytes(finish(body, entries))
    with open_zip(archive) as zf:
        for _ in range(4):
            assert len(zf.read("demo/big.bin")) == 1 << 20
        with pytest.raises(ziplayout.LayoutError) as raised:
            zf.read("demo/big.bin")
    limit = 4 * archive.stat().st_size
    assert str(raised.value) == (f"it was read past {limit} bytes, 4 times its size and 0 bytes "
                                 "more")


@pytest.fixture(scope="module")
def red_team_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """20,000 members, each reading as the local headers after it and an 8 MB block: 11 MB
    that read as 160 GB (publish hashed it for minutes)."""
    wheel = tmp_path_factory.mktemp("red") / WHEEL_NAME
    wheel.write_bytes(overlapping_wheel(20_000, 8 << 20))
    return wheel


SAID = ("not a readable zip file: member demo/m00001.py (bytes 44 to 9268607) overlaps member "
        "demo/m00000.py (bytes 0 to 9268607): the archive's members share bytes")


@pytest.mark.parametrize("command", ["verify", "publish"])
def test_the_red_team_wheel_is_refused_at_once(tmp_path: Path, red_team_wheel: Path,
                                               command: str) -> None:
    args = ["--arch", "12.0"] if command == "verify" else ["--index", "index", "--channel", "c"]
    with sentinel(tmp_path / "outside"):
        outcome = run_bounded(command, str(red_team_wheel), *args, cwd=tmp_path, seconds=60)
    assert_orderly(outcome, seconds=15)
    if command == "verify":
        assert outcome.returncode == 10, outcome.describe()
        assert f"  {SAID}" in outcome.stderr.splitlines(), outcome.describe()
    else:
        assert outcome.returncode == 12, outcome.describe()
        assert outcome.stderr.splitlines()[0] == (
            f"error: refusing to publish {WHEEL_NAME}: it is not a valid wheel: {SAID}")
    assert outcome.stderr.splitlines()[-1] == f"hint: {Flaw.ARCHIVE.value}"
    assert not (tmp_path / "index" / "files").exists()


def test_the_red_team_wheel_as_an_sdist_is_refused_unread(tmp_path: Path,
                                                          red_team_wheel: Path) -> None:
    sdist = tmp_path / "demo-1.0.zip"
    sdist.write_bytes(red_team_wheel.read_bytes())
    (tmp_path / "out").mkdir()
    with pytest.raises(SourceError) as raised:
        unpack(sdist, tmp_path / "out")
    assert raised.value.message == "refusing to unpack demo-1.0.zip: " + SAID.split(": ", 1)[1]
    assert list((tmp_path / "out").iterdir()) == []
