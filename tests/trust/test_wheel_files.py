"""A wheel is data whoever built it wrote (verify, verify --rebuild, publish): its zip, member
names, METADATA, WHEEL and RECORD are checked at one place (wheelfile.check) into a list of
problems, each shown escaped, never an exception; and what the check accepts, publish stores
and its own reader (index check) accepts again."""

from __future__ import annotations

import json
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from tests.hostile import assert_orderly, returned_or_raised, run_bounded, sentinel
from tests.trust.test_wheel_provenance import RECORD
from tests.wheels import make_wheel
from wheelsmith.errors import SourceError, UntrustedDataError
from wheelsmith.index import store
from wheelsmith.index.publish import publish
from wheelsmith.recipes.unpack import unpack
from wheelsmith.untrusted import control_in
from wheelsmith.untrusted.provenance import read_provenance
from wheelsmith.wheelfile import Flaw, examine, record_hash

INFO = "demo-1.0.0.dist-info"
NAMES = st.sampled_from([
    "../../x.py", "/tmp/abs.py", "C:\\x.py", "demo\\b.py", "demo/\x1b[2J.py", "demo/\x9b1m.py",
    "demo/\u202egnp.py", "demo/a\nb.py", "demo/\u00e9t\u00e9.py", "demo.data/scripts/python3",
    "demo/ok.py", "demo/_C.so", f"{INFO}/wheelsmith.json"]) | st.text(max_size=10).map(
        "demo/{}".format)
HEADER_TEXT = st.sampled_from(["1.0.0", "not!a!version", ">=3.8", ">=3.8,<", "d\u0435mo",
                               "demo", "cp311-cp311-linux_x86_64", "\u00e9", ""]) | st.text(
    st.characters(blacklist_characters="\r\n"), max_size=10)


RIGHT = b"(a RECORD that matches the members)"


@dataclass(frozen=True)
class Member:
    name: str
    data: bytes
    link: bool = False  # a symbolic link's mode
    encrypted: bool = False  # its flag bit (the data is not)
    method: int = zipfile.ZIP_DEFLATED


@dataclass(frozen=True)
class Spec:
    """A wheel to write: its file name, members, METADATA and WHEEL fields, how RECORD is
    written, and bytes damaged or cut off afterwards."""

    filename: str
    members: tuple[Member, ...]
    metadata: dict[str, str]
    tag: str
    record: bytes | None  # RIGHT: one that matches the members; None: no RECORD
    damage: tuple[int, int] | None  # (offset, length) of bytes flipped
    cut: int | None  # bytes cut off the end


