"""Run by the Python that `wheelsmith doctor` examines: which fast-path functions the installed
transformers' modeling code for one model type needs, and whether transformers found them.

usage: model_needs.py MODEL_TYPE

The needs are read from the modeling module's own source: each function it wraps with
`use_kernel_func_from_hub_with_fallback("NAME", "PACKAGE")` (transformers 5), each name it
imports from fla, causal_conv1d, mamba_ssm or flash_attn, and each attribute it reads from a
`lazy_load_kernel(...)` result (transformers 4). Whether a need is met is then read from the
imported module: the wrapper's own `is_new_implementation` (False: transformers runs its torch
code), or the imported name being None. Prints one line `WHEELSMITH-MODEL {json}`. Never
imports wheelsmith; never reaches the hub (HF_HUB_OFFLINE=1).
"""
# transformers and the fast-path packages are imported inside, each failure being an answer.
# ruff: noqa: PLC0415

from __future__ import annotations

import ast
import importlib
import inspect
import json
import os
import re
import sys
import warnings
from pathlib import Path
from typing import Any

warnings.simplefilter("ignore")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

FAST_PATH = ("fla", "causal_conv1d", "mamba_ssm", "flash_attn")
WRAPPER = "use_kernel_func_from_hub_with_fallback"
LAZY = "lazy_load_kernel"
MARKERS = re.compile(rf"{WRAPPER}\(|{LAZY}\(|^\s*from ({'|'.join(FAST_PATH)})[\s.]", re.MULTILINE)


def module_of(name: str) -> str:
    """`causal-conv1d` (a hub kernel name) or `fla.ops.x` -> the top-level module."""
    return name.replace("-", "_").split(".")[0]


def _string_args(call: ast.Call) -> list[str]:
    return [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]


def _called(node: ast.AST, name: str) -> ast.Call | None:
    if isinstance(node, ast.Call):
        func = node.func
        called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        if called == name:
            return node
    return None


def _wrapped(node: ast.AST) -> list[tuple[str, str, str]]:
    """A function wrapped by use_kernel_func_from_hub_with_fallback("NAME", "PACKAGE")."""
    found = []
    for decorator in getattr(node, "decorator_list", []):
        call = _called(decorator, WRAPPER)
        args = _string_args(call) if call else []
        if len(args) >= 2:
            found.append((getattr(node, "name", ""), module_of(args[1]), args[0]))
    return found


def _imported(node: ast.AST) -> list[tuple[str, str, str]]:
    """`from fla.ops.x import name [as other]` and the like."""
    if not isinstance(node, ast.ImportFrom) or not node.module or \
            module_of(node.module) not in FAST_PATH:
        return []
    return [(a.asname or a.name, module_of(node.module), a.name) for a in node.names]


def _lazy_kernels(tree: ast.AST) -> dict[str, str]:
    """`name = lazy_load_kernel("causal-conv1d")` -> {name: module}."""
    found = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assign):
            continue
        call = _called(node.value, LAZY)
        if call is not None and _string_args(call):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = module_of(_string_args(call)[0])
    return found


def needs_in(source: str) -> list[tuple[str, str, str]]:
    """(global name in the module, fast-path module, function) for each need, in order."""
    tree = ast.parse(source)
    found: dict[tuple[str, str, str], None] = {}
    lazy = _lazy_kernels(tree)
    for node in ast.walk(tree):
        for need in (*_wrapped(node), *_imported(node)):
            found[need] = None
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                node.value.id in lazy:
            found[(node.attr, lazy[node.value.id], node.attr)] = None
    return list(found)


def transformers_view(value: Any) -> bool | None:
    """What transformers decided for one wrapped function: True (the package's kernel), False
    (its torch code), None (not a wrapper: judge by the value itself)."""
    seen = 0
    while callable(value) and seen < 8:
        if inspect.isfunction(value) and value.__closure__:
            nonlocals = inspect.getclosurevars(value).nonlocals
            if "is_new_implementation" in nonlocals:
                return bool(nonlocals["is_new_implementation"])
        value = getattr(value, "__wrapped__", None)
        seen += 1
    return None


def available(module: Any, name: str, package: str) -> bool:
    value = getattr(module, name, None)
    decided = transformers_view(value)
    if decided is not None:
        return decided
    return value is not None and getattr(value, "__module__", "").split(".")[0] == package


def why_not(package: str, function: str) -> dict[str, str]:
    """Why a package's function is unavailable: not installed, or the import error."""
    try:
        root = importlib.import_module(package)
    except ModuleNotFoundError as exc:
        if exc.name == package:
            return {"reason": "not-installed", "message": f"No module named '{package}'"}
        return {"reason": "import", "message": f"{type(exc).__name__}: {exc}"}
    except Exception as exc:
        return {"reason": "import", "message": f"{type(exc).__name__}: {exc}"}
    try:
        from transformers.integrations.hub_kernels import _KERNELS_INTERNAL_PATH_MAPPINGS as paths
    except Exception:
        paths = {}
    internal = paths.get(function)
    try:
        if internal:
            importlib.import_module(f"{package}.{internal}")
        elif not hasattr(root, function):
            return {"reason": "missing", "message": f"{package} has no {function}"}
    except Exception as exc:
        return {"reason": "import", "message": f"{type(exc).__name__}: {exc}"}
    return {"reason": "unknown", "message": f"transformers did not take {function} from "
                                            f"{package}"}


def fast_path_types(root: Path) -> list[str]:
    """The model types whose modeling code in this transformers uses a fast-path package."""
    found = []
    for path in sorted(root.glob("models/*/modeling_*.py")):
        if path.stem == f"modeling_{path.parent.name}" and MARKERS.search(path.read_text()):
            found.append(path.parent.name)
    return found


def examine(model_type: str) -> dict[str, Any]:
    out: dict[str, Any] = {"model_type": model_type, "transformers": None, "known": None,
                           "module": None, "needs": [], "fast_path_types": [], "error": None,
                           "is_fast_path_available": None}
    try:
        import transformers
        from transformers.models.auto import configuration_auto as auto
    except Exception as exc:
        out["error"] = {"reason": "no-transformers", "message": f"{type(exc).__name__}: {exc}"}
        return out
    out["transformers"] = transformers.__version__
    root = Path(transformers.__file__).parent
    out["known"] = model_type in auto.CONFIG_MAPPING_NAMES
    if not out["known"]:
        out["fast_path_types"] = fast_path_types(root)
        return out
    name = auto.model_type_to_module_name(model_type)
    source = root / "models" / name / f"modeling_{name}.py"
    out["module"] = f"transformers.models.{name}.modeling_{name}"
    if not source.is_file():
        return out  # a configuration-only type: no modeling code, no kernels
    try:
        module = importlib.import_module(out["module"])
    except Exception as exc:
        out["error"] = {"reason": "import", "message": f"{type(exc).__name__}: {exc}"}
        return out
    flag = getattr(module, "is_fast_path_available", None)
    out["is_fast_path_available"] = flag if isinstance(flag, bool) else None
    seen = set()
    for global_name, package, function in needs_in(source.read_text()):
        if (package, function) in seen:
            continue
        seen.add((package, function))
        need: dict[str, Any] = {"module": package, "function": function,
                                "available": available(module, global_name, package)}
        if not need["available"]:
            need.update(why_not(package, function))
        out["needs"].append(need)
    return out


if __name__ == "__main__":
    print("WHEELSMITH-MODEL " + json.dumps(examine(sys.argv[1])), flush=True)
