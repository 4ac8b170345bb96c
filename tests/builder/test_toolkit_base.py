"""A profile whose compiler is an installed toolkit (the cu128 case: PyPI has no CUDA 12 nvcc)
may name a base image that carries it in /usr/local/cuda (`image_base`, NVIDIA's devel image in
real life); that base is locked on first use like the Debian base: a registry's digest, else a
local image by its ID.

No registry here: the stand-in is a local podman image, the Debian base plus a /usr/local/cuda
assembled from PyPI's CUDA 13 wheels (the default profile's nvcc, cudart, cccl, crt, nvvm)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.builder.test_baseimage import BASE, assert_locked_by_id_then_pinned, image_id
from tests.builder.test_container import PROBLEM, no_registry_env
from tests.conftest import REPO
from wheelsmith.builder.container import Engine
from wheelsmith.toolchain.env import Toolchain

pytestmark = [pytest.mark.skipif(PROBLEM is not None, reason=f"no podman build: {PROBLEM}"),
              pytest.mark.toolchain]

STANDIN = "localhost/wheelsmith-cuda-standin:13.0"


@pytest.fixture(scope="session")
def standin(toolchain: Toolchain, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The toolkit-carrying stand-in base (~220 MB), made once per machine."""
    if subprocess.run(["podman", "image", "exists", STANDIN], check=False).returncode == 0:
        return STANDIN
    if subprocess.run(["podman", "image", "exists", BASE], check=False).returncode != 0:
        pytest.skip(f"no {BASE} (scripts/make-base-image.sh makes it)")
    context = tmp_path_factory.mktemp("standin")
    cuda = context / "cuda"
    for part in ("bin", "include", "nvvm"):
        shutil.copytree(toolchain.cuda_home / part, cuda / part, symlinks=True)
    (cuda / "lib64").mkdir()
    for lib in [*toolchain.cuda_home.glob("lib/libcudart.so*"),
                toolchain.cuda_home / "lib" / "libcudadevrt.a"]:
        shutil.copy(lib, cuda / "lib64" / lib.name, follow_symlinks=True)
    (context / "Containerfile").write_text(f"FROM {BASE}\nCOPY cuda /usr/local/cuda\n")
    subprocess.run(["podman", "build", "--runtime", "runc", "--tag", STANDIN, str(context)],
                   check=True, capture_output=True)
    return STANDIN


def profile_with_base(home: Path, base: str, cuda_home: str = "installed") -> None:
    """The default profile, but built with the toolkit its image base carries."""
    (home / "recipes").mkdir(parents=True)
    shutil.copytree(REPO / "toolchains", home / "toolchains")
    profile = home / "toolchains" / "cu130-torch2.14.yaml"
    text = profile.read_text().replace("cuda_home: nvidia/cu13", f"cuda_home: {cuda_home}")
    profile.write_text(text + f"image_base: {base}\n")


def image_base(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wheelsmith", "image", "base", "--engine",
                           "podman", "--toolchain", "cu130-torch2.14"], env=env,
                          capture_output=True, text=True, check=False)


