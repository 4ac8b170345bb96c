"""aarch64 wheels built on an x86-64 machine (`--platform aarch64`): the real x86-64 nvcc
writes the device code, Debian's aarch64-linux-gnu-g++ the host code, linked against PyPI's
aarch64 torch and CUDA runtime (the profile's pins fetched for aarch64, several GB once);
verified with the x86-64 cuobjdump, tagged by auditwheel's aarch64 policy, and imported under
qemu-user by a bookworm arm64 Python with that aarch64 torch (no GPU there: CPU import).

Needs g++-aarch64-linux-gnu, qemu-user-static and debootstrap (skipped with the reason
otherwise), and an x86-64 machine (on aarch64 the same command builds natively)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO, add_variant, wheelsmith
from wheelsmith.toolchain.env import Toolchain
from wheelsmith.toolchain.foreign import debian_mirror
from wheelsmith.toolchain.platform import host_machine


def cross_problem() -> str | None:
    if host_machine() != "x86_64":
        return f"this machine is {host_machine()}: --platform aarch64 builds natively here"
    for tool, package in (("aarch64-linux-gnu-g++", "g++-aarch64-linux-gnu"),
                          ("qemu-aarch64-static", "qemu-user-static"),
                          ("debootstrap", "debootstrap")):
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
            return f"{tool} is not installed (apt install {package})"
    if debian_mirror() is None:
        return "no Debian archive in apt's sources to make the arm64 root from"
    return None


PROBLEM = cross_problem()
pytestmark = [pytest.mark.skipif(PROBLEM is not None, reason=f"no cross build: {PROBLEM}"),
              pytest.mark.toolchain, pytest.mark.slow]


def test_platform_aarch64_gives_an_aarch64_manylinux_wheel_with_exactly_its_sass(
        project: Path, toolchain: Toolchain) -> None:
    add_variant(project, "tiny-ext")
    result = wheelsmith("build", "tiny-ext", "--arch", "9.0;12.0", "--platform", "aarch64",
                        "--json", cwd=project, check=True)
    data = json.loads(result.stdout)
    wheel = Path(data["wheel"])
    provenance = data["provenance"]
    platform = provenance["platform"]
    assert platform["policy"] == f"manylinux_{platform['glibc_floor'].replace('.', '_')}_aarch64"
    assert wheel.name == ("tiny_ext-0.1.0+cu.13.0.torch.2.14.sm.90.120-cp311-cp311-"
                          f"{platform['tag']}.whl")
    assert provenance["toolchain"]["platform"] == "aarch64"
    assert provenance["device_code"] == [
        {"path": "tiny_ext/_C.cpython-311-aarch64-linux-gnu.so", "sass": ["sm_90", "sm_120"],
         "ptx": []}]
    assert "imported tiny_ext" in data["run"]["smoke"]
    with zipfile.ZipFile(wheel) as archive:
        so = archive.read("tiny_ext/_C.cpython-311-aarch64-linux-gnu.so")
    assert so[:4] == b"\x7fELF"
    assert int.from_bytes(so[18:20], "little") == 183  # e_machine: EM_AARCH64


def test_platform_aarch64_from_an_installed_toolkit_is_refused_by_name(project: Path) -> None:
    add_variant(project, "tiny-ext")
    result = wheelsmith("build", "tiny-ext", "--platform", "aarch64", "--toolchain", "system",
                        cwd=project, check=False)
    assert result.returncode != 0
    assert ("--platform aarch64 cannot be built from an installed toolkit ('system'): a cross "
            "build needs a profile, whose pins are fetched for aarch64") in result.stderr


def test_an_unknown_platform_is_refused_with_the_known_ones(project: Path) -> None:
    add_variant(project, "tiny-ext")
    result = wheelsmith("build", "tiny-ext", "--platform", "riscv64", cwd=project, check=False)
    assert "unknown --platform 'riscv64'" in result.stderr
    assert "one of x86_64, aarch64" in result.stderr


def test_a_cross_build_in_a_container_is_refused_by_name(project: Path) -> None:
    add_variant(project, "tiny-ext")
    result = wheelsmith("build", "tiny-ext", "--platform", "aarch64", "--runner", "podman",
                        cwd=project, check=False)
    assert ("--platform aarch64: a cross build runs on the host runner (the image has no cross "
            "compiler)") in result.stderr


def pip_target(index: Path, target: Path, *platform: str, package: str = "tiny-ext"
               ) -> subprocess.CompletedProcess[str]:
    """What pip installs of `package` from the channel's simple index for those platform tags
    (none: this machine's)."""
    tags = [arg for tag in platform for arg in ("--platform", tag)]
    return subprocess.run(
        [sys.executable, "-m", "pip", "install", "--isolated", "--no-deps", "--only-binary",
         ":all:", *tags, "--python-version", "3.11", "--target", str(target), "--index-url",
         (index / "cu130-torch2.14" / "simple").as_uri(), package],
        capture_output=True, text=True, check=False)


def glibc_tags(minor: int) -> list[str]:
    """pip's platform tags on an aarch64 system with glibc 2.`minor` (pip expands none)."""
    return [f"manylinux_2_{m}_aarch64" for m in range(minor, 16, -1)]


def test_one_channel_serves_both_cpus_and_pip_picks_by_tag(
        project: Path, toolchain: Toolchain, tmp_path: Path) -> None:
    """An aarch64 system with glibc 2.35 (Ubuntu 22.04, DGX OS 6) gets the aarch64 wheel,
    this machine its own, from one channel; an aarch64 system below the wheel's floor (glibc
    2.28: RHEL 8) none."""
    add_variant(project, "tiny-ext")
    index = tmp_path / "index"
    for machine in ("x86_64", "aarch64"):
        wheelsmith("build", "tiny-ext", "--arch", "12.0", "--platform", machine, "--publish",
                   "--index", str(index), cwd=project, check=True)
    arm = pip_target(index, tmp_path / "arm", *glibc_tags(35))
    assert arm.returncode == 0, arm.stderr
    assert [p.name for p in (tmp_path / "arm" / "tiny_ext").glob("*.so")] == [
        "_C.cpython-311-aarch64-linux-gnu.so"]
    here = pip_target(index, tmp_path / "here")
    assert here.returncode == 0, here.stderr
    assert [p.name for p in (tmp_path / "here" / "tiny_ext").glob("*.so")] == [
        "_C.cpython-311-x86_64-linux-gnu.so"]
    old = pip_target(index, tmp_path / "old", *glibc_tags(28))
    assert "No matching distribution found for tiny-ext" in old.stderr


@pytest.mark.parametrize("archs", ["12.1", "9.0;10.0"])
def test_causal_conv1d_for_aarch64_carries_exactly_its_sass_and_installs_there_by_tag(
        archs: str, toolchain: Toolchain, tmp_path: Path) -> None:
    """The real package for DGX Spark (12.1) and for GH200 with GB200 (9.0;10.0), built here
    (about 7 and 12 minutes on 2 cores), published, and fetched from the channel by an aarch64
    pip on glibc 2.35."""
    index = tmp_path / "index"
    result = wheelsmith("build", "causal-conv1d", "--arch", archs, "--platform", "aarch64",
                        "--publish", "--index", str(index), "--out", str(tmp_path / "out"),
                        "--work-dir", str(tmp_path / "work"), "--json", cwd=REPO, check=True)
    data = json.loads(result.stdout)
    sass = [f"sm_{arch.replace('.', '')}" for arch in archs.split(";")]
    assert [(d["sass"], d["ptx"]) for d in data["provenance"]["device_code"]] == [(sass, [])]
    assert data["provenance"]["platform"]["tag"] == "manylinux_2_34_aarch64"
    assert "imported causal_conv1d" in data["run"]["smoke"]
    arm = pip_target(index, tmp_path / "arm", *glibc_tags(35), package="causal-conv1d")
    assert arm.returncode == 0, arm.stderr
    assert [p.name for p in (tmp_path / "arm").glob("*.so")] == [
        "causal_conv1d_cuda.cpython-311-aarch64-linux-gnu.so"]
