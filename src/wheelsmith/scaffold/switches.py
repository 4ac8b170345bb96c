"""Which variables a package's build reads turn its CUDA build on, and the value that does,
decided from how setup.py and the modules of its own it runs (imports.py) read them, without
running anything: the value compared with (`== "1"`, `in ("cuda", "cpu")`, `!= "0"`, also
through a name it is assigned to, or a list of names), the default it is read with, a flag's
shape (`int(...)`, `bool(...)`, a test of its truth, `"X" in os.environ`).

A variable is a CUDA switch when it is compared with, or defaults to, a CUDA value (deepspeed's
DS_ACCELERATOR, vllm's VLLM_TARGET_DEVICE: "cuda"), when its words say it switches CUDA on
(FORCE_CUDA, <PKG>_FORCE_BUILD, WITH_CUDA, <PKG>_ENABLE_CUDA), or when they say it builds the
ops (deepspeed's DS_BUILD_OPS, read as `int(...)`); not one that skips or disables something,
names a place or a version, or another vendor's. A switch whose value cannot be told (an
accelerator variable compared only with other vendors' names) is kept undecided: `recipe new`
says so rather than guess."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from wheelsmith.builder.buildenv import protection
from wheelsmith.scaffold.env_reads import env_name
from wheelsmith.scaffold.extensions import callee, dotted
from wheelsmith.scaffold.imports import setup_run

# variables that make setup.py build its CUDA extensions where no GPU is visible
FORCE_RE = re.compile(r"(^|_)FORCE_BUILD$|(^|_)FORCE_CUDA(_EXT|_EXTENSIONS?)?$|^WITH_CUDA$"
                      r"|^BUILD_CUDA_EXT$")
# a switch that turns the CUDA build on by its name's words: TLA_BUILD_LEGACY_CUDA, USE_GPU,
# ENABLE_CUDA_KERNELS; not one that turns it off or names a place or a version
SWITCH_WORDS = {"BUILD", "FORCE", "WITH", "ENABLE", "USE", "COMPILE"}
CUDA_WORDS = {"CUDA", "GPU", "KERNELS", "EXT", "EXTENSION", "EXTENSIONS"}
OPS_WORDS = {"OPS", "OP", "KERNEL", "KERNELS", "EXT", "EXTS", "EXTENSION", "EXTENSIONS"}
NOT_A_SWITCH = {"SKIP", "DISABLE", "NO", "WITHOUT", "ONLY", "ARCH", "ARCHS", "HOME", "PATH",
                "DIR", "ROOT", "VERSION", "LIST"}  # FORCE_ONLY_CUDA drops the CPU extensions
OTHER_VENDORS = {"ROCM", "HIP", "CPU", "XPU", "NPU", "MPS", "MLU", "MUSA", "HPU", "XLA", "TPU",
                 "SYCL", "CANN", "METAL", "VULKAN", "OPENCL", "NEURON"}
ACCELERATOR_WORDS = {"ACCELERATOR", "DEVICE", "BACKEND"}  # the last word of a chooser's name
CUDA_VALUES = {"cuda", "gpu", "nvidia"}
ON_WORDS = {"1", "true", "yes", "on", "y", "t"}
OFF_WORDS = {"0", "false", "off", "no", "n", ""}  # a comparison with one of them is the off side
FLAG_CALL_RE = re.compile(r"^(?:int|bool|float)$|bool|flag|truth|^is_|^has_|enabled", re.I)


@dataclass(frozen=True, slots=True)
class Switch:
    """A variable that may turn the CUDA build on: the value that does (None: not told),
    where it is first read (`file:line`) and how the value was decided, in words."""

    name: str
    value: str | None
    where: str
    how: str

    @property
    def note(self) -> str:
        return f"{self.where}: {self.how}"


@dataclass(frozen=True, slots=True)
class Reading:
    """How one variable is read: the values it is compared with, how it is read as a flag
    (`int()`, `a truth value`), the defaults it is read with."""

    where: str
    compared: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()
    defaults: tuple[str, ...] = ()

    def merged(self, other: Reading) -> Reading:
        return Reading(self.where, self.compared + other.compared, self.flags + other.flags,
                       self.defaults + other.defaults)


def cuda_switches(tree: Path) -> tuple[Switch, ...]:
    """The CUDA switches of setup.py and the modules of its own it runs, each where first
    read."""
    readings: dict[str, Reading] = {}
    for source in setup_run(tree):
        for name, reading in read_module(source.module, source.path).items():
            readings[name] = readings[name].merged(reading) if name in readings else reading
    return tuple(s for name, r in readings.items() if (s := decide(name, r)) is not None)


def setup_switches(module: ast.Module) -> tuple[tuple[str, str, int], ...]:
    """setup.py's own CUDA switches whose value is told: (variable, value, line)."""
    return tuple((s.name, s.value, int(s.where.rpartition(":")[2]))
                 for name, reading in read_module(module, "setup.py").items()
                 if (s := decide(name, reading)) is not None and s.value is not None)


