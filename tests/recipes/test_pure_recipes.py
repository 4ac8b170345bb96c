"""Pure-Python recipes (fla-core, flash-linear-attention): built offline from the pinned sdist,
labelled after their toolchain (+cu.13.0.torch.2.14.pure), no torch pin added, refused if they
contain compiled code."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO, wheelsmith
from wheelsmith.toolchain.env import Toolchain


@pytest.mark.toolchain
def test_fla_core_builds_as_a_pure_wheel(tmp_path: Path, toolchain: Toolchain) -> None:
    result = wheelsmith("build", "fla-core", "--json", "--out", str(tmp_path / "out"),
                        "--work-dir", str(tmp_path / "work"), cwd=REPO, check=True)
    data = json.loads(result.stdout)
    wheel = Path(data["wheel"])
    assert wheel.name == "fla_core-0.6.0+cu.13.0.torch.2.14.pure-py3-none-any.whl"
    assert data["provenance"]["device_code"] == []
    with zipfile.ZipFile(wheel) as zf:
        metadata = zf.read("fla_core-0.6.0+cu.13.0.torch.2.14.pure.dist-info/METADATA").decode()
        assert any(name.startswith("fla/ops/gated_delta_rule/") for name in zf.namelist())
    assert "Requires-Dist: einops\n" in metadata
    assert "Requires-Dist: torch==2.14.*" not in metadata  # pure wheels get no torch pin
    assert "Requires-Dist: torch>=2.7.0; extra == \"cuda\"" in metadata  # upstream's own stays


def test_arch_does_not_apply_to_a_pure_recipe(tmp_path: Path) -> None:
    result = wheelsmith("build", "fla-core", "--arch", "12.0", "--work-dir", str(tmp_path),
                        cwd=REPO)
    assert result.returncode == 4
    assert result.stderr == ("error: fla-core is pure Python: it has no device code, so --arch "
                             "does not apply\nhint: leave out --arch\n")
