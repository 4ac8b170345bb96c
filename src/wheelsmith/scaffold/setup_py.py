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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeGuard

from wheelsmith.builder.cmakebuild import backend, uses_cmake
from wheelsmith.errors import SourceError
from wheelsmith.scaffold.env_reads import env_name, env_reads, local_modules
from wheelsmith.scaffold.extensions import (
    Extension,
    assignments,
    compiled_files,
    dotted,
    extensions_of,
    missing_parts,
    strings,
    vendor_branches,
)
from wheelsmith.scaffold.imports import caught_imports
from wheelsmith.scaffold.switches import setup_switches
from wheelsmith.untrusted import parse_python

GENCODE_RE = re.compile(r"arch=compute_(\d+[af]?),code=sm_\d+[af]?")
ARCH_FLAG_RE = re.compile(r"^-arch[= ](?:compute|sm)_(\d+[af]?)$")  # nvcc -arch=compute_50
ARCH_KNOB_RE = re.compile(r"^[A-Z][A-Z0-9_]*_CUDA_ARCHS?$|^[A-Z][A-Z0-9_]*_ARCH_LIST$")
DOWNLOADS = ("urlretrieve", "urlopen", "requests.get", "urllib.request.urlretrieve")
# what every wheelsmith toolchain holds: setup_requires of these needs no download
PROVIDED = {"torch", "ninja", "setuptools", "wheel", "packaging", "pip"}
BUILD_DIR_RE = re.compile(r"^[A-Z][A-Z0-9_]*_BUILD_DIR$")  # natten's NATTEN_BUILD_DIR
OLD_STD_RE = re.compile(r"(-std=(?:c|gnu)\+\+)(?:98|03|0x|11|1y|14|1z|17)\b")  # before C++20


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
    psutil_line: int | None  # an `import psutil` nothing catches the ImportError of
    extensions: tuple[Extension, ...]
    missing: tuple[str, ...]  # sources and include directories the sdist lacks
    cuda_files: int  # .cu files in the sdist
    compiled_files: int = 0  # files of the sdist the extensions' sources name (globs expanded)
    old_std_line: int | None = None  # -std=c++17 (or older) for the CUDA build
    pkg_resources_line: int | None = None  # setuptools >= 81 has no pkg_resources
    needs_gpu_line: int | None = None  # a raise unless torch.cuda.is_available()
    build_dir_var: tuple[str, int] | None = None  # where it takes its CMake build directory
    no_ninja: str = "False"  # what setup.py gives use_ninja there (`use_ninja` of deepspeed)
    # where setup.py, or a module of its own it imports, builds extensions it does not declare
    # itself (transformer-engine-torch's build_tools/pytorch.py makes its CUDAExtension)
    extension_build: str | None = None

    @property
    def own_cuda_way(self) -> bool:
        """setup.py reads a CUDA switch of its own (FORCE_CUDA, WITH_CUDA, ...) or its own arch
        knob (natten asks for a GPU only to choose the arch NATTEN_CUDA_ARCH gives)."""
        return self.arch_knob is not None or any(
            "CUDA" in variable.upper() for variable, _, _ in self.env)


# the backends that build a pure-Python wheel from pyproject.toml alone (their first module)
PURE_BACKENDS = ("hatchling", "flit_core", "setuptools", "pdm", "poetry", "uv_build")


