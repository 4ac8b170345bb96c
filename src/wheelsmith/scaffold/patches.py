"""The standard patches: the ones `recipe new` writes itself (a setup.py edit it can make
exactly: `use_ninja=False` -> True, `setup_requires` dropped) and the ones it names with a
shipped patch to start from (a hard-coded -gencode list, the bare_metal_version probe,
prebuilt-wheel downloads, psutil at build time)."""

from __future__ import annotations

import ast
import difflib
import re
from dataclasses import dataclass
from pathlib import Path

from wheelsmith import locations
from wheelsmith.scaffold.setup_py import ARCH_FLAG_RE, GENCODE_RE, Setup
from wheelsmith.untrusted import parse_python


@dataclass(frozen=True, slots=True)
class StandardPatch:
    """One of the patches wheelsmith's own recipes carry, by what it fixes."""

    stem: str  # the file name after NNNN-
    reason: str

    def example(self) -> str | None:
        """A shipped patch of this kind to start from (`patches/PKG/VERSION/NNNN-stem.patch`)."""
        root = locations.project_root()
        found = sorted(root.glob(f"patches/*/*/[0-9][0-9][0-9][0-9]-{self.stem}.patch"))
        return str(found[-1].relative_to(root)) if found else None


@dataclass(frozen=True, slots=True)
class Written:
    """A standard patch `recipe new` made: its file name and unified diff."""

    file: str
    description: str
    text: str


ARCH_PATCH = StandardPatch("honour-torch-cuda-arch-list",
                           "setup.py passes its own -gencode list and ignores "
                           "TORCH_CUDA_ARCH_LIST")
NVCC_PATCH = StandardPatch("clear-error-without-nvcc",
                           "setup.py sets bare_metal_version only when it finds nvcc and uses "
                           "it anyway (NameError without nvcc)")
DOWNLOAD_PATCH = StandardPatch("never-download-prebuilt-wheel",
                               "setup.py downloads a prebuilt wheel unless forced to build")
PSUTIL_PATCH = StandardPatch("no-psutil-at-build-time", "setup.py imports psutil to size its jobs")


def needed(setup: Setup, made: tuple[Written, ...] = ()
           ) -> tuple[tuple[StandardPatch, int], ...]:
    """The standard patches to write by hand, each with the setup.py line that needs it."""
    found = []
    if setup.gencode and setup.arch_list_line is None and setup.arch_knob is None and not any(
            ARCH_PATCH.stem in w.file for w in made):
        found.append((ARCH_PATCH, setup.gencode_line or 0))
    if setup.probe_line is not None:
        found.append((NVCC_PATCH, setup.probe_line))
    if setup.download_line is not None:
        found.append((DOWNLOAD_PATCH, setup.download_line))
    if setup.psutil_line is not None:
        found.append((PSUTIL_PATCH, setup.psutil_line))
    return tuple(found)


def written(tree: Path, setup: Setup) -> tuple[Written, ...]:
    """The patches `recipe new` writes: each one applies on top of the one before."""
    text = (tree / "setup.py").read_text(errors="replace")
    made: list[Written] = []
    edits = [(ARCH_PATCH.stem, "keep the hard-coded -gencode list only when TORCH_CUDA_ARCH_LIST "
                               "is unset, so torch emits exactly the requested archs",
              _honour_arch_list),
             ("use-ninja", "torch's BuildExtension with ninja (setup.py turned it off), so the "
                           "pre-build arch check, MAX_JOBS and split-compile apply", _use_ninja),
             ("no-setup-requires", "setup_requires would make setuptools download in the "
                                   "offline build; the toolchain provides the build's "
                                   "dependencies", _no_setup_requires)]
    for stem, description, edit in edits:
        changed = edit(text, setup)
        if changed is not None and changed != text:
            diff = difflib.unified_diff(text.splitlines(keepends=True),
                                        changed.splitlines(keepends=True),
                                        "a/setup.py", "b/setup.py")
            made.append(Written(f"{len(made) + 1:04d}-{stem}.patch", description,
                                "".join(diff)))
            text = changed
    return tuple(made)


