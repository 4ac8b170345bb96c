"""wheelsmith installed from its own built wheel (not editable), run from an empty directory:
its recipes, profiles and Dockerfile come with the package, user recipe repositories layer on
top, and the commands that read no recipes do not look for any (issue 13)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, REPO
from wheelsmith.toolchain.env import Toolchain


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """wheelsmith's own wheel, built the way a release is (sdist first, the wheel from it)."""
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out),
                    str(REPO)], check=True, capture_output=True)
    return next(out.glob("wheelsmith-*.whl"))


@dataclass
class Installed:
    wheelsmith: Path
    data: Path  # the data inside the installed package
    env: dict[str, str]

    def run(self, *args: str, cwd: Path, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.wheelsmith), *args], cwd=cwd, env=self.env | (env or {}),
                              capture_output=True, text=True, check=False)


def clean_env() -> dict[str, str]:
    """This machine's environment without any pointer to a checkout or recipe repository."""
    return {k: v for k, v in os.environ.items()
            if k not in ("WHEELSMITH_HOME", "WHEELSMITH_RECIPES", "PYTHONPATH", "VIRTUAL_ENV")}


@pytest.fixture(scope="session")
def installed(built_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """A fresh venv with wheelsmith pip-installed from its wheel."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
                    str(built_wheel)], check=True)
    site = subprocess.run([str(venv / "bin" / "python"), "-c", "import wheelsmith, pathlib; "
                           "print(pathlib.Path(wheelsmith.__file__).parent)"],
                          capture_output=True, text=True, check=True, cwd=venv).stdout.strip()
    return Installed(venv / "bin" / "wheelsmith", Path(site) / "data", clean_env())


@pytest.fixture
def empty(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    return work


def user_repo(root: Path) -> Path:
    """A user's recipe repository with the tiny fixture (its source beside the recipes)."""
    shutil.copytree(FIXTURES / "tiny-ext", root / "sources" / "tiny-ext")
    (root / "recipes").mkdir(parents=True)
    recipe = (FIXTURES / "tiny-ext.recipe.yaml").read_text().replace("PATH", "../sources/tiny-ext")
    (root / "recipes" / "tiny-ext.yaml").write_text(recipe)
    return root


def listing(data: Path) -> list[tuple[str, int]]:
    return sorted((str(p.relative_to(data)), p.stat().st_size) for p in data.rglob("*"))


def test_the_wheel_carries_the_data_and_no_second_copy_is_kept(built_wheel: Path) -> None:
    names = subprocess.run([sys.executable, "-m", "zipfile", "-l", str(built_wheel)],
                           capture_output=True, text=True, check=True).stdout
    tracked = subprocess.run(["git", "-C", str(REPO), "ls-files", "recipes", "patches",
                              "toolchains", "known-bad.yaml", "matrix.yaml", "Dockerfile",
                              "images.lock", "scripts/make-base-image.sh"],
                             capture_output=True, text=True,
                             check=True).stdout.split()
    assert tracked
    for name in tracked:
        assert f"wheelsmith/data/{name} " in names, name
    assert not (REPO / "src" / "wheelsmith" / "data").exists()


def test_recipes_from_an_empty_directory_come_with_the_package(installed: Installed,
                                                              empty: Path) -> None:
    result = installed.run("recipes", cwd=empty)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"{installed.data} (package):"
    assert [line.split()[0] for line in lines[1:]] == [
        "causal-conv1d", "fla-core", "flash-attn", "flash-linear-attention", "mamba-ssm"]


@pytest.mark.toolchain
def test_installed_wheelsmith_builds_and_verifies_from_a_user_recipe_repository(
        installed: Installed, empty: Path, tmp_path: Path, toolchain: Toolchain) -> None:
    mine = user_repo(tmp_path / "my-recipes")
    before = listing(installed.data)
    shown = installed.run("recipes", "--recipes", str(mine), cwd=empty)
    assert shown.stdout.splitlines()[:2] == [
        f"{mine} (--recipes):",
        "  tiny-ext                 0.1.0                    archs 12.0       "]

    built = installed.run("build", "tiny-ext", "--arch", "12.0", "--recipes", str(mine),
                          "--json", cwd=empty)
    assert built.returncode == 0, built.stderr
    data = json.loads(built.stdout)
    wheel = Path(data["wheel"])
    assert wheel.parent == empty / "wheelhouse"
    assert data["provenance"]["device_code"][0]["sass"] == ["sm_120"]
    assert data["provenance"]["toolchain"]["channel"] == "cu130-torch2.14"

    # verify, publish, index check need no recipes: a broken repository setting is not read
    broken = {"WHEELSMITH_RECIPES": str(tmp_path / "no-such-repo")}
    verified = installed.run("verify", str(wheel), "--arch", "12.0", cwd=empty, env=broken)
    assert verified.returncode == 0, verified.stderr
    assert verified.stdout.splitlines()[0] == f"ok: {wheel.name} carries exactly 12.0"
    published = installed.run("publish", str(wheel), cwd=empty, env=broken)
    assert published.stdout == (f"published: {wheel.name} -> index/cu130-torch2.14/simple/"
                                "tiny-ext/\n"), published.stderr
    assert installed.run("index", "check", cwd=empty, env=broken).returncode == 0
    refused = installed.run("recipes", cwd=empty, env=broken)
    assert refused.returncode == 4  # ... while the recipe commands do read it
    assert listing(installed.data) == before  # nothing is written into the package


def test_uv_tool_install_gives_a_working_wheelsmith(built_wheel: Path, tmp_path: Path,
                                                     empty: Path) -> None:
    uv = shutil.which("uv", path=str(Path(sys.executable).parent))
    if uv is None:
        pytest.skip("uv is not installed in this environment (the dev extra has it)")
    env = clean_env() | {"UV_TOOL_DIR": str(tmp_path / "tools"),
                         "UV_TOOL_BIN_DIR": str(tmp_path / "bin")}
    subprocess.run([uv, "tool", "install", "--quiet", str(built_wheel)], env=env, check=True,
                   capture_output=True)
    tool = tmp_path / "bin" / "wheelsmith"
    result = subprocess.run([str(tool), "recipes"], cwd=empty, env=env, capture_output=True,
                            text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0].endswith("/site-packages/wheelsmith/data (package):")
    index = subprocess.run([str(tmp_path / "tools" / "wheelsmith" / "bin" / "python"), "-c",
                            "from wheelsmith.recipes import simple; "
                            "print(simple.package_index().origin)"],
                           cwd=empty, env=env, capture_output=True, text=True, check=False)
    assert index.stdout.strip() in ("pip's default", "pip's configuration", "PIP_INDEX_URL"), \
        index.stderr  # the tool's own pip answers (uv makes environments without pip)


def test_an_installed_wheelsmith_keeps_your_own_profiles_in_your_config_dir(
        installed: Installed, empty: Path, tmp_path: Path) -> None:
    """`toolchain new` of an installed wheelsmith writes to ~/.config/wheelsmith/toolchains
    (never into site-packages), and those profiles are read before the packaged ones."""
    config = tmp_path / "config"
    own = config / "wheelsmith" / "toolchains"
    own.mkdir(parents=True)
    text = (REPO / "toolchains" / "cu130-torch2.11.yaml").read_text()
    (own / "cu131-torch2.11.yaml").write_text(text.replace("name: cu130-torch2.11",
                                                         "name: cu131-torch2.11"))
    env = {"XDG_CONFIG_HOME": str(config)}
    listed = installed.run("toolchain", "list", "--json", cwd=empty, env=env)
    assert listed.returncode == 0, listed.stderr
    names = [row["name"] for row in json.loads(listed.stdout)]
    assert {"cu131-torch2.11", "cu130-torch2.14"} <= set(names)
    new = installed.run("toolchain", "new", "--help", cwd=empty, env=env)
    assert "for an installed wheelsmith, ~/.config/wheelsmith/toolchains" in " ".join(
        new.stdout.split())
    where = subprocess.run([str(installed.wheelsmith.parent / "python"), "-c",
                            "from wheelsmith import locations; print(locations.new_profile_dir())"],
                           cwd=empty, env=installed.env | env, capture_output=True, text=True,
                           check=True)
    assert where.stdout.strip() == str(own)
    assert not (installed.data / "toolchains" / "cu131-torch2.11.yaml").exists()
