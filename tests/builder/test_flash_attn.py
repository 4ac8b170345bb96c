"""flash-attn (the recipe's newest, 2.8.3.post2): its own arch knob is bridged from --arch. A
full build takes hours on 2 cores, so this checks the configure-only step: the generated
build.ninja holds exactly the requested -gencode targets and nothing else (real sdist, real
torch, real setup.py). That its objects compile, into exactly sm_120, is make test's guard over
every shipped recipe (tests/builder/test_shipped_recipes_compile.py: `build --check`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO, wheelsmith
from wheelsmith.toolchain.env import Toolchain

pytestmark = pytest.mark.toolchain


@pytest.mark.parametrize(("archs", "sass"), [("9.0;12.0", ["sm_120", "sm_90"])])
def test_build_ninja_holds_exactly_the_requested_archs(tmp_path: Path, toolchain: Toolchain,
                                                       archs: str, sass: list[str]) -> None:
    result = wheelsmith("build", "flash-attn", "--arch", archs, "--configure-only", "--json",
                        "--work-dir", str(tmp_path / "work"), "--out", str(tmp_path / "out"),
                        cwd=REPO)
    assert result.returncode == 0, result.stderr
    configured = json.loads(result.stdout)["configured"]
    assert [(c["sass"], c["ptx"]) for c in configured] == [(sass, [])]
    assert not (tmp_path / "out").exists()


def test_arch_outside_the_knob_is_refused_before_anything_runs(tmp_path: Path) -> None:
    result = wheelsmith("build", "flash-attn", "--arch", "12.0+PTX", "--work-dir",
                        str(tmp_path / "work"), cwd=REPO)
    assert result.returncode == 4
    assert result.stderr == (
        "error: flash-attn cannot be built for 12.0+PTX: its FLASH_ATTN_CUDA_ARCHS knob only "
        "knows 8.0, 9.0, 10.0, 12.0\nhint: pick archs from that list (an sm_120 cubin also runs "
        "on sm_121, an sm_100 cubin on sm_103)\n")
    assert not (tmp_path / "work").exists()
