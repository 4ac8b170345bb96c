"""The environment variables a package's build reads, found in its Python without running
it: os.getenv("X"), os.environ.get("X"), os.environ["X"], `"X" in os.environ`, a helper of the
package's named for the environment (deepspeed's get_env_if_set); in setup.py (setup_py.py
reads its CUDA switches and arch knob from them), and in the modules of its own setup.py
imports (`build_switches`: named when a check compiled nothing for the GPU)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from wheelsmith.builder.buildenv import protection
from wheelsmith.errors import UntrustedDataError
from wheelsmith.scaffold.extensions import dotted
from wheelsmith.scaffold.owntree import own_files
from wheelsmith.untrusted import ENV_NAME_RE, parse_python


def env_name(node: ast.expr) -> str | None:
    """The variable an expression reads: os.getenv("X"), os.environ.get("X"), os.environ["X"]
    (also through .lower()/.upper()/.strip()); only a name a recipe can set (ENV_NAME_RE)."""
    name = _env_read(node)
    return name if name is not None and ENV_NAME_RE.fullmatch(name) else None


def _env_read(node: ast.expr) -> str | None:
    """os.getenv("X"), os.environ.get("X"), os.environ["X"], `"X" in os.environ` (or its
    .keys()), and a helper of the package's named for the environment (deepspeed's
    get_env_if_set("DS_BUILD_OPS", ...), is_env_set)."""
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
            node.func.attr in ("lower", "upper", "strip") and not node.args:
        node = node.func.value
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
            and isinstance(node.args[0].value, str) and (
            dotted(node.func) in ("os.getenv", "getenv") or dotted(node.func).endswith(
                "environ.get") or ENV_HELPER_RE.search(dotted(node.func).rpartition(".")[2])):
        return node.args[0].value
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and \
            isinstance(node.ops[0], ast.In | ast.NotIn) and isinstance(node.left, ast.Constant) \
            and isinstance(node.left.value, str) and _is_environ(node.comparators[0]):
        return node.left.value
    if isinstance(node, ast.Subscript) and dotted(node.value).endswith("environ") and \
            isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
        return node.slice.value
    return None


ENV_HELPER_RE = re.compile(r"(?:^|_)env(?:$|_)", re.IGNORECASE)  # get_env_if_set, is_env_set


def _is_environ(node: ast.expr) -> bool:
    """os.environ, or its .keys()."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
            node.func.attr == "keys" and not node.args:
        node = node.func.value
    return dotted(node).endswith("environ")


# words of a variable that may decide whether the build compiles CUDA (deepspeed's
# DS_ACCELERATOR, DS_BUILD_OPS; vllm's VLLM_TARGET_DEVICE): named first
DECIDING_WORDS = {"BUILD", "FORCE", "WITH", "ENABLE", "USE", "COMPILE", "CUDA", "GPU", "KERNELS",
                  "EXT", "EXTENSION", "EXTENSIONS", "OPS", "ACCELERATOR", "DEVICE", "TARGET",
                  "BACKEND", "NINJA"}


def deciding_first(switches: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """`switches` with those whose words may decide the CUDA build first, each group in its
    order."""
    def decides(name: str) -> bool:
        return bool(set(name.upper().split("_")) & DECIDING_WORDS)
    return tuple(sorted(switches, key=lambda s: not decides(s[0])))


MAX_SWITCH_FILES = 400  # of the modules setup.py imports from the sdist (deepspeed's: ~100)


def build_switches(tree: Path) -> tuple[tuple[str, str], ...]:
    """The variables the build reads that a recipe may set, each with where it is first read
    (`setup.py:128`): in setup.py, then in the sdist's own modules it imports (deepspeed
    chooses its accelerator, and so whether any CUDA op exists, in accelerator/ from
    DS_ACCELERATOR). What wheelsmith sets itself (buildenv.protection) is left out."""
    setup = tree / "setup.py"
    if not setup.is_file():
        return ()
    found: dict[str, str] = {}
    for file in [setup, *local_modules(tree, setup)]:
        try:
            module = parse_python(file.read_text(errors="replace"), str(file.relative_to(tree)))
        except UntrustedDataError:
            continue
        for name, (line, _) in env_reads(module).items():
            if protection(name) is None:
                found.setdefault(name, f"{file.relative_to(tree)}:{line}")
    return tuple(found.items())


def local_modules(tree: Path, setup: Path) -> list[Path]:
    """The sdist's modules setup.py imports (a package: every module under it, not tests)."""
    try:
        module = parse_python(setup.read_text(errors="replace"), "setup.py")
    except UntrustedDataError:
        return []
    tops = dict.fromkeys(
        name.split(".")[0] for node in ast.walk(module)
        for name in ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module] if isinstance(node, ast.ImportFrom) and node.module
                     and not node.level else []))
    files: list[Path] = []
    for top in tops:
        if (tree / f"{top}.py").is_file():
            files.append(tree / f"{top}.py")
        elif (tree / top / "__init__.py").is_file():
            files += own_files(tree / top, lambda path: path.suffix == ".py")
    return files[:MAX_SWITCH_FILES]


def env_reads(module: ast.Module) -> dict[str, tuple[int, str | None]]:
    """Each variable setup.py reads: its first line and the string it is compared with."""
    reads: dict[str, tuple[int, str | None]] = {}
    for node in ast.walk(module):
        name = env_name(node) if isinstance(node, ast.expr) else None
        if isinstance(node, ast.expr) and name is not None and name not in reads:
            reads[name] = (node.lineno, None)
    for node in ast.walk(module):
        if not isinstance(node, ast.Compare) or not isinstance(
                node.ops[0], ast.Eq | ast.In | ast.NotEq | ast.NotIn):  # `!= "1"`: off unless 1
            continue
        operands = [node.left, *node.comparators]
        named = [n for n in map(env_name, operands) if n is not None]
        values = [c.value for o in operands for c in ([o] if isinstance(o, ast.Constant) else
                  o.elts if isinstance(o, ast.Tuple | ast.List | ast.Set) else [])
                  if isinstance(c, ast.Constant) and isinstance(c.value, str)]
        for name in named:
            if values and reads[name][1] is None:
                reads[name] = (reads[name][0], values[0])
    return reads
