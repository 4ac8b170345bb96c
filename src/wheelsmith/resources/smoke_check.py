"""Run by a toolchain's Python: import a freshly built wheel's modules (the recipe's, then
every compiled extension module), then (on a GPU the wheel was built for) run the recipe's tiny
GPU op. Argument: a JSON spec from smoke.py (deliver.py's import check after an install gives
only `imports`). Compiled modules that do not import are all tried, written to the spec's
`failed` file and the exit code is 3.
"""

import ctypes
import importlib
import json
import re
import sys
import warnings
from pathlib import Path

warnings.simplefilter("ignore")
spec = json.loads(sys.argv[1])
try:
    import torch  # load libtorch first, as the package's own __init__ would
except ImportError:  # a CUDA-only toolchain's package links no torch
    torch = None


def capability() -> "tuple[int, int] | None":
    """The first GPU's (major, minor): torch's answer, else the driver's; None without one."""
    if torch is not None:
        return torch.cuda.get_device_capability() if torch.cuda.is_available() else None
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    count, major, minor = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    if driver.cuInit(0) or driver.cuDeviceGetCount(ctypes.byref(count)) or not count.value:
        return None
    # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR (75) and _MINOR (76) of device 0
    if driver.cuDeviceGetAttribute(ctypes.byref(major), 75, 0) or \
            driver.cuDeviceGetAttribute(ctypes.byref(minor), 76, 0):
        return None
    return major.value, minor.value


def needs_left_out(exc: BaseException) -> "str | None":
    """What a failed import needed that was left out, with why: the missing module is named
    as a runtime requirement that could not be installed; None for any other failure."""
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return None
    why = spec.get("left_out", {}).get(re.sub(r"[-_.]+", "_", exc.name.split(".")[0]).lower())
    return None if why is None else f"it needs {exc.name}, which was left out: {why}"


def attempt(module: str, failed: "list[dict[str, str]] | None") -> bool:
    """Import `module`; False (and said) where it needs what was left out. Any other failure
    of a compiled module goes into `failed`; of a recipe's import (`failed` None) it is
    raised, traceback and all."""
    try:
        importlib.import_module(module)
    except Exception as exc:  # a module's init may raise anything
        why = needs_left_out(exc)
        if why is not None:
            print(f"not imported: {module}: {why}")
            return False
        if failed is None:
            raise
        said = str(exc).replace(spec["site"] + "/", "") if spec.get("site") else str(exc)
        failed.append({"module": module, "error": f"{type(exc).__name__}: {said}"})
        return False
    return True


made = []
for module in spec["imports"]:
    made.append(attempt(module, None))
    if made[-1]:
        print("imported", module)
failed: "list[dict[str, str]]" = []
for module, path in spec.get("extensions", []):
    made.append(attempt(module, failed))
    if made[-1]:
        print(f"imported {module} ({path})")
if failed:
    Path(spec["failed"]).write_text(json.dumps(failed), encoding="utf-8")
    for item in failed:
        print(f"does not import: {item['module']}: {item['error']}", file=sys.stderr)
    sys.exit(3)
for library in spec.get("load", []):  # every symbol bound now (ctypes' dlopen is RTLD_NOW)
    ctypes.CDLL(library, mode=ctypes.RTLD_GLOBAL)
    print("loaded", library)
for path, why in spec.get("libraries", []):
    print(f"not imported: {path}: no Python module ({why})")
if spec["gpu"] and not all(made):
    print("gpu op: skipped (an import it needs was not made)")
elif spec["gpu"]:
    found = capability()
    if found is None:
        print("gpu op: skipped (no GPU)")
    else:
        major, minor = found
        if [major, minor] not in spec["sass"]:
            print(f"gpu op: skipped (GPU is sm_{major}{minor}, the wheel is for {spec['archs']})")
        else:
            exec(compile(spec["gpu"], "<recipe smoke.gpu>", "exec"), {})  # noqa: S102 - recipe code
            print(f"gpu op: ok on sm_{major}{minor}")
