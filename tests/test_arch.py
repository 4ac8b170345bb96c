"""Arch strings: what users write, what torch and cuobjdump call it, what is refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from packaging.version import Version

from wheelsmith.arch import KNOWN_ARCHS, ArchParseError, ArchSet


@pytest.mark.parametrize(
    ("values", "torch_list", "sass", "ptx", "label"),
    [
        (["12.0"], "12.0", {"sm_120"}, set(), "sm.120"),
        (["9.0;12.0"], "9.0;12.0", {"sm_90", "sm_120"}, set(), "sm.90.120"),
        (["12.0", "9.0"], "9.0;12.0", {"sm_90", "sm_120"}, set(), "sm.90.120"),
        (["9.0;12.0+PTX"], "9.0;12.0+PTX", {"sm_90", "sm_120"}, {"sm_120"}, "sm.90.120.ptx.120"),
        (["10.0 12.0"], "10.0;12.0", {"sm_100", "sm_120"}, set(), "sm.100.120"),
        (["9.0a"], "9.0a", {"sm_90a"}, set(), "sm.90a"),
        (["12.0f"], "12.0", {"sm_120f"}, set(), "sm.120f"),  # torch is told the base
        (["10.0f;12.0f+PTX"], "10.0;12.0+PTX", {"sm_100f", "sm_120f"}, {"sm_120f"},
         "sm.100f.120f.ptx.120f"),
        (["12.0a;12.0f"], "12.0a;12.0", {"sm_120a", "sm_120f"}, set(), "sm.120a.120f"),
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
        ("9.0f", "'9.0f': family 'f' targets exist only from 10.0 on", "use '9.0'"),
        ("12.0;12.0f", "'12.0' and '12.0f' are both listed: both run on every 12.x GPU from "
         "12.0 on", "keep one: '12.0f' where its family's features are wanted, else '12.0'"),
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
        ("12.0+ptx", "'12.0+ptx' is not a CUDA arch", "write MAJOR.MINOR, optionally with 'a', "
         "'f' or '+PTX': e.g. '12.0', '9.0;12.0f+PTX'"),
        ("12.0x", "'12.0x': unknown suffix 'x'",
         "write '12.0', '12.0a' (arch-specific) or '12.0f' (family)"),
    ],
)
def test_bad_arch_is_refused_with_what_to_write(value: str, message: str, hint: str) -> None:
    with pytest.raises(ArchParseError) as caught:
        ArchSet.parse([value])
    assert caught.value.message == message
    assert caught.value.hint == hint


@given(st.sampled_from(sorted(KNOWN_ARCHS)), st.sampled_from(["", "sm_", "compute_"]),
       st.sampled_from(["", "a", "f"]), st.booleans())
def test_an_arch_written_as_cmake_or_nvcc_numbers_is_told_its_dotted_form(
        capability: str, prefix: str, suffix: str, short: bool) -> None:
    """`120`, `sm_90a`, `compute_100f` and a major alone (`12`: 12.0, not CUDA 1.2's arch)."""
    major, minor = capability.split(".")
    alone = (short and minor == "0" and len(major) == 2
             and f"{major[0]}.{major[1]}" not in KNOWN_ARCHS)
    digits = major if alone else f"{major}{minor}"
    with pytest.raises(ArchParseError) as caught:
        ArchSet.parse([f"{prefix}{digits}{suffix}"])
    assert caught.value.hint == ("write MAJOR.MINOR as TORCH_CUDA_ARCH_LIST does: did you mean "
                                 f"'{capability}{suffix}'?")


@given(st.sampled_from(sorted(KNOWN_ARCHS)), st.sampled_from(["", "a", "f"]), st.booleans())
def test_every_known_arch_with_any_suffix_parses_or_says_why(
        capability: str, suffix: str, ptx: bool) -> None:
    """A family target is the family's everywhere wheelsmith names it (sm_XXf, label XXf) and
    its base wherever a package is told the archs (torch's list, the numbers, CMake's list)."""
    text = f"{capability}{suffix}{'+PTX' if ptx else ''}"
    floor = (9, 0) if suffix == "a" else (10, 0) if suffix == "f" else (0, 0)
    major, minor = map(int, capability.split("."))
    if (major, minor) < floor:
        with pytest.raises(ArchParseError, match=f"'{suffix}' targets exist only from"):
            ArchSet.parse([text])
        return
    archs = ArchSet.parse([text])
    code = f"{major}{minor}"
    assert archs.sass == {f"sm_{code}{suffix}"}
    assert archs.ptx == ({f"sm_{code}{suffix}"} if ptx else set())
    assert archs.label() == f"sm.{code}{suffix}" + (f".ptx.{code}{suffix}" if ptx else "")
    told = "" if suffix == "f" else suffix
    assert archs.torch_arch_list() == f"{capability}{told}{'+PTX' if ptx else ''}"
    assert archs.numbers_list() == f"{code}{told}"
    assert archs.family_codes == ({code} if suffix == "f" else set())
    assert ArchSet.label_device_code(f"cu.13.0.{archs.label()}") == (archs.sass, archs.ptx)
    problems = archs.toolkit_problems(Version("12.8"))
    assert (suffix == "f") == any("family target, which needs CUDA >= 12.9" in p
                                  for p in problems)


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
