"""The NVIDIA driver and the CUDA majors it runs, as doctor reports them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.doctor.test_doctor import probe_info
from wheelsmith.arch import parse_arch
from wheelsmith.doctor.examine import examine
from wheelsmith.toolchain.driver import Driver, find_driver, parse_version

# what the kernel module writes (a CUDA 12.8 machine) and what nvidia-smi answers on the H200s
PROC_570 = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.10  Wed Jan  8 15:45:17 "
            "UTC 2025\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n")
SMI_580 = "580.159.03\n"


@pytest.mark.parametrize(("text", "source", "expected"), [
    (SMI_580, "nvidia-smi", "580.159.03 (from nvidia-smi): runs CUDA 12 and 13"),
    (PROC_570, "/proc/driver/nvidia/version",
     "570.86.10 (from /proc/driver/nvidia/version): runs CUDA 12"),
    ("470.256.02\n", "nvidia-smi", "470.256.02 (from nvidia-smi): too old for any CUDA "
     "wheelsmith builds with (driver >= 525.60.13 (CUDA 12))"),
])
def test_the_driver_says_which_cuda_majors_it_runs(text: str, source: str,
                                                   expected: str) -> None:
    assert Driver(parse_version(text), source).describe() == expected


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None or Path("/proc/driver/nvidia").exists(),
                    reason="this machine has an NVIDIA driver")
def test_a_machine_without_the_nvidia_driver_is_told_so() -> None:
    found = find_driver()
    assert (found.version, found.majors) == (None, [])
    assert found.describe() == ("none found (no nvidia-smi on PATH, and no "
                                "/proc/driver/nvidia/version: no NVIDIA kernel module is loaded)")


def test_a_cuda_13_torch_on_a_cuda_12_driver_is_a_problem_with_its_way_out() -> None:
    report = examine(probe_info([], fast=True), parse_arch("12.0"), "--arch", Path("cuobjdump"),
                     index_url="http://127.0.0.1:9",
                     driver=Driver("570.86.10", "nvidia-smi"))
    assert report.problems == [
        "torch 2.14.1+cu130 is built with CUDA 13.0, which needs an NVIDIA driver >= 580.65.06 "
        "(CUDA 13); this machine's driver is 570.86.10: no CUDA kernel runs"]
    assert report.fixes == ["install an NVIDIA driver >= 580.65.06, or use a torch built with "
                            "CUDA 12"]
    assert report.as_dict()["driver"] == {"version": "570.86.10", "source": "nvidia-smi",
                                          "cuda_majors": [12]}