def test_a_profiles_toolkit_base_is_locked_by_its_id_on_first_use(
        standin: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    profile_with_base(home, standin)
    env = {**no_registry_env(tmp_path / "config"), "WHEELSMITH_HOME": str(home)}
    assert_locked_by_id_then_pinned(lambda: image_base(env), "base-cu130-torch2.14", standin,
                                    tmp_path / "config" / "wheelsmith" / "images.lock")


def test_a_locked_toolkit_base_whose_id_changed_is_refused(standin: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    profile_with_base(home, standin)
    env = {**no_registry_env(tmp_path / "config"), "WHEELSMITH_HOME": str(home)}
    lock = tmp_path / "config" / "wheelsmith" / "images.lock"
    lock.parent.mkdir(parents=True)
    lock.write_text(f'base-cu130-torch2.14: "{standin}"\nbase-cu130-torch2.14-id: "{"0" * 64}"\n')
    result = image_base(env)
    assert result.returncode == 7
    assert result.stderr.splitlines()[0] == (
        f"error: the base {standin} recorded in {lock} (id {'0' * 64}) is now "
        f"{image_id(standin)}")


def test_the_standin_toolkit_is_what_an_installed_profile_builds_with(
        standin: str, tmp_path: Path) -> None:
    """The toolchain inside the stand-in finds /usr/local/cuda, as the image's would."""
    found = subprocess.run(
        ["podman", "run", "--rm", *Engine("podman", "podman").common(), "--network=none", standin,
         "/usr/local/cuda/bin/nvcc", "--version"], capture_output=True, text=True, check=True)
    assert "release 13.0" in found.stdout


def test_an_image_base_with_a_compiler_from_the_pins_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    profile_with_base(home, STANDIN, cuda_home="nvidia/cu13")
    result = subprocess.run([sys.executable, "-m", "wheelsmith", "toolchain", "requirements",
                             "cu130-torch2.14"],
                            env={**no_registry_env(tmp_path / "config"),
                                 "WHEELSMITH_HOME": str(home)},
                            capture_output=True, text=True, check=False)
    assert ("image_base names a base that carries the CUDA toolkit, but cuda_home is "
            "nvidia/cu13 (the compiler from the pins)") in result.stderr


def project_on_standin(home: Path, base: str) -> None:
    """A wheelsmith project (what `image build` sends as its context: Dockerfile, pyproject.toml,
    src/, recipes/, patches/) with a profile `cu999-torch2.14`: the default one's pins, compiled
    with the toolkit in `base` (a name of its own: an image build removes the images other keys
    of its profile name made)."""
    profile_with_base(home, base)
    shipped = home / "toolchains" / "cu130-torch2.14.yaml"
    (home / "toolchains" / "cu999-torch2.14.yaml").write_text(
        shipped.read_text().replace("name: cu130-torch2.14", "name: cu999-torch2.14"))
    for part in ("Dockerfile", "pyproject.toml", "README.md"):
        shutil.copy(REPO / part, home / part)
    for part in ("src", "patches"):
        shutil.copytree(REPO / part, home / part, ignore=shutil.ignore_patterns("__pycache__",
                                                                                 "*.egg-info"))
    shutil.copy(REPO / "recipes" / "causal-conv1d.yaml", home / "recipes")
    shutil.copy(REPO / "tests" / "fixtures" / "tiny-ext.recipe.yaml", home / "recipes" /
                "tiny-ext.yaml")


@pytest.mark.slow
def test_an_image_on_the_toolkit_base_builds_verified_wheels_with_its_toolkit(
        standin: str, tmp_path: Path) -> None:
    """The cu128 route with no local toolkit, end to end: the image is built on the base that
    carries the toolkit (an image build: minutes, ~22 GB at its peak), and tiny-ext and
    causal-conv1d built in it are verified (about 10 minutes on 2 cores); the provenance names
    the toolkit that compiled them."""
    home = tmp_path / "home"
    project_on_standin(home, standin)
    tiny = shutil.copytree(REPO / "tests" / "fixtures" / "tiny-ext", tmp_path / "tiny-ext")
    recipe = home / "recipes" / "tiny-ext.yaml"
    recipe.write_text(recipe.read_text().replace("PATH", str(tiny)))
    env = {**no_registry_env(tmp_path / "config"), "WHEELSMITH_HOME": str(home)}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "wheelsmith", *args], cwd=home, env=env,
                              capture_output=True, text=True, check=False)

    made = run("image", "build", "--engine", "podman", "--toolchain", "cu999-torch2.14")
    assert made.returncode == 0, made.stderr
    try:
        for package in ("tiny-ext", "causal-conv1d"):
            result = run("build", package, "--arch", "12.0", "--runner", "podman",
                         "--toolchain", "cu999-torch2.14", "--json")
            assert result.returncode == 0, result.stderr
            provenance = json.loads(result.stdout)["provenance"]
            assert provenance["toolchain"]["cuda_home"] == "/usr/local/cuda"
            assert [d["sass"] for d in provenance["device_code"]] == [["sm_120"]]
            verified = run("verify", json.loads(result.stdout)["wheel"], "--arch", "12.0")
            assert verified.returncode == 0, verified.stderr
    finally:
        subprocess.run(["podman", "rmi", made.stdout.strip()], capture_output=True, check=False)
