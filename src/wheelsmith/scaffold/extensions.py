"""The extensions a setup.py declares, read from its ast: their names (a `*` where setup.py
computes a part), the sources and include directories it spells out, which of them compile no
CUDA (the recipe's `build.host_only`), and what the sdist lacks of them."""

from __future__ import annotations

import ast
import fnmatch
import re
from dataclasses import dataclass
from pathlib import Path

SOURCE_SUFFIXES = (".cu", ".cpp", ".cc", ".cxx", ".c")
CUDA_SUFFIXES = (".cu",)
KNOWN = ("CUDAExtension", "CppExtension", "Extension")
PATH_CALLS = ("join", "Path", "str", "glob", "abspath", "realpath", "PurePath", "sorted", "list")


@dataclass(frozen=True, slots=True)
class Extension:
    name: str  # the module, `*` where setup.py computes a part
    line: int
    callee: str  # CUDAExtension, CppExtension, Extension, or the alias's choice
    sources: tuple[str, ...]  # the ones setup.py spells out
    cuda: bool  # compiles CUDA (a .cu among its sources, or a CUDAExtension of computed ones)
    host_variant: str | None = None  # its CppExtension twin's name (`... if suffix == 'cpu'`)

    @staticmethod
    def glob(name: str) -> str:
        """The wheel path of module `name` as a host_only glob."""
        return name.replace(".", "/") + "*.so"


def dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{dotted(node.value)}.{node.attr}".lstrip(".")
    return ""


def callee(call: ast.Call) -> str:
    return dotted(call.func).rpartition(".")[2]


def assignments(module: ast.Module) -> dict[str, ast.expr]:
    """`NAME = expr` anywhere in setup.py: the first one (names computed later are the same
    kind of thing), except a list built up in steps (`sources = [...]`, `sources = [main] +
    sources`, `sources += cuda_sources`), whose values are added up."""
    found: dict[str, ast.expr] = {}
    for node in ast.walk(module):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add):
            target, value = node.target, node.value
        else:
            continue
        if not isinstance(target, ast.Name):
            continue
        known = found.get(target.id)
        if known is None:
            found[target.id] = value
        elif isinstance(known, ast.List | ast.Tuple | ast.BinOp) and isinstance(
                value, ast.List | ast.Tuple | ast.BinOp | ast.Name | ast.Call):  # += glob.glob(...)
            found[target.id] = ast.BinOp(left=known, op=ast.Add(), right=value)
    return found


def strings(node: ast.expr | None, names: dict[str, ast.expr]) -> list[str]:
    """The paths an expression spells out: constants, joins of constant parts, names bound
    to those, f-strings without their computed parts (`f"{cwd}/csrc"` -> `csrc`)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        return _f_string(node)
    if isinstance(node, ast.Name) and node.id in names:
        return strings(names[node.id], {k: v for k, v in names.items() if k != node.id})
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return [s for item in node.elts for s in strings(item, names)]
    if isinstance(node, ast.BinOp) and not isinstance(node.op, ast.Div):
        return strings(node.left, names) + strings(node.right, names)
    parts = (strings(node.left, names) + strings(node.right, names)
             if isinstance(node, ast.BinOp) else
             [s for a in node.args for s in strings(a, names)]
             if isinstance(node, ast.Call) and callee(node) in PATH_CALLS else [])
    return ["/".join(parts)] if parts else []


def _f_string(node: ast.JoinedStr) -> list[str]:
    """An f-string's path without its computed parts where only a leading directory is
    computed (`f"{cwd}/csrc"` -> `csrc`); none where a computed part is in a name
    (`f"{name}_cpu.cpp"`)."""
    after = [*node.values[1:], None]
    if any(isinstance(v, ast.FormattedValue) and not (
            isinstance(a, ast.Constant) and str(a.value).startswith("/"))
           for v, a in zip(node.values, after, strict=True)):
        return []
    text = "".join(v.value for v in node.values
                   if isinstance(v, ast.Constant) and isinstance(v.value, str))
    return [text.lstrip("/")] if text.strip("/") else []


def pattern(node: ast.expr | None, given: dict[str, str] | None = None) -> str | None:
    """A module name as written; the parts setup.py computes become `*` (or `given`'s)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(
            str(v.value) if isinstance(v, ast.Constant) else
            (given or {}).get(dotted(v.value) if isinstance(v, ast.FormattedValue) else "", "*")
            for v in node.values)
    return None


