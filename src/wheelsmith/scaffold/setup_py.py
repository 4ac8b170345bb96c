"""Read a package's setup.py without running it (stdlib ast): what its build needs.

Each finding keeps the setup.py line it comes from and says what it means for the recipe: the
variables that make it compile CUDA without a GPU (`<PKG>_FORCE_BUILD`, `FORCE_CUDA`,
`WITH_CUDA`), its own arch knob and hard-coded `-gencode` family, `use_ninja=False`,
`setup_requires`, a `bare_metal_version`-style CUDA probe, prebuilt-wheel downloads, the
extensions (and which of them hold no CUDA sources: `build.host_only`), and sources or
submodule directories the sdist lacks.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from wheelsmith.build.compilesetup import ninja_switched_off
from wheelsmith.errors import SourceError
from wheelsmith.scaffold.extensions import (
    Extension,
    assignments,
    dotted,
    extensions_of,
    missing_parts,
    strings,
)
from wheelsmith.untrusted import parse_python

GENCODE_RE = re.compile(r"arch=compute_(\d+[af]?),code=sm_\d+[af]?")
ARCH_FLAG_RE = re.compile(r"^-arch[= ](?:compute|sm)_(\d+[af]?)$")  # nvcc -arch=compute_50
# variables that make setup.py build its CUDA extensions where no GPU is visible
FORCE_RE = re.compile(r"(^|_)FORCE_BUILD$|(^|_)FORCE_CUDA(_EXT|_EXTENSIONS?)?$|^WITH_CUDA$"
                      r"|^BUILD_CUDA_EXT$")
ARCH_KNOB_RE = re.compile(r"^[A-Z][A-Z0-9_]*_CUDA_ARCHS?$|^[A-Z][A-Z0-9_]*_ARCH_LIST$")
DOWNLOADS = ("urlretrieve", "urlopen", "requests.get", "urllib.request.urlretrieve")
# what every wheelsmith toolchain holds: setup_requires of these needs no download
PROVIDED = {"torch", "ninja", "setuptools", "wheel", "packaging", "pip"}


@dataclass(frozen=True, slots=True)
class Setup:
    """What setup.py says about its build."""

    env: tuple[tuple[str, str, int], ...]  # variable, value, line
    gencode: tuple[str, ...]  # "90", "100a"
    gencode_line: int | None
    arch_list_line: int | None  # where it reads TORCH_CUDA_ARCH_LIST itself
    arch_knob: tuple[str, int] | None
    no_ninja_line: int | None
    setup_requires: tuple[tuple[str, ...], int] | None  # the ones a toolchain does not hold
    probe_line: int | None  # bare_metal_version used where it may be unset
    download_line: int | None
    psutil_line: int | None
    extensions: tuple[Extension, ...]
    missing: tuple[str, ...]  # sources and include directories the sdist lacks
    cuda_files: int  # .cu files in the sdist


def read_setup(tree: Path) -> Setup:
    """Read `tree`/setup.py (without running it)."""
    setup = tree / "setup.py"
    if not setup.is_file():
        held = ", ".join(sorted(p.name for p in tree.iterdir()))
        raise SourceError(f"the sdist has no setup.py (it holds {held})",
                          hint="wheelsmith's recipes build torch CUDA extensions from setup.py; "
                               "write the recipe by hand (docs/recipes.md)")
    module = parse_python(setup.read_text(errors="replace"), f"{tree.name}/setup.py")
    names = assignments(module)
    reads = _env_reads(module)
    extensions = extensions_of(module, names)
    gencode = _gencode(module)
    knob = next(((v, line) for v, (line, _) in reads.items()
                 if ARCH_KNOB_RE.match(v) and v != "TORCH_CUDA_ARCH_LIST"), None)
    return Setup(
        env=tuple((v, value or _default_value(v), line) for v, (line, value) in reads.items()
                  if FORCE_RE.search(v)),
        gencode=tuple(sorted({cc for cc, _ in gencode}, key=_cc_key)),
        gencode_line=min((line for _, line in gencode), default=None),
        arch_list_line=next((n.lineno for n in ast.walk(module) if isinstance(n, ast.Constant)
                             and n.value == "TORCH_CUDA_ARCH_LIST"), None),
        arch_knob=knob,
        no_ninja_line=ninja_switched_off(setup),
        setup_requires=_setup_requires(module),
        probe_line=_used_unset(module, "bare_metal_version"),
        download_line=next((n.lineno for n in ast.walk(module) if isinstance(n, ast.Call)
                            and dotted(n.func) in DOWNLOADS), None),
        psutil_line=next((n.lineno for n in ast.walk(module) if isinstance(n, ast.Import)
                          and any(a.name == "psutil" for a in n.names)), None),
        extensions=extensions,
        missing=missing_parts(tree, module, names, extensions),
        cuda_files=sum(1 for p in tree.rglob("*.cu") if p.is_file()),
    )


def _default_value(variable: str) -> str:
    """The Dao-AILab packages compare with the literal TRUE; the others read 1."""
    return "TRUE" if variable.endswith("FORCE_BUILD") else "1"


def _cc_key(cc: str) -> tuple[int, str]:
    digits = cc.rstrip("af")
    return int(digits), cc[len(digits):]


# --- environment variables -------------------------------------------------------------------


def _env_name(node: ast.expr) -> str | None:
    """The variable an expression reads: os.getenv("X"), os.environ.get("X"), os.environ["X"]
    (also through .lower()/.upper()/.strip())."""
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
            node.func.attr in ("lower", "upper", "strip") and not node.args:
        node = node.func.value
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
            and isinstance(node.args[0].value, str) and (
            dotted(node.func) in ("os.getenv", "getenv") or dotted(node.func).endswith(
                "environ.get")):
        return node.args[0].value
    if isinstance(node, ast.Subscript) and dotted(node.value).endswith("environ") and \
            isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
        return node.slice.value
    return None


def _env_reads(module: ast.Module) -> dict[str, tuple[int, str | None]]:
    """Each variable setup.py reads: its first line and the string it is compared with."""
    reads: dict[str, tuple[int, str | None]] = {}
    for node in ast.walk(module):
        name = _env_name(node) if isinstance(node, ast.expr) else None
        if isinstance(node, ast.expr) and name is not None and name not in reads:
            reads[name] = (node.lineno, None)
    for node in ast.walk(module):
        if not isinstance(node, ast.Compare) or not isinstance(node.ops[0], ast.Eq | ast.In):
            continue
        operands = [node.left, *node.comparators]
        named = [n for n in map(_env_name, operands) if n is not None]
        values = [c.value for o in operands for c in ([o] if isinstance(o, ast.Constant) else
                  o.elts if isinstance(o, ast.Tuple | ast.List | ast.Set) else [])
                  if isinstance(c, ast.Constant) and isinstance(c.value, str)]
        for name in named:
            if values and reads[name][1] is None:
                reads[name] = (reads[name][0], values[0])
    return reads


# --- arch lists, setup_requires, the CUDA probe ----------------------------------------------


def _constants(module: ast.Module) -> Iterator[tuple[str, int]]:
    for node in ast.walk(module):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value, node.lineno


def _gencode(module: ast.Module) -> list[tuple[str, int]]:
    return [(match[1], line) for text, line in _constants(module)
            for match in [*GENCODE_RE.finditer(text), *ARCH_FLAG_RE.finditer(text)]]


def _setup_requires(module: ast.Module) -> tuple[tuple[str, ...], int] | None:
    for node in ast.walk(module):
        if isinstance(node, ast.keyword) and node.arg == "setup_requires":
            wanted = [re.split(r"[<>=!~;\[ ]", s, maxsplit=1)[0] for s in strings(node.value, {})]
            needed = tuple(w for w in wanted if w.lower() not in PROVIDED)
            return (needed, node.value.lineno) if needed else None
    return None


def _used_unset(module: ast.Module, name: str) -> int | None:
    """The line where `name`, assigned only under `if CUDA_HOME is not None:`, is read
    outside it (a NameError without nvcc)."""
    guarded: set[int] = set()
    assigned = False
    for node in ast.walk(module):
        if isinstance(node, ast.If) and "CUDA_HOME is not None" in ast.unparse(node.test):
            for inner in ast.walk(node):
                guarded.add(id(inner))
                if isinstance(inner, ast.Name) and inner.id == name and isinstance(
                        inner.ctx, ast.Store):
                    assigned = True
    return next((node.lineno for node in ast.walk(module)
                 if assigned and isinstance(node, ast.Name) and node.id == name
                 and isinstance(node.ctx, ast.Load) and id(node) not in guarded), None)
