"""On a machine with an NVIDIA GPU: build the tiny extension for that GPU's arch with the
installed torch + CUDA (`--toolchain system`) and run its op on the GPU during the smoke test.

Run with `make test-gpu` (or `pytest -m gpu`) on a GPU host; skipped elsewhere.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, wheelsmith

pytestmark = pytest.mark.gpu


def gpu_capability() -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    probe = subprocess.run(
        [sys.executable, "-c", "import torch; print('%d.%d' % torch.cuda.get_device_capability()"
         " if torch.cuda.is_available() else '')"], capture_output=True, text=True, check=False)
    return probe.stdout.strip() or None


CAPABILITY = gpu_capability()


@pytest.mark.skipif(CAPABILITY is None, reason="no NVIDIA GPU visible to this Python's torch "
                    "(the GPU tests run on the H200 device machine: make test-gpu)")
def test_tiny_extension_runs_on_this_gpu(project: Path) -> None:
    (project / "recipes" / "tiny-ext.yaml").write_text(
        (FIXTURES / "tiny-ext.recipe.yaml").read_text().replace("PATH", str(FIXTURES /
                                                                            "tiny-ext")))
    result = wheelsmith("build", "tiny-ext", "--arch", str(CAPABILITY), "--toolchain", "system",
                        "--json", cwd=project, check=True)
    smoke = json.loads(result.stdout)["run"]["smoke"]
    major, minor = str(CAPABILITY).split(".")
    compiled = f"tiny_ext/_C{sysconfig.get_config_var('EXT_SUFFIX')}"
    assert smoke == ["imported tiny_ext", f"imported tiny_ext._C ({compiled})",
                     f"gpu op: ok on sm_{major}{minor}"]
