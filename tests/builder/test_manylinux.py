"""The platform tag from the wheel's real glibc floor: real shared objects compiled here, real
auditwheel (the profile's pin) and its policy data; torch's and CUDA's libraries excluded."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from tests.conftest import DEFAULT_PROFILE
from tests.wheels import compile_shared, extension_wheel, make_wheel
from wheelsmith import wheelfile
from wheelsmith.builder import manylinux
from wheelsmith.builder.stamp import stamp
from wheelsmith.errors import PublishError
from wheelsmith.index.publish import publish
from wheelsmith.toolchain.profile import load_profile

PLAIN_C = """#include <string.h>
void *PyInit__native(void) { return 0; }
int answer(const char *s) { return (int)strlen(s); }
"""
GETRANDOM_C = """#include <sys/random.h>
void *PyInit__native(void) { return 0; }
int answer(void) { char b[4]; return (int)getrandom(b, sizeof b, 0); }
"""
SINGLE_THREADED_C = """extern char __libc_single_threaded;
int answer(void) { return __libc_single_threaded; }
"""
# GLIBC_2.14 at most, but std::filesystem needs GLIBCXX_3.4.26 (gcc 9's libstdc++)
FILESYSTEM_CXX = """#include <filesystem>
extern "C" void *PyInit__native(void) { return 0; }
extern "C" int answer(const char *p) { return std::filesystem::exists(p); }
"""
# no new glibc symbol at all, but floating-point std::to_chars needs GLIBCXX_3.4.29 (gcc 11)
TO_CHARS_CXX = """#include <charconv>
extern "C" void *PyInit__native(void) { return 0; }
extern "C" int answer(double x) { char b[64]; return int(std::to_chars(b, b + 64, x).ptr - b); }
"""
AUDITWHEEL = next(p.split("==")[1] for p in load_profile(DEFAULT_PROFILE).tools
                  if p.startswith("auditwheel=="))


def assessed(tmp_path: Path, auditwheel: Path | None, source: str, *, cxx: bool = False,
             links: tuple[Path, ...] = ()) -> manylinux.Platform:
    shared = compile_shared(tmp_path / "obj", source, cxx=cxx, links=links)
    return manylinux.assess(extension_wheel(tmp_path, "demo-native", shared), auditwheel)


@pytest.mark.toolchain
def test_a_plain_c_extension_gets_the_oldest_tag_with_its_legacy_alias(
        tmp_path: Path, auditwheel: Path) -> None:
    platform = assessed(tmp_path, auditwheel, PLAIN_C)
    assert (platform.tag, platform.glibc_floor) == (
        "manylinux_2_5_x86_64.manylinux1_x86_64", "2.5")
    assert platform.record["older_policy_refused"] == []
    assert platform.record["checked_with"] == f"auditwheel {AUDITWHEEL}"


@pytest.mark.toolchain
def test_the_newest_glibc_symbol_version_sets_the_floor(tmp_path: Path,
                                                        auditwheel: Path) -> None:
    platform = assessed(tmp_path, auditwheel, GETRANDOM_C)
    assert (platform.tag, platform.glibc_floor) == ("manylinux_2_26_x86_64", "2.26")
    assert platform.record["older_policy_refused"] == ["manylinux_2_24_x86_64: needs GLIBC_2.25"]
    assert platform.record["symbol_versions"] == {"libc.so.6": ["GLIBC_2.2.5", "GLIBC_2.25"]}


@pytest.mark.toolchain
def test_libstdcxx_symbol_versions_raise_the_floor_above_what_glibc_needs(
        tmp_path: Path, auditwheel: Path) -> None:
    """Counting GLIBC_ alone would say manylinux_2_17 here; the libstdc++ of a 2.17-2.28
    system lacks GLIBCXX_3.4.26, so the import would fail there."""
    platform = assessed(tmp_path / "fs", auditwheel, FILESYSTEM_CXX, cxx=True)
    assert platform.record["symbol_versions"]["libc.so.6"] == ["GLIBC_2.14", "GLIBC_2.2.5"]
    assert (platform.tag, platform.record["older_policy_refused"]) == (
        "manylinux_2_31_x86_64", ["manylinux_2_28_x86_64: needs GLIBCXX_3.4.26"])
    only_cxx = assessed(tmp_path / "tc", auditwheel, TO_CHARS_CXX, cxx=True)
    assert (only_cxx.tag, only_cxx.record["older_policy_refused"]) == (
        "manylinux_2_34_x86_64", ["manylinux_2_31_x86_64: needs GLIBCXX_3.4.29"])


@pytest.mark.toolchain
def test_torch_and_cuda_libraries_are_excluded_never_read_nor_grafted(
        tmp_path: Path, auditwheel: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """libc10 and libcudart here are real libraries that need GLIBC_2.32, and auditwheel is
    told where they are: their needs must not raise the wheel's floor (they come from the
    torch and nvidia-* wheels, with their own tags), and nothing is copied into the wheel."""
    libs = [compile_shared(tmp_path / "libs", SINGLE_THREADED_C, soname=name)
            for name in ("libc10.so", "libcudart.so.13")]
    monkeypatch.setenv("AUDITWHEEL_LD_LIBRARY_PATH", str(tmp_path / "libs"))
    shared = compile_shared(tmp_path / "obj", PLAIN_C, links=tuple(libs))
    raw = extension_wheel(tmp_path, "demo-native", shared)
    platform = manylinux.assess(raw, auditwheel)
    assert (platform.tag, platform.record["excluded"]) == (
        "manylinux_2_5_x86_64.manylinux1_x86_64", ["libc10.so", "libcudart.so.13"])
    stamped = stamp(raw, tmp_path, label="cu.13.0.torch.2.14.sm.120",
                    torch_requirement=None, provenance={}, epoch=0, platform=platform.tag)
    with zipfile.ZipFile(raw) as before, zipfile.ZipFile(stamped) as after:
        assert [n for n in after.namelist() if ".dist-info/" not in n] == [
            n for n in before.namelist() if ".dist-info/" not in n]


@pytest.mark.toolchain
def test_a_library_neither_the_systems_nor_torchs_keeps_the_linux_tag(
        tmp_path: Path, auditwheel: Path) -> None:
    lib = compile_shared(tmp_path / "libs", PLAIN_C, soname="libfoo.so.1")
    platform = assessed(tmp_path, auditwheel, PLAIN_C, links=(lib,))
    assert platform.as_dict() == {
        "tag": "linux_x86_64", "glibc_floor": None,
        "reason": f"auditwheel {AUDITWHEEL}: no manylinux policy fits (manylinux_2_41_x86_64: "
                  "needs libfoo.so.1, which is neither a system library the policy allows nor "
                  "torch's or CUDA's); the tag stays linux_x86_64 (not guessed)"}


def test_without_auditwheel_the_tag_stays_linux_and_the_record_says_why(tmp_path: Path) -> None:
    raw = make_wheel(tmp_path, "demo-native", "1.0.0")
    platform = manylinux.assess(raw, None)
    assert platform.as_dict() == {
        "tag": "linux_x86_64", "glibc_floor": None,
        "reason": "auditwheel is not available: add it to the profile's tools, or put it on "
                  "PATH; the tag stays linux_x86_64 (not guessed)"}
    stamped = stamp(raw, tmp_path, label="cu.13.0.torch.2.14.sm.120",
                    torch_requirement=None, provenance={}, epoch=0, platform=platform.tag)
    assert stamped.name == ("demo_native-1.0.0+cu.13.0.torch.2.14.sm.120-cp311-cp311-"
                            "linux_x86_64.whl")


def test_a_pure_wheel_keeps_its_any_tag_without_asking_auditwheel(tmp_path: Path) -> None:
    raw = make_wheel(tmp_path, "demo", "1.0.0", tags="py3-none-any")
    assert manylinux.assess(raw, tmp_path / "no-such-auditwheel").as_dict() == {
        "tag": "any", "glibc_floor": None, "reason": "a pure Python wheel has no platform tag"}


def test_stamp_writes_the_platform_tag_into_the_filename_and_the_wheel_file(
        tmp_path: Path) -> None:
    raw = make_wheel(tmp_path, "demo", "1.0.0")
    wheel = stamp(raw, tmp_path, label="cu.13.0.torch.2.14.sm.120", torch_requirement=None,
                  provenance={}, epoch=0, platform="manylinux_2_17_x86_64.manylinux2014_x86_64")
    assert wheel.name == ("demo-1.0.0+cu.13.0.torch.2.14.sm.120-cp311-cp311-"
                          "manylinux_2_17_x86_64.manylinux2014_x86_64.whl")
    with zipfile.ZipFile(wheel) as zf:
        text = zf.read("demo-1.0.0+cu.13.0.torch.2.14.sm.120.dist-info/WHEEL").decode()
    assert text == ("Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: false\n"
                    "Tag: cp311-cp311-manylinux_2_17_x86_64\n"
                    "Tag: cp311-cp311-manylinux2014_x86_64\n")
    assert wheelfile.check(wheel) == []  # RECORD matches the edited WHEEL file


def test_check_finds_a_platform_tag_renamed_without_the_wheel_file(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "demo", "1.0.0")
    renamed = wheel.rename(wheel.with_name("demo-1.0.0-cp311-cp311-manylinux_2_17_x86_64.whl"))
    assert wheelfile.check(renamed) == [
        "the filename's tag cp311-cp311-manylinux_2_17_x86_64 is not among the WHEEL file's "
        "tags (cp311-cp311-linux_x86_64): renamed?"]


def test_publish_refuses_a_linux_wheel_renamed_to_a_manylinux_tag(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "demo", "1.0.0")
    renamed = wheel.rename(wheel.with_name("demo-1.0.0-cp311-cp311-manylinux_2_17_x86_64.whl"))
    with pytest.raises(PublishError) as caught:
        publish(renamed, tmp_path / "index", channel="cu130-torch2.14")
    assert caught.value.message == (
        "refusing to publish demo-1.0.0-cp311-cp311-manylinux_2_17_x86_64.whl: it is not a valid "
        "wheel: the filename's tag cp311-cp311-manylinux_2_17_x86_64 is not among the WHEEL "
        "file's tags (cp311-cp311-linux_x86_64): renamed?")