def read_setup(tree: Path) -> Setup:
    """Read `tree`/setup.py (without running it); nothing to read for a build that runs CMake
    without one (scikit-build-core: scaffold/cmake.py reads that side)."""
    setup = tree / "setup.py"
    if not setup.is_file():
        return _without_setup_py(tree)
    text = setup.read_text(errors="replace")
    module = parse_python(text, f"{tree.name}/setup.py")
    names = assignments(module)
    reads = env_reads(module)
    extensions = extensions_of(module, names)
    gencode = _gencode(module)
    knob = next(((v, line) for v, (line, _) in reads.items()
                 if ARCH_KNOB_RE.match(v) and v != "TORCH_CUDA_ARCH_LIST"), None)
    elsewhere = vendor_branches(module)  # not the CUDA build's
    found = Setup(
        env=setup_switches(module),
        gencode=tuple(sorted({cc for cc, _ in gencode}, key=_cc_key)),
        gencode_line=min((line for _, line in gencode), default=None),
        arch_list_line=reads_arch_list(module),
        arch_knob=knob,
        no_ninja_line=_ninja_not_on(module),
        no_ninja=_ninja_value(module),
        setup_requires=_setup_requires(module),
        probe_line=_used_unset(module, "bare_metal_version"),
        download_line=next((n.lineno for n in ast.walk(module) if isinstance(n, ast.Call)
                            and dotted(n.func) in DOWNLOADS and id(n) not in elsewhere), None),
        psutil_line=next((n.lineno for n in ast.walk(module) if isinstance(n, ast.Import)
                          and any(a.name == "psutil" for a in n.names)
                          and id(n) not in caught_imports(module)), None),
        extensions=extensions,
        missing=missing_parts(tree, module, names, extensions),
        cuda_files=sum(1 for p in tree.rglob("*.cu") if p.is_file()),
        extension_build=_extension_build(tree, setup),
        compiled_files=compiled_files(tree, extensions),
        old_std_line=next((line for text, line, node in _constants(module)
                           if OLD_STD_RE.search(text) and id(node) not in elsewhere), None),
        pkg_resources_line=next((line for line, _ in pkg_resources_imports(module)), None),
        build_dir_var=next(((v, line) for v, (line, _) in reads.items()
                            if BUILD_DIR_RE.search(v)), None),
    )
    needs_gpu = gpu_required(module, switched=found.own_cuda_way)
    return replace(found, needs_gpu_line=needs_gpu[0].lineno if needs_gpu else None)


def _without_setup_py(tree: Path) -> Setup:
    """An sdist without setup.py: a CMake build (scikit-build-core: scaffold/cmake.py reads
    that side) or a pure one (a pure-Python backend, no .cu file); else not one wheelsmith
    reads."""
    cuda_files = sum(1 for p in tree.rglob("*.cu") if p.is_file())
    named = backend(tree)
    pure = named is not None and named.split(".")[0] in PURE_BACKENDS and not cuda_files
    if uses_cmake(tree) or pure:
        return Setup((), (), None, None, None, None, None, None, None, None, (), (),
                     cuda_files=cuda_files)
    held = ", ".join(sorted(p.name for p in tree.iterdir()))
    raise SourceError(f"the sdist has no setup.py (it holds {held})" + (
        f"; it builds with {named}" if named else ""),
                      hint="wheelsmith's recipes build torch CUDA extensions from setup.py, "
                           "CMake projects from scikit-build(-core) or a setup.py that runs "
                           "cmake, and pure-Python packages from "
                           f"{', '.join(PURE_BACKENDS)}; write the recipe by hand "
                           "(docs/recipes.md)")


def reads_arch_list(module: ast.Module) -> int | None:
    """The first line where setup.py reads TORCH_CUDA_ARCH_LIST itself; setting it
    (`os.environ["TORCH_CUDA_ARCH_LIST"] = ""`, mamba-ssm 2.3.2's blanking on a CUDA major
    mismatch) is not reading it."""
    written = {id(n.slice) for n in ast.walk(module)
               if isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Store | ast.Del)}
    return min((n.lineno for n in ast.walk(module) if isinstance(n, ast.Constant)
                and n.value == "TORCH_CUDA_ARCH_LIST" and id(n) not in written), default=None)


def _cc_key(cc: str) -> tuple[int, str]:
    digits = cc.rstrip("af")
    return int(digits), cc[len(digits):]


# --- arch lists, setup_requires, the CUDA probe ----------------------------------------------


def _constants(module: ast.Module) -> Iterator[tuple[str, int, ast.Constant]]:
    for node in ast.walk(module):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value, node.lineno, node


