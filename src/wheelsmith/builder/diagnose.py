"""Known failure signatures in build logs, each with what it means and what to do; and the
source tree's paths in what the compiler said, relative to the tree."""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the pre-build check imports this module where only the stdlib is
    from wheelsmith.builder.pathview import PathView


@dataclass(frozen=True, slots=True)
class Signature:
    name: str
    pattern: re.Pattern[str]
    meaning: str
    remedy: str


SOURCES_MISSING = Signature(
    "sources-missing",
    re.compile(r"missing and no known rule to make it|wheelsmith source check: "),
    "the build compiles source files the source tree does not hold: some sdists leave out "
    "the csrc/ their extensions compile (causal-conv1d before 1.5.1, fast-hadamard-transform "
    "1.1.0)",
    "build from the package's repository instead: a git source pinned to the release's commit "
    "(`wheelsmith recipe new NAME==VERSION` checks the sdist and shows that form)",
)

# a header the compiler could not open, then the #include line it printed (gcc: `  6 | #include
# "x.cuh"`, EDG: `  #include "x.cuh"`); "..." for the package's own, <...> for a library's
# The names C++20 added to the standard library that packages had for functions of their own
# (extend as found): compiled as C++20, as torch's headers need, a call that also finds std's
# is ambiguous. The sample compile (sample.py) compiles the CUDA objects that define one.
CXX20_NAMES = ("lerp", "midpoint", "ssize", "bit_cast", "popcount", "countl_zero",
               "countr_zero", "countl_one", "countr_one", "has_single_bit", "bit_width",
               "bit_ceil", "bit_floor", "rotl", "rotr", "to_address", "erase_if",
               "is_constant_evaluated", "assume_aligned", "byteswap")

_NOT_OPENED = (r'(?:No such file or directory|cannot open source file "[^"\n]*")[ \t]*\n'
               r'[ \t]*(?:\d+[ \t]*\|)?[ \t]*#[ \t]*include[ \t]*')

