"""matrix.yaml's `needs: farm`: validated like every key, and nightly skips such cells, saying
why, on runners without a compile farm or many cores (the shipped flash-attn cell)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from wheelsmith.builder import compilefarm
from wheelsmith.errors import RecipeError
from wheelsmith.fleet import nightly
from wheelsmith.fleet.matrix import Cell, load
from wheelsmith.recipes import repos

CORES = len(os.sched_getaffinity(0))


def cells(path: Path, text: str) -> list[Cell]:
    path.write_text(text)
    return load(path, repos.recipe_file, default_toolchain="cu130-torch2.14",
                default_python="3.11")


def test_the_shipped_matrix_has_flash_attn_as_a_farm_cell() -> None:
    shipped = load(REPO / "matrix.yaml", repos.recipe_file, default_toolchain="cu130-torch2.14",
                   default_python="3.11")
    farm = [c for c in shipped if c.needs == "farm"]
    assert [c.id for c in farm] == ["flash-attn-2.8.3.post2-cu130-torch2.14-12.0-py3.11"]


def test_needs_accepts_only_farm(tmp_path: Path) -> None:
    path = tmp_path / "matrix.yaml"
    with pytest.raises(RecipeError) as caught:
        cells(path, "packages:\n  - recipe: flash-attn\n    needs: gpu\n")
    assert [p.render().split("\n")[0] for p in caught.value.problems] == [
        f"{path}:3:12: 'packages[0].needs' must be one of farm; got 'gpu'"]


def test_a_farm_cell_needs_a_farm_or_a_big_runner(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    text = "packages:\n  - recipe: flash-attn\n    needs: farm\n"
    cell = cells(tmp_path / "matrix.yaml", text)[0]
    monkeypatch.delenv(compilefarm.ENV, raising=False)
    expected = None if CORES >= nightly.BIG_RUNNER_CORES else (
        f"needs a compile farm or a big runner: $WHEELSMITH_COMPILE_FARM is not set and this "
        f"runner has {CORES} cores (fewer than 32)")
    assert nightly.unmet_needs(cell) == expected
    monkeypatch.setenv(compilefarm.ENV, "http://farm.internal:10600")
    assert nightly.unmet_needs(cell) is None


@pytest.mark.skipif(CORES >= nightly.BIG_RUNNER_CORES, reason="a big runner builds farm cells")
def test_nightly_skips_the_farm_cell_with_its_reason(tmp_path: Path) -> None:
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text("packages:\n  - recipe: flash-attn\n    archs: ['12.0']\n    needs: farm\n")
    env = {k: v for k, v in os.environ.items() if k != compilefarm.ENV}
    result = subprocess.run(
        [sys.executable, "-m", "wheelsmith", "nightly", "--matrix", str(matrix), "--no-publish",
         "--out", str(tmp_path / "out"), "--work-dir", str(tmp_path / "work"), "--report",
         str(tmp_path / "report"), "--index", str(tmp_path / "index")],
        cwd=REPO, env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "report" / "nightly.json").read_text())
    assert [(c["id"], c["status"], c["reason"]) for c in report["cells"]] == [(
        "flash-attn-2.8.3.post2-cu130-torch2.14-12.0-py3.11", "skipped",
        f"needs a compile farm or a big runner: $WHEELSMITH_COMPILE_FARM is not set and this "
        f"runner has {CORES} cores (fewer than 32)")]
    assert not (tmp_path / "work").exists()  # nothing fetched, no toolchain touched
