"""matrix.yaml: expansion, excludes, shards, the GitHub matrix, and errors with positions."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from tests.conftest import REPO
from wheelsmith.errors import RecipeError, UsageError
from wheelsmith.fleet.matrix import Cell, github_matrix, load, shard
from wheelsmith.fleet.nightly import Settings, request_for
from wheelsmith.recipes import repos
from wheelsmith.toolchain.platform import host_machine
from wheelsmith.toolchain.profile import load_profiles


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "matrix.yaml"
    path.write_text(text)
    return path


def expand(tmp_path: Path, text: str) -> list[Cell]:
    return load(write(tmp_path, text), repos.recipe_file, default_toolchain="cu130-torch2.14",
                default_python="3.11")


def test_cells_are_the_product_minus_excludes(tmp_path: Path) -> None:
    cells = expand(tmp_path, """
pythons: ["3.11", "3.12"]
packages:
  - recipe: causal-conv1d
    versions: ["1.7.0", "1.6.1"]
    archs: ["9.0;12.0"]
  - recipe: fla-core
exclude:
  - recipe: causal-conv1d
    version: "1.6.1"
    python: "3.12"
""")
    assert [c.id for c in cells] == [
        "causal-conv1d-1.6.1-cu130-torch2.14-9.0-12.0-py3.11",
        "causal-conv1d-1.7.0-cu130-torch2.14-9.0-12.0-py3.11",
        "causal-conv1d-1.7.0-cu130-torch2.14-9.0-12.0-py3.12",
        "fla-core-0.6.0-cu130-torch2.14-pure-py3.11"]  # py3-none-any: once per channel


def test_profiles_times_pythons_with_a_package_narrowing_them(tmp_path: Path) -> None:
    profiles = {p.name: p for p in load_profiles(REPO / "toolchains")}
    cells = load(write(tmp_path, """
toolchains: [cu128-torch2.10, cu130-torch2.11]
pythons: ["3.11", "3.12"]
packages:
  - recipe: causal-conv1d
    archs: ["12.0"]
  - recipe: mamba-ssm
    archs: ["12.0"]
    toolchains: [cu130-torch2.11]
    pythons: ["3.12"]
  - recipe: fla-core
"""), repos.recipe_file, default_toolchain="cu130-torch2.14", default_python="3.11",
                 profiles=profiles)
    assert [c.id for c in cells] == [
        "causal-conv1d-1.7.0-cu128-torch2.10-12.0-py3.11",
        "causal-conv1d-1.7.0-cu128-torch2.10-12.0-py3.12",
        "causal-conv1d-1.7.0-cu130-torch2.11-12.0-py3.11",
        "causal-conv1d-1.7.0-cu130-torch2.11-12.0-py3.12",
        "fla-core-0.6.0-cu128-torch2.10-pure-py3.11",
        "fla-core-0.6.0-cu130-torch2.11-pure-py3.11",
        "mamba-ssm-2.3.1-cu130-torch2.11-12.0-py3.12"]


def test_a_python_a_profile_was_not_resolved_for_is_refused_at_its_line(tmp_path: Path) -> None:
    profiles = {p.name: p for p in load_profiles(REPO / "toolchains")}
    path = write(tmp_path, """toolchains: [cu132-torch2.15, cu999-torch9.9]
pythons: ["3.10", "3.12"]
packages:
  - recipe: fla-core
""")
    with pytest.raises(RecipeError) as caught:
        load(path, repos.recipe_file, default_toolchain="cu130-torch2.14", default_python="3.11",
             profiles=profiles)
    assert [p.render().split("\n")[0] for p in caught.value.problems] == [
        f"{path}:1:31: no toolchain profile 'cu999-torch9.9'",
        f"{path}:2:11: the cu132-torch2.15 profile was resolved for Python 3.11, 3.12, 3.13, "
        "3.14, 3.15, not 3.10"]


def test_shards_split_the_cells_without_overlap(tmp_path: Path) -> None:
    cells = expand(tmp_path, "packages:\n  - recipe: causal-conv1d\n    versions: ['1.7.0', "
                             "'1.6.1']\n  - recipe: fla-core\n  - recipe: mamba-ssm\n")
    parts = [shard(cells, f"{i}/3") for i in range(3)]
    assert sorted(c.id for part in parts for c in part) == sorted(c.id for c in cells)
    assert all(parts)
    include = json.loads(github_matrix(cells, 3))["include"]
    assert [entry["shard"] for entry in include] == ["0/3", "1/3", "2/3"]
    with pytest.raises(UsageError, match=r"--shard: '3/3' needs 0 <= I < N"):
        shard(cells, "3/3")


def test_github_matrix_groups_shards_by_python_in_version_order(tmp_path: Path) -> None:
    cells = expand(tmp_path, 'pythons: ["3.10", "3.9"]\npackages:\n  - recipe: fla-core\n'
                             "  - recipe: causal-conv1d\n    versions: ['1.7.0', '1.6.1']\n")
    include = json.loads(github_matrix(cells, 2))["include"]
    assert [(e["python"], e["shard"], len(e["cells"])) for e in include] == [
        ("3.9", "0/2", 1), ("3.9", "1/2", 1),  # fla-core is pure: once, with the first Python
        ("3.10", "0/2", 2), ("3.10", "1/2", 1)]
    assert all(cell.endswith(f"-py{e['python']}") for e in include for cell in e["cells"])
    assert json.loads(github_matrix(cells[:1], 4))["include"] == [
        {"python": "3.10", "shard": "0/1", "cells": [cells[0].id]}]


def test_bad_matrix_reports_every_problem_with_positions(tmp_path: Path) -> None:
    path = write(tmp_path, """packages:
  - recipe: causal-conv1d
    versions: ["9.9"]
    archs: ["9.0f", "12.0", "9.0;12.0"]
  - recipe: no-such-thing
  - recipe: fla-core
    archs: ["12.0"]
  - recipe: flash-attn
    archs: ["12.1"]
