"""Smoke test of a built wheel: import it against a torch — the toolchain's own, and the
target environment's when the build is for one (`--python`).

The wheel is installed (without dependencies) into a scratch directory and its modules are
imported by that Python, which catches ABI mismatches and missing symbols. When a GPU is
present whose arch the wheel was built for, the recipe's tiny GPU op runs too.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from wheelsmith import cmd, locations
from wheelsmith.arch import ArchSet
from wheelsmith.errors import VerifyError
from wheelsmith.inventory import is_shared_object
from wheelsmith.untrusted import LONG, tool_bounds

log = logging.getLogger(__name__)

SMOKE_SCRIPT = locations.RESOURCES / "smoke_check.py"


def smoke_test(wheel: Path, *, python: Sequence[str | Path], pip: Sequence[str | Path],
               cuda_home: Path, imports: tuple[str, ...], gpu_code: str | None, archs: ArchSet,
               scratch: Path, log_path: Path, sites: tuple[Path, ...] = (),
               install_options: tuple[str, ...] = (), libraries: tuple[Path, ...] = (),
               load_shared: bool = False) -> str:
    """Install `wheel` into `scratch` with `pip` (a pip that installs for `python`: the
    command that runs it, qemu-user's for another CPU) and import `imports` with `python`,
    `sites` (another CPU's torch) on its path too, and pip told that CPU's tags
    (`install_options`); return the test's output. `libraries`: where the CUDA runtime a
    package without torch loads is found (torch loads its own). `load_shared`: every shared
    object of the wheel is loaded too (dlopen, every symbol bound: what an import of a ctypes
    package does, whose Python side needs runtime dependencies the toolchain lacks)."""
    if scratch.exists():
        shutil.rmtree(scratch)
    target = scratch / "site"
    spec = {"imports": list(imports), "gpu": gpu_code, "archs": str(archs),
            "sass": [[a.major, a.minor] for a in archs.archs if not a.suffix]}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(map(str, (target, *sites))),
               PYTHONNOUSERSITE="1",
               PIP_CONFIG_FILE=os.devnull, CUDA_HOME=str(cuda_home))
    if libraries:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            [*map(str, libraries), *filter(None, [os.environ.get("LD_LIBRARY_PATH")])])
    with log_path.open("a", encoding="utf-8") as log_file:
        cmd.run([*pip, "install", "--no-deps", "--no-index", *install_options, "--target",
                 target, wheel],
                env=env, log_file=log_file, stream=False,
                what="pip install of the wheel for the smoke test", error=VerifyError)
        if load_shared:
            spec["load"] = sorted(str(path.relative_to(scratch)) for path in target.rglob("*")
                                  if path.is_file() and is_shared_object(path.name))
        result = cmd.run([*python, SMOKE_SCRIPT, json.dumps(spec)], cwd=scratch,
                         env=env, log_file=log_file, log_path=log_path,
                         what=f"the smoke test of {wheel.name}", error=VerifyError,
                         bounds=tool_bounds(LONG))
    return result.stdout
