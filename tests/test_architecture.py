"""The package's layout, read from its imports (stdlib ast): the parts of docs/architecture.md,
what each may import, no import circles, and rooms of a size one can read."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGE = REPO / "src" / "wheelsmith"
# The foundation every part uses; the other top-level modules sit above build/.
FOUNDATION = {"wheelsmith", "wheelsmith.__init__", "wheelsmith.arch", "wheelsmith.cmd",
              "wheelsmith.procs", "wheelsmith.errors", "wheelsmith.files",
              "wheelsmith.document", "wheelsmith.wheelfile", "wheelsmith.inventory",
              "wheelsmith.locations", "wheelsmith.locks", "wheelsmith.numbers",
              "wheelsmith.untrusted",
              "wheelsmith.untrusted.urls", "wheelsmith.untrusted.web",
              "wheelsmith.untrusted.addresses", "wheelsmith.untrusted.text",
              "wheelsmith.untrusted.local", "wheelsmith.untrusted.provenance",
              "wheelsmith.untrusted.connections", "wheelsmith.untrusted.elf",
              "wheelsmith.untrusted.markup", "wheelsmith.untrusted.ziplayout",
              "wheelsmith.untrusted.redaction", "wheelsmith.untrusted.fatbin",
              "wheelsmith.untrusted.linkage"}
# What each part may import besides itself (docs/architecture.md, "What may import what").
ALLOWED = {
    "foundation": set(),
    "recipes": {"foundation"},
    "toolchain": {"foundation"},
    "index": {"foundation", "recipes", "toolchain"},
    "doctor": {"foundation", "recipes", "toolchain", "index"},
    "builder": {"foundation", "recipes", "toolchain"},
    "deliver": {"foundation", "recipes", "toolchain", "index", "builder"},
    "install": {"foundation", "recipes", "toolchain", "index", "builder", "deliver"},
    "scaffold": {"foundation", "recipes", "toolchain", "builder"},
    "fleet": {"foundation", "recipes", "toolchain", "index", "builder", "deliver"},
    "cli": {"foundation", "recipes", "toolchain", "index", "doctor", "builder", "deliver",
            "install", "scaffold", "fleet"},
    "__main__": {"cli"},
    "resources": set(),  # scripts other Pythons run: the standard library only
}
MAX_TOP_LEVEL = 15
MAX_MODULE_LINES = 400
MAX_FUNCTION_BODY = 50


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports_of(name: str, path: Path) -> Iterator[str]:
    """Every wheelsmith module `name` imports, anywhere in it (lazy imports count too)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    known = modules()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                       for a in node.names]
        else:
            continue
        yield from (t for t in targets if t == "wheelsmith" or t.startswith("wheelsmith."))


def graph() -> dict[str, set[str]]:
    return {name: set(imports_of(name, path)) - {name} for name, path in modules().items()}


def part_of(module: str) -> str:
    if module in FOUNDATION or module.startswith("wheelsmith.untrusted."):
        return "foundation"  # untrusted/: one foundation module, grown into a package
    return module.split(".")[1]


def test_the_parts_import_only_what_the_architecture_page_allows() -> None:
    wrong = sorted(f"{module} imports {target} ({part_of(module)} may not import "
                   f"{part_of(target)})"
                   for module, targets in graph().items() for target in targets
                   if part_of(target) != part_of(module)
                   and part_of(target) not in ALLOWED[part_of(module)])
    assert wrong == []


def test_every_module_belongs_to_a_part_the_architecture_page_names() -> None:
    assert sorted({part_of(m) for m in modules()} - set(ALLOWED)) == []


def test_the_imports_have_no_circles() -> None:
    edges = graph()
    circles: list[list[str]] = []
    state: dict[str, str] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                circles.append([*trail[trail.index(nxt):], nxt])
            elif nxt not in state:
                visit(nxt, [*trail, nxt])
        state[node] = "done"

    for start in sorted(edges):
        if start not in state:
            visit(start, [start])
    assert circles == []


def test_the_top_level_holds_only_a_few_modules() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL, top


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")),
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_outgrew_its_room(path: Path) -> None:
    assert len(path.read_text().splitlines()) <= MAX_MODULE_LINES


def test_no_function_body_is_longer_than_a_screen() -> None:
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = node.body[1:] if ast.get_docstring(node) and len(node.body) > 1 \
                    else node.body
                lines = (node.end_lineno or 0) - body[0].lineno + 1
                if lines > MAX_FUNCTION_BODY:
                    long.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name}: {lines}")
    assert long == []
