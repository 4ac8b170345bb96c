"""Recipe repositories: --recipes DIR (repeatable) and $WHEELSMITH_RECIPES before the built-in
recipes, the first match wins, `recipes` shows where each comes from and what is shadowed, and
bad repositories are refused in one line with what to do."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, REPO
from wheelsmith.recipes import repos


def user_repo(root: Path, *recipes: str) -> Path:
    """A recipe repository holding the tiny fixture's recipe and copies of built-in recipes."""
    (root / "recipes").mkdir(parents=True)
    tiny = (FIXTURES / "tiny-ext.recipe.yaml").read_text().replace("PATH", "../tiny-ext")
    (root / "recipes" / "tiny-ext.yaml").write_text(tiny)
    for name in recipes:
        shutil.copy(REPO / "recipes" / f"{name}.yaml", root / "recipes")
    return root


def run(*args: str, cwd: Path, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != repos.ENV} | (env or {})
    return subprocess.run([sys.executable, "-m", "wheelsmith", *args], cwd=cwd,
                          env=environment, capture_output=True, text=True, check=False)


def test_recipes_shows_each_repository_and_the_shadowed_recipe(tmp_path: Path) -> None:
    mine = user_repo(tmp_path / "mine", "fla-core")
    theirs = user_repo(tmp_path / "theirs")
    result = run("recipes", "--recipes", str(mine), cwd=tmp_path, env={repos.ENV: str(theirs)})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"{mine} (--recipes):"
    assert lines[1] == ("  fla-core                 0.6.0                    pure Python      "
                        "flash-linear-attention's Triton kernels (GatedDeltaNet, ...); pure "
                        "Python, no nvcc")
    assert lines[2] == "  tiny-ext                 0.1.0                    archs 12.0       "
    assert lines[3] == f"{theirs} (WHEELSMITH_RECIPES):"
    assert lines[4] == f"  tiny-ext                 0.1.0                    shadowed by {mine}"
    assert lines[5] == f"{REPO} (checkout):"
    assert [line.split()[0] for line in lines[6:]] == [
        "causal-conv1d", "fla-core", "flash-attn", "flash-linear-attention", "mamba-ssm"]
    assert lines[7] == f"  fla-core                 0.6.0                    shadowed by {mine}"


def test_recipes_json_names_file_origin_and_shadowing(tmp_path: Path) -> None:
    mine = user_repo(tmp_path / "mine", "fla-core")
    rows = json.loads(run("recipes", "--json", "--recipes", str(mine), cwd=tmp_path).stdout)
    fla = [(r["file"], r["origin"], r["shadowed_by"]) for r in rows if r["name"] == "fla-core"]
    assert fla == [(str(mine / "recipes" / "fla-core.yaml"), "--recipes", None),
                   (str(REPO / "recipes" / "fla-core.yaml"), "checkout", str(mine))]


@pytest.fixture
def option_dirs() -> Iterator[None]:
    yield
    repos.use_option([])


def test_the_first_repository_wins_and_the_shadowed_one_is_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        option_dirs: None) -> None:
    first = user_repo(tmp_path / "first")
    second = user_repo(tmp_path / "second", "fla-core")
    monkeypatch.setenv(repos.ENV, os.pathsep.join([str(first), str(second)]))
    repos.use_option([second])  # what --recipes does: before the variable's directories
    assert [(r.root, r.origin) for r in repos.repos()] == [
        (second, "--recipes"), (first, repos.ENV), (REPO, "checkout")]
    recipe = repos.resolve_recipe("tiny-ext")
    assert recipe.file == second / "recipes" / "tiny-ext.yaml"
    assert caplog.messages == [
        f"warning: {second / 'recipes' / 'tiny-ext.yaml'} shadows "
        f"{first / 'recipes' / 'tiny-ext.yaml'} for version 0.1.0 (the first repository wins; "
        "remove it from one of them to use the other)"]
    assert repos.resolve_recipe("causal-conv1d").file == REPO / "recipes" / "causal-conv1d.yaml"


def test_a_recipe_from_a_user_repository_takes_its_patches_from_there(tmp_path: Path) -> None:
    mine = user_repo(tmp_path / "mine", "causal-conv1d")
    shutil.copytree(REPO / "patches" / "causal-conv1d", mine / "patches" / "causal-conv1d")
    result = run("check-recipes", "--recipes", str(mine), cwd=tmp_path)
    assert result.stdout == "ok: 7 recipe(s) valid\n", result.stderr
    shutil.rmtree(mine / "patches")
    result = run("check-recipes", "--recipes", str(mine), cwd=tmp_path)
    assert result.returncode == 3
    lines = result.stderr.splitlines()
    assert lines[0] == "error: 6 problems in mine/recipes/causal-conv1d.yaml"
    assert lines[-3].startswith("  mine/recipes/causal-conv1d.yaml:")  # its line and column
    assert lines[-3].endswith(": patch file not found: "
                              "patches/causal-conv1d/1.6.1/0003-never-download-prebuilt-wheel.patch")
    assert lines[-2] == ("    hint: patches for causal-conv1d 1.6.1 live in "
                         "patches/causal-conv1d/1.6.1/")


def test_a_missing_recipe_repository_is_refused_in_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    result = run("build", "tiny-ext", "--recipes", str(missing), cwd=tmp_path)
    assert result.returncode == 4
    assert result.stderr.splitlines() == [
        f"error: --recipes {missing}: no such directory",
        "hint: a recipe repository holds recipes/NAME.yaml (and patches/); start one with: "
        f"wheelsmith recipe new NAME --recipes {missing}"]


def test_a_repository_without_recipes_is_refused_in_one_line(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    (empty / "recipes").mkdir(parents=True)
    result = run("recipes", cwd=tmp_path, env={repos.ENV: str(empty)})
    assert result.returncode == 4
    assert result.stderr.splitlines() == [
        f"error: WHEELSMITH_RECIPES {empty}: holds no recipes (no {empty / 'recipes'}/*.yaml)",
        "hint: point WHEELSMITH_RECIPES at the directory above recipes/, or add one: "
        f"wheelsmith recipe new NAME --recipes {empty}"]


def test_an_unknown_recipe_names_every_repository_searched(tmp_path: Path) -> None:
    mine = user_repo(tmp_path / "mine")
    result = run("build", "nothing-like-it", "--recipes", str(mine), cwd=tmp_path)
    assert result.returncode == 4
    assert result.stderr.splitlines()[0] == (
        f"error: no recipe named 'nothing-like-it' in {mine} (--recipes); {REPO} (checkout)")
