"""The shipped causal-conv1d recipe against the real sdists from PyPI, and its real build."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO, assert_platform_tagged
from tests.leftovers import new_env
from tests.resumes import kill_after_first_object, log_entries, ninja_steps
from wheelsmith import locations
from wheelsmith.errors import PatchError
from wheelsmith.recipes.fetch import fetch
from wheelsmith.recipes.model import load_recipe
from wheelsmith.recipes.patch import apply_all
from wheelsmith.toolchain.env import Toolchain

RECIPE = load_recipe(REPO / "recipes" / "causal-conv1d.yaml")


@pytest.mark.parametrize("version", [r.version for r in RECIPE.releases])
def test_patches_apply_to_the_real_sdist(tmp_path: Path, version: str) -> None:
    release = RECIPE.release(version)
    root = fetch(release.source, tmp_path / "src", locations.cache_dir())
    apply_all(release.patches, root)
    setup = (root / "setup.py").read_text()
    ast.parse(setup)
    guard = setup.index('if not os.environ.get("TORCH_CUDA_ARCH_LIST"):')
    assert guard < setup.index('cc_flag.append("arch=compute_75,code=sm_75")')
    assert "raise RuntimeError(\n                f\"{PACKAGE_NAME}: nvcc not found" in setup
    run = setup[setup.index("    def run(self):"):]
    assert run.split("\n", 3)[2].strip() == "return super().run()"


def test_patch_for_one_version_does_not_apply_to_another(tmp_path: Path) -> None:
    root = fetch(RECIPE.release("1.6.1").source, tmp_path / "src", locations.cache_dir())
    with pytest.raises(PatchError) as caught:
        apply_all(RECIPE.release("1.7.0").patches, root)
    assert caught.value.message.startswith(
        "patches/causal-conv1d/1.7.0/0001-honour-torch-cuda-arch-list.patch: hunk #1")


@pytest.mark.build
def test_real_build_for_sm_120_killed_after_its_first_object_resumes(
        tmp_path: Path, toolchain: Toolchain) -> None:
    """About 6-8 minutes on 2 cores: the whole point of the tool, for real — killed with
    SIGKILL once its first object is built, then run again: ninja compiles only the objects
    the first run had not finished, and the wheel is the verified one."""
    mark, env = new_env(WHEELSMITH_COMPILE_CACHE="off")  # real compilers, no cache hits
    args = [sys.executable, "-m", "wheelsmith", "build", "causal-conv1d", "--arch", "12.0",
            "--json", "--out", str(tmp_path / "out"), "--work-dir", str(tmp_path / "work")]
    log = kill_after_first_object(args, REPO, env, mark, tmp_path / "work")
    done = len(log_entries(log))  # read after the kill: what the first run really finished
    assert 1 <= done < 4
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())

    result = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stderr
    assert f"==> resuming: {done}/4 objects already built" in re.sub(
        r"\[[^]]*\] ", "", result.stderr)
    build_log = next((tmp_path / "work").glob("causal-conv1d-*/build.log"))
    assert ninja_steps(build_log) == 4 - done  # exactly the missing objects compiled
    data = json.loads(result.stdout)
    wheel = Path(data["wheel"])
    provenance = data["provenance"]
    assert_platform_tagged(wheel, provenance, "causal_conv1d-1.7.0+cu.13.0.torch.2.14.sm.120")
    assert provenance["device_code"] == [{"path": "causal_conv1d_cuda.cpython-311-x86_64-linux-"
                                          "gnu.so", "sass": ["sm_120"], "ptx": []}]
    assert data["run"]["smoke"][:2] == ["imported causal_conv1d", "imported causal_conv1d_cuda"]
    assert [p["file"] for p in provenance["patches"]] == [
        "0001-honour-torch-cuda-arch-list.patch", "0002-clear-error-without-nvcc.patch",
        "0003-never-download-prebuilt-wheel.patch"]
    with zipfile.ZipFile(wheel) as zf:
        metadata = zf.read("causal_conv1d-1.7.0+cu.13.0.torch.2.14.sm.120.dist-info/METADATA")
    assert b"Requires-Dist: torch==2.14.*\n" in metadata
    assert b"Requires-Dist: torch\n" not in metadata
    assert list((tmp_path / "out").iterdir()) == [wheel]
    so = "causal_conv1d_cuda.cpython-311-x86_64-linux-gnu.so"
    verified = subprocess.run([sys.executable, "-m", "wheelsmith", "verify", str(wheel)],
                              cwd=REPO, env=env, capture_output=True, text=True, check=False)
    assert verified.returncode == 0, verified.stderr
    assert verified.stdout.splitlines()[3:6] == [  # its bwd cubin is compressed: extracted
        "  CUDA runtime: 13 (libcudart.so.13)",
        "  oldest driver: 580.65.06 (set by cubins of CUDA 13.0 (any CUDA 13 driver runs them))",
        f"  manylinux: manylinux_2_34_x86_64, set by GLIBC_2.32 (__libc_single_threaded in "
        f"{so}): manylinux_2_31_x86_64 does not list it"]
