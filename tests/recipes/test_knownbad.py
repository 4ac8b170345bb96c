"""The known-bad table: refusals before compiling, warnings, and a validated data file."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.version import Version

from tests.conftest import REPO, wheelsmith
from wheelsmith.arch import ArchSet
from wheelsmith.errors import RecipeError
from wheelsmith.recipes.knownbad import FILE, load, matching
from wheelsmith.toolchain.env import Toolchain

RULES = load(REPO / FILE)


@pytest.mark.parametrize(
    ("package", "version", "nvcc", "archs", "expected"),
    [
        ("causal-conv1d", "1.7.0", "13.0.88", "10.3", ["refuse"]),
        ("causal-conv1d", "1.7.0", "13.0.88", "10.0;12.0", []),
        ("causal-conv1d", "1.7.0", "12.9.41", "10.3", []),  # only nvcc 13.x miscompiles
        ("flash-attn", "2.7.2.post1", "12.8.61", "12.0", ["refuse"]),
        ("flash-attn", "2.8.3", "13.0.88", "12.0", []),
        ("mamba-ssm", "2.3.1", "13.0.88", "12.0", ["warn"]),
        ("mamba-ssm", "2.3.1", "13.0.88", "9.0", []),
    ],
)
def test_rules_match_package_version_toolchain_and_arch(package: str, version: str, nvcc: str,
                                                        archs: str, expected: list[str]) -> None:
    found = matching(RULES, package, version, nvcc=Version(nvcc), torch=Version("2.14.1"),
                     archs=ArchSet.parse([archs]))
    assert [r.action for r in found] == expected


def test_bad_table_is_reported_with_positions(tmp_path: Path) -> None:
    table = tmp_path / FILE
    table.write_text("- package: x\n  versions: '>>1'\n  archs: ['9.0f']\n  action: block\n"
                     "  reason: r\n  link: http://example.com\n")
    with pytest.raises(RecipeError) as caught:
        load(table)
    assert [p.render() for p in caught.value.problems] == [
        f"{table}:2:13: '[0].versions' is not a version specifier: '>>1'\n    hint: write e.g. "
        "'>=1.5.3,<1.8'",
        f"{table}:3:11: '9.0f': family 'f' targets exist only from 10.0 on\n    hint: use "
        "'9.0'",
        f"{table}:4:11: '[0].action' must be one of refuse, warn; got 'block'",
        f"{table}:6:9: '[0].link' must be an https:// link to the upstream report; got "
        "'http://example.com'"]


@pytest.mark.toolchain
def test_refused_combination_stops_before_compiling(toolchain: Toolchain, tmp_path: Path) -> None:
    result = wheelsmith("build", "causal-conv1d", "--arch", "10.3", "--out", str(tmp_path / "o"),
                        "--work-dir", str(tmp_path / "w"), cwd=REPO)
    assert result.returncode == 16
    assert "error: refusing to build causal-conv1d 1.7.0 for 10.3 with nvcc 13.0.88: nvcc 13.x " \
           "miscompiles causal-conv1d for sm_103" in result.stderr
    assert "https://github.com/Dao-AILab/causal-conv1d/issues/105" in result.stderr
    assert not (tmp_path / "w").exists()