def _gencode(module: ast.Module) -> list[tuple[str, int]]:
    return [(match[1], line) for text, line, _ in _constants(module)
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


# --- what a build machine lacks: a GPU, pkg_resources, a module only try/except asks for ----


def pkg_resources_imports(module: ast.Module) -> list[tuple[int, ast.Import | ast.ImportFrom]]:
    """`import pkg_resources` and `from pkg_resources import ...`, by line."""
    found = [(n.lineno, n) for n in ast.walk(module)
             if (isinstance(n, ast.Import) and any(a.name == "pkg_resources" for a in n.names))
             or (isinstance(n, ast.ImportFrom) and n.module == "pkg_resources")]
    return sorted(found, key=lambda item: item[0])


def gpu_required(module: ast.Module, *, switched: bool = False) -> list[ast.Call]:
    """The `torch.cuda.is_available()` calls that decide, where no GPU is visible, that setup.py
    stops or builds no CUDA: `if not torch.cuda.is_available(): raise ...`, `assert
    torch.cuda.is_available()`, `if torch.cuda.is_available() ...: ... else: raise`; and, unless
    setup.py reads a CUDA switch of its own (`switched`: PyG's FORCE_CUDA), every other call
    outside another vendor's branch not already joined with a variable (`is_available() or
    os.getenv("FORCE_CUDA") == "1"`): DCNv4's CUDAExtension only with a GPU."""
    found: list[ast.Call] = []
    elsewhere = vendor_branches(module)
    joined = {id(value) for node in ast.walk(module)
              if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or)
              and any(map(_reads_env, node.values)) for value in node.values}
    for node in ast.walk(module):
        if isinstance(node, ast.If) and node.body and isinstance(node.body[0], ast.Raise):
            negated = [n.operand for n in ast.walk(node.test)
                       if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not)]
            found += [n for n in negated if _is_available(n)]
        elif isinstance(node, ast.Assert) or (isinstance(node, ast.If) and node.orelse
                                              and isinstance(node.orelse[-1], ast.Raise)):
            found += [n for n in ast.walk(node.test) if _is_available(n)]
    if not switched:
        found += [n for node in ast.walk(module) if isinstance(node, ast.If | ast.IfExp)
                  and _builds_cuda(node.body) for n in ast.walk(node.test)
                  if _is_available(n) and id(n) not in joined]
    unique = {id(call): call for call in found if id(call) not in elsewhere}
    return sorted(unique.values(), key=lambda call: (call.lineno, call.col_offset))


def _builds_cuda(body: ast.AST | list[ast.stmt]) -> bool:
    """A branch that makes the CUDA build: it names CUDAExtension, a .cu file, nvcc or cuda
    (PyG's extension suffix)."""
    for node in (n for part in (body if isinstance(body, list) else [body])
                 for n in ast.walk(part)):
        if isinstance(node, ast.Name | ast.Attribute) and \
                dotted(node).endswith("CUDAExtension"):
            return True
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and (
                node.value.endswith(".cu") or node.value.lower() in ("cuda", "nvcc")):
            return True
    return False


def _reads_env(node: ast.expr) -> bool:
    """`os.getenv("X")`, or a comparison of one."""
    operands = [node.left, *node.comparators] if isinstance(node, ast.Compare) else [node]
    return any(env_name(o) is not None for o in operands)


EXTENSION_BUILD_RE = re.compile(r"\b(?:ext_modules\s*=\s*(?![\[(]\s*[\])])|CUDAExtension\b|"
                                r"CppExtension\b|Pybind11Extension\b|cpp_extension\b)")


def _extension_build(tree: Path, setup: Path) -> str | None:
    """`file:line` where setup.py or a module of its own it imports names an extension build
    (`ext_modules=` something, torch's cpp_extension, CUDAExtension, CppExtension,
    Pybind11Extension), else None: such a package is not pure even where setup.py's own
    extensions could not be read."""
    for file in [setup, *local_modules(tree, setup)]:
        text = file.read_text(errors="replace")
        found = EXTENSION_BUILD_RE.search(text)
        if found is not None:
            return f"{file.relative_to(tree)}:{text.count(chr(10), 0, found.start()) + 1}"
    return None


def _ninja_keyword(module: ast.Module) -> ast.keyword | None:
    """The first `use_ninja=` given torch's BuildExtension that is not True: False, or an
    expression (deepspeed's `use_ninja=use_ninja`, off unless DS_ENABLE_NINJA is set), on
    one line."""
    return next((node for node in ast.walk(module) if isinstance(node, ast.keyword)
                 and node.arg == "use_ninja" and node.value.lineno == node.value.end_lineno
                 and not (isinstance(node.value, ast.Constant) and node.value.value is True)),
                None)


def _ninja_not_on(module: ast.Module) -> int | None:
    keyword = _ninja_keyword(module)
    return keyword.value.lineno if keyword is not None else None


def _ninja_value(module: ast.Module) -> str:
    keyword = _ninja_keyword(module)
    return ast.unparse(keyword.value) if keyword is not None else "False"


def _is_available(node: ast.AST) -> TypeGuard[ast.Call]:
    return isinstance(node, ast.Call) and not node.args and \
        dotted(node.func).endswith("cuda.is_available")
