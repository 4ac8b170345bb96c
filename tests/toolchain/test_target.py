"""The target environment: which profile builds for it, which wheels its pip takes, and the
one-line errors for an environment wheelsmith cannot build for."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, add_variant, wheelsmith
from wheelsmith.errors import ToolchainError, UsageError
from wheelsmith.toolchain.env import probe_python
from wheelsmith.toolchain.profile import load_profiles
from wheelsmith.toolchain.select import select_profile
from wheelsmith.toolchain.target import Target

PROFILES = load_profiles(REPO / "toolchains")


def target(torch: str | None, cuda: str | None, python: str = "3.12",
           glibc: str | None = "2.36", dist: str | None = None) -> Target:
    """A Target as the probe would report it (`dist`: torch's distribution version)."""
    return Target.from_probe(Path("/env/bin/python"), {
        "python": python, "torch_full": torch, "torch_dist": dist, "torch_cuda": cuda,
        "glibc": glibc,
        "machine": "x86_64", "pip": True, "gpu": {"name": "RTX PRO 6000", "capability": [12, 0]},
        "torch_error": None if torch else "ModuleNotFoundError: No module named 'torch'"})


@pytest.mark.parametrize(("torch", "cuda", "profile"), [
    ("2.11.0", "13.0", "cu130-torch2.11"),
    ("2.11.0+cu130", "13.0", "cu130-torch2.11"),
    ("2.9.1", "12.8", "cu128-torch2.9"),
    ("2.10.0+cu129", "12.9", "cu128-torch2.10"),  # same CUDA major: its runtime loads
    ("2.14.1", "13.0", "cu130-torch2.14"),
])
def test_the_profile_follows_the_torch_minor_and_cuda_major(torch: str, cuda: str,
                                                            profile: str) -> None:
    assert select_profile(target(torch, cuda), PROFILES).name == profile


def test_no_profile_names_the_closest_and_the_command_that_makes_one() -> None:
    """torch 2.11.0+cu128 from a per-CUDA index: its distribution has the label too."""
    with pytest.raises(ToolchainError) as caught:
        select_profile(target("2.11.0+cu128", "12.8", dist="2.11.0+cu128"), PROFILES)
    assert caught.value.message == (
        "no toolchain profile builds for /env/bin/python: its torch 2.11.0+cu128 uses CUDA "
        "12.8, and a wheel must match torch 2.11 and CUDA 12.x; closest: cu128-torch2.10, "
        "cu128-torch2.9, cu130-torch2.11")
    assert caught.value.hint == ("create it: wheelsmith toolchain new --torch 2.11.0+cu128 "
                                 "--cuda 12.8 --index URL   (URL: the index that torch came "
                                 "from)")


def test_a_pypi_cuda_torch_without_a_profile_gets_the_command_for_pypi() -> None:
    """PyPI's torch 2.8.0 wheel says 2.8.0+cu128 in torch.__version__ but is the release 2.8.0:
    `--torch 2.8.0+cu128` is on no index, and PyPI needs no --index."""
    with pytest.raises(ToolchainError) as caught:
        select_profile(target("2.8.0+cu128", "12.8", dist="2.8.0"), PROFILES)
    assert caught.value.message.startswith("no toolchain profile builds for /env/bin/python: "
                                           "its torch 2.8.0+cu128 uses CUDA 12.8, ")
    assert caught.value.hint == "create it: wheelsmith toolchain new --torch 2.8.0 --cuda 12.8"


def test_the_probe_reports_the_torch_distributions_version_beside_torch_version(
        tmp_path: Path) -> None:
    """A stand-in torch laid out as PyPI's wheel installs it (module and dist-info)."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(
        '__version__ = "2.8.0+cu128"\n\nclass version:\n    cuda = "12.8"\n')
    info = tmp_path / "torch-2.8.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.8.0\n")
    probed = Target.from_probe(Path(sys.executable), probe_python(
        Path(sys.executable), env={**os.environ, "PYTHONPATH": str(tmp_path)}))
    assert (str(probed.torch), str(probed.torch_dist), str(probed.torch_cuda)) == (
        "2.8.0+cu128", "2.8.0", "12.8")


def test_a_python_the_profile_was_not_resolved_for_is_refused() -> None:
    with pytest.raises(ToolchainError) as caught:
        select_profile(target("2.11.0", "13.0", python="3.15"), PROFILES)
    assert caught.value.message == ("the cu130-torch2.11 profile was resolved for Python 3.10, "
                                    "3.11, 3.12, 3.13, 3.14, not 3.15")


@pytest.mark.parametrize(("torch", "cuda", "python", "profile"), [
    ("2.14.1", "13.0", "3.14", "cu130-torch2.14"),
    ("2.15.0", "13.2", "3.15", "cu132-torch2.15"),
])
def test_the_newest_pythons_torch_publishes_for_are_served(torch: str, cuda: str, python: str,
                                                           profile: str) -> None:
    assert select_profile(target(torch, cuda, python=python), PROFILES).name == profile


@pytest.mark.parametrize("command", [["build", "tiny-ext", "--arch", "12.0"],
                                     ["image", "build"]])
def test_a_free_threaded_python_is_refused_by_name(command: list[str]) -> None:
    result = wheelsmith(*command, "--python", "3.14t", cwd=REPO)
    assert result.returncode == 4
    assert result.stderr.splitlines()[-2:] == [
        "error: Python 3.14t is free-threaded: wheelsmith builds only for GIL-enabled Pythons "
        "(Debian forky, where the build images' 3.14 and 3.15 come from, ships no free-threaded "
        "interpreter)",
        "hint: build for the GIL-enabled Python 3.14: --python 3.14"]


def test_a_cpu_only_torch_has_no_channel() -> None:
    with pytest.raises(UsageError) as caught:
        select_profile(target("2.13.0+cpu", None), PROFILES)
    assert caught.value.message == ("the torch in /env/bin/python is a CPU-only build "
                                    "(2.13.0+cpu)")


@pytest.mark.parametrize(("filename", "accepted"), [
    ("x-1.0+cu.13.0.torch.2.11.sm.120-cp312-cp312-linux_x86_64.whl", True),
    ("x-1.0+cu.13.0.torch.2.11.sm.120-cp312-cp312-manylinux_2_34_x86_64.whl", True),
    ("x-1.0+cu.13.0.torch.2.11.sm.120-cp312-cp312-manylinux_2_39_x86_64.whl", False),
    ("x-1.0+cu.13.0.torch.2.11.sm.120-cp311-cp311-linux_x86_64.whl", False),
    ("x-1.0+cu.13.0.torch.2.11.pure-py3-none-any.whl", True),
    ("x-1.0-cp312-cp312-manylinux2014_x86_64.whl", True),
])
def test_the_target_accepts_what_its_pip_would(filename: str, accepted: bool) -> None:
    assert target("2.11.0", "13.0").accepts(filename) is accepted


def test_an_environment_without_torch_is_refused_by_name(project: Path, tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")],
                   check=True)
    add_variant(project, "tiny-ext")
    python = tmp_path / "venv" / "bin" / "python"
    result = wheelsmith("build", "tiny-ext", "--python", str(python), cwd=project)
    assert result.returncode == 4
    assert result.stderr.splitlines()[-2:] == [
        f"error: {python} has no working torch (ModuleNotFoundError: No module named 'torch')",
        "hint: install the torch you train with into that environment first; wheels are "
        "built to match it"]
    assert not (project / "wheelhouse").exists()


def test_a_python_that_is_not_a_python_is_refused_by_name(project: Path) -> None:
    add_variant(project, "tiny-ext")
    result = wheelsmith("build", "tiny-ext", "--python", "/etc/hostname", cwd=project)
    assert result.returncode == 7
    assert result.stderr.startswith("error: /etc/hostname is not a Python interpreter: ")
    assert result.stderr.endswith("hint: give the path of a Python interpreter\n")
    missing = wheelsmith("build", "tiny-ext", "--python", "/no/such/python", cwd=project)
    assert missing.returncode == 7
    assert "error: /no/such/python does not exist" in missing.stderr
