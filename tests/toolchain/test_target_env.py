"""Builds for the user's own environment (`--python ENV`) and `wheelsmith install`.

The user this project exists for: Python 3.12, torch 2.11 from PyPI, no CUDA toolkit. Their
environment is made for real (pip install torch==2.11.0 into a Python 3.12 venv; about 3 GB,
once per machine, in the wheelsmith cache). Where no Python 3.12 exists the tests use this
Python, and the torch is still not the default profile's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, Server, add_variant, find_python, serve, torch_env, wheelsmith

pytestmark = pytest.mark.toolchain

USER_PYTHON = find_python("3.12") or Path(sys.executable)
PY = subprocess.run([str(USER_PYTHON), "-c", "import sys; print('%d%d' % sys.version_info[:2])"],
                    capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture(scope="session")
def user_env() -> Path:
    return torch_env(USER_PYTHON, "2.11.0")


def uninstall(python: Path, *names: str) -> None:
    subprocess.run([str(python), "-m", "pip", "uninstall", "-y", "-q", *names], check=True,
                   capture_output=True)


def imports_in(python: Path, module: str) -> str:
    """Import `module` after torch in `python`; its file and torch's version."""
    result = subprocess.run([str(python), "-c", f"import torch, {module}; "
                             f"print({module}.__file__, torch.__version__)"],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.mark.slow  # a second toolchain (torch 2.11): 5 min
def test_build_for_an_env_with_torch_2_11_picks_its_profile_and_installs_there(
        project: Path, user_env: Path) -> None:
    add_variant(project, "tiny-ext")
    uninstall(user_env, "tiny-ext")
    result = wheelsmith("build", "tiny-ext", "--arch", "12.0", "--python", str(user_env),
                        "--install", "--json", cwd=project)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    wheel = Path(data["wheel"])
    assert wheel.name == (f"tiny_ext-0.1.0+cu.13.0.torch.2.11.sm.120-cp{PY}-cp{PY}-"
                          "manylinux_2_34_x86_64.whl")  # the tiny fixture's glibc floor
    assert (f"toolchain: cu130-torch2.11, chosen for {user_env} (Python {PY[0]}.{PY[1:]}, "
            "torch 2.11.0+cu130, CUDA 13.0)") in result.stderr
    toolchain = data["provenance"]["toolchain"]
    assert (toolchain["name"], toolchain["torch"], toolchain["python"]) == (
        "cu130-torch2.11", "2.11.0", f"{PY[0]}.{PY[1:]}")
    compiled = f"imported tiny_ext._C (tiny_ext/_C.cpython-{PY}-x86_64-linux-gnu.so)"
    assert data["run"]["smoke"] == [
        "imported tiny_ext", compiled, "gpu op: skipped (no GPU)",  # the toolchain's torch,
        "imported tiny_ext", compiled, "gpu op: skipped (no GPU)"]  # then the environment's
    assert data["installed"] == {"python": str(user_env), "imports": ["tiny_ext"]}
    assert imports_in(user_env, "tiny_ext").endswith(" 2.11.0+cu130")


@pytest.mark.slow  # the torch 2.11 toolchain, as above
def test_install_builds_on_a_miss_then_takes_the_indexed_wheel(
        project: Path, user_env: Path, tmp_path: Path) -> None:
    add_variant(project, "tiny-ext")
    index = tmp_path / "index"
    with serve(index, tmp_path / "serve.log") as server:
        uninstall(user_env, "tiny-ext")
        miss = install(project, server, user_env, "--publish", str(index))
        assert (miss["source"], miss["published"], miss["imports"]) == (
            "built", "published", ["tiny_ext"])
        channel = f"{server.url}/cu130-torch2.11/simple/"
        assert miss["channel"] == channel
        uninstall(user_env, "tiny-ext")
        work = project / "build" / "wheelsmith"
        built_before = sorted(work.iterdir())
        hit = install(project, server, user_env)
        assert (hit["source"], hit["wheel"], hit["imports"]) == (
            "index", miss["wheel"], ["tiny_ext"])
        assert sorted(work.iterdir()) == built_before  # no build ran
        assert "/cu130-torch2.11/simple/tiny-ext/" in server.requests()
    assert imports_in(user_env, "tiny_ext").endswith(" 2.11.0+cu130")
    print(f"install from the index: {hit['seconds']} s; build on a miss: {miss['seconds']} s")


def install(project: Path, server: Server, python: Path, *args: str) -> dict[str, object]:
    result = wheelsmith("install", "tiny-ext", "--python", str(python), "--arch", "12.0",
                        "--index", server.url, "--json", *args, cwd=project)
    assert result.returncode == 0, result.stderr
    data: dict[str, object] = json.loads(result.stdout)
    return data


@pytest.mark.build
@pytest.mark.slow  # a second cold causal-conv1d compile in CI: the tiny fixture covers the flow
def test_causal_conv1d_for_the_users_torch_2_11_env_imports_there(user_env: Path,
                                                                  tmp_path: Path) -> None:
    """The case this project exists for, for real (5-7 minutes on 2 cores)."""
    uninstall(user_env, "causal-conv1d")
    result = wheelsmith("build", "causal-conv1d", "--arch", "12.0", "--python", str(user_env),
                        "--install", "--json", "--out", str(tmp_path / "out"), "--work-dir",
                        str(tmp_path / "work"), cwd=REPO)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert Path(data["wheel"]).name.startswith(
        f"causal_conv1d-1.7.0+cu.13.0.torch.2.11.sm.120-cp{PY}-cp{PY}-")
    assert data["provenance"]["device_code"] == [{
        "path": f"causal_conv1d_cuda.cpython-{PY}-x86_64-linux-gnu.so", "sass": ["sm_120"],
        "ptx": []}]
    assert data["installed"]["imports"] == ["causal_conv1d", "causal_conv1d_cuda"]
    assert imports_in(user_env, "causal_conv1d_cuda").endswith(" 2.11.0+cu130")
    requires = subprocess.run([str(user_env), "-c", "from importlib.metadata import requires; "
                               "print(requires('causal-conv1d'))"],
                              capture_output=True, text=True, check=True).stdout
    assert "'torch==2.11.*'" in requires  # pip will not pair it with another torch