def mostly(good: object, other: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    """`good` three times in four, else one of `other`: enough wheels pass to be published."""
    return st.one_of(st.just(good), st.just(good), st.just(good), other)


MEMBERS = st.builds(Member, NAMES, st.binary(max_size=64), mostly(False, st.just(True)),
                    mostly(False, st.just(True)), mostly(zipfile.ZIP_DEFLATED, st.sampled_from(
                        [zipfile.ZIP_STORED, zipfile.ZIP_BZIP2])))
SPECS_NAME = "demo-1.0.0-cp311-cp311-linux_x86_64.whl"
SPECS = st.builds(
    Spec,
    mostly(SPECS_NAME, st.sampled_from([
        "d\u0435mo-1.0.0-cp311-cp311-linux_x86_64.whl", "demo-1.0.0-x.whl",
        "demo-1.0.0-cp311-cp311-linux_x86_64\x1b.whl"])),
    st.lists(MEMBERS, max_size=3).map(tuple),
    st.fixed_dictionaries({}, optional={"Name": HEADER_TEXT, "Version": HEADER_TEXT,
                                        "Requires-Python": HEADER_TEXT}),
    mostly("cp311-cp311-linux_x86_64", HEADER_TEXT),
    mostly(RIGHT, st.sampled_from([None, b"\xff\xfe,,\n", b"a\x00b,,\n", b"x" * 200_000])),
    mostly(None, st.tuples(st.integers(0, 2000), st.integers(1, 8))),
    mostly(None, st.integers(1, 200)))


def write(directory: Path, spec: Spec) -> Path:
    metadata = {"Name": "demo", "Version": "1.0.0", **spec.metadata}
    files = {f"{INFO}/METADATA": ("Metadata-Version: 2.1\n" + "".join(
        f"{k}: {v}\n" for k, v in metadata.items())).encode(),
        f"{INFO}/WHEEL": f"Wheel-Version: 1.0\nTag: {spec.tag}\n".encode()}
    members = [Member("demo/__init__.py", b""), *(Member(n, d) for n, d in files.items()),
               *spec.members]
    rows = "".join(f"{m.name},{record_hash(m.data)},{len(m.data)}\n" for m in members)
    record = (rows + f"{INFO}/RECORD,,\n").encode() if spec.record is RIGHT else spec.record
    if record is not None:
        members.append(Member(f"{INFO}/RECORD", record))
    path = directory / spec.filename
    with zipfile.ZipFile(path, "w") as zf, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a duplicate name is what some specs ask for
        for member in members:
            info = zipfile.ZipInfo(member.name)
            info.compress_type = member.method
            info.external_attr = (0o120777 if member.link else 0o100644) << 16
            info.flag_bits |= 0x1 if member.encrypted else 0
            zf.writestr(info, member.data)
    data = bytearray(path.read_bytes())
    _flag_encrypted(path, data, {m.name for m in members if m.encrypted})
    if spec.damage is not None:
        offset, length = spec.damage
        for at in range(offset % len(data), min(len(data), offset % len(data) + length)):
            data[at] ^= 0x5A
    path.write_bytes(bytes(data[: len(data) - spec.cut] if spec.cut else data))
    return path


def _flag_encrypted(path: Path, data: bytearray, names: set[str]) -> None:
    """Set the encrypted bit of the members `names` in `data` (zipfile clears it on write):
    in each one's local header and in its central directory entry."""
    with zipfile.ZipFile(path) as zf:
        entry = zf.start_dir
        for info in zf.infolist():
            if info.filename in names:
                data[info.header_offset + 6] |= 1
                data[entry + 8] |= 1
            entry += 46 + sum(int.from_bytes(data[entry + at:entry + at + 2], "little")
                              for at in (28, 30, 32))


@given(SPECS)
def test_any_wheel_is_a_list_of_problems_and_what_passes_publish_reads_back(
        tmp_path_factory: pytest.TempPathFactory, spec: Spec) -> None:
    root = tmp_path_factory.mktemp("wheel")
    try:
        wheel = write(root, spec)
    except (OSError, ValueError):  # a name the file system or zipfile refuses to write
        return
    flaw, problems = examine(wheel)
    assert all(control_in(problem, lines=True) is None for problem in problems), problems
    assert (flaw is Flaw.NAME) == (spec.filename != SPECS_NAME), (flaw, problems)
    assert (flaw is Flaw.ARCHIVE) == (flaw is not Flaw.NAME and problems[:1] != [] and
                                      problems[0].startswith("not a readable zip file")), problems
    assert (flaw is None) == (problems == [])
    provenance = returned_or_raised(lambda: read_provenance(wheel), UntrustedDataError)
    if problems:
        event("refused")
        return
    if isinstance(provenance, UntrustedDataError):  # publish refuses it the same way (exit 21)
        event("provenance refused")
        with pytest.raises(UntrustedDataError) as raised:
            publish(wheel, root / "index", channel="cu130-torch2.14")
        assert raised.value.message == provenance.message
        assert not (root / "index").exists() or store.check(root / "index").problems == []
        return
    event("published")
    with sentinel(root / "outside"):
        publish(wheel, root / "index", channel="cu130-torch2.14")
        assert store.check(root / "index").problems == []


CASES = {  # a wheel, and the problem verify and publish name
    "RECORD that is not UTF-8": (
        Spec("demo-1.0.0-cp311-cp311-linux_x86_64.whl", (), {}, "cp311-cp311-linux_x86_64",
             b"\xff\xfe,,\n", None, None),
        f"{INFO}/RECORD is not UTF-8 (byte 1)"),
    "a Version that is none": (
        Spec("demo-1.0.0-cp311-cp311-linux_x86_64.whl", (), {"Version": "not!a!version"},
             "cp311-cp311-linux_x86_64", RIGHT, None, None),
        "METADATA Version 'not!a!version' is not a version"),
    "a name of another script": (
        Spec("d\u0435mo-1.0.0-cp311-cp311-linux_x86_64.whl", (), {},
             "cp311-cp311-linux_x86_64", RIGHT, None, None),
        "invalid wheel filename: d\\u0435mo-1.0.0-cp311-cp311-linux_x86_64.whl holds other "
        "characters than ASCII letters, digits and . _ + ! - (PEP 427)"),
    "an encrypted member": (
        Spec("demo-1.0.0-cp311-cp311-linux_x86_64.whl", (Member("demo/x.py", b"x",
                                                                encrypted=True),), {},
             "cp311-cp311-linux_x86_64", RIGHT, None, None),
        "member demo/x.py is encrypted"),
}


def _damaged_deflate(directory: Path) -> Path:
    """A wheel with a provenance, whose one member's deflate stream does not decode."""
    wheel = make_wheel(directory, "demo", files={
        "demo/__init__.py": b"A" * 100_000,
        f"{INFO}/wheelsmith.json": json.dumps({**RECORD, "recipe": {
            "package": "demo", "version": "1.0.0"}}).encode()})
    data = bytearray(wheel.read_bytes())
    start = data.index(b"demo/__init__.py") + len("demo/__init__.py") + 10
    for at in range(start, start + 40):
        data[at] ^= 0x55
    wheel.write_bytes(bytes(data))
    return wheel


DAMAGED = "not a readable zip file: Error -3 while decompressing data: invalid literal/lengths set"


@pytest.mark.parametrize("command", ["verify", "publish"])
@pytest.mark.parametrize("case", [*sorted(CASES), "a damaged deflate stream"])
def test_verify_and_publish_name_what_is_wrong_with_a_wheel(tmp_path: Path, command: str,
                                                            case: str) -> None:
    (tmp_path / "w").mkdir()
    if case in CASES:
        spec, said = CASES[case]
        wheel = write(tmp_path / "w", spec)
    else:
        wheel, said = _damaged_deflate(tmp_path / "w"), DAMAGED
    args = ("--arch", "12.0") if command == "verify" else ("--index", str(tmp_path / "i"),
                                                           "--channel", "c")
    with sentinel(tmp_path / "outside"):
        outcome = run_bounded(command, str(wheel), *args, cwd=tmp_path, seconds=60)
    assert_orderly(outcome, seconds=30)
    content = ("rebuild it; a wheel whose members are not what a build writes (a RECORD that "
               "does not match, an unsafe or missing member) was altered or made by hand"
               if command == "verify"
               else "rebuild it; published files must be exactly what a build wrote")
    hint = {"a name of another script": Flaw.NAME.value,
            "a damaged deflate stream": Flaw.ARCHIVE.value}.get(case, content)
    if command == "verify":
        assert outcome.returncode == 10
        assert f"  {said}" in outcome.stderr.splitlines()
    else:
        assert outcome.returncode == 12
        assert said in outcome.stderr.splitlines()[-2]
    assert outcome.stderr.splitlines()[-1] == f"hint: {hint}"
    assert not (tmp_path / "i" / "files").exists()


def test_a_rebuild_of_an_invalid_wheel_is_refused_before_anything_runs(tmp_path: Path) -> None:
    """Its members are compared after the build: a damaged one would end an hour's rebuild in
    a traceback."""
    wheel = _damaged_deflate(tmp_path)
    outcome = run_bounded("verify", "--rebuild", str(wheel), "--work-dir", str(tmp_path / "w"),
                          cwd=tmp_path, seconds=60)
    assert_orderly(outcome, seconds=30)
    assert outcome.returncode == 10
    assert outcome.stderr.splitlines()[-3:] == [
        f"error: {wheel.name} is not a valid wheel", f"  {DAMAGED}",
        f"hint: {Flaw.ARCHIVE.value}"]
    assert not (tmp_path / "w").exists()


@pytest.mark.parametrize("command", ["verify", "publish"])
def test_a_wheel_of_a_hundred_thousand_members_is_checked_in_bounded_time(
        tmp_path: Path, command: str) -> None:
    """Its checks grow with the wheel, not with its square: RECORD's rows were each looked up
    in a list of every member (60,000 empty members, an 11 MB wheel: 100 s of CPU before
    publish refused it; 250,000 fit in a RECORD wheelsmith reads)."""
    info = "demo_ext-1.0.0.dist-info"
    files = {f"demo_ext/m{i}.py": b"" for i in range(100_000)}
    wheel = make_wheel(tmp_path, "demo-ext", "1.0.0", files=files, tags="py3-none-any")
    args = ["--arch", "12.0"] if command == "verify" else ["--index", "index", "--channel", "c"]
    outcome = run_bounded(command, str(wheel), *args, cwd=tmp_path, seconds=120)
    assert_orderly(outcome, seconds=60)
    assert f"{info}/RECORD" in zipfile.ZipFile(wheel).namelist()
    assert outcome.returncode == (10 if command == "verify" else 0), outcome.describe()


def flagged_name(name: bytes) -> bytes:
    return "demo/\u00e9".encode() + name + b".py"


def flagged_utf8_zip(path: Path, name: bytes) -> Path:
    """A zip whose one member's name is `name`, flagged as UTF-8 (bit 11) in its local header
    and central directory, whatever the bytes are."""
    placeholder = "demo/\u00e9" + "n" * len(name) + ".py"  # not ASCII: zipfile flags it
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(placeholder, b"x")
    data = path.read_bytes()
    assert data.count(placeholder.encode()) == 2  # the local header's and the directory's
    path.write_bytes(data.replace(placeholder.encode(), flagged_name(name)))
    return path


@given(st.binary(min_size=1, max_size=12))
def test_a_member_name_in_any_bytes_flagged_utf8_is_a_problem_or_read_never_a_crash(
        tmp_path_factory: pytest.TempPathFactory, name: bytes) -> None:
    """zipfile decodes a flagged name while it opens the archive: bytes that are not UTF-8
    are damage, named, in a wheel (verify, publish) and in an sdist (unpack) alike."""
    root = tmp_path_factory.mktemp("zip")
    wheel = flagged_utf8_zip(root / "demo-1.0.0-py3-none-any.whl", name)
    flaw, problems = examine(wheel)
    sdist = root / "demo-1.0.zip"
    sdist.write_bytes(wheel.read_bytes())
    (root / "out").mkdir()
    unpacked = returned_or_raised(lambda: unpack(sdist, root / "out"), SourceError)
    try:
        flagged_name(name).decode("utf-8")
    except UnicodeDecodeError:
        assert flaw is Flaw.ARCHIVE
        assert problems[0].startswith("not a readable zip file: a member's name is not the "
                                      "UTF-8 its flag says (")
        assert isinstance(unpacked, SourceError)
        assert unpacked.message.startswith("cannot unpack demo-1.0.zip: a member's name is not")
        return
    assert flaw is not Flaw.ARCHIVE  # a readable zip: its members are judged, not its bytes
