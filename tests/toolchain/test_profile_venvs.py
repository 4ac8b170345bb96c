"""Every shipped profile installs for real: its venv (3-5 GB each) holds the torch it pins,
built with the CUDA it names, and its compiler. Three are made by `make test` (the default,
cu130-torch2.11 for the target tests, cu128-torch2.9 here); the rest are `slow`, removed again
after the check to save disk.

A CUDA 12 profile builds with an installed CUDA 12 toolkit, which PyPI cannot provide (its
nvcc wheel holds only ptxas): without one, a build for a CUDA 12 torch stops with a one-line
error before compiling; with one (CUDA_HOME or /usr/local/cuda-12.*), the chain is tested."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, add_variant, wheelsmith
from wheelsmith import locations
from wheelsmith.errors import MissingToolkitError
from wheelsmith.toolchain.driver import find_driver
from wheelsmith.toolchain.env import probe_python
from wheelsmith.toolchain.profile import load_profile, load_profiles
from wheelsmith.toolchain.venv import MARKER, ensure_venv, installed_cuda_home

pytestmark = pytest.mark.toolchain
IN_MAKE_TEST = {"cu130-torch2.14", "cu130-torch2.11", "cu128-torch2.9"}
PROFILES = {p.name: p for p in load_profiles(REPO / "toolchains")}
CU12 = PROFILES["cu128-torch2.9"]


def cuda12_problem() -> str | None:
    try:
        installed_cuda_home(CU12)
    except MissingToolkitError as exc:
        return exc.message
    return None


NO_CUDA12 = cuda12_problem()
DRIVER = find_driver().version
HERE = f"this machine's: {DRIVER}" if DRIVER else "no driver found here"


@pytest.fixture(scope="session")
def cu12_env() -> Path:
    """The cu128-torch2.9 profile's venv: a real environment with torch 2.9.1 + CUDA 12.8."""
    return ensure_venv(CU12, Path(sys.executable), locations.cache_dir()) / "bin" / "python"


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n in IN_MAKE_TEST
                                               else pytest.mark.slow) for n in sorted(PROFILES)])
def test_profile_venv_has_the_torch_and_cuda_it_names(name: str) -> None:
    profile = load_profile(REPO / "toolchains" / f"{name}.yaml")
    root = ensure_venv(profile, Path(sys.executable), locations.cache_dir())
    info = probe_python(root / "bin" / "python")
    assert (str(info.torch), str(info.torch_cuda)) == (str(profile.torch), str(profile.cuda))
    marker = json.loads((root / MARKER).read_text())
    if not profile.installed_compiler:
        assert marker["nvcc"].startswith(f"{profile.cuda}.")
    if name not in IN_MAKE_TEST:
        shutil.rmtree(root)


@pytest.mark.skipif(NO_CUDA12 is None, reason="a CUDA 12 toolkit is installed here: the build "
                                             "is tested below instead")
def test_a_cuda_12_torch_without_a_cuda_12_toolkit_stops_before_compiling(
        project: Path, cu12_env: Path) -> None:
    add_variant(project, "tiny-ext")
    result = wheelsmith("build", "tiny-ext", "--arch", "9.0", "--python", str(cu12_env),
                        cwd=project)
    assert result.returncode == 7
    assert result.stderr.splitlines()[-3].startswith(
        "error: the cu128-torch2.9 profile needs an installed CUDA 12 toolkit: PyPI ships no "
        "CUDA 12 compiler, and none is installed here")
    assert result.stderr.splitlines()[-2] == (
        "hint: install CUDA 12.8 or a newer 12.x (NVIDIA's cuda-nvcc-12-8 and "
        "cuda-cudart-dev-12-8 packages) and set CUDA_HOME to it")
    assert result.stderr.splitlines()[-1] == (
        f"      or, with an NVIDIA driver >= 580.65.06 (CUDA 13); {HERE}: install "
        f"torch 2.11.0 built for CUDA 13.0 into {cu12_env} and build again (torch 2.11, whose "
        "CUDA compiler PyPI ships)")
    assert not (project / "wheelhouse").exists()


@pytest.mark.skipif(NO_CUDA12 is None, reason="a CUDA 12 toolkit is installed here")
def test_a_cuda_12_profile_without_its_toolkit_names_a_cuda_13_profile_that_builds(
        project: Path) -> None:
    add_variant(project, "tiny-ext")
    refused = wheelsmith("build", "tiny-ext", "--arch", "12.0", "--toolchain", "cu128-torch2.9",
                         cwd=project)
    assert refused.returncode == 7
    assert refused.stderr.splitlines()[-2:] == [
        "hint: install CUDA 12.8 or a newer 12.x (NVIDIA's cuda-nvcc-12-8 and "
        "cuda-cudart-dev-12-8 packages) and set CUDA_HOME to it",
        f"      or, with an NVIDIA driver >= 580.65.06 (CUDA 13); {HERE}: build "
        "with --toolchain cu130-torch2.11 (torch 2.11, whose CUDA compiler PyPI ships)"]
    hinted = wheelsmith("build", "tiny-ext", "--arch", "12.0", "--toolchain", "cu130-torch2.11",
                        "--configure-only", cwd=project)  # the hint, as written
    assert hinted.returncode == 0, hinted.stderr


@pytest.mark.skipif(NO_CUDA12 is not None, reason=f"not runnable here: {NO_CUDA12}")
def test_a_cuda_12_torch_gets_a_cu128_wheel_that_imports_there(project: Path,
                                                               cu12_env: Path) -> None:
    add_variant(project, "tiny-ext")
    result = wheelsmith("build", "tiny-ext", "--arch", "12.0", "--python", str(cu12_env),
                        "--json", cwd=project)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert Path(data["wheel"]).name.startswith("tiny_ext-0.1.0+cu.12.8.torch.2.9.sm.120-")
    assert data["run"]["smoke"].count("imported tiny_ext") == 2  # toolchain, env


@pytest.mark.slow
@pytest.mark.skipif(NO_CUDA12 is not None, reason=f"not runnable here: {NO_CUDA12}")
def test_causal_conv1d_for_a_cuda_12_torch_imports_there(cu12_env: Path, tmp_path: Path) -> None:
    """causal-conv1d 1.7.0 for 12.0 through the cu128-torch2.9 profile (5-7 minutes)."""
    result = wheelsmith("build", "causal-conv1d", "--arch", "12.0", "--python", str(cu12_env),
                        "--json", "--out", str(tmp_path / "out"), "--work-dir",
                        str(tmp_path / "work"), cwd=REPO)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert Path(data["wheel"]).name.startswith("causal_conv1d-1.7.0+cu.12.8.torch.2.9.sm.120-")
    assert data["run"]["smoke"].count("imported causal_conv1d_cuda") == 2
