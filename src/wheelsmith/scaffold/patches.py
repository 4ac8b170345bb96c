"""The standard patches: the ones `recipe new` writes itself (a setup.py edit it can make
exactly: a hard-coded -gencode list kept only without TORCH_CUDA_ARCH_LIST, `use_ninja=False`
-> True, `setup_requires` dropped, `-std=c++17` -> c++20 where the toolchain's torch needs it,
pkg_resources replaced by importlib.metadata and packaging, a raise without a GPU made to
honour FORCE_CUDA; in the C++ and CUDA sources, the ATen spellings torch removed) and the ones
it names with a shipped patch to start from (the bare_metal_version probe, prebuilt-wheel
downloads, psutil at build time). The edits over the package's CMake files are cmake.py's,
those over its own modules source_edits.py's, those over its C++ and CUDA sources
aten_api.py's; every diff is recipes.patch.file_diff's."""

from __future__ import annotations

import ast
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from wheelsmith import locations
from wheelsmith.recipes.patch import apply_one, file_diff
from wheelsmith.scaffold import aten_api, cmake, source_edits
from wheelsmith.scaffold.extensions import vendor_branches
from wheelsmith.scaffold.setup_py import (
    ARCH_FLAG_RE,
    GENCODE_RE,
    OLD_STD_RE,
    Setup,
    gpu_required,
)
from wheelsmith.scaffold.source_edits import (
    in_place,
    lines_of,
    one_line,
    source_of,
    without_pkg_resources,
)
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

    @property
    def data(self) -> bytes:
        """The patch file's bytes (a source byte that is not UTF-8 stays the byte it was)."""
        return self.text.encode("utf-8", "surrogateescape")


ARCH_PATCH = StandardPatch("honour-torch-cuda-arch-list",
                           "setup.py passes its own -gencode list and ignores "
                           "TORCH_CUDA_ARCH_LIST")
NVCC_PATCH = StandardPatch("clear-error-without-nvcc",
                           "setup.py sets bare_metal_version only when it finds nvcc and uses "
                           "it anyway (NameError without nvcc)")
DOWNLOAD_PATCH = StandardPatch("never-download-prebuilt-wheel",
                               "setup.py downloads a prebuilt wheel unless forced to build")
PSUTIL_PATCH = StandardPatch("no-psutil-at-build-time", "setup.py imports psutil to size its jobs")
PKG_RESOURCES_PATCH = StandardPatch("no-pkg-resources",
                                    "setup.py imports pkg_resources, which the toolchain's "
                                    "setuptools no longer has, and uses more of it than "
                                    "importlib.metadata and packaging stand in for here")
GPU_PATCH = StandardPatch("honour-force-cuda",
                          "setup.py builds CUDA only where torch.cuda.is_available(), and build "
                          "machines have no GPU")
CXX20 = "cxx20-for-newer-torch-headers"
NINJA_ON_PATH = "ninja-on-path"
# the ninja module's directory, where setup.py takes ninja's binary from (bmtrain 1.0.1:
# -DCMAKE_MAKE_PROGRAM={ninja.BIN_DIR}/ninja), past the ninja first on the build's PATH
NINJA_BIN_DIR_RE = re.compile(r"\bninja\.BIN_DIR\b")
NINJA_ON_PATH_DIR = '__import__("os").path.dirname(__import__("shutil").which("ninja"))'
CMAKE_ARCHS = "honour-cmake-cuda-architectures"
FORCE_CUDA = "FORCE_CUDA"  # the variable the honour-force-cuda patch reads


def needed(setup: Setup, made: tuple[Written, ...] = ()
           ) -> tuple[tuple[StandardPatch, int], ...]:
    """The standard patches to write by hand, each with the setup.py line that needs it; none
    of a kind `made` (written, or carried over from a shipped recipe) holds already."""
    arch = bool(setup.gencode) and setup.arch_list_line is None and setup.arch_knob is None
    found = [(patch, line) for patch, line in (
        (ARCH_PATCH, (setup.gencode_line or 0) if arch else None),
        (NVCC_PATCH, setup.probe_line), (DOWNLOAD_PATCH, setup.download_line),
        (PSUTIL_PATCH, setup.psutil_line), (PKG_RESOURCES_PATCH, setup.pkg_resources_line),
        (GPU_PATCH, setup.needs_gpu_line))
        if line is not None and not any(patch.stem in w.file for w in made)]
    return tuple(found)


