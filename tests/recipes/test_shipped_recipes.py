"""Every shipped recipe version: its real source (from PyPI) fetches, verifies and takes its
patches exactly; a patched setup.py still parses and reads the recipe's arch knob."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import REPO
from wheelsmith import locations
from wheelsmith.recipes.fetch import fetch
from wheelsmith.recipes.model import Recipe, Release, load_recipe, recipe_files
from wheelsmith.recipes.patch import apply_all

CASES = [(recipe, release) for file in recipe_files(REPO / "recipes")
         for recipe in [load_recipe(file)] for release in recipe.releases]


@pytest.mark.parametrize(("recipe", "release"), CASES,
                         ids=[f"{r.name}-{v.version}" for r, v in CASES])
def test_real_source_takes_its_patches(tmp_path: Path, recipe: Recipe, release: Release) -> None:
    root = fetch(release.source, tmp_path / "src", locations.cache_dir())
    apply_all(release.patches, root)
    setup = root / "setup.py"
    if setup.is_file():
        text = setup.read_text()
        ast.parse(text)
        if recipe.arch.env != "TORCH_CUDA_ARCH_LIST":  # the package's own knob must exist
            assert recipe.arch.env in text
        elif "-gencode" in text or '"arch=compute_' in text:  # a hard-coded arch list
            assert 'if not os.environ.get("TORCH_CUDA_ARCH_LIST"):' in text
