"""An sdist is not trusted (build, recipe new): an archive that would unpack to more members or
bytes than any source tree holds, or far more than its own size, is refused before anything is
extracted, naming the bound, whatever its form (tar plain or compressed, zip). Archives are
generated: real compressed zeros against the ratio rule, and headers that claim sizes no data
backs (refused at the header, before a byte of it is decompressed)."""

from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.hostile import returned_or_raised
from wheelsmith.errors import SourceError
from wheelsmith.recipes import unpack as unpacking
from wheelsmith.recipes.unpack import (
    UNPACK_FLOOR,
    UNPACK_MAX_BYTES,
    UNPACK_MAX_MEMBERS,
    unpack,
)
from wheelsmith.untrusted.local import BOMB_RATIO

TAR_MODES = ["w", "w:gz", "w:bz2", "w:xz"]
SMALL_FLOOR = 256 << 10  # the ratio rule, tried with real data at a floor a test can pass
HINT = "the archive is malformed or hostile; nothing was extracted"


def zeros_tar(path: Path, sizes: list[int], mode: str) -> Path:
    with tarfile.open(path, mode) as tar:  # type: ignore[call-overload]
        for at, size in enumerate(sizes):
            info = tarfile.TarInfo(f"demo-1.0/data{at}.bin")
            info.size = size
            tar.addfile(info, io.BytesIO(bytes(size)))
    return path


def zeros_zip(path: Path, sizes: list[int]) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for at, size in enumerate(sizes):
            zf.writestr(f"demo-1.0/data{at}.bin", bytes(size))
    return path


def claimed_tar(path: Path, real: list[int], claim: int) -> Path:
    """A plain tar of members of `real` sizes, then a header claiming `claim` bytes that no
    data follows."""
    zeros_tar(path, real, "w")
    with tarfile.open(path) as tar:  # where the last member's data ends: not the end blocks
        end = max((m.offset_data + -(-m.size // 512) * 512 for m in tar), default=0)
    data = path.read_bytes()[:end]
    info = tarfile.TarInfo("demo-1.0/claimed.bin")
    info.size = claim
    path.write_bytes(data + info.tobuf(format=tarfile.GNU_FORMAT))
    return path


def outcome(archive: Path, dest: Path) -> tuple[str, str | None, list[Path]] | None:
    """The refusal's message, hint and what it left in `dest`; None when it unpacked."""
    dest.mkdir()
    refused = returned_or_raised(lambda: unpack(archive, dest), SourceError)
    if isinstance(refused, SourceError):
        return refused.message, refused.hint, list(dest.iterdir())
    return None


DAMAGED = "the archive is damaged; delete it from the download cache and fetch it again"


@given(sizes=st.lists(st.integers(0, 6 * SMALL_FLOOR), min_size=1, max_size=4),
       form=st.sampled_from([*TAR_MODES, "zip"]))
def test_an_archive_past_the_floor_and_the_ratio_is_refused_and_any_other_unpacks_whole(
        tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch,
        sizes: list[int], form: str) -> None:
    monkeypatch.setattr(unpacking, "UNPACK_FLOOR", SMALL_FLOOR)
    root = tmp_path_factory.mktemp("bomb")
    archive = zeros_zip(root / "demo-1.0.zip", sizes) if form == "zip" else \
        zeros_tar(root / "demo-1.0.tar", sizes, form)
    packed, total = archive.stat().st_size, sum(sizes)
    refused = outcome(archive, root / "out")
    if total > SMALL_FLOOR and total > BOMB_RATIO * packed:
        assert refused is not None
        message, hint, left = refused
        assert message.startswith(f"refusing to unpack {archive.name}: it unpacks to ")
        assert message.endswith(f" bytes or more from {packed}, over {BOMB_RATIO} times its "
                                "size: an archive bomb")
        assert (hint, left) == (HINT, [])
    else:
        assert refused is None
        assert sorted(p.stat().st_size for p in (root / "out").rglob("*.bin")) == sorted(sizes)


@given(real=st.lists(st.integers(0, 2048), max_size=3),
       claim=st.one_of(st.integers(1, 1 << 20), st.integers(1, 2 * UNPACK_MAX_BYTES)))
def test_a_header_claiming_more_than_the_bounds_is_refused_before_its_data_is_read(
        tmp_path_factory: pytest.TempPathFactory, real: list[int], claim: int) -> None:
    """No data follows the last header: past a bound it is refused there, the data never
    read; within them the archive is cut short, and what it extracted is removed."""
    root = tmp_path_factory.mktemp("claims")
    archive = claimed_tar(root / "demo-1.0.tar", real, claim)
    refused = outcome(archive, root / "out")
    assert refused is not None
    message, hint, left = refused
    total, packed = sum(real) + claim, archive.stat().st_size
    if total > UNPACK_MAX_BYTES:
        assert (message, hint) == (
            f"refusing to unpack {archive.name}: it unpacks to more than 16 GiB", HINT)
    elif total > UNPACK_FLOOR:  # 50 times the archive's few KiB, too
        assert (message, hint) == (
            f"refusing to unpack {archive.name}: it unpacks to {total} bytes or more from "
            f"{packed}, over {BOMB_RATIO} times its size: an archive bomb", HINT)
    else:
        assert (message, hint) == (
            f"cannot unpack {archive.name}: unexpected end of data", DAMAGED)
    assert left == []


def test_more_members_than_any_source_tree_holds_are_refused_naming_the_bound(
        tmp_path: Path) -> None:
    archive = tmp_path / "demo-1.0.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for at in range(UNPACK_MAX_MEMBERS + 1):
            tar.addfile(tarfile.TarInfo(f"demo-1.0/f{at}"))
    assert outcome(archive, tmp_path / "out") == (
        f"refusing to unpack {archive.name}: it holds more than {UNPACK_MAX_MEMBERS} members",
        HINT, [])


def test_a_source_tree_of_real_size_unpacks(tmp_path: Path) -> None:
    """The bounds sit far above real sdists (the largest wheelsmith has built holds 20,000
    members, 886 MiB from 110 MiB): here 5,000 small members."""
    archive = tmp_path / "demo-1.0.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for at in range(5000):
            info = tarfile.TarInfo(f"demo-1.0/src/f{at}.cu")
            data = f"// {at}\n__global__ void k{at}() {{}}\n".encode()
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    assert outcome(archive, tmp_path / "out") is None
    assert len(list((tmp_path / "out" / "demo-1.0" / "src").iterdir())) == 5000
    assert (UNPACK_FLOOR, UNPACK_MAX_BYTES) == (1 << 30, 16 << 30)