def written(tree: Path, setup: Setup, *, cxx20: bool, after: tuple[Written, ...] = (),
            cmake_torch: bool = False, cmake_cuda: bool = False) -> tuple[Written, ...]:
    """The patches `recipe new` writes: each one is made over the tree the ones before it
    left (a copy of `tree`, each applied to it once made), so each applies on top of them.
    `cxx20`:
    the toolchain's torch headers need C++20 (check.torch_needs_cxx20); `cmake_torch`: a CMake
    project that compiles against them (its own CMake files get C++20 too); `cmake_cuda`: a
    CMake project that compiles CUDA (a hard-coded arch list in it is made to take the
    build's). `after`: patches
    applied to `tree` already (carried over from a shipped recipe): numbered after them, and
    none of a kind they hold."""
    with tempfile.TemporaryDirectory() as scratch:  # the tree as each patch leaves it
        work = Path(scratch) / "tree"
        shutil.copytree(tree, work, symlinks=True)
        return _made_over(work, setup, list(after), cxx20=cxx20, cmake_torch=cmake_torch,
                          cmake_cuda=cmake_cuda)


def _made_over(tree: Path, setup: Setup, made: list[Written], *, cxx20: bool,
               cmake_torch: bool, cmake_cuda: bool) -> tuple[Written, ...]:
    """The patches made over `tree` (a copy), each applied to it once made; `made`: those
    applied already, whose kinds are not made again."""
    after = tuple(made)

    def add(*patches: Written | None) -> None:  # applied to `tree`: the next is made over it
        for patch in patches:
            if patch is not None:
                _apply(patch, tree)
                made.append(patch)

    def missing(kind: str) -> bool:
        return not any(f"-{kind}." in w.file for w in after)

    add(*(_setup_py_patches(tree, setup, cxx20=cxx20, after=after)
          if (tree / "setup.py").is_file() else ()))
    add(cmake_cxx20(tree, len(made) + 1) if cxx20 and cmake_torch and missing(CXX20) else None)
    add(cmake_arch_list(tree, len(made) + 1, torch=cmake_torch)
        if cmake_cuda and missing(CMAKE_ARCHS) else None)
    add(current_aten_api(tree, len(made) + 1) if missing(ATEN_API) else None)
    add(runtime_pkg_resources(tree, len(made) + 1) if missing(RUNTIME_PKG_RESOURCES) else None)
    return tuple(made[len(after):])


def _apply(patch: Written, tree: Path) -> None:
    """`patch` applied to `tree` by the exact patcher the build uses."""
    with tempfile.TemporaryDirectory() as scratch:
        file = Path(scratch) / patch.file
        file.write_bytes(patch.data)
        apply_one(file, tree)


