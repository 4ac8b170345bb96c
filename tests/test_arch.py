"""Arch strings: what users write, what torch and cuobjdump call it, what is refused."""

from __future__ import annotations

import pytest
from packaging.version import Version

from wheelsmith.arch import ArchParseError, ArchSet


@pytest.mark.parametrize(
    ("values", "torch_list", "sass", "ptx", "label"),
    [
        (["12.0"], "12.0", {"sm_120"}, set(), "sm.120"),
        (["9.0;12.0"], "9.0;12.0", {"sm_90", "sm_120"}, set(), "sm.90.120"),
        (["12.0", "9.0"], "9.0;12.0", {"sm_90", "sm_120"}, set(), "sm.90.120"),
        (["9.0;12.0+PTX"], "9.0;12.0+PTX", {"sm_90", "sm_120"}, {"sm_120"}, "sm.90.120.ptx.120"),
        (["10.0 12.0"], "10.0;12.0", {"sm_100", "sm_120"}, set(), "sm.100.120"),
        (["9.0a"], "9.0a", {"sm_90a"}, set(), "sm.90a"),
    ],
)
def test_arch_lists_parse_to_torch_and_cuobjdump_names(
    values: list[str], torch_list: str, sass: set[str], ptx: set[str], label: str
) -> None:
    archs = ArchSet.parse(values)
    assert archs.torch_arch_list() == torch_list
    assert archs.sass == sass
    assert archs.ptx == ptx
    assert archs.label() == label


@pytest.mark.parametrize(
    ("value", "message", "hint"),
    [
        ("12.0f", "'12.0f': the family suffix 'f' is not accepted by torch's "
         "TORCH_CUDA_ARCH_LIST", "use '12.0': sm_120 cubins also run on later 12.x GPUs of the "
         "same family"),
        ("13.7", "unknown CUDA arch '13.7'", "known: 5.0, 5.2, 5.3, 6.0, 6.1, 6.2, 7.0, 7.2, "
         "7.5, 8.0, 8.6, 8.7, 8.9, 9.0, 10.0, 10.1, 10.3, 11.0, 12.0, 12.1"),
        ("12.5", "unknown CUDA arch '12.5'", "did you mean '12.1'? known: 5.0, 5.2, 5.3, 6.0, "
         "6.1, 6.2, 7.0, 7.2, 7.5, 8.0, 8.6, 8.7, 8.9, 9.0, 10.0, 10.1, 10.3, 11.0, 12.0, 12.1"),
        ("sm_120", "'sm_120' is not a compute capability",
         "write MAJOR.MINOR as TORCH_CUDA_ARCH_LIST does: did you mean '12.0'?"),
        ("120", "'120' is not a compute capability",
         "write MAJOR.MINOR as TORCH_CUDA_ARCH_LIST does: did you mean '12.0'?"),
        ("Blackwell", "'Blackwell' names a group of GPUs, not an arch",
         "list the archs explicitly, e.g. '10.0;12.0' (B200 + RTX 50 / RTX PRO 6000)"),
        ("8.0a", "'8.0a': arch-specific 'a' targets exist only from 9.0 on", "use '8.0'"),
        ("12.0+ptx", "'12.0+ptx' is not a CUDA arch", "write MAJOR.MINOR, optionally with 'a' "
         "or '+PTX': e.g. '12.0', '9.0;12.0+PTX'"),
    ],
)
def test_bad_arch_is_refused_with_what_to_write(value: str, message: str, hint: str) -> None:
    with pytest.raises(ArchParseError) as caught:
        ArchSet.parse([value])
    assert caught.value.message == message
    assert caught.value.hint == hint


def test_same_arch_twice_is_refused() -> None:
    with pytest.raises(ArchParseError, match=r"arch '12\.0\+PTX' is listed twice"):
        ArchSet.parse(["12.0", "12.0+PTX"])


def test_empty_arch_list_is_refused() -> None:
    with pytest.raises(ArchParseError, match="no arch given"):
        ArchSet.parse([" ; "])


def test_toolkit_problems_name_the_cuda_floor_and_removals() -> None:
    archs = ArchSet.parse(["7.0;11.0;12.0"])
    assert archs.toolkit_problems(Version("12.8")) == [
        "arch 11.0 needs CUDA >= 13.0, the toolchain has 12.8 (CUDA 12 calls Jetson Thor "
        "10.1: write 10.1)"]
    assert archs.toolkit_problems(Version("13.0")) == [
        "arch 7.0 was removed in CUDA 13.0, the toolchain has 13.0"]


def test_a_renamed_arch_is_refused_with_the_number_that_toolkit_uses() -> None:
    assert ArchSet.parse(["10.1"]).toolkit_problems(Version("13.0")) == [
        "arch 10.1 was removed in CUDA 13.0, the toolchain has 13.0 (CUDA 13 calls Jetson "
        "Thor 11.0: write 11.0)"]
    assert ArchSet.parse(["11.0"]).toolkit_problems(Version("12.9")) == [
        "arch 11.0 needs CUDA >= 13.0, the toolchain has 12.9 (CUDA 12 calls Jetson Thor "
        "10.1: write 10.1)"]


def test_labels_sort_numerically_across_torch_versions() -> None:
    older = Version("1.7.0+cu.13.0.torch.2.9.sm.120")
    newer = Version("1.7.0+cu.13.0.torch.2.14.sm.120")
    assert older < newer
