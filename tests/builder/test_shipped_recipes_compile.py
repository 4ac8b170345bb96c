"""Every shipped recipe builds on the default toolchain: make test's guard (issue 33). A
toolchain bump that breaks a recipe (torch 2.14's headers need C++20, mamba-ssm asked for
C++17) fails here, not on a user's machine. Each recipe's newest version is checked for 12.0
with `build --check`: configured with its real sdist and patches, then the cheapest host and
CUDA object of each extension compiled for real with the generated build.ninja's flags, the CUDA
one carrying exactly sm_120 (cuobjdump); a pure recipe configures with nothing to compile."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO, wheelsmith
from wheelsmith.recipes.model import Recipe, load_recipe, recipe_files
from wheelsmith.toolchain.env import Toolchain

pytestmark = pytest.mark.toolchain

SHIPPED = [load_recipe(file) for file in recipe_files(REPO / "recipes")]


# the demo's package in make test; the others (a minute or more each) in make test-slow
IN_MAKE_TEST = {"causal-conv1d"}


@pytest.mark.parametrize("recipe", [
    pytest.param(r, id=r.name, marks=() if r.name in IN_MAKE_TEST else pytest.mark.slow)
    for r in SHIPPED])
def test_the_newest_version_configures_and_its_sample_compiles_for_12_0(
        recipe: Recipe, tmp_path: Path, toolchain: Toolchain) -> None:
    archs = [] if recipe.kind == "pure" else ["--arch", "12.0"]
    result = wheelsmith("build", recipe.name, *archs, "--check", "--json", "--compile-cache",
                        "off", "--work-dir", str(tmp_path / "work"), "--out",
                        str(tmp_path / "out"), cwd=REPO)
    assert result.returncode == 0, result.stderr[-4000:]
    done = json.loads(result.stdout)
    assert done["wheel"] is None
    assert not (tmp_path / "out").exists()
    if recipe.kind == "pure":
        assert done["configured"] == []  # nothing to compile
        return
    assert done["configured"], "no build.ninja with CUDA rules"
    for extension in done["configured"]:
        assert (extension["sass"], extension["ptx"]) == (["sm_120"], [])
        rules = [(s["rule"], s.get("sass"), s.get("ptx")) for s in extension["samples"]]
        assert rules in ([("compile", None, None), ("cuda_compile", ["sm_120"], [])],
                         [("cuda_compile", ["sm_120"], [])]), extension
