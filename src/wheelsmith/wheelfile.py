"""Reading, checking and rewriting wheel files (PEP 427 / binary distribution format).

`check` finds everything that makes a wheel unsafe or invalid (used by verify and publish);
`rewrite` produces a new wheel deterministically: sorted members, .dist-info last, fixed
timestamps from SOURCE_DATE_EPOCH, fixed permissions, and a RECORD that matches.

A wheel may be anyone's: it is opened as a zip only when it is a regular file (`open_zip`,
through untrusted.local: a FIFO or a device named as a wheel is refused naming it), and a
member read whole (METADATA, WHEEL, RECORD, wheelsmith.json) at most MEMBER_MAX_BYTES
(`read_member`); every other member is read in pieces.
"""

from __future__ import annotations

import base64
import csv
import enum
import hashlib
import io
import re
import stat
import time
import unicodedata
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from email.message import Message
from email.parser import HeaderParser
from pathlib import Path, PurePosixPath

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from wheelsmith import files
from wheelsmith.untrusted import clip, control_in
from wheelsmith.untrusted.local import MemberTooLarge, expands_too_far, open_zip, read_member

ZIP_EPOCH_FLOOR = 315532800  # 1980-01-01, the earliest time a zip entry can hold


@dataclass(frozen=True, slots=True)
class WheelName:
    name: str
    version: Version
    build: str
    tags: str  # "cp311-cp311-linux_x86_64"

    @classmethod
    def parse(cls, filename: str) -> WheelName:
        name, version, build, _ = parse_wheel_filename(filename)
        tags = filename.removesuffix(".whl").split("-", 2 + (1 if build else 0))[-1]
        build_text = "".join(str(p) for p in build) if build else ""
        return cls(str(name), version, build_text, tags)

    def filename(self) -> str:
        dist = re.sub(r"[-_.]+", "_", self.name)
        build = f"-{self.build}" if self.build else ""
        return f"{dist}-{self.version}{build}-{self.tags}.whl"

    @property
    def platform(self) -> str:
        """The platform part of the tags, e.g. "linux_x86_64" or "manylinux_2_34_x86_64"."""
        return self.tags.rsplit("-", 1)[-1]

    def with_platform(self, platform: str) -> WheelName:
        return WheelName(self.name, self.version, self.build,
                         self.tags.rsplit("-", 1)[0] + "-" + platform)

    def tag_lines(self) -> list[str]:
        """The WHEEL file's `Tag:` values for these (possibly compressed) tags, in order."""
        python, abi, platform = self.tags.split("-")
        return [f"{p}-{a}-{plat}" for p in python.split(".") for a in abi.split(".")
                for plat in platform.split(".")]


def set_tags(wheel_text: str, tags: list[str]) -> str:
    """The WHEEL file `wheel_text` with its `Tag:` lines replaced by `tags` (where the first
    one was)."""
    lines = wheel_text.splitlines()
    first = next((i for i, line in enumerate(lines) if line.startswith("Tag:")), len(lines))
    kept = [line for line in lines if not line.startswith("Tag:")]
    return "\n".join([*kept[:first], *(f"Tag: {t}" for t in tags), *kept[first:]]) + "\n"