def _host_choice(alias: ast.IfExp) -> tuple[str, str] | None:
    """`CppExtension if suffix == 'cpu' else CUDAExtension`: ("suffix", "cpu")."""
    test = alias.test
    if not (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name)
            and len(test.comparators) == 1 and isinstance(test.comparators[0], ast.Constant)):
        return None
    value = str(test.comparators[0].value)
    host = {ast.Eq: dotted(alias.body), ast.NotEq: dotted(alias.orelse)}.get(type(test.ops[0]))
    return (test.left.id, value) if host == "CppExtension" else None


def _aliases(module: ast.Module) -> dict[str, set[str]]:
    """Names setup.py calls torch's extension classes by: `Extension = CUDAExtension` (in any
    branch), `extension = CppExtension`, `import CUDAExtension as Ext`."""
    found: dict[str, set[str]] = {}
    for node in ast.walk(module):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(
                node.targets[0], ast.Name):
            values = [node.value.body, node.value.orelse] if isinstance(
                node.value, ast.IfExp) else [node.value]
            kinds = {dotted(v).rpartition(".")[2] for v in values} & {"CUDAExtension",
                                                                      "CppExtension"}
            if kinds:
                found.setdefault(node.targets[0].id, set()).update(kinds)
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.asname and alias.name in ("CUDAExtension", "CppExtension"):
                    found.setdefault(alias.asname, set()).add(alias.name)
    return found


def _literal(node: ast.expr | None) -> bool:
    """A sources list written out in full (no name that code may extend)."""
    return isinstance(node, ast.List | ast.Tuple) and all(
        isinstance(e, ast.Constant) or (isinstance(e, ast.Call) and callee(e) in PATH_CALLS)
        for e in node.elts)


# words that say a branch builds for another vendor (IS_ROCM, IS_HIP_EXTENSION,
# torch.version.hip, USE_XPU, torch.is_mlu_available, FORCE_NPU, ...) or for no GPU
# (BUILD_CPU_ONLY, FORCE_ONLY_CPU; not WITH_CPU, which the CUDA build takes too); a test that
# names CUDA as well is the CUDA build's (`is_rocm_pytorch or torch.cuda.is_available()`)
VENDOR_TOKENS = {"rocm", "hip", "xpu", "mps", "npu", "musa", "sycl", "mlu", "hpu", "xla",
                 "tpu", "dcu", "gcu", "ipu", "ascend", "cann", "habana", "neuron", "metal",
                 "vulkan", "opencl", "dipu", "maca"}
CPU_ONLY = {"cpu", "only"}
WORD_SPLIT_RE = re.compile(r"[^a-z0-9]+")


def _words(node: ast.AST) -> set[str]:
    """The words a name, an attribute or a string constant of a test says (an environment
    variable's name is a string: os.getenv('FORCE_NPU'))."""
    if isinstance(node, ast.Name | ast.Attribute):
        return set(WORD_SPLIT_RE.split(dotted(node).lower()))
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) < 64:
        return set(WORD_SPLIT_RE.split(node.value.lower()))
    return set()


def _vendor_word(node: ast.AST) -> bool:
    words = _words(node)
    return bool(VENDOR_TOKENS & words) or words >= CPU_ONLY


def _cuda_alternative(test: ast.expr) -> bool:
    """`is_rocm_pytorch or torch.cuda.is_available() or FORCE_CUDA`: the vendor is one way
    into a branch that CUDA (an operand of the `or` that names it) is another."""
    return isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or) and any(
        "cuda" in _words(n) for value in test.values for n in ast.walk(value)
        if not isinstance(value, ast.UnaryOp))


def vendor_branches(module: ast.Module) -> set[int]:
    """The nodes of the branches that are not the CUDA build's: the body of `if IS_ROCM:`
    (`IS_HIP_EXTENSION`, `torch.version.hip`, `CPU_ONLY`, `USE_XPU`, `os.getenv('FORCE_NPU')`),
    the else of `if not IS_ROCM:`; not a test that names CUDA too."""
    inside: set[int] = set()
    for node in ast.walk(module):
        if not isinstance(node, ast.If):
            continue
        tested = list(ast.walk(node.test))
        if _cuda_alternative(node.test):
            continue
        asked = [n for n in tested if _vendor_word(n)]
        negated = {id(inner) for n in tested if isinstance(n, ast.UnaryOp)
                   and isinstance(n.op, ast.Not) for inner in ast.walk(n.operand)}
        if asked and all(id(n) not in negated for n in asked):
            branch = node.body
        elif asked and all(id(n) in negated for n in asked):
            branch = node.orelse
        else:
            continue
        inside.update(id(inner) for stmt in branch for inner in ast.walk(stmt))
    return inside