SIGNATURES = (
    SOURCES_MISSING,
    Signature(
        "own-header-missing",
        re.compile(_NOT_OPENED + '"'),
        "a source includes a header of the package's own (`#include \"...\"`) that the source "
        "tree does not hold: the sdist leaves it out (auto-gptq 0.7.1's marlin_repack.cuh), or "
        "a build step that makes it did not run",
        SOURCES_MISSING.remedy,
    ),
    Signature(
        "library-header-missing",
        re.compile(_NOT_OPENED + "<"),
        "a source includes a library's header (`#include <...>`) that is not on the include "
        "path: the compilers search the toolchain's CUDA toolkit, torch, the libraries "
        "torch's wheels bring (cuDNN, NCCL, cuSPARSELt, NVSHMEM) and the system's headers",
        "name the library in the recipe's build.libraries (NVIDIA's wheel of it, e.g. "
        "nvidia-nccl-cu13==VERSION, or an archive of its install prefix; `wheelsmith recipe "
        "new` writes the entry from the #include), or patch the package to build without it",
    ),
    Signature(
        "download-offline",
        re.compile(r"Failed to clone repository|error: downloading '[^'\n]*' failed|"
                   r"Each download failed|Max retries exceeded with url|"
                   r"Failed to establish a new connection"),
        "the build downloads while it runs (CMake's FetchContent or ExternalProject, a git "
        "clone, setup.py fetching a file: vllm 0.34.0's cutlass, torch-kdtree's eigen), and "
        "builds are offline so that the same inputs give the same wheel",
        "make the recipe carry the source: a `carry` entry in its version (docs/recipes.md) "
        "fetches and pins it, places it in the tree and names it to the build (cmake: "
        "FETCHCONTENT_SOURCE_DIR_<NAME>, or env: the package's variable); `wheelsmith recipe "
        "new` names each download it finds ('carry needed')",
    ),
    Signature(
        "bare-metal-version",
        re.compile(r"NameError: name 'bare_metal_version' is not defined"),
        "the package's setup.py did not find nvcc (CUDA_HOME unset or a CPU-only torch) and "
        "then used a variable it never set",
        "build with a wheelsmith toolchain (it sets CUDA_HOME), and give the recipe the "
        "'clear error without nvcc' patch",
    ),
    Signature(
        "unsupported-arch",
        re.compile(r"Unsupported gpu architecture '(compute_\w+)'"),
        "nvcc was asked for an arch it does not know; packages that pass their own -gencode "
        "list do this when the CUDA toolkit is newer or older than the list expects",
        "make the recipe honour TORCH_CUDA_ARCH_LIST (patch the hard-coded list), or use a "
        "toolchain whose nvcc supports the arch",
    ),
    Signature(
        "cuda-major-mismatch",
        re.compile(r"The detected CUDA version .{0,20}mismatches the version that was used to "
                   r"compile\s*PyTorch"),
        "nvcc and torch were built for different CUDA major versions",
        "use the toolchain profile that matches torch (wheelsmith's profiles pin both)",
    ),
    Signature(
        "oom-killed",
        re.compile(r"(?m)(^|\s)Killed\s*$|signal 9|exit status 137|Killed signal terminated"),
        "a compiler process was killed, almost always by the kernel's OOM killer",
        "lower parallelism (--jobs 1) or raise build.memory_per_job_gb in the recipe",
    ),
    Signature(
        "no-torch",
        re.compile(r"No module named 'torch'"),
        "the build could not import torch (an isolated build environment?)",
        "wheelsmith builds with --no-build-isolation in the toolchain venv; check the recipe "
        "does not run a separate build frontend",
    ),
    Signature(
        "build-import-missing",
        re.compile(r"Backend '[\w.:]+' is not available|No module named '(?!torch')[\w.]+'"),
        "the build imports a package the toolchain does not hold (its pyproject.toml's build "
        "backend, or a module setup.py imports)",
        "add it, pinned, to the recipe's build.requires (NAME==VERSION, with what it needs; "
        "`wheelsmith recipe new` pins pyproject.toml's build requirements)",
    ),
    Signature(
        "download-attempt",
        re.compile(r"urlopen error|Temporary failure in name resolution|Guessing wheel URL"),
        "the package's setup tried to download something (usually a prebuilt wheel), and "
        "wheelsmith builds offline",
        "add the 'never download a prebuilt wheel' patch and set <PKG>_FORCE_BUILD=TRUE",
    ),
    Signature(
        "farm-job-failed",
        re.compile(r"sccache: Job failed on server \S+"),
        "a build server of the compile farm ran a compile and it failed there (its sandbox "
        "cannot run the toolchain, or the server broke); sccache does not retry those here",
        "check that server (sccache-dist's log, bubblewrap), or build without --compile-farm",
    ),
    Signature(
        "farm-token-refused",
        re.compile(r"Error 401: Fixed token mismatch"),
        "the compile farm's scheduler refused the client token",
        "set $WHEELSMITH_COMPILE_FARM_TOKEN to the token of the scheduler's [client_auth]",
    ),
    Signature(
        "cxx-standard",
        re.compile(r"#error C\+\+20 or later compatible compiler is required"),
        "the package asks the compiler for an older C++ standard (a -std=c++17 in setup.py's "
        "extra_compile_args, after torch's own -std=c++20) and torch 2.14's headers need C++20",
        "give the recipe a patch that makes setup.py's -std=c++17 (or c++14) -std=c++20, as "
        "patches/flash-attn/2.8.3/0004-cxx20-for-newer-torch-headers.patch does (`wheelsmith "
        "recipe new` writes it for a new recipe), or build with a profile of an older torch "
        "(--toolchain cu130-torch2.11)",
    ),
    Signature(
        "cxx20-name-clash",
        re.compile(  # nvcc's front end (EDG), then g++'s two wordings
            r"more than one instance of overloaded function \"(?:std::)?(?:{0})\"|"
            r"call of overloaded '(?:std::)?(?:{0})\(|reference to '(?:std::)?(?:{0})' is "
            r"ambiguous".format("|".join(CXX20_NAMES))),
        "a function of the package has the name of one C++20 added to the standard library "
        "(std::lerp, std::midpoint, ...): compiled as C++20, as torch's headers need, a call "
        "that also finds the std one (`using namespace std`, or arguments from std) is "
        "ambiguous",
        "patch the package where the compiler's first error points: rename its function or "
        "qualify the call (`::lerp(...)`); no mechanical edit can choose for it",
    ),
    Signature(
        "cmake-policy-minimum",
        re.compile(r"Compatibility with CMake < [\d.]+ has been removed from CMake"),
        "the project (or one it vendors, such as an old pybind11) asks for a CMake policy "
        "version older than the toolchain's CMake supports (CMake 4 removed those below 3.5)",
        "set `CMAKE_POLICY_VERSION_MINIMUM: \"3.5\"` in the recipe's build.env (CMake 4 reads "
        "it when it configures a new build tree), or patch the cmake_minimum_required(VERSION "
        "...) the error names",
    ),
    Signature(
        "arch-list-missing",
        re.compile(r"_get_cuda_arch_flags.*\n.*IndexError: list index out of range"),
        "torch had no arch list and no GPU to ask",
        "pass --arch; the recipe's arch.env must be the variable the package reads",
    ),
)


DISK_FULL = re.compile(r"No space left on device|Disk quota exceeded|\[Errno (?:28|122)\]")
ABSOLUTE_PATH = re.compile(r"/[^\s:'\"]+")


def disk_full(log_text: str) -> tuple[str, Path | None] | None:
    """A build that ran out of space (a compiler, the linker or Python could not write): the
    first line that says so and the file it names (None: it names none); None when no line
    does. Such a build is not a compile failure: it needs space, not a fix."""
    for line in log_text.splitlines():
        if DISK_FULL.search(line):
            named = [Path(p) for p in ABSOLUTE_PATH.findall(line)]
            written = [p for p in named if not (p.is_file() and os.access(p, os.X_OK))]
            return line.strip(), written[0] if written else None  # not the linker's own name
    return None


