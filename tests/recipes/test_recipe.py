"""Recipes: every problem reported at once, each with file:line:col and a hint."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import REPO
from wheelsmith.errors import RecipeError, UsageError
from wheelsmith.recipes.model import load_recipe, recipe_files
from wheelsmith.recipes.schema import schema_json
from wheelsmith.recipes.sources import PypiSource

BAD = REPO / "tests" / "recipes" / "bad"


def render(error: RecipeError) -> str:
    return "\n".join([error.message, *error.details()]) + "\n"


@pytest.mark.parametrize("recipe", sorted(BAD.glob("*.yaml")), ids=lambda p: p.stem)
def test_bad_recipe_reports_exact_problems(recipe: Path) -> None:
    with pytest.raises(RecipeError) as caught:
        load_recipe(recipe, f"recipes/{recipe.name}")
    assert render(caught.value) == recipe.with_suffix(".expected").read_text()


def test_all_problems_are_reported_at_once() -> None:
    with pytest.raises(RecipeError) as caught:
        load_recipe(BAD / "many-problems.yaml", "recipes/many-problems.yaml")
    lines = [p.line for p in caught.value.problems]
    assert len(lines) == 5
    assert lines == sorted(lines)


def test_yaml_number_for_version_gets_a_quote_hint() -> None:
    with pytest.raises(RecipeError) as caught:
        load_recipe(BAD / "wrong-type.yaml", "recipes/wrong-type.yaml")
    hints = [p.hint for p in caught.value.problems if "versions[0].version" in p.message]
    assert hints == ['quote it: "1.10" (YAML reads 1.10 as the number 1.1)']


@pytest.mark.parametrize("file", list(recipe_files(REPO / "recipes")), ids=lambda p: p.stem)
def test_shipped_recipes_are_valid(file: Path) -> None:
    recipe = load_recipe(file)
    assert recipe.releases
    for release in recipe.releases:
        assert all(patch.path.is_file() for patch in release.patches)


def test_causal_conv1d_recipe_pins_pypi_sdists() -> None:
    recipe = load_recipe(REPO / "recipes" / "causal-conv1d.yaml")
    assert recipe.latest.version == "1.7.0"
    assert str(recipe.arch.default) == "12.0"
    assert dict(recipe.env)["CAUSAL_CONV1D_FORCE_BUILD"] == "TRUE"
    source = recipe.release("1.6.1").source
    assert isinstance(source, PypiSource)
    assert source.sha256 == "e4a697ec2db3906f012e675125569f8b510b4559bc53e3095143d91369e1221b"


def test_unknown_version_names_the_versions_there() -> None:
    recipe = load_recipe(REPO / "recipes" / "causal-conv1d.yaml")
    with pytest.raises(UsageError) as caught:
        recipe.release("9.9")
    assert caught.value.message == "recipe causal-conv1d has no version 9.9"
    assert caught.value.hint == "versions in causal-conv1d.yaml: 1.7.0, 1.6.1"


def test_published_schema_matches_the_validator() -> None:
    assert (REPO / "recipes" / "recipe.schema.json").read_text() == schema_json()
