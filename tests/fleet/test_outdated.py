"""`wheelsmith outdated` against a real HTTP simple index on 127.0.0.1."""

from __future__ import annotations

import html
import json
import os
import subprocess
import sys
from urllib.parse import quote

from tests.conftest import REPO, Served
from wheelsmith.recipes.model import load_recipe, recipe_files


def page(served: Served, project: str, files: list[tuple[str, bool]]) -> None:
    """A PEP 503 page of (filename, yanked) as a static server sends it (its index.html)."""
    directory = served.root / "simple" / project
    directory.mkdir(parents=True)
    yank = ' data-yanked=""'
    links = [f'<a href="../../files/{quote(name)}#sha256={"0" * 64}"'
             f'{yank if yanked else ""}>{html.escape(name)}</a><br>' for name, yanked in files]
    (directory / "index.html").write_text("\n".join(["<!DOCTYPE html><html><body>", *links,
                                                      "</body></html>"]))


def sdist(name: str, version: str, *, yanked: bool = False) -> tuple[str, bool]:
    return f"{name.replace('-', '_')}-{version}.tar.gz", yanked


def test_lists_newer_releases_and_torch(http_dir: Served) -> None:
    for file in recipe_files(REPO / "recipes"):
        recipe = load_recipe(file)
        files = [sdist(recipe.name, r.version) for r in recipe.releases]
        if recipe.name == "causal-conv1d":
            files += [sdist(recipe.name, "1.8.0"), sdist(recipe.name, "1.9.0", yanked=True),
                      sdist(recipe.name, "2.0.0rc1")]
        page(http_dir, recipe.name, files)
    page(http_dir, "torch", [(f"torch-{v}-cp311-cp311-manylinux_2_28_x86_64.whl", False)
                             for v in ("2.14.1", "2.15.0", "2.16.0")])
    env = dict(os.environ, WHEELSMITH_INDEX_URL=f"{http_dir.url}/simple")
    result = subprocess.run([sys.executable, "-m", "wheelsmith", "outdated", "--json"],
                            cwd=REPO, env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [
        {"kind": "recipe", "name": "causal-conv1d", "current": "1.7.0", "newer": ["1.8.0"]},
        {"kind": "toolchain", "name": "torch", "current": "2.15.0", "newer": ["2.16.0"]}]
