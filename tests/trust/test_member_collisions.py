"""Wheel members whose names are one file where an installer writes them — on a file system
that ignores case (Windows, macOS) or normalises Unicode (macOS: NFC and NFD spellings of one
name) — are refused by verify and publish (wheelfile.py), naming both, escaped: one would
silently overwrite the other on some machines and not on others. Names that differ there
pass."""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.hostile import assert_orderly, run_bounded
from tests.wheels import make_wheel
from wheelsmith import wheelfile

CHANNEL = "cu130-torch2.13"
LETTERS = st.sampled_from(list("abcxyzABCXYZ_0123éÉåÅñÑöÖßẞǅσΣςﬁİıK"))  # K: the Kelvin sign
STEMS = st.text(LETTERS, min_size=1, max_size=10)
# another spelling of a name that is the same file on such a file system
SPELLINGS: dict[str, Callable[[str], str]] = {
    "upper case": str.upper, "lower case": str.lower, "swapped case": str.swapcase,
    "NFD": lambda n: unicodedata.normalize("NFD", n),
    "NFC": lambda n: unicodedata.normalize("NFC", n),
    "NFD of its upper case": lambda n: unicodedata.normalize("NFD", n.upper()),
}


def _same_file(a: str, b: str) -> bool:
    """The canonical caseless match (Unicode 3.13, D145), written here from the standard."""
    def fold(n: str) -> str:
        return unicodedata.normalize("NFD", unicodedata.normalize("NFD", n).casefold())
    return fold(a) == fold(b)


def _shown(name: str) -> str:
    return name.encode("unicode_escape").decode("ascii")


def _said(a: str, b: str) -> str:
    return (f"member names {_shown(a)} and {_shown(b)} are one file on a file system that "
            "ignores case or normalises Unicode (Windows, macOS): one would overwrite the other")


def _wheel(directory: Path, *names: str) -> Path:
    return make_wheel(directory, "demo-ext", files={"demo_ext/__init__.py": b"",
                                                    **{f"demo_ext/{n}.py": b"" for n in names}})


@given(STEMS, st.sampled_from(sorted(SPELLINGS)))
def test_two_spellings_of_one_file_are_refused_naming_both(
        tmp_path_factory: pytest.TempPathFactory, stem: str, spelling: str) -> None:
    other = SPELLINGS[spelling](stem)
    wheel = _wheel(tmp_path_factory.mktemp("w"), stem, other)
    found = [p for p in wheelfile.check(wheel) if p.startswith("member names")]
    if other == stem:
        assert found == []  # one member (make_wheel's dict): nothing collides
    elif _same_file(stem, other):
        assert found == [_said(f"demo_ext/{stem}.py", f"demo_ext/{other}.py")]
    else:  # the spelling made another file (ß.upper() is SS, whose fold is ss, not ß)
        assert found == []


@given(STEMS, STEMS)
def test_names_that_are_different_files_everywhere_pass(
        tmp_path_factory: pytest.TempPathFactory, a: str, b: str) -> None:
    wheel = _wheel(tmp_path_factory.mktemp("w"), a, b)
    found = [p for p in wheelfile.check(wheel) if p.startswith("member names")]
    assert bool(found) == (a != b and _same_file(a, b))


PAIRS = {"case": ("Kernels", "kernels"), "NFC and NFD": ("caf\u00e9", "cafe\u0301")}


@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_verify_and_publish_refuse_colliding_members_and_publish_writes_nothing(
        tmp_path: Path, pair: str) -> None:
    a, b = PAIRS[pair]
    wheel = _wheel(tmp_path, a, b)
    said = _said(f"demo_ext/{a}.py", f"demo_ext/{b}.py")
    verified = run_bounded("verify", str(wheel), "--arch", "12.0", cwd=tmp_path)
    published = run_bounded("publish", str(wheel), "--index", str(tmp_path / "i"),
                            "--channel", CHANNEL, cwd=tmp_path)
    for outcome in (verified, published):
        assert_orderly(outcome, seconds=30)
    assert (verified.returncode, verified.stderr.splitlines()[:2]) == (
        10, [f"error: {wheel.name} is not a valid wheel", f"  {said}"])
    assert (published.returncode, published.stderr.splitlines()[0]) == (
        12, f"error: refusing to publish {wheel.name}: it is not a valid wheel: {said}")
    assert not (tmp_path / "i").exists()