def record_hash(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def dist_info_dir(names: list[str]) -> str:
    dirs = {n.split("/", 1)[0] for n in names if n.split("/", 1)[0].endswith(".dist-info")
            and "/" in n}
    if len(dirs) != 1:
        raise ValueError(f"expected exactly one .dist-info directory, found {len(dirs)}")
    return dirs.pop()


def read_metadata(wheel: Path) -> bytes:
    with open_zip(wheel) as zf:
        return read_member(zf, f"{dist_info_dir(zf.namelist())}/METADATA")


_FOLD = re.compile(r"(?:\r\n|\r|\n)(?=[ \t])")


def headers(data: bytes) -> Message:
    """METADATA or WHEEL as the email-style headers they are (UTF-8; UnicodeDecodeError),
    each value unfolded (RFC 5322 2.2.3: a line break before a space or tab is removed), so
    that none carries a line break into a page, the ledger or a message."""
    parsed = HeaderParser().parsestr(data.decode())
    unfolded = Message()
    for key, value in parsed.items():
        unfolded[key] = _FOLD.sub("", value)
    unfolded.set_payload(parsed.get_payload())
    return unfolded


# What reading a damaged or hostile zip raises besides BadZipFile: a deflate stream that does
# not decode, data cut short, an encrypted member or one of an unknown compression.
ZIP_DAMAGE = (zipfile.BadZipFile, zlib.error, EOFError, RuntimeError, NotImplementedError)
UNREADABLE = (*ZIP_DAMAGE, OSError)
FILENAME_RE = re.compile(r"[A-Za-z0-9._+!-]+\.whl")  # what PEP 427's parts are written with


class Flaw(enum.Enum):
    """What is wrong with a wheel, for what to do about it: its name, its archive, or what
    it holds (a member, METADATA, WHEEL, RECORD)."""

    NAME = ("give the file the name its build wrote: NAME-VERSION[-BUILD]-PYTHON-ABI-PLATFORM"
            ".whl in ASCII letters, digits and . _ + ! - (PEP 427)")
    ARCHIVE = "download or build it again: the file is cut short, damaged or no zip archive"
    CONTENT = ""  # the caller's: what a wheel that holds the wrong things means there


def check(wheel: Path) -> list[str]:
    """Every reason `wheel` is not a valid, safe wheel; empty when it is fine."""
    return examine(wheel)[1]


def examine(wheel: Path) -> tuple[Flaw | None, list[str]]:
    """What is wrong with `wheel` (None: nothing) and every reason it is not a valid, safe
    wheel. Names from the wheel are shown escaped (`clip`): a member's name is data its
    builder chose."""
    try:
        name = WheelName.parse(wheel.name)
    except InvalidWheelFilename as exc:
        return Flaw.NAME, [f"invalid wheel filename: {clip(str(exc), 200)}"]
    if not FILENAME_RE.fullmatch(wheel.name):
        return Flaw.NAME, [f"invalid wheel filename: {clip(wheel.name, 200)} holds other "
                           "characters than ASCII letters, digits and . _ + ! - (PEP 427)"]
    try:
        with open_zip(wheel) as zf:
            problems = _check_members(zf, name)
    except UNREADABLE as exc:
        return Flaw.ARCHIVE, [f"not a readable zip file: "
                              f"{clip(str(exc) or type(exc).__name__, 200)}"]
    return (Flaw.CONTENT if problems else None), problems


def what_to_do(flaw: Flaw, content: str) -> str:
    """The hint for a wheel with `flaw`; `content`: the caller's for one that holds the
    wrong things."""
    return flaw.value or content


BOMB_FLOOR = 64 << 20


INTERPRETER_RE = re.compile(r"\.data/scripts/(python|pythonw|python3(\.\d+)?)$")
ENCRYPTED = 0x1  # a zip member's flag bit


def _unsafe_members(zf: zipfile.ZipFile) -> list[str]:
    problems = []
    names = zf.namelist()
    if len(set(names)) != len(names):
        problems.append("duplicate member names")
    problems += _colliding(names)
    for member in zf.infolist():
        problems += _member_problems(member)
    unpacked = sum(m.file_size for m in zf.infolist())
    packed = sum(m.compress_size for m in zf.infolist())
    if expands_too_far(unpacked, packed, BOMB_FLOOR):
        problems.append(f"unpacks to {unpacked} bytes from {packed}: looks like a zip bomb")
    return problems


def _colliding(names: list[str]) -> list[str]:
    """Member names that are one file where the installer writes them: a file system that
    ignores case (Windows, macOS) or normalises Unicode (macOS: NFC and NFD forms of one name
    are one name). Compared as Unicode's canonical caseless match (NFD, casefold, NFD)."""
    first: dict[str, str] = {}
    problems = []
    for name in dict.fromkeys(names):  # an exact duplicate is said once, above
        key = unicodedata.normalize("NFD", unicodedata.normalize("NFD", name).casefold())
        if key in first:
            problems.append(f"member names {clip(first[key], 200)} and {clip(name, 200)} are "
                            "one file on a file system that ignores case or normalises Unicode "
                            "(Windows, macOS): one would overwrite the other")
        else:
            first[key] = name
    return problems


def _member_problems(member: zipfile.ZipInfo) -> list[str]:
    name, shown = member.filename, clip(member.filename, 200)
    path = PurePosixPath(name)
    problems = []
    if path.is_absolute() or ".." in path.parts or "\\" in name or re.match(r"^[A-Za-z]:", name):
        problems.append(f"unsafe member path: {shown}")
    if control_in(name, lines=True) is not None:
        problems.append(f"member name with control characters: {shown}")
    if stat.S_ISLNK(member.external_attr >> 16):
        problems.append(f"member {shown} is a symbolic link")
    if member.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        problems.append(f"member {shown} uses an unsupported compression")
    if member.flag_bits & ENCRYPTED:
        problems.append(f"member {shown} is encrypted")
    if INTERPRETER_RE.search(name):
        problems.append(f"member {shown} would overwrite the Python interpreter")
    return problems


class _Unfit(Exception):
    """A file of the .dist-info that cannot be read as what it is."""


def _headers_of(zf: zipfile.ZipFile, member: str) -> Message:
    try:
        return headers(read_member(zf, member))
    except UnicodeDecodeError as exc:
        raise _Unfit(f"{member} is not UTF-8 (byte {exc.start + 1})") from None
    except MemberTooLarge as exc:
        raise _Unfit(str(exc)) from None


def _check_members(zf: zipfile.ZipFile, name: WheelName) -> list[str]:
    problems = _unsafe_members(zf)
    names = zf.namelist()
    try:
        info_dir = dist_info_dir(names)
    except ValueError as exc:
        return [*problems, str(exc)]
    for required in ("METADATA", "WHEEL", "RECORD"):
        if f"{info_dir}/{required}" not in names:
            problems.append(f"{info_dir}/{required} is missing")
    if problems:
        return problems
    try:
        problems += _metadata_problems(_headers_of(zf, f"{info_dir}/METADATA"), name)
        tags = _headers_of(zf, f"{info_dir}/WHEEL").get_all("Tag", [])
    except _Unfit as exc:
        return [str(exc)]
    problems += [f"the filename's tag {tag} is not among the WHEEL file's tags "
                 f"({clip(', '.join(tags), 200)}): renamed?"
                 for tag in name.tag_lines() if tag not in tags]
    return problems + _check_record(zf, f"{info_dir}/RECORD")


def _metadata_problems(metadata: Message, name: WheelName) -> list[str]:
    problems = []
    said = {key: str(metadata.get(key, "")) for key in ("Name", "Version")}
    if canonicalize_name(said["Name"]) != canonicalize_name(name.name):
        problems.append(f"METADATA Name '{clip(said['Name'])}' does not match the filename")
    try:
        if Version(said["Version"]) != name.version:
            problems.append(f"METADATA Version '{clip(said['Version'])}' does not match the "
                            f"filename version {name.version}")
    except InvalidVersion:
        problems.append(f"METADATA Version '{clip(said['Version'])}' is not a version")
    requires = metadata.get("Requires-Python")
    try:
        if requires is not None:
            SpecifierSet(str(requires))
    except InvalidSpecifier:
        problems.append(f"METADATA Requires-Python '{clip(str(requires))}' is not a version "
                        "specifier")
    return problems


def _check_record(zf: zipfile.ZipFile, record_name: str) -> list[str]:
    try:
        text = read_member(zf, record_name).decode()
        rows = {row[0]: row for row in csv.reader(io.StringIO(text)) if row}
    except MemberTooLarge as exc:
        return [str(exc)]
    except UnicodeDecodeError as exc:
        return [f"{record_name} is not UTF-8 (byte {exc.start + 1})"]
    except csv.Error as exc:
        return [f"{record_name} is not a CSV table ({clip(str(exc))})"]
    problems = []
    names = zf.namelist()
    members = set(names)  # looked up once per RECORD row: a wheel may hold 250,000 members
    for member in names:
        if member.endswith("/") or member == record_name:
            continue
        row = rows.get(member)
        if row is None:
            problems.append(f"{member} is not listed in RECORD")
        elif len(row) < 2 or row[1] != _member_hash(zf, member):
            problems.append(f"RECORD hash of {member} does not match its content")
    problems += [f"RECORD lists {clip(m, 200)}, which is not in the wheel"
                 for m in rows if m not in members and m != record_name]
    return problems


def _member_hash(zf: zipfile.ZipFile, member: str) -> str:
    """`record_hash` of a member, read in pieces (a member may be larger than memory)."""
    digest = hashlib.sha256()
    with zf.open(member) as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return "sha256=" + base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()


def rewrite(
    src: Path,
    dst: Path,
    *,
    name: WheelName,
    edits: dict[str, Callable[[str], str]],
    extra: dict[str, bytes],
    epoch: int,
) -> None:
    """Write `src` as the wheel `name` to `dst`: renamed .dist-info, its files named in `edits`
    (METADATA, WHEEL) edited, `extra` files added to it, and a fresh RECORD."""
    with open_zip(src) as zin:
        old_info = dist_info_dir(zin.namelist())
        new_info = f"{re.sub(r'[-_.]+', '_', name.name)}-{name.version}.dist-info"
        contents: dict[str, bytes] = {}
        modes: dict[str, int] = {}
        for info in zin.infolist():
            if info.filename.endswith("/") or info.filename == f"{old_info}/RECORD":
                continue
            target = new_info + info.filename[len(old_info):] if info.filename.startswith(
                f"{old_info}/") else info.filename
            contents[target] = zin.read(info)
            modes[target] = (info.external_attr >> 16) & 0o777
    for file, edit in edits.items():
        contents[f"{new_info}/{file}"] = edit(contents[f"{new_info}/{file}"].decode()).encode()
    for file, data in extra.items():
        contents[f"{new_info}/{file}"] = data
    _write(dst, contents, modes, f"{new_info}/RECORD", max(epoch, ZIP_EPOCH_FLOOR))


def _write(dst: Path, contents: dict[str, bytes], modes: dict[str, int], record: str,
           epoch: int) -> None:
    info_prefix = record.split("/", 1)[0] + "/"
    order = sorted(contents, key=lambda n: (n.startswith(info_prefix), n))
    lines = [f"{n},{record_hash(contents[n])},{len(contents[n])}" for n in order]
    contents[record] = ("\n".join([*lines, f"{record},,"]) + "\n").encode()
    order.append(record)
    date_time = time.gmtime(epoch)[:6]
    with files.naming(dst), zipfile.ZipFile(dst, "w", compression=zipfile.ZIP_DEFLATED) as zout:
        for member in order:
            info = zipfile.ZipInfo(member, date_time=date_time)
            mode = modes.get(member, 0o644)
            info.external_attr = ((0o755 if mode & 0o111 else 0o644) | 0o100000) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zout.writestr(info, contents[member])