@dataclass(frozen=True, slots=True)
class Parsed:
    """A module read once for how it reads variables: each node's parent, its module-level
    names bound by `=`, and each name's loads in each function (0: the whole module)."""

    parents: dict[int, ast.AST]
    named: dict[str, ast.expr]
    loads: dict[tuple[int, str], list[ast.Name]]

    @classmethod
    def of(cls, module: ast.Module) -> Parsed:
        parents = {id(child): node for node in ast.walk(module)
                   for child in ast.iter_child_nodes(node)}
        loads: dict[tuple[int, str], list[ast.Name]] = {}
        for node in ast.walk(module):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                for scope in [0, *map(id, _functions_around(node, parents))]:
                    loads.setdefault((scope, node.id), []).append(node)
        return cls(parents, {t.id: n.value for n in module.body if isinstance(n, ast.Assign)
                             for t in n.targets if isinstance(t, ast.Name)}, loads)


def read_module(module: ast.Module, path: str) -> dict[str, Reading]:
    """Each variable a module reads, and how (first read first)."""
    parsed = Parsed.of(module)
    readings: dict[str, Reading] = {}
    for node in sorted((n for n in ast.walk(module) if isinstance(n, ast.expr)),
                       key=lambda n: (n.lineno, n.col_offset)):
        name = env_name(node)
        if name is None or _wraps_read(node, parsed.parents):
            continue
        found = _reading(node, f"{path}:{node.lineno}", parsed)
        readings[name] = readings[name].merged(found) if name in readings else found
    return readings


def _wraps_read(node: ast.AST, parents: dict[int, ast.AST]) -> bool:
    """Whether the read `node` is the inside of a larger one (`os.getenv("X")` of
    `os.getenv("X").lower()`): the larger one is read instead."""
    parent = parents.get(id(node))
    above = parents.get(id(parent)) if isinstance(parent, ast.Attribute) else None
    return isinstance(above, ast.Call) and env_name(above) is not None


def _reading(node: ast.expr, where: str, parsed: Parsed) -> Reading:
    default = _default(node)
    flags = ("set or not",) if isinstance(node, ast.Compare) else (  # `"X" in os.environ`
        (f"{callee(node)}()",) if isinstance(node, ast.Call)  # is_env_set("X")
        and FLAG_CALL_RE.search(callee(node)) else ())
    reading = Reading(where, defaults=(default,) if default is not None else (), flags=flags)
    if isinstance(node, ast.Compare):
        return reading
    for use in _uses(node, parsed):
        reading = reading.merged(_use(use, where, parsed))
    return reading


def _default(node: ast.expr) -> str | None:
    """The constant a read falls back to: `os.getenv("X", "0")`, `get_env_if_set("X", 0)`."""
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
            node.func.attr in ("lower", "upper", "strip"):
        node = node.func.value
    if isinstance(node, ast.Call) and len(node.args) > 1 and \
            isinstance(node.args[1], ast.Constant) and node.args[1].value is not None:
        return str(node.args[1].value)
    return None


def _uses(node: ast.expr, parsed: Parsed, depth: int = 0) -> Iterator[ast.expr]:
    """Where a read's value goes: the read itself (and what it is wrapped in: `x or "0"`),
    else, assigned to a name, that name's loads in its scope (once more through a name)."""
    while isinstance(parent := parsed.parents.get(id(node)), ast.BoolOp) and \
            isinstance(parent.op, ast.Or) and parent.values[0] is node:
        node = parent  # os.environ.get("X") or "0"
    parent = parsed.parents.get(id(node))
    if not (isinstance(parent, ast.Assign) and parent.value is node and len(parent.targets) == 1
            and isinstance(parent.targets[0], ast.Name)) or depth > 1:
        yield node
        return
    scope = next(map(id, _functions_around(parent, parsed.parents)), 0)
    for load in parsed.loads.get((scope, parent.targets[0].id), []):
        yield from _uses(load, parsed, depth + 1)


def _functions_around(node: ast.AST, parents: dict[int, ast.AST]) -> Iterator[ast.AST]:
    """The functions `node` is in, innermost first."""
    above = parents.get(id(node))
    while above is not None:
        if isinstance(above, ast.FunctionDef | ast.AsyncFunctionDef):
            yield above
        above = parents.get(id(above))


def _use(node: ast.expr, where: str, parsed: Parsed) -> Reading:
    """What one use of a read's value says: the values it is compared with, or a flag."""
    parent = parsed.parents.get(id(node))
    if isinstance(parent, ast.Call) and node in parent.args and \
            FLAG_CALL_RE.search(dotted(parent.func).rpartition(".")[2]):
        compared = _compared(parent, parsed)  # int(os.getenv("X", "0")) == 1
        return Reading(where, compared, flags=(f"{callee(parent)}()",))
    if isinstance(parent, ast.Compare):
        return Reading(where, _compared(node, parsed),
                       flags=() if isinstance(parent.ops[0], ast.Eq | ast.NotEq | ast.In
                                              | ast.NotIn) else ("a number",))
    tested = isinstance(parent, ast.If | ast.While | ast.IfExp | ast.Assert) and \
        getattr(parent, "test", None) is node
    truth = (isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.Not)) or \
        isinstance(parent, ast.BoolOp)
    return Reading(where, flags=("a truth value",) if tested or truth else ())