def extensions_of(module: ast.Module, names: dict[str, ast.expr]) -> tuple[Extension, ...]:
    found: list[Extension] = []
    rocm, aliases = vendor_branches(module), _aliases(module)
    for node in ast.walk(module):
        called = callee(node) if isinstance(node, ast.Call) else ""
        if not isinstance(node, ast.Call) or id(node) in rocm or called == "BuildExtension" or \
                not (called.endswith("Extension") or called in aliases):
            continue
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        name_node = keywords.get("name", node.args[0] if node.args else None)
        given = keywords.get("sources", node.args[1] if len(node.args) > 1 else None)
        sources = tuple(s for s in strings(given, names) if s.endswith(SOURCE_SUFFIXES))
        alias = names.get(called)
        if isinstance(alias, ast.IfExp):
            choice = _host_choice(alias)
            found.append(Extension(
                pattern(name_node) or "*", node.lineno, ast.unparse(alias), sources, cuda=True,
                host_variant=pattern(name_node, dict([choice])) if choice else None))
            continue
        kinds = aliases.get(called, {called} if called in KNOWN else {"Extension"})
        kind = "CUDAExtension" if "CUDAExtension" in kinds else min(kinds)
        label = kind if called == kind else f"{called}: {' or '.join(sorted(kinds))}"
        cuda = kind != "CppExtension" and (any(s.endswith(CUDA_SUFFIXES) for s in sources) or (
            kind == "CUDAExtension" and not _literal(given)))  # a CppExtension is the CPU one
        found.append(Extension(pattern(name_node) or "*", node.lineno, label, sources, cuda))
    cuda_names = {e.name for e in found if e.cuda}  # a CPU fallback of a CUDA module
    return tuple(e for e in found if e.cuda or e.name not in cuda_names)


def module_of(leaf: str, extensions: tuple[Extension, ...]) -> str | None:
    """The module a build.ninja compiles, from its TORCH_EXTENSION_NAME (the name's last part)
    and the names setup.py gives: `_version_cuda` of `torch_scatter._*_*` is
    `torch_scatter._version_cuda`; None where no name says where it lies."""
    for ext in extensions:
        for name in filter(None, (ext.name, ext.host_variant)):
            package, _, last = name.rpartition(".")
            if name != "*" and fnmatch.fnmatchcase(leaf, last):
                return f"{package}.{leaf}" if package else leaf
    return None


def _is_glob(path: str) -> bool:
    return any(ch in path for ch in "*?[")


def _holds(tree: Path, path: str) -> bool:
    if _is_glob(path):
        return next(tree.glob(path), None) is not None
    return (tree / path).is_file()


def _unheld(tree: Path, sources: tuple[str, ...]) -> list[str]:
    """What of an extension's `sources` the sdist lacks: a file it names; a glob that
    matches nothing only where nothing else of its kind (device code, host code) is there,
    for a glob is how setup.py gathers what may be absent (DCNv4's `src/cpu/*.cpp` next to
    `src/*.cpp`)."""
    held = {s: _holds(tree, s) for s in sources}
    found_kinds = {s.endswith(CUDA_SUFFIXES) for s, there in held.items() if there}
    return [s for s, there in held.items() if not there and (
        not _is_glob(s) or s.endswith(CUDA_SUFFIXES) not in found_kinds)]


def compiled_files(tree: Path, extensions: tuple[Extension, ...]) -> int:
    """How many files of the sdist the extensions' sources name (a glob counts what it
    matches)."""
    found: set[Path] = set()
    for source in (s for e in extensions for s in e.sources):
        found.update(tree.glob(source) if _is_glob(source) else
                     [tree / source] if (tree / source).is_file() else [])
    return len(found)


def missing_parts(tree: Path, module: ast.Module, names: dict[str, ast.expr],
                  extensions: tuple[Extension, ...]) -> tuple[str, ...]:
    """The sources the extensions compile and the include directories they name (a git
    submodule such as cutlass) that the sdist does not hold; not those only another vendor's
    branch names (mmcv's MLU and NPU sources)."""
    elsewhere = vendor_branches(module)
    theirs = {n.value for n in ast.walk(module) if isinstance(n, ast.Constant)
              and isinstance(n.value, str) and id(n) in elsewhere} - {
        n.value for n in ast.walk(module) if isinstance(n, ast.Constant)
        and isinstance(n.value, str) and id(n) not in elsewhere}
    missing = [s for e in extensions for s in _unheld(tree, e.sources) if s not in theirs]
    for node in ast.walk(module):
        if isinstance(node, ast.keyword) and node.arg == "include_dirs":
            for directory in strings(node.value, names):
                where = tree / directory
                if directory and not directory.startswith("/") and not (
                        where.is_dir() and any(where.iterdir())):
                    missing.append(directory.rstrip("/") + "/")
    return tuple(dict.fromkeys(missing))