def _setup_py_patches(tree: Path, setup: Setup, *, cxx20: bool, after: tuple[Written, ...]
                      ) -> list[Written]:
    made: list[Written] = list(after)
    text = (tree / "setup.py").read_text(errors="replace")
    edits = [(ARCH_PATCH.stem, "keep the hard-coded -gencode list only when TORCH_CUDA_ARCH_LIST "
                               "is unset, so torch emits exactly the requested archs",
              _honour_arch_list),
             ("use-ninja", "torch's BuildExtension with ninja (setup.py turned it off), so the "
                           "pre-build arch check, MAX_JOBS and split-compile apply", _use_ninja),
             ("no-setup-requires", "setup_requires would make setuptools download in the "
                                   "offline build; the toolchain provides the build's "
                                   "dependencies", _no_setup_requires),
             *([(CXX20, "-std=c++20, as the toolchain's torch headers need (setup.py asks for "
                        "an older standard)", _cxx20)] if cxx20 else []),
             (PKG_RESOURCES_PATCH.stem, "importlib.metadata and packaging in place of "
                                        "pkg_resources, which the toolchain's setuptools no "
                                        "longer has", _no_pkg_resources),
             (GPU_PATCH.stem, f"{FORCE_CUDA}=1 stands in for the GPU build machines lack "
                              "(setup.py builds CUDA only where torch.cuda.is_available())",
              _honour_force_cuda),
             (NINJA_ON_PATH, "the ninja on PATH in place of the ninja module's own binary, "
                             "which setup.py gave CMake: the build's ninja runs the pre-build "
                             "check", _ninja_on_path)]
    for stem, description, edit in edits:
        if any(f"-{stem}." in w.file for w in after):
            continue
        changed = edit(text, setup)
        if changed is not None and changed != text:
            made.append(Written(f"{len(made) + 1:04d}-{stem}.patch", description,
                                file_diff("setup.py", text, changed)))
            text = changed
    return made[len(after):]


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
    lines = lines_of(text)
    for line in guarded:
        row = lines[line - 1]
        indent = len(row) - len(row.lstrip())
        lines[line - 1] = f"{row[:indent]}if not {arch_list}: {row[indent:]}"
    for line, (start, end) in items.items():  # ast's columns are UTF-8 bytes
        raw = lines[line - 1].encode()
        lines[line - 1] = (f"{raw[:start].decode()}*([] if {arch_list} else "
                           f"[{raw[start:end].decode()}]){raw[end:].decode()}")
    return "".join(lines) if placed else None


def _use_ninja(text: str, setup: Setup) -> str | None:
    """`use_ninja=True` in place of the value setup.py gives (False, or an expression that
    may be false: deepspeed's `use_ninja=use_ninja`)."""
    if setup.no_ninja_line is None:
        return None
    keyword = next((n for n in ast.walk(parse_python(text, "setup.py"))
                    if isinstance(n, ast.keyword) and n.arg == "use_ninja"
                    and n.value.lineno == setup.no_ninja_line), None)
    if keyword is None:
        return None
    lines = lines_of(text)
    raw = lines[setup.no_ninja_line - 1].encode()  # ast's columns are UTF-8 bytes
    start, end = keyword.value.col_offset, keyword.value.end_col_offset or 0
    lines[setup.no_ninja_line - 1] = f"{raw[:start].decode()}True{raw[end:].decode()}"
    return "".join(lines)


def _no_setup_requires(text: str, setup: Setup) -> str | None:
    """Drop the `setup_requires=...,` lines when the keyword has lines of its own, or the
    keyword and its comma from a line it shares (`setup(name="x", setup_requires=["y"])`)."""
    if setup.setup_requires is None:
        return None
    keyword = next(n for n in ast.walk(parse_python(text, "setup.py"))
                   if isinstance(n, ast.keyword) and n.arg == "setup_requires")
    lines = lines_of(text)
    first, last = keyword.lineno - 1, (keyword.value.end_lineno or keyword.lineno) - 1
    if lines[first].lstrip().startswith("setup_requires") and lines[last].rstrip().endswith(","):
        return "".join(lines[:first] + lines[last + 1:])
    if first != last:
        return None
    row = lines[first].encode()
    start, end = keyword.col_offset, keyword.value.end_col_offset or 0
    after = re.match(rb"\s*,\s*", row[end:])
    before = re.search(rb",\s*$", row[:start])
    if after:  # `setup_requires=[...], ` goes
        end += after.end()
    elif before:  # the last keyword: `, setup_requires=[...]` goes
        start = before.start()
    lines[first] = (row[:start] + row[end:]).decode()
    return "".join(lines)


def _cxx20(text: str, setup: Setup) -> str | None:
    """Each `-std=c++17` (c++14, gnu++17, ...) of the CUDA build becomes c++20."""
    if setup.old_std_line is None:
        return None
    module = parse_python(text, "setup.py")
    elsewhere = vendor_branches(module)
    edits = [(n, OLD_STD_RE.sub(r"\g<1>20", source_of(text, n))) for n in ast.walk(module)
             if isinstance(n, ast.Constant) and isinstance(n.value, str) and one_line(n)
             and OLD_STD_RE.search(n.value) and id(n) not in elsewhere]
    return in_place(text, edits) if edits else None