def _compared(node: ast.expr, parsed: Parsed) -> tuple[str, ...]:
    """The constants `node` is compared with (in a tuple, list or set, or a module-level name
    bound to one: deepspeed's SUPPORTED_ACCELERATOR_LIST)."""
    parent = parsed.parents.get(id(node))
    if not isinstance(parent, ast.Compare) or not isinstance(
            parent.ops[0], ast.Eq | ast.NotEq | ast.In | ast.NotIn):  # `> 0`: a number
        return ()
    values: list[str] = []
    for operand in [parent.left, *parent.comparators]:
        if operand is node:
            continue
        other = parsed.named.get(operand.id, operand) if isinstance(operand, ast.Name) \
            else operand
        items = other.elts if isinstance(other, ast.Tuple | ast.List | ast.Set) else [other]
        values += [str(i.value) for i in items if isinstance(i, ast.Constant)
                   and isinstance(i.value, str | int) and not isinstance(i.value, bool)]
    return tuple(values)


def cuda_switch(variable: str) -> bool:
    """Whether a variable's name says it turns the CUDA build on where no GPU is visible: a
    known name (FORCE_CUDA, <PKG>_FORCE_BUILD, WITH_CUDA) or one whose words say so."""
    words = set(variable.upper().split("_"))
    return bool(FORCE_RE.search(variable)) or (
        bool(words & SWITCH_WORDS) and bool(words & CUDA_WORDS)
        and not words & (NOT_A_SWITCH | OTHER_VENDORS))


def _builds_ops(variable: str) -> bool:
    """DS_BUILD_OPS, BUILD_KERNELS: a name that says it builds the package's ops."""
    words = set(variable.upper().split("_"))
    return bool(words & {"BUILD", "COMPILE"}) and bool(words & OPS_WORDS) and \
        not words & (NOT_A_SWITCH | OTHER_VENDORS)


def _chooser(variable: str) -> bool:
    """DS_ACCELERATOR, VLLM_TARGET_DEVICE: a name that says it chooses the accelerator."""
    words = variable.upper().split("_")
    return words[-1] in ACCELERATOR_WORDS and not set(words) & OTHER_VENDORS


def decide(name: str, reading: Reading) -> Switch | None:
    """The switch `name` is, read as `reading`; None for a variable that is none, or one that
    wheelsmith sets (its names are protected) unless its name says it switches CUDA on."""
    if protection(name) is not None and not cuda_switch(name):
        return None
    values = [*reading.compared, *reading.defaults]
    cuda = next((v for v in values if v.strip().lower() in CUDA_VALUES), None)
    if cuda is not None:
        return Switch(name, cuda, reading.where, f'compared with "{cuda}"'
                      if cuda in reading.compared else f'read with the default "{cuda}"')
    if not (cuda_switch(name) or _builds_ops(name) or _chooser(name)):
        return None
    value, how = _on_value(name, reading)
    return Switch(name, value, reading.where, how)


def _on_value(name: str, reading: Reading) -> tuple[str | None, str]:
    """The value that turns a switch on, and how it was told (None: it was not)."""
    on = next((v for v in reading.compared if v.strip().lower() in ON_WORDS), None)
    other = [v for v in reading.compared if v.strip().lower() not in ON_WORDS | OFF_WORDS]
    listed = ", ".join(f'"{v}"' for v in reading.compared)
    if on is not None:
        return on, f'compared with "{on}"'
    if other and cuda_switch(name) and not _chooser(name):  # a word of its own
        return other[0], f'compared with "{other[0]}"'
    if other or _chooser(name):
        return None, f"compared with {listed}" if other else "no value of it read turns CUDA on"
    if reading.compared or reading.flags or cuda_switch(name):
        return "TRUE" if name.endswith("FORCE_BUILD") else "1", (
            f"compared with {listed}" if reading.compared else f"read as {reading.flags[0]}"
            if reading.flags else "its name says it switches CUDA on")
    return None, "no value of it read turns its ops on"


def switch_lines(told: tuple[Switch, ...], undecided: tuple[Switch, ...]) -> list[str]:
    """`recipe new`'s findings: the switches told (those of setup.py's own have lines of their
    own) and those whose value could not be."""
    return [f'{s.where}: {s.name} ({s.how}) turns its CUDA build on: build.env {s.name}: '
            f'"{s.value}"' for s in told] + [
        f"{s.where}: {s.name} may decide whether its CUDA build is made ({s.how}), but which "
        "value turns it on cannot be told from how it is read: set it in build.env if the check "
        "finds nothing to compile for the GPU" for s in undecided]
