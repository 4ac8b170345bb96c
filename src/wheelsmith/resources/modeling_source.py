"""Read by the Python that `wheelsmith doctor` examines (through model_needs.py): which
fast-path functions a transformers modeling module's source reaches, and how.

Each function it wraps with `use_kernel_func_from_hub_with_fallback("NAME", "PACKAGE")`
(transformers 5), each name it imports from fla, causal_conv1d, mamba_ssm or flash_attn, and
each attribute it reads from a `lazy_load_kernel(...)` result (transformers 4). Standard library
only; never imports wheelsmith.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

FAST_PATH = ("fla", "causal_conv1d", "mamba_ssm", "flash_attn")
WRAPPER = "use_kernel_func_from_hub_with_fallback"
LAZY = "lazy_load_kernel"
MARKERS = re.compile(rf"{WRAPPER}\(|{LAZY}\(|^\s*from ({'|'.join(FAST_PATH)})[\s.]", re.MULTILINE)


@dataclass(frozen=True)
class Need:
    """One fast-path function the modeling module reaches, and how it reaches it."""

    entry: str  # the modeling module's global: the wrapped torch function or the imported name
    package: str  # the fast-path module: fla, causal_conv1d, ...
    function: str  # the package's name for it
    kind: str  # wrapped | imported | lazy
    path: str | None = None  # the module it is imported from; for lazy, the kernel's name
    arity: int | None = None  # a wrapped torch function's required positional parameters


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


def _internal_path(call: ast.Call) -> str | None:
    """use_kernel_func_from_hub_with_fallback(NAME, PACKAGE, internal_path)'s third argument."""
    strings = _string_args(call)
    keyword = [k.value.value for k in call.keywords if k.arg == "internal_path"
               and isinstance(k.value, ast.Constant) and isinstance(k.value.value, str)]
    found = strings[2:3] or keyword
    return found[0] if found else None


def _arity(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """The required positional parameters of a def, read from its source: the decorators'
    wrappers may answer inspect with (*args, **kwargs)."""
    positional = [*node.args.posonlyargs, *node.args.args]
    return len(positional) - len(node.args.defaults)


def _wrapped(node: ast.AST) -> list[Need]:
    """A function wrapped by use_kernel_func_from_hub_with_fallback("NAME", "PACKAGE")."""
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return []
    found = []
    for decorator in node.decorator_list:
        call = _called(decorator, WRAPPER)
        args = _string_args(call) if call else []
        if call is not None and len(args) >= 2:
            package, internal = module_of(args[1]), _internal_path(call)
            found.append(Need(node.name, package, args[0], "wrapped",
                              f"{package}.{internal}" if internal else None, _arity(node)))
    return found


def _imported(node: ast.AST) -> list[Need]:
    """`from fla.ops.x import name [as other]` and the like."""
    if not isinstance(node, ast.ImportFrom) or not node.module or \
            module_of(node.module) not in FAST_PATH:
        return []
    return [Need(a.asname or a.name, module_of(node.module), a.name, "imported", node.module)
            for a in node.names if a.name != "*"]


def _lazy_kernels(tree: ast.AST) -> dict[str, str]:
    """`name = lazy_load_kernel("causal-conv1d")` -> {name: kernel name}."""
    found = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assign):
            continue
        call = _called(node.value, LAZY)
        if call is not None and _string_args(call):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = _string_args(call)[0]
    return found


def _lazy_reads(node: ast.AST, lazy: dict[str, str]) -> list[Need]:
    """`kernel.name` or `getattr(kernel, "name", ...)` of a lazily loaded kernel."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
            node.value.id in lazy:
        kernel, attribute = lazy[node.value.id], node.attr
    elif (call := _called(node, "getattr")) is not None and len(call.args) >= 2 and \
            isinstance(call.args[0], ast.Name) and call.args[0].id in lazy and \
            isinstance(call.args[1], ast.Constant) and isinstance(call.args[1].value, str):
        kernel, attribute = lazy[call.args[0].id], call.args[1].value
    else:
        return []
    return [Need(attribute, module_of(kernel), attribute, "lazy", kernel)]


def needs_in(source: str) -> list[Need]:
    """Each need of a modeling module's source, in order, once per (package, function)."""
    tree = ast.parse(source)
    lazy = _lazy_kernels(tree)
    found: dict[tuple[str, str], Need] = {}
    for node in ast.walk(tree):
        for need in (*_wrapped(node), *_imported(node), *_lazy_reads(node, lazy)):
            found.setdefault((need.package, need.function), need)
    return list(found.values())



def fast_path_types(root: Path) -> list[str]:
    """The model types whose modeling code in this transformers uses a fast-path package."""
    found = []
    for path in sorted(root.glob("models/*/modeling_*.py")):
        if path.stem == f"modeling_{path.parent.name}" and MARKERS.search(path.read_text()):
            found.append(path.parent.name)
    return found