def _os(text: str) -> str:
    return "os" if re.search(r"^import os$", text, re.MULTILINE) else '__import__("os")'


def _honour_force_cuda(text: str, setup: Setup) -> str | None:
    """`torch.cuda.is_available()` where setup.py stops without it becomes
    `(torch.cuda.is_available() or os.environ.get("FORCE_CUDA") == "1")`."""
    if setup.needs_gpu_line is None:
        return None
    force = f'{_os(text)}.environ.get("{FORCE_CUDA}") == "1"'
    calls = [c for c in gpu_required(parse_python(text, "setup.py"),
                                     switched=setup.own_cuda_way) if one_line(c)]
    return in_place(text, [(c, f"({source_of(text, c)} or {force})") for c in calls]) \
        if calls else None


def _ninja_on_path(text: str, _: Setup) -> str | None:
    """`ninja.BIN_DIR` (the ninja module's binary) becomes the directory of the ninja first on
    PATH, which in a wheelsmith build is the one that runs the pre-build check."""
    return NINJA_BIN_DIR_RE.sub(NINJA_ON_PATH_DIR, text) if NINJA_BIN_DIR_RE.search(text) \
        else None


def _no_pkg_resources(text: str, setup: Setup) -> str | None:
    return None if setup.pkg_resources_line is None else without_pkg_resources(text, "setup.py")


RUNTIME_PKG_RESOURCES = "no-pkg-resources-at-run-time"
ATEN_API = "current-aten-api"


def current_aten_api(tree: Path, number: int) -> Written | None:
    """One patch over the package's own C++ and CUDA sources that use a spelling every
    toolchain's torch, or CUDA 13's CUB, removed (`aten_api.diff`); None when none does."""
    diff = aten_api.diff(tree)
    return Written(f"{number:04d}-{ATEN_API}.patch", "the spellings torch and CUDA 13's CUB "
                   "removed (AT_DISPATCH_* of Tensor::type(), AT_CHECK, cub::Max and its kin, the "
                   "debug_synchronous argument of CUB's device algorithms) "
                   "replaced by the current ones (scalar_type(), TORCH_CHECK, "
                   "::cuda::maximum<> and its kin) in the package's C++ and CUDA sources",
                   diff) if diff else None



def runtime_pkg_resources(tree: Path, number: int) -> Written | None:
    """One patch over the package's own modules that import pkg_resources
    (`source_edits.runtime_pkg_resources_diff`); None when none needs one."""
    diff = source_edits.runtime_pkg_resources_diff(tree)
    return Written(f"{number:04d}-{RUNTIME_PKG_RESOURCES}.patch", "importlib.metadata and "
                   "packaging in place of pkg_resources in the package's own modules, which "
                   "would not import where setuptools 81 or later is installed",
                   diff) if diff else None


def cmake_cxx20(tree: Path, number: int) -> Written | None:
    """One patch over the package's own CMake files asking for C++20 where they ask for an
    older standard (`cmake.cxx20_diff`); None when none asks for one."""
    diff = cmake.cxx20_diff(tree)
    return Written(f"{number:04d}-{CXX20}.patch", "C++20 in the CMake project, as the "
                   "toolchain's torch headers need (it asks for an older standard)",
                   diff) if diff else None


def cmake_arch_list(tree: Path, number: int, *, torch: bool) -> Written | None:
    """One patch over the package's own CMake files whose arch list is hard-coded
    (`cmake.arch_list_diff`); None when none is."""
    diff = cmake.arch_list_diff(tree, torch=torch)
    return Written(f"{number:04d}-{CMAKE_ARCHS}.patch", "the CMake project's hard-coded "
                   "CUDA_ARCHITECTURES made to take the arch list the build gives",
                   diff) if diff else None
