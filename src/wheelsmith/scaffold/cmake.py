"""The CMake side of an sdist, read for `recipe new` (never run): whether its build runs CMake
(the build machinery's own test, builder/cmakebuild.py: scikit-build-core or scikit-build by
pyproject.toml's build-backend, or a setup.py that calls `cmake`), where its CMake project
enables CUDA, the switches a build machine needs (a CUDA option that is off by default, such as
llama.cpp's GGML_CUDA; an option that optimises for the machine it builds on, GGML_NATIVE, made
off: the build machine has no GPU and is not the user's CPU), and whether it links torch (a
CUDA package that does not is built in a CUDA-only channel); and the diffs that make its own
CMake files ask for C++20 and take the build's arch list where they hard-code them."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from wheelsmith.builder import cmakebuild
from wheelsmith.recipes.patch import file_diff, read_exactly
from wheelsmith.scaffold.owntree import own_files
from wheelsmith.scaffold.setup_py import OLD_STD_RE
from wheelsmith.untrusted.text import clip

# where a CMake project compiles CUDA: its languages, or enabled later (else the first .cu source
# it names: vllm's CUDA comes from torch's CMake config, which enables the language for it)
CUDA_RE = re.compile(r"^[ \t]*((?:project\s*\([^)]*\bCUDA\b|enable_language\s*\(\s*CUDA\b))",
                     re.MULTILINE | re.IGNORECASE)
# `option(NAME "doc" DEFAULT)`
OPTION_RE = re.compile(r"^[ \t]*option\s*\(\s*(\w+)\s+\"[^\"]*\"\s*([^)\s]*)\s*\)",
                       re.MULTILINE | re.IGNORECASE)
# the option that turns CUDA on: GGML_CUDA, USE_CUDA, WITH_CUDA, ENABLE_CUDA
CUDA_SWITCH_RE = re.compile(r"^(?:\w+_)?CUDA$|^(?:USE|WITH|ENABLE|BUILD)_CUDA$")
NATIVE_RE = re.compile(r"^\w+_NATIVE$")  # -march=native and the build machine's GPU arch
CU_SOURCE_RE = re.compile(r"^[^#\n]*?[\w/.${}*-]+\.cu\b", re.MULTILINE)  # a .cu file it names
OTHER_VENDOR_RE = re.compile(r"rocm|hip", re.IGNORECASE)  # a .cu a HIP build compiles
TORCH_RE = re.compile(r"find_package\s*\(\s*Torch\b|^\s*(?:import torch|from torch[ .])",
                      re.MULTILINE)
# a dependency CMake downloads while it configures or builds: FetchContent_Declare(NAME ... URL
# or GIT_REPOSITORY ...), ExternalProject_Add(NAME ...) likewise (torch-kdtree's eigen)
DOWNLOAD_RE = re.compile(r"\b(FetchContent_Declare|ExternalProject_Add)\s*\(\s*([\w.+-]+)"
                         r"[^)]*?\b(URL|GIT_REPOSITORY|SVN_REPOSITORY|HG_REPOSITORY)\s+"
                         r"\"?([^\s\")]*)", re.IGNORECASE)
SKIPPED = {"test", "tests", "examples", "docs", "benchmarks"}
MAX_BYTES = 1 << 21  # of one CMake file: llama.cpp's largest is 40 KB
MAX_FILES = 5000  # CMake files of one sdist read for their policy version (llama.cpp: ~150)
# what sets a CMake policy version: cmake_minimum_required(VERSION min[...max]) and
# cmake_policy(VERSION min[...max]); CMake takes max where it is given, else min (its docs).
# A command's name is any case, its VERSION keyword upper case; `#` starts a comment.
POLICY_RE = re.compile(r"^[ \t]*((?i:cmake_minimum_required|cmake_policy))[ \t]*\(\s*VERSION\s+"
                       r"(\d+(?:\.\d+)*)(?:\.\.\.(\d+(?:\.\d+)*))?(?=[\s)])", re.MULTILINE)
# CMake 4 refuses a policy version older than 3.5, unless this variable (of the environment
# where it configures a new build tree, or a -D option) gives the oldest one to take instead:
# builder/diagnose.py's cmake-policy-minimum names the same setting
POLICY_MINIMUM = ("CMAKE_POLICY_VERSION_MINIMUM", "3.5")


@dataclass(frozen=True, slots=True)
class CMakeSide:
    how: str  # how the build runs CMake, in words (with the setup.py line)
    passes_args: bool  # scikit-build(-core): CMAKE_ARGS reaches CMake's configure
    cuda_at: str | None  # `csrc/CMakeLists.txt:4`: where the project compiles CUDA
    switches: tuple[tuple[str, str, str], ...]  # (option, value, `file:line`) to pass
    links_torch: bool
    lists: bool = True  # the sdist holds a CMakeLists.txt (marlin-kernels' has none)
    downloads: tuple[tuple[str, str, str], ...] = ()  # (`file:line`, call(NAME), from where)
    # (`file:line`, the call) of each policy version older than the toolchain's CMake takes
    old_policies: tuple[tuple[str, str], ...] = ()

    def cmake_args(self) -> str:
        """The switches as CMake options (`-DGGML_CUDA=ON -DGGML_NATIVE=OFF`)."""
        return " ".join(f"-D{name}={value}" for name, value, _ in self.switches)


def _files(tree: Path) -> list[Path]:
    """The CMake files of the sdist, outside its tests, examples and docs."""
    found = [*tree.rglob("CMakeLists.txt"), *tree.rglob("*.cmake")]
    return sorted(p for p in found if p.is_file()
                  and not SKIPPED & {part.lower() for part in p.relative_to(tree).parts[:-1]})


def _head(file: Path) -> str:
    """A CMake file's text, its first MAX_BYTES (an sdist is untrusted: a huge file is not
    read whole)."""
    with file.open("rb") as stream:
        return stream.read(MAX_BYTES).decode(errors="replace")


def _line(text: str, start: int) -> int:
    return text[:start].count("\n") + 1


def _where(tree: Path, file: Path, text: str, start: int) -> str:
    return f"{file.relative_to(tree)}:{_line(text, start)}"


def read_cmake(tree: Path, cmake_version: str | None = None) -> CMakeSide | None:
    """The CMake side of `tree`, or None when its build does not run CMake; `cmake_version`:
    the toolchain's CMake (None: the newest's rules)."""
    if not cmakebuild.uses_cmake(tree):
        return None
    backend = cmakebuild.backend(tree) or ""
    passes = backend.split(".")[0] in cmakebuild.BACKENDS
    line = cmakebuild.cmake_call_line(tree / "setup.py")
    how = f"{backend} (pyproject.toml's build-backend)" if passes else \
        f"setup.py:{line} runs cmake"
    files = {file: _head(file) for file in _files(tree)}
    cuda_at = next((_where(tree, f, t, m.start()) for pattern in (CUDA_RE, CU_SOURCE_RE)
                    for f, t in files.items() for m in pattern.finditer(t)
                    if not OTHER_VENDOR_RE.search(m[0])), None)
    switches = []
    for file, text in files.items():
        for option in OPTION_RE.finditer(text):
            name, default = option[1], option[2].upper()
            if CUDA_SWITCH_RE.match(name) and default in ("", "OFF", "FALSE", "0"):
                switches.append((name, "ON", _where(tree, file, text, option.start())))
            elif NATIVE_RE.match(name) and default not in ("OFF", "FALSE", "0"):
                switches.append((name, "OFF", _where(tree, file, text, option.start())))
    setup = (tree / "setup.py").read_text(errors="replace") if (tree / "setup.py").is_file() \
        else ""
    torch = any(TORCH_RE.search(text) for text in [setup, *files.values()])
    build_requires = (tree / "pyproject.toml").read_text(errors="replace") \
        if (tree / "pyproject.toml").is_file() else ""
    links = torch or re.search(r"requires\s*=\s*\[[^\]]*[\"']torch\b", build_requires) is not None
    first = {name: (name, value, where) for name, value, where in reversed(switches)}
    on_the_way = _on_the_way(tree, cuda_at)
    turned_on = {name for name, value, _ in switches if value == "ON"} | {
        m[1] for t in files.values() for m in OPTION_RE.finditer(t)
        if m[2].upper() not in ("", "OFF", "FALSE", "0")} | {
        m[1] for t in files.values() for m in SET_ON_RE.finditer(t)}
    downloads = tuple((_where(tree, f, t, m.start()), f"{m[1]}({m[2]})", m[4] or m[3])
                      for f, t in files.items() if on_the_way(f)
                      for m in DOWNLOAD_RE.finditer(t)
                      if _reached(enclosing_ifs(t, m.start()), turned_on))
    return CMakeSide(how, passes, cuda_at, tuple(first[n] for n in dict.fromkeys(
        n for n, _, _ in switches)) if passes else (), links,
        any(p.name == "CMakeLists.txt" for p in files), downloads,
        old_policies(tree, cmake_version))


def old_policies(tree: Path, cmake_version: str | None = None) -> tuple[tuple[str, str], ...]:
    """Each call in the sdist's CMake files that asks for a policy version older than
    `cmake_version` takes (CMake 4 refuses those below 3.5; None: the newest CMake's rule):
    (`file:line`, the call). Every CMake file of the sdist is read, its third-party trees and
    tests too: CMake configures a vendored project (an old pybind11 under third_party/) through
    add_subdirectory, and a test tree where its option is on; the setting that lets CMake 4
    take an old version changes nothing for a file that asks for a newer one."""
    major = (cmake_version or "").split(".")[0]
    if major.isdigit() and int(major) < 4:
        return ()
    floor = _version(POLICY_MINIMUM[1])
    found = []
    for file in _every_file(tree):
        text = _head(file)
        for m in POLICY_RE.finditer(text):
            if _version(m[3] or m[2]) < floor:
                asked = f"{m[2]}...{m[3]}" if m[3] else m[2]
                found.append((_where(tree, file, text, m.start(1)), f"{m[1]}(VERSION {asked})"))
    return tuple(found)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def _every_file(tree: Path) -> list[Path]:
    """The sdist's CMake files (CMakeLists.txt, *.cmake) in every directory, no link, the
    first MAX_FILES."""
    found = [p for p in sorted(tree.rglob("*")) if (p.name == "CMakeLists.txt" or
                                                    p.suffix == ".cmake")
             and not p.is_symlink() and p.is_file()]
    return found[:MAX_FILES]


IF_RE = re.compile(r"^[ \t]*(if|elseif|else|endif)\s*\((.*)", re.IGNORECASE | re.MULTILINE)
SET_ON_RE = re.compile(r"\bset\s*\(\s*(\w+)\s+(?:ON|TRUE|YES|1)\s*[)\s]", re.IGNORECASE)
BARE_TEST_RE = re.compile(r"^\s*(NOT\s+)?(\w+)\s*\)")  # `if (NAME)`, else(): `NOT NAME)`


def enclosing_ifs(text: str, at: int) -> list[str]:
    """The conditions a CMake file's offset `at` is under, outermost first: each open if()
    block's (the text after `if(` on its line); in an elseif() or else() branch, each earlier
    branch's condition negated (`NOT ` before it) and the elseif's own (vllm fetches cutlass
    in the else() of `if(VLLM_CUTLASS_SRC_DIR)`)."""
    blocks: list[list[str]] = []
    for m in IF_RE.finditer(text, 0, at):
        word = m[1].lower()
        if word == "if":
            blocks.append([m[2]])
        elif not blocks:
            continue
        elif word == "endif":
            blocks.pop()
        else:
            branch = blocks[-1]
            branch[-1] = f"NOT {branch[-1]}"
            if word == "elseif":
                branch.append(m[2])
    return [condition for branch in blocks for condition in branch]


def _reached(conditions: list[str], turned_on: set[str]) -> bool:
    """Whether a build with the project's defaults and wheelsmith's switches enters every
    one of `conditions`: `if (NAME)` of a variable nothing turns on (llama.cpp's
    GGML_CUDA_CUB_3DOT2, under which it fetches CCCL) is not entered, nor the else() of one
    something turns on; other tests may be."""
    for condition in conditions:
        bare = BARE_TEST_RE.match(condition)
        if bare is not None and (bare[2] in turned_on) == bool(bare[1]):
            return False
    return True


def _on_the_way(tree: Path, cuda_at: str | None) -> Callable[[Path], bool]:
    """Whether a CMake file is read by the CUDA build for certain: its directory holds the file
    that compiles CUDA, or is above it, or is in a `cmake` directory of modules (vllm's
    cmake/external_projects/ too); not a sibling backend's (llama.cpp's ggml-zendnn downloads
    ZenDNN, off unless asked for)."""
    cuda_dir = (tree / cuda_at.rsplit(":", 1)[0]).parent if cuda_at else tree

    def reads(file: Path) -> bool:
        return "cmake" in {part.lower() for part in file.relative_to(tree).parts[:-1]} or \
            cuda_dir.is_relative_to(file.parent)
    return reads


def cmake_lines(side: CMakeSide, pinned: Mapping[str, tuple[str, str]] = MappingProxyType({})
                ) -> list[str]:
    """`recipe new`'s findings: how its build runs CMake, what a build machine needs, and its
    channel; `pinned`: for a download's file:line, the carry entry that pins it, in words, or
    ("", why not)."""
    where = f"its project compiles CUDA ({side.cuda_at})" if side.cuda_at else \
        "no CMake file of it enables CUDA"
    lines = [f"cmake: {side.how}; {where}: built with Ninja through the pre-build check"]
    for name, value, at in side.switches:
        why = "turns CUDA on (off by default)" if value == "ON" else \
            "optimises for the build machine (its CPU; its GPU, which it lacks)"
        lines.append(f"{at}: option {name} {why}: build.env CMAKE_ARGS -D{name}={value}")
    lines += [f"{at}: {call} asks for a CMake policy version older than the toolchain's CMake "
              f"takes ({POLICY_MINIMUM[1]}): build.env {POLICY_MINIMUM[0]}: "
              f'"{POLICY_MINIMUM[1]}"' for at, call in side.old_policies]
    for at, call, origin in side.downloads:
        carried, why = pinned.get(at, ("", ""))
        lines.append(f"{at}: {call} downloads {clip(origin)} while CMake runs: {carried}"
                     if carried else
                     f"{at}: carry needed: {call} downloads {clip(origin)} while CMake runs: "
                     "build machines are offline and a build must be the same every time; "
                     + carry_advice(call, side.passes_args) + (f" ({why})" if why else ""))
    if side.cuda_at and not side.links_torch:
        lines += ["links no torch: kind: cuda (the CUDA-only channel, no torch pin)",
                  "smoke: its shared libraries are loaded (its Python side needs runtime "
                  "dependencies the toolchain does not hold)"]
    return lines


def carry_advice(call: str, passes_args: bool) -> str:
    """How a recipe carries what `call` (`FetchContent_Declare(cutlass)`) downloads."""
    name = call.split("(", 1)[1].rstrip(")")
    entry = (f"give the version a `carry` entry (into: third_party/{name}, its source pinned: "
             "url and sha256, or git and commit")
    if call.lower().startswith("fetchcontent"):
        reach = "" if passes_args else ("; setup.py must pass CMAKE_ARGS on to CMake (vllm's "
                                        "does; else a patch makes it)")
        return f"{entry}, cmake: FETCHCONTENT_SOURCE_DIR_{name.upper()}){reach}"
    return f"{entry}, env: a variable) and a patch that makes {call} take it as its SOURCE_DIR"


def arch_lines(side: CMakeSide, knob: tuple[str, int] | None, checked: str | None) -> list[str]:
    """The recipe's arch knob for a CMake build: the package's own variable (natten's, in
    torch's `12.0` form), else CMAKE_ARGS where scikit-build(-core) passes it on, else CMake's
    CUDAARCHS; the default the check found it builds (`12.0a`), else 12.0."""
    default = f"  default: [{json.dumps(checked or '12.0')}]"
    if knob or (side.links_torch and not side.passes_args):  # torch's CMake config reads
        return ["arch:", f"  env: {knob[0] if knob else 'TORCH_CUDA_ARCH_LIST'}",  # the list
                "  format: torch", default]
    return ["arch:", f"  env: {'CMAKE_ARGS' if side.passes_args else 'CUDAARCHS'}",
            "  format: cmake", default]


# a C++ standard before 20 in CMake's words: set(CMAKE_CXX_STANDARD 17), set(CXX_STD "17" ...),
# CXX_STANDARD 17 / CUDA_STANDARD 17 target properties
CMAKE_STD_RE = re.compile(r"(\bset\s*\(\s*\w*(?:STD|STANDARD)\w*\s+\"?"
                          r"|\b(?:CXX|CUDA)_STANDARD\s+\"?)(?:11|14|17)\b")


def cxx20_diff(tree: Path) -> str:
    """The diff over the package's own CMake files asking for C++20 where they ask for an
    older standard, for a CMake build that compiles against torch headers that need it."""
    return own_cmake_diff(tree, lambda text: CMAKE_STD_RE.sub(
        r"\g<1>20", OLD_STD_RE.sub(r"\g<1>20", text)))


# a hard-coded arch list in CMake's words: a target's CUDA_ARCHITECTURES (set_property,
# set_target_properties) and set(CMAKE_CUDA_ARCHITECTURES ...); a value that reads a variable
# (`${X}`, `$ENV{X}`) already honours something, OFF asks for no arch flags, a set() under
# `if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)` is a default: each is left as it is
TARGET_ARCHS_RE = re.compile(
    r"(\bset_property\s*\(\s*TARGET\b[^)]*?\bPROPERTY\s+CUDA_ARCHITECTURES)(\s+)([^)$]*?)"
    r"(\s*\))|(\bset_target_properties\s*\([^)]*?\bCUDA_ARCHITECTURES)(\s+)(\"[^\"$]*\"|"
    r"[^\s)$\"]+)", re.IGNORECASE)
_APPEND = re.compile(r"\bAPPEND\s+", re.IGNORECASE)  # the list is the build's, not added to
GLOBAL_ARCHS_RE = re.compile(r"^([ \t]*)(set\s*\(\s*CMAKE_CUDA_ARCHITECTURES\s+[^)$]*\))",
                             re.IGNORECASE | re.MULTILINE)


# a CUDA target flag written into CMAKE_CUDA_FLAGS (bmtrain: `-gencode=arch=compute_61,code=sm_61`
# ... which nvcc 13 refuses while CMake tests its compiler), on a line that sets or appends to it
CUDA_FLAGS_LINE_RE = re.compile(r"^(?!\s*#).*\bCMAKE_CUDA_FLAGS\b.*$", re.MULTILINE)
TARGET_FLAG_RE = re.compile(r"[ \t]*(?:(?:-gencode|--generate-code)[= ]arch=compute_\w+,"
                            r"code=(?:\[[\w,]*\]|[\w,]+)|(?:-arch|--gpu-architecture)[= ]"
                            r"(?:sm|compute)_\w+)")


def arch_list_diff(tree: Path, *, torch: bool) -> str:
    """The diff over the package's own CMake files whose arch list is hard-coded (torch-kdtree:
    `set_property(TARGET torch_knn PROPERTY CUDA_ARCHITECTURES 50-real 50-virtual)`): a target
    property takes CMAKE_CUDA_ARCHITECTURES (the recipe's CUDAARCHS or CMAKE_ARGS), or, in a
    project that links torch, OFF (CMake adds no arch flags; torch's CMake config passes
    TORCH_CUDA_ARCH_LIST's); a project-wide set() is kept only where the build gave no list;
    target flags written into CMAKE_CUDA_FLAGS are taken out (the list above gives them)."""
    value = "OFF" if torch else "${CMAKE_CUDA_ARCHITECTURES}"

    def target(m: re.Match[str]) -> str:
        if (m[3] if m[1] else m[7]).strip('" ').upper() == "OFF":
            return m[0]
        return f"{_APPEND.sub('', m[1])}{m[2]}{value}{m[4]}" if m[1] else f"{m[5]}{m[6]}{value}"

    def project_wide(m: re.Match[str]) -> str:
        if any("CMAKE_CUDA_ARCHITECTURES" in condition.upper()  # a default the build's list
               for condition in enclosing_ifs(m.string, m.start())):  # overrides (llama.cpp)
            return m[0]
        return (f"{m[1]}if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES AND NOT DEFINED ENV{{CUDAARCHS}})"
                f"\n{m[1]}  {m[2]}\n{m[1]}endif()")

    def edit(text: str) -> str:
        text = CUDA_FLAGS_LINE_RE.sub(lambda m: TARGET_FLAG_RE.sub("", m[0]), text)
        return GLOBAL_ARCHS_RE.sub(project_wide, TARGET_ARCHS_RE.sub(target, text))
    return own_cmake_diff(tree, edit)


def own_cmake_diff(tree: Path, edit: Callable[[str], str]) -> str:
    """The unified diff `edit` makes over the package's own CMake files (not its third-party
    ones); "" when it changes none."""
    diff: list[str] = []
    for file in own_files(tree, lambda path: path.name == "CMakeLists.txt"
                          or path.suffix == ".cmake"):
        text = read_exactly(file)
        diff.append(file_diff(str(file.relative_to(tree)), text, edit(text)))
    return "".join(diff)