ARCH_LIST = 'os.environ.get("TORCH_CUDA_ARCH_LIST")'


def _is_gencode(text: str) -> bool:
    return text == "-gencode" or GENCODE_RE.search(text) is not None or \
        ARCH_FLAG_RE.match(text) is not None


def _in_lists(module: ast.Module) -> dict[int, tuple[int, int]]:
    """Hard-coded arch flags that are items of a list literal, by line: (start, end) column
    (one a line: `extra_compile_args=["-arch=compute_50"]`)."""
    found: dict[int, list[tuple[int, int]]] = {}
    for node in ast.walk(module):
        if isinstance(node, ast.List | ast.Tuple):
            for item in node.elts:
                if isinstance(item, ast.Constant) and isinstance(item.value, str) and \
                        _is_gencode(item.value) and item.lineno == item.end_lineno:
                    found.setdefault(item.lineno, []).append(
                        (item.col_offset, item.end_col_offset or 0))
    return {line: cols[0] for line, cols in found.items() if len(cols) == 1}


def _honour_arch_list(text: str, setup: Setup) -> str | None:
    """Each one-line statement that adds hard-coded -gencode flags (`cc_flag.append(...)`,
    `flags += [...]`) runs only without TORCH_CUDA_ARCH_LIST, and a flag that is an item of a
    list literal becomes `*([] if TORCH_CUDA_ARCH_LIST else [flag])`. None when one sits
    anywhere else: that patch is written by hand."""
    if not setup.gencode or setup.arch_list_line is not None or setup.arch_knob is not None:
        return None
    arch_list = ARCH_LIST if re.search(r"^import os$", text, re.MULTILINE) else \
        f'__import__("os").{ARCH_LIST.removeprefix("os.")}'  # setup.py has no `import os`
    module = parse_python(text, "setup.py")
    guarded: set[int] = set()
    for node in ast.walk(module):
        if not isinstance(node, ast.AugAssign | ast.Expr) or (isinstance(node, ast.Expr) and not (
                isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Attribute)
                and node.value.func.attr in ("append", "extend"))):
            continue
        flags = [n.value for n in ast.walk(node) if isinstance(n, ast.Constant)
                 and isinstance(n.value, str)]
        if flags and all(map(_is_gencode, flags)) and node.lineno == node.end_lineno:
            guarded.add(node.lineno)
    placed = [n.lineno for n in ast.walk(module) if isinstance(n, ast.Constant)
              and isinstance(n.value, str) and _is_gencode(n.value)]
    items = {line: cols for line, cols in _in_lists(module).items() if line not in guarded}
    if any(line not in guarded and line not in items for line in placed):
        return None
    lines = text.splitlines(keepends=True)
    for line in guarded:
        row = lines[line - 1]
        indent = len(row) - len(row.lstrip())
        lines[line - 1] = f"{row[:indent]}if not {arch_list}: {row[indent:]}"
    for line, (start, end) in items.items():
        row = lines[line - 1]
        lines[line - 1] = f"{row[:start]}*([] if {arch_list} else [{row[start:end]}]){row[end:]}"
    return "".join(lines) if placed else None


def _use_ninja(text: str, setup: Setup) -> str | None:
    if setup.no_ninja_line is None:
        return None
    lines = text.splitlines(keepends=True)
    index = setup.no_ninja_line - 1
    lines[index] = re.sub(r"use_ninja\s*=\s*False", "use_ninja=True", lines[index])
    return "".join(lines)


def _no_setup_requires(text: str, setup: Setup) -> str | None:
    """Drop the `setup_requires=...,` lines when the keyword has lines of its own."""
    if setup.setup_requires is None:
        return None
    keyword = next(n for n in ast.walk(parse_python(text, "setup.py"))
                   if isinstance(n, ast.keyword) and n.arg == "setup_requires")
    lines = text.splitlines(keepends=True)
    first, last = keyword.lineno - 1, (keyword.value.end_lineno or keyword.lineno) - 1
    if not (lines[first].lstrip().startswith("setup_requires")
            and lines[last].rstrip().endswith(",")):
        return None
    return "".join(lines[:first] + lines[last + 1:])
