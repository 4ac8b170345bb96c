"""Edits to an sdist's Python source that `recipe new` can make exactly: a one-line node's
text replaced in place (ast's lines and UTF-8 byte columns), and pkg_resources, which the
toolchain's setuptools no longer has, replaced by importlib.metadata and packaging (in setup.py,
and in the package's own modules, whose wheel would not import beside setuptools 81 or later).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from pathlib import Path

from wheelsmith.errors import UntrustedDataError
from wheelsmith.recipes.patch import file_diff, read_exactly
from wheelsmith.scaffold.owntree import own_files
from wheelsmith.scaffold.setup_py import pkg_resources_imports
from wheelsmith.untrusted import parse_python


def lines_of(text: str) -> list[str]:
    """`text`'s lines as ast numbers them (str.splitlines also splits at a form feed)."""
    return re.findall(r"[^\n]*\n|[^\n]+$", text)


def in_place(text: str, edits: Sequence[tuple[ast.expr, str]]) -> str:
    """`text` with each one-line node's source replaced by its new text (ast's columns are
    UTF-8 bytes)."""
    lines = lines_of(text)
    for node, new in sorted(edits, key=lambda e: (e[0].lineno, e[0].col_offset), reverse=True):
        row = lines[node.lineno - 1].encode()
        lines[node.lineno - 1] = (row[:node.col_offset].decode() + new +
                                  row[node.end_col_offset or 0:].decode())
    return "".join(lines)


def source_of(text: str, node: ast.expr) -> str:
    row = lines_of(text)[node.lineno - 1].encode()
    return row[node.col_offset:node.end_col_offset].decode()


def one_line(node: ast.AST) -> bool:
    return getattr(node, "lineno", 0) == getattr(node, "end_lineno", -1)


# what stands in for each name of pkg_resources setup.py files use
PKG_RESOURCES = {
    "parse_version": '__import__("packaging.version").version.parse',
    "packaging": '__import__("packaging.version")',
    "DistributionNotFound": '__import__("importlib.metadata").metadata.PackageNotFoundError',
    "get_distribution": 'lambda name: __import__("types").SimpleNamespace(version=__import__('
                        '"importlib.metadata").metadata.version(name))',
}


def without_pkg_resources(text: str, name: str) -> str | None:
    """Each `import pkg_resources` (a line of its own) becomes a namespace of the names the
    file uses from it, `from pkg_resources import a, b` an assignment of each; None when it
    uses a name nothing here stands in for."""
    module = parse_python(text, name)
    lines = lines_of(text)
    for _, node in reversed(pkg_resources_imports(module)):
        row = lines[node.lineno - 1]
        if not one_line(node) or row.strip() != ast.get_source_segment(text, node):
            return None
        bound = _bindings(module, node)
        if bound is None:
            return None
        indent = row[:len(row) - len(row.lstrip())]
        lines[node.lineno - 1] = f"{indent}{'; '.join(bound)}\n"
    return "".join(lines)


def _bindings(module: ast.Module, node: ast.Import | ast.ImportFrom) -> list[str] | None:
    """The assignments that replace one pkg_resources import, or None."""
    if isinstance(node, ast.ImportFrom):
        names = [(a.asname or a.name, a.name) for a in node.names]
        if not all(name in PKG_RESOURCES for _, name in names):
            return None
        return [f"{bound} = {PKG_RESOURCES[name]}" for bound, name in names]
    alias = next(a for a in node.names if a.name == "pkg_resources")
    if len(node.names) != 1:
        return None
    bound = alias.asname or "pkg_resources"
    used = sorted({n.attr for n in ast.walk(module) if isinstance(n, ast.Attribute)
                   and isinstance(n.value, ast.Name) and n.value.id == bound})
    if not all(name in PKG_RESOURCES for name in used):
        return None
    members = ", ".join(f"{name}={PKG_RESOURCES[name]}" for name in used)
    return [f'{bound} = __import__("types").SimpleNamespace({members})']


def _own_python(tree: Path) -> list[Path]:
    """The package's own modules: not setup.py, its tests, examples or vendored code."""
    return own_files(tree, lambda path: path.suffix == ".py" and path.name != "setup.py",
                     also_not={"examples", "docs", "benchmarks", "build"})


def runtime_pkg_resources_diff(tree: Path) -> str:
    """The diff over the package's own modules that import pkg_resources (warp-rnnt's
    `from pkg_resources import get_distribution` in its __init__): setuptools 81 and later
    have none, so the wheel would not import where a current setuptools is installed (the
    smoke test's environment among them). "" when no module imports it; a module that
    uses a name nothing stands in for is left as it is (its smoke test says so)."""
    diff: list[str] = []
    for file in _own_python(tree):
        text = read_exactly(file)
        if "pkg_resources" not in text:
            continue
        relative = file.relative_to(tree)
        try:
            changed = without_pkg_resources(text, str(relative))
        except UntrustedDataError:  # not Python this interpreter reads (a Python 2 file)
            continue
        if changed is not None:
            diff.append(file_diff(str(relative), text, changed))
    return "".join(diff)