# A compiler's error with its place: gcc/clang `file:12:5: error: ...` (`fatal error:` too),
# nvcc's front end `file(12): error: ...` (`error #20014-D:`, `catastrophic error:`)
_GCC_ERROR_RE = re.compile(r"^(?P<file>[^\s:][^:\n]*):(?P<line>\d+)(?::(?P<col>\d+))?: "
                           r"(?:fatal )?error: (?P<what>.*)$", re.MULTILINE)
_EDG_ERROR_RE = re.compile(r"^(?P<file>[^\s(][^(\n]*)\((?P<line>\d+)\): (?:catastrophic )?"
                           r"error(?: #[\w-]+)?: (?P<what>.*)$", re.MULTILINE)
# CMake's: `CMake Error at CMakeLists.txt:12 (message):` (configure) or `CMake Error in
# CMakeLists.txt:` (generate), its message on the indented lines after it (paragraphs too)
_CMAKE_ERROR_RE = re.compile(r"^CMake Error (?:at (?P<file>[^\n:]+):(?P<line>\d+)"
                             r"(?: \([^)\n]*\))?|in (?P<infile>[^\n:]+)):[ \t]*\n"
                             r"(?P<what>(?:[ \t]+\S.*\n?|\n(?=[ \t]+\S))+)", re.MULTILINE)
# where no file is to blame: `nvcc fatal   : Unsupported gpu architecture 'compute_53'`
_PLACELESS_ERROR_RE = re.compile(r"^(?:nvcc fatal\s*: .*|\S*(?:c\+\+|g\+\+|gcc|cc1plus): "
                                 r"(?:fatal )?error: .*|CMake Error: .*)$", re.MULTILINE)


def first_error(output: str) -> str | None:
    """The first error a compiler or CMake printed in `output`, as `file:line[:col]: error:
    what` (nvcc's `file(line)` and CMake's `CMake Error at file:line` written the same way, a
    message over several lines joined into one); a placeless one (`nvcc fatal : ...`,
    `CMake Error: ...`) only when no error names a place; None when there is neither."""
    placed = [*_GCC_ERROR_RE.finditer(output), *_EDG_ERROR_RE.finditer(output),
              *_CMAKE_ERROR_RE.finditer(output)]
    if placed:
        first = min(placed, key=lambda m: m.start())
        found = first.groupdict()
        where = ":".join(filter(None, (found["file"] or found.get("infile"), found["line"],
                                       found.get("col"))))
        said = " ".join(first["what"].split()) if first.re is _CMAKE_ERROR_RE else \
            first["what"].strip()
        return f"{where}: error: {said}"
    placeless = _PLACELESS_ERROR_RE.search(output)
    return placeless[0].strip() if placeless else None


def diagnose(log_text: str) -> list[Signature]:
    """Every known signature found in the log, most specific first."""
    return [s for s in SIGNATURES if s.pattern.search(log_text)]


def explain(found: list[Signature]) -> str | None:
    if not found:
        return None
    return "\n".join(f"{s.meaning}; {s.remedy}" for s in found)


_UPWARD_RE = re.compile(r"(?<![\w/.])((?:\.\./)+[^\s:()]+)")  # ../../csrc/k.cuh
_PLACE_RE = re.compile(r"([^/\s:][^\s:]*):(?:\d+:)*\s*error: ")  # a relative file:line: error:


def in_tree(text: str, source: Path, view: PathView | None) -> str:
    """`text` with the source tree's paths relative to it: the compiler's absolute ones
    (through a view too), and those a compile cache made relative to a build directory."""
    for root in filter(None, (view and view.fixed_source, source, source.resolve())):
        text = text.replace(f"{root}/", "")
    tree = source.resolve()

    def from_build_dir(match: re.Match[str]) -> str:
        for base in sorted(tree.glob("build/*/")):
            path = (base / match[1]).resolve()
            if path.is_relative_to(tree) and path.exists():
                return str(path.relative_to(tree))
        return match[0]

    return in_subproject(_UPWARD_RE.sub(from_build_dir, text), tree)


def in_subproject(text: str, tree: Path) -> str:
    """A place relative to a directory below the tree, as CMake names the files of a project
    whose CMakeLists.txt is not at the top (natten's csrc/), named from the tree's top: the
    shallowest file of the tree that ends in it (build directories aside)."""
    match = _PLACE_RE.match(text)
    if not match or (tree / match[1]).exists():
        return text
    found = sorted((p for p in tree.glob(f"*/**/{glob.escape(match[1])}")
                    if p.is_file() and "build" not in p.relative_to(tree).parts),
                   key=lambda p: (len(p.parts), str(p)))
    return f"{found[0].relative_to(tree)}{text[match.end(1):]}" if found else text
