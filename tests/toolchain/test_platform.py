"""`--platform`: which CPU a wheel is for is read strictly, and it is part of the toolchain's
identity (so of the content key and the provenance) for every CPU but x86-64, whose keys stay
what they were before platforms existed."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from packaging.version import Version

from wheelsmith.errors import UsageError
from wheelsmith.toolchain.env import Toolchain
from wheelsmith.toolchain.platform import parse_platform, pip_platforms, site_pins
from wheelsmith.toolchain.profile import load_profile

REPO = Path(__file__).resolve().parents[2]


def x86_toolchain() -> Toolchain:
    return Toolchain(name="cu130-torch2.14", python=Path("/v/bin/python"), python_version="3.11",
                     cuda_home=Path("/v/cu13"), torch_version=Version("2.14.1"),
                     torch_cuda=Version("13.0"), nvcc_version=Version("13.0.88"),
                     cuobjdump=None, pins=("torch==2.14.1",), platform="x86_64")


def test_arm64_and_amd64_are_read_as_debian_names_them() -> None:
    assert parse_platform("arm64") == "aarch64"
    assert parse_platform("AMD64") == "x86_64"


def test_an_unknown_platform_names_the_known_ones() -> None:
    with pytest.raises(UsageError) as caught:
        parse_platform("riscv64")
    assert caught.value.message == "unknown --platform 'riscv64'"
    assert caught.value.hint == "one of x86_64, aarch64 (arm64 and amd64 are read as those)"


def test_an_aarch64_toolchain_has_another_identity_and_x86_64_keeps_its_old_one() -> None:
    x86 = x86_toolchain()
    arm = dataclasses.replace(x86, platform="aarch64", target_site=Path("/site"))
    assert "platform" not in x86.identity()
    assert arm.identity() == {**x86.identity(), "platform": "aarch64"}
    assert arm.cross
    assert not x86.cross


def test_pip_is_given_every_manylinux_tag_down_to_2_17() -> None:
    tags = pip_platforms("aarch64")
    assert tags[0] == "manylinux_2_28_aarch64"
    assert tags[-2:] == ["manylinux_2_17_aarch64", "manylinux2014_aarch64"]
    assert len(tags) == 13


def test_the_target_site_takes_the_pins_whose_markers_hold_for_that_python() -> None:
    profile = load_profile(REPO / "toolchains" / "cu130-torch2.14.yaml")
    pins = site_pins(profile, "3.11", "aarch64")
    assert "torch==2.14.1" in pins
    assert "cuda-toolkit==13.0.3.0" in pins  # extras dropped: installed --no-deps
    assert all(";" not in pin for pin in pins)
