"""What setup.py runs of the sdist's own Python, and what that imports from outside the sdist,
read without running it: setup.py, then each module of the sdist it imports (its packages'
`__init__.py` first, relative imports resolved), followed through their own imports. setup.py's
imports count wherever they are (its functions run in the build); a module's only where they
run when it is imported (not in its functions). For `recipe new`'s readers of the variables
that switch CUDA on (switches.py) and of the build requirements setup.py imports
(buildsystem.py)."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from wheelsmith.errors import UntrustedDataError
from wheelsmith.scaffold.extensions import dotted, vendor_branches
from wheelsmith.untrusted import parse_python

MAX_MODULES = 400  # of the sdist's modules followed (deepspeed's setup.py runs ~60)
MAX_BYTES = 1 << 20  # of one module read
CAUGHT = ("ImportError", "ModuleNotFoundError", "Exception", "BaseException")


@dataclass(frozen=True, slots=True)
class Source:
    """One file setup.py runs: its path in the sdist, its syntax tree, its package (dotted, ""
    at the top: what its relative imports start from)."""

    path: str
    module: ast.Module
    package: str

    def imports(self) -> list[ast.Import | ast.ImportFrom]:
        """The imports that run, by line: setup.py's all, a module's outside its functions."""
        nodes = ast.walk(self.module) if self.path == "setup.py" else _run_on_import(self.module)
        return sorted((n for n in nodes if isinstance(n, ast.Import | ast.ImportFrom)),
                      key=lambda n: (n.lineno, n.col_offset))


@dataclass(frozen=True, slots=True)
class Import:
    """A module of outside the sdist that setup.py runs an import of."""

    name: str  # as imported: numpy.distutils.core
    where: str  # setup.py:3

    @property
    def top(self) -> str:
        return self.name.split(".")[0]


def setup_run(tree: Path) -> list[Source]:
    """setup.py and the sdist's modules it runs, in the order it imports them (none without a
    setup.py Python can read)."""
    setup = _source(tree, tree / "setup.py", "")
    if setup is None:
        return []
    found, queue = {setup.path: setup}, [setup]
    while queue and len(found) < MAX_MODULES:
        source = queue.pop(0)
        for file, package in _own_files(tree, source):
            key = str(file.relative_to(tree))
            if key not in found and (nxt := _source(tree, file, package)) is not None:
                found[key] = nxt
                queue.append(nxt)
    return list(found.values())[:MAX_MODULES]


def outside_imports(tree: Path) -> tuple[Import, ...]:
    """What setup.py runs imports of modules outside the sdist and the standard library, each
    where it is first imported; not one inside a `try:` that catches its ImportError, nor one
    in another vendor's branch (`if IS_ROCM:`)."""
    found: dict[str, Import] = {}
    for source in setup_run(tree):
        skipped = caught_imports(source.module) | vendor_branches(source.module)
        for node in source.imports():
            if id(node) in skipped or (isinstance(node, ast.ImportFrom) and node.level):
                continue
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [f"{node.module}.{a.name}" for a in node.names] if node.module else []
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and not _own(tree, top):
                    found.setdefault(name, Import(name, f"{source.path}:{node.lineno}"))
    return tuple(found.values())


def caught_imports(module: ast.Module) -> set[int]:
    """The imports inside a `try:` whose handlers catch their ImportError."""
    inside: set[int] = set()
    for node in ast.walk(module):
        if isinstance(node, ast.Try) and any(
                h.type is None or any(isinstance(n, ast.expr) and dotted(n) in CAUGHT
                                      for n in ast.walk(h.type))
                for h in node.handlers):
            inside.update(id(n) for stmt in node.body for n in ast.walk(stmt)
                          if isinstance(n, ast.Import | ast.ImportFrom))
    return inside


def _run_on_import(module: ast.Module) -> Iterator[ast.AST]:
    """The nodes of a module that run when it is imported: all but its functions' bodies."""
    stack: list[ast.AST] = [module]
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            stack.extend(reversed(list(ast.iter_child_nodes(node))))


def _source(tree: Path, file: Path, package: str) -> Source | None:
    if not file.is_file() or file.is_symlink() or file.stat().st_size > MAX_BYTES:
        return None
    path = str(file.relative_to(tree))
    try:
        return Source(path, parse_python(file.read_text(errors="replace"), path), package)
    except UntrustedDataError:
        return None


def _own_files(tree: Path, source: Source) -> Iterator[tuple[Path, str]]:
    """The sdist's files an import of `source` runs, each with its package."""
    for node in source.imports():
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            base = _relative_base(source.package, node.level)
            if base is None:
                continue
            stem = ".".join(filter(None, [base, node.module or ""]))
            names = [stem, *(f"{stem}.{a.name}" if stem else a.name for a in node.names)]
        for name in names:
            yield from _files_of(tree, name)


def _relative_base(package: str, level: int) -> str | None:
    """What `from .{level} import` starts from in `package`; None: above the sdist's top."""
    if not level:
        return ""
    parts = package.split(".") if package else []
    return ".".join(parts[:len(parts) - level + 1]) if level - 1 <= len(parts) else None


def _files_of(tree: Path, name: str) -> Iterator[tuple[Path, str]]:
    """The files importing `name` runs: each package's `__init__.py` on the way, then the
    module (a file, or a package's `__init__.py`)."""
    parts = [p for p in name.split(".") if p]
    if not parts or not all(p.isidentifier() for p in parts):
        return
    for depth in range(1, len(parts) + 1):
        here = tree.joinpath(*parts[:depth])
        package = ".".join(parts[:depth])
        if (here / "__init__.py").is_file():
            yield here / "__init__.py", package
        elif here.with_suffix(".py").is_file():
            yield here.with_suffix(".py"), ".".join(parts[:depth - 1])
            return
        elif not here.is_dir():
            return


def _own(tree: Path, top: str) -> bool:
    """Whether the sdist holds the top-level module `top` (a file, a package, a directory)."""
    return top.isidentifier() and ((tree / f"{top}.py").is_file() or (tree / top).is_dir())