exclude:
  - recipe: fla-core
    arch: "12.0"
""")
    with pytest.raises(RecipeError) as caught:
        load(path, repos.recipe_file, default_toolchain="cu130-torch2.14", default_python="3.11")
    assert [p.render().split(": ", 1)[1].split("\n")[0] for p in caught.value.problems] == [
        "recipe causal-conv1d has no version 9.9",
        "causal-conv1d has 2 arch sets, but a channel holds one arch set per version (pip picks "
        "by label, not by GPU)",
        "'9.0f': family 'f' targets exist only from 10.0 on",
        f"no recipe named 'no-such-thing' in {REPO} (checkout)",
        "fla-core is pure Python: archs do not apply",
        "flash-attn cannot be built for 12.1",
        "unknown key 'arch' in 'exclude[0]'"]


def test_a_platforms_axis_gives_each_cpu_its_cells_and_x86_64_cells_keep_their_names(
        tmp_path: Path) -> None:
    cells = expand(tmp_path, """
platforms: [x86_64, arm64]
packages:
  - recipe: causal-conv1d
    archs: ["12.1"]
  - recipe: mamba-ssm
    archs: ["12.0"]
    platforms: [x86_64]
  - recipe: fla-core
exclude:
  - recipe: causal-conv1d
    platform: x86_64
""")
    assert [(c.id, c.platform) for c in cells] == [
        ("causal-conv1d-1.7.0-cu130-torch2.14-12.1-py3.11-aarch64", "aarch64"),
        ("fla-core-0.6.0-cu130-torch2.14-pure-py3.11", "x86_64"),  # py3-none-any: one cell
        ("mamba-ssm-2.3.1-cu130-torch2.14-12.0-py3.11", "x86_64")]
    assert cells[0].as_dict() == {
        "id": "causal-conv1d-1.7.0-cu130-torch2.14-12.1-py3.11-aarch64",
        "recipe": "causal-conv1d", "version": "1.7.0", "toolchain": "cu130-torch2.14",
        "archs": "12.1", "python": "3.11", "platform": "aarch64"}


def test_without_platforms_the_cells_are_for_this_machines_cpu(tmp_path: Path) -> None:
    text = "packages:\n  - recipe: causal-conv1d\n    archs: ['12.0']\n"
    assert [(c.id, c.platform) for c in expand(tmp_path, text)] == [
        (f"causal-conv1d-1.7.0-cu130-torch2.14-12.0-py3.11"
         f"{'' if host_machine() == 'x86_64' else '-' + host_machine()}", host_machine())]
    on_arm = load(write(tmp_path, text), repos.recipe_file, default_toolchain="cu130-torch2.14",
                  default_python="3.11", default_platform="aarch64")
    assert [c.id for c in on_arm] == ["causal-conv1d-1.7.0-cu130-torch2.14-12.0-py3.11-aarch64"]


def test_an_unknown_platform_is_refused_by_name_at_its_position(tmp_path: Path) -> None:
    path = write(tmp_path, """platforms: [x86_64, riscv64]
packages:
  - recipe: causal-conv1d
    platforms: [aarch64, ppc64le]
""")
    with pytest.raises(RecipeError) as caught:
        load(path, repos.recipe_file, default_toolchain="cu130-torch2.14", default_python="3.11")
    assert [p.render().split("\n") for p in caught.value.problems] == [
        [f"{path}:1:21: unknown platform 'riscv64'",
         "    hint: one of x86_64, aarch64 (arm64 and amd64 are read as those)"],
        [f"{path}:4:26: unknown platform 'ppc64le'",
         "    hint: one of x86_64, aarch64 (arm64 and amd64 are read as those)"]]


def test_a_cells_platform_goes_into_its_build_request(tmp_path: Path) -> None:
    settings = Settings(out_dir=tmp_path / "out", work_dir=tmp_path / "work",
                        index_dir=tmp_path / "index", publish=False)
    cells = expand(tmp_path, "platforms: [x86_64, aarch64]\npackages:\n"
                             "  - recipe: causal-conv1d\n    archs: ['12.1']\n")
    assert [(c.id, request_for(c, settings).platform) for c in cells] == [
        ("causal-conv1d-1.7.0-cu130-torch2.14-12.1-py3.11", "x86_64"),
        ("causal-conv1d-1.7.0-cu130-torch2.14-12.1-py3.11-aarch64", "aarch64")]


def test_a_platform_a_profile_records_it_lacks_is_refused_at_its_position(
        tmp_path: Path) -> None:
    profiles = {p.name: p for p in load_profiles(REPO / "toolchains")}
    profiles["cu130-torch2.11"] = replace(profiles["cu130-torch2.11"], platforms=("x86_64",))
    path = write(tmp_path, """toolchains: [cu130-torch2.11, cu130-torch2.14]
platforms: [x86_64, aarch64]
packages:
  - recipe: causal-conv1d
  - recipe: mamba-ssm
    toolchains: [cu130-torch2.14]
""")
    with pytest.raises(RecipeError) as caught:
        load(path, repos.recipe_file, default_toolchain="cu130-torch2.14", default_python="3.11",
             profiles=profiles)
    assert [p.render().split("\n") for p in caught.value.problems] == [[
        f"{path}:2:21: the cu130-torch2.11 profile was resolved for x86_64, not aarch64",
        "    hint: exclude the cells, or regenerate the profile once its pins have aarch64 "
        "wheels"]]
