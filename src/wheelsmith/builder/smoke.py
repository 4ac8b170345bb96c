"""Smoke test of a built wheel: import it against a torch — the toolchain's own, and the
target environment's when the build is for one (`--python`).

The wheel is installed (without dependencies) into a scratch directory; that Python imports
the recipe's modules and then every compiled extension module of the wheel (each shared
object its RECORD lists that is one: modules.py), which catches ABI mismatches, missing
symbols and modules that raise as they initialise, also where the package imports them only
when they are used. When a GPU is present whose arch the wheel was built for, the recipe's
tiny GPU op runs too.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from wheelsmith import cmd, locations
from wheelsmith.arch import ArchSet
from wheelsmith.builder import modules
from wheelsmith.errors import VerifyError
from wheelsmith.inventory import is_shared_object
from wheelsmith.toolchain.overlay import LeftOut
from wheelsmith.toolchain.venv import STUBS
from wheelsmith.untrusted import LONG, tool_bounds
from wheelsmith.untrusted.linkage import linkage

log = logging.getLogger(__name__)

SMOKE_SCRIPT = locations.RESOURCES / "smoke_check.py"
IMPORTS_FAILED = 3  # smoke_check.py's exit code when compiled modules did not import
FAILED_FILE = "failed-imports.json"  # where it lists them
IMPORT_HINT = ("each compiled module must import where its wheel was built: an undefined "
               "symbol is a source file or library its build did not link (or a symbol of "
               "another torch); an exception is what the module raised as it initialised")


def smoke_test(wheel: Path, *, python: Sequence[str | Path], pip: Sequence[str | Path],
               cuda_home: Path, imports: tuple[str, ...], gpu_code: str | None, archs: ArchSet,
               scratch: Path, log_path: Path, sites: tuple[Path, ...] = (),
               install_options: tuple[str, ...] = (), libraries: tuple[Path, ...] = (),
               load_shared: bool = False, left_out: tuple[LeftOut, ...] = ()) -> str:
    """Install `wheel` into `scratch` with `pip` (a pip that installs for `python`: the
    command that runs it, qemu-user's for another CPU) and import `imports` and the wheel's
    compiled modules with `python`, `sites` (another CPU's torch) on its path too, and pip
    told that CPU's tags (`install_options`); return the test's output. `libraries`: where
    the CUDA runtime a package without torch loads is found (torch loads its own).
    `load_shared`: every shared object of the wheel is loaded too (dlopen, every symbol bound:
    what an import of a ctypes package does, whose Python side needs runtime dependencies the
    toolchain lacks). `left_out`: runtime requirements that could not be installed; an import
    that fails for want of one of them is named, not failed."""
    if scratch.exists():
        shutil.rmtree(scratch)
    target = scratch / "site"
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
        env.update(driver_stub(target, cuda_home, env, log_file))
        spec = _spec(imports, gpu_code, archs, scratch, left_out, load_shared=load_shared)
        result = cmd.run([*python, SMOKE_SCRIPT, json.dumps(spec)], cwd=scratch,
                         env=env, log_file=log_file, log_path=log_path,
                         ok_returncodes=(0, IMPORTS_FAILED), hint=_import_hint(left_out),
                         what=f"the smoke test of {wheel.name}", error=VerifyError,
                         bounds=tool_bounds(LONG))
    if result.returncode == IMPORTS_FAILED:
        raise _failed_imports(wheel, scratch, len(spec["extensions"]), log_path)
    return result.stdout


DRIVER = "libcuda.so.1"


def driver_stub(site: Path, cuda_home: Path, env: dict[str, str], log: Any) -> dict[str, str]:
    """Where a compiled module links the driver API (DT_NEEDED libcuda.so.1: `-lcuda`) and
    this machine has no driver to load it, the toolkit's stub of it on LD_LIBRARY_PATH, said
    in the log: the import needs a libcuda.so.1, which the stub gives without a GPU (a call
    into it fails). Nothing where the driver's own loads, or no module needs it."""
    needing = [p for p in site.rglob("*") if p.is_file() and is_shared_object(p.name)
               and (found := linkage(p)) is not None and DRIVER in found.needed]
    stubs = driver_stub_dir(cuda_home)
    if not needing or stubs is None:
        return {}
    log.write(f"wheelsmith smoke: {needing[0].name} links {DRIVER} and this machine has no "
              f"driver: its import loads the toolkit's stub ({stubs})\n")
    return {"LD_LIBRARY_PATH": os.pathsep.join(
        [*filter(None, env.get("LD_LIBRARY_PATH", "").split(os.pathsep)), str(stubs)])}


def driver_stub_dir(cuda_home: Path) -> Path | None:
    """The toolkit's driver stub directory where this machine has no driver to load (a build
    machine without a GPU imports as one whose GPU is missing); None where the driver's own
    libcuda.so.1 loads, or the toolkit has no stub."""
    stubs = cuda_home / "lib" / STUBS
    try:
        ctypes.CDLL(DRIVER)
    except OSError:
        return stubs if (stubs / DRIVER).is_file() else None
    return None


def _spec(imports: tuple[str, ...], gpu_code: str | None, archs: ArchSet, scratch: Path,
          left_out: tuple[LeftOut, ...], *, load_shared: bool) -> dict[str, Any]:
    """What smoke_check.py is asked to do, for the wheel installed in `scratch`/site."""
    target = scratch / "site"
    found = modules.installed(target)
    spec: dict[str, Any] = {
        "imports": list(imports), "gpu": gpu_code, "archs": str(archs),
        "sass": [[a.major, a.minor] for a in archs.archs if not a.suffix],
        "extensions": [[module.name, module.path] for module in found.modules],
        "libraries": [[library.path, library.why] for library in found.libraries],
        "left_out": {_import_name(item.name): item.describe() for item in left_out},
        "site": str(target), "failed": FAILED_FILE}
    if load_shared:
        spec["load"] = sorted(str(path.relative_to(scratch)) for path in target.rglob("*")
                              if path.is_file() and is_shared_object(path.name))
    return spec


def _import_name(project: str) -> str:
    """A project's name as smoke_check.py compares it with a missing module's (PEP 503's
    normal form with `_`: `scikit_learn`, `wheelsmith_no_such_project`)."""
    return re.sub(r"[-_.]+", "_", project).lower()


def _import_hint(left_out: tuple[LeftOut, ...]) -> str | None:
    if not left_out:
        return None
    return ("it may need what its runtime requirements left out: " +
            "; ".join(item.describe() for item in left_out))


def _failed_imports(wheel: Path, scratch: Path, total: int, log_path: Path) -> VerifyError:
    """The compiled modules smoke_check.py could not import, each with its error (where it
    listed none, the recipe's GPU op exited with that code itself)."""
    try:
        failed = json.loads((scratch / FAILED_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return VerifyError(f"the smoke test of {wheel.name} failed with exit code "
                           f"{IMPORTS_FAILED}", log_file=log_path)
    return VerifyError(
        f"the smoke test of {wheel.name}: {len(failed)} of {total} compiled extension "
        "module(s) do not import",
        findings=[f"{item['module']}: {item['error']}" for item in failed],
        hint=IMPORT_HINT, log_file=log_path)
