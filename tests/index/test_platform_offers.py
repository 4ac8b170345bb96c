"""One channel serves both CPUs, and `install` and `doctor` choose by the target
environment's CPU (its probe's `platform.machine()` and glibc), never by this machine's: real
wheel names of each platform, published and served by `wheelsmith serve`."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import serve
from tests.wheels import make_wheel
from wheelsmith.arch import parse_arch
from wheelsmith.builder.request import BuildRequest, QuietReporter
from wheelsmith.doctor.fixes import fix_lines
from wheelsmith.errors import UsageError
from wheelsmith.index.offers import offers
from wheelsmith.index.publish import publish
from wheelsmith.install import InstallRequest, install
from wheelsmith.toolchain.platform import host_machine
from wheelsmith.toolchain.target import Target

CHANNEL = "cu130-torch2.14"
VERSION = "1.7.0+cu.13.0.torch.2.14.sm.120"
WHEELS = {machine: f"causal_conv1d-{VERSION}-cp311-cp311-manylinux_2_34_{machine}.whl"
          for machine in ("x86_64", "aarch64")}
pytestmark = pytest.mark.skipif(host_machine() != "x86_64", reason="the environments below are "
                                "x86-64 (this machine's CPU) and aarch64 (another one)")


def environment(machine: str, glibc: str = "2.35", python: str = "3.11") -> Target:
    """A Target as the probe reports a Python with torch 2.14.1+cu130 on an sm_120 GPU, whose
    `platform.machine()` says `machine`."""
    return Target.from_probe(Path(f"/{machine}-env/bin/python"), {
        "python": python, "torch_full": "2.14.1+cu130", "torch_dist": "2.14.1",
        "torch_cuda": "13.0", "glibc": glibc, "machine": machine, "pip": True,
        "gpu": {"name": "RTX PRO 6000", "capability": [12, 0]}})


@pytest.fixture
def both_cpus(tmp_path: Path) -> Path:
    """An index whose channel holds causal-conv1d for x86-64 and for aarch64."""
    root = tmp_path / "index"
    for machine, filename in WHEELS.items():
        wheel = make_wheel(tmp_path, "causal-conv1d", VERSION,
                           tags=f"cp311-cp311-manylinux_2_34_{machine}")
        assert wheel.name == filename
        publish(wheel, root, channel=CHANNEL)
    return root


@pytest.mark.parametrize(("machine", "glibc", "offered"), [
    ("x86_64", "2.36", [WHEELS["x86_64"]]),
    ("aarch64", "2.35", [WHEELS["aarch64"]]),  # Ubuntu 22.04, DGX OS 6
    ("arm64", "2.35", [WHEELS["aarch64"]]),  # the same CPU by its other name
    ("aarch64", "2.28", []),  # RHEL 8: below the wheel's glibc floor
])
def test_a_served_channel_offers_each_environment_the_wheel_of_its_own_cpu(
        both_cpus: Path, tmp_path: Path, machine: str, glibc: str, offered: list[str]) -> None:
    with serve(both_cpus, tmp_path / "serve.log") as server:
        found = offers(f"{server.url}/{CHANNEL}/simple/", "causal-conv1d",
                       environment(machine, glibc), (parse_arch("12.0"),))
    assert [offer.filename for offer in found] == offered


def test_install_into_an_environment_of_another_cpu_never_builds_for_this_one(
        both_cpus: Path, tmp_path: Path) -> None:
    """A miss (no cp312 wheel) for an aarch64 environment is refused with the cross build
    that makes its wheel, instead of building an x86-64 one for it."""
    target = environment("aarch64", python="3.12")
    request = InstallRequest(
        recipe="causal-conv1d", version=None, python=target.python,
        index_url=both_cpus.as_uri(), archs=None, publish=False, publish_to=None,
        build=BuildRequest(recipe="causal-conv1d", out_dir=tmp_path / "out",
                           work_dir=tmp_path / "work"))
    with pytest.raises(UsageError) as caught:
        install(request, target, QuietReporter())
    base = f"{both_cpus.as_uri()}/{CHANNEL}/simple/"
    assert (caught.value.message, caught.value.hint) == (
        f"{base} has no causal-conv1d wheel for Python 3.12 on aarch64 with 12.0 kernels, and "
        "/aarch64-env/bin/python runs on aarch64: this x86_64 machine builds aarch64 wheels as "
        "cross builds, named by Python version and profile",
        "build and publish one: wheelsmith build causal-conv1d --arch 12.0 --platform aarch64 "
        "--python 3.12 --toolchain cu130-torch2.14 --publish, then install again")


def test_doctors_fix_for_an_environment_of_another_cpu_is_its_cross_build(
        both_cpus: Path) -> None:
    base = f"{both_cpus.as_uri()}/{CHANNEL}/simple/"
    arch = parse_arch("12.0")
    assert fix_lines(["causal-conv1d"], base, arch, environment("aarch64"),
                     "/aarch64-env/bin/python") == [
        f"pip install --index-url {base} --no-deps --force-reinstall causal-conv1d"]
    assert fix_lines(["causal-conv1d"], base, arch, environment("aarch64", python="3.12"),
                     "/aarch64-env/bin/python") == [
        "wheelsmith build causal-conv1d --arch 12.0 --platform aarch64 --python 3.12 "
        f"--toolchain cu130-torch2.14 --publish --index {both_cpus}   # the index has no "
        "causal-conv1d wheel for Python 3.12 on aarch64 with sm_120 kernels"]
    assert fix_lines(["causal-conv1d"], base, arch, environment("x86_64", python="3.12"),
                     "/x86_64-env/bin/python") == [
        "wheelsmith build causal-conv1d --arch 12.0 --python /x86_64-env/bin/python --publish "
        f"--index {both_cpus}   # the index has no causal-conv1d wheel for Python 3.12 with "
        "sm_120 kernels"]
