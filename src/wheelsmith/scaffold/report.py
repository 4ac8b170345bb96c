"""The findings as lines: printed as `recipe new` makes them, each under the stage that made
it (`STAGES`), and all of them, in one order, as comments at the top of the recipe and in
`--json` (`report_lines`); each with its severity (`severity`). What came from the sdist is
shown as one line, never obeyed."""

from __future__ import annotations

import urllib.parse
from collections import Counter
from collections.abc import Callable

from wheelsmith.document import yaml_string
from wheelsmith.inventory import is_shared_object
from wheelsmith.scaffold.buildsystem import requires_lines
from wheelsmith.scaffold.cmake import cmake_lines
from wheelsmith.scaffold.extensions import Extension
from wheelsmith.scaffold.findings import Findings
from wheelsmith.scaffold.patches import (
    ARCH_PATCH,
    ATEN_API,
    CMAKE_ARCHS,
    CXX20,
    FORCE_CUDA,
    GPU_PATCH,
    NINJA_ON_PATH,
    RUNTIME_PKG_RESOURCES,
)
from wheelsmith.scaffold.sdist import Sdist
from wheelsmith.scaffold.setup_py import Setup
from wheelsmith.scaffold.switches import switch_lines
from wheelsmith.untrusted.text import clip, one_line

Section = Callable[[Findings], list[str]]


def dotted_cc(cc: str) -> str:
    """A -gencode compute capability as --arch spells it: "90a" -> "9.0a"."""
    digits = cc.rstrip("af")
    return f"{int(digits) // 10}.{int(digits) % 10}{cc[len(digits):]}"


def git_form(sdist: Sdist, homepage: str | None) -> list[str]:
    """The source block that builds from the repository instead (its commit to fill in)."""
    url = homepage if homepage and urllib.parse.urlparse(homepage).scheme else "REPOSITORY-URL"
    return [f"git: {url}",
            f"commit: COMMIT  # the full 40-digit commit of the v{sdist.version} tag",
            f"tag: v{sdist.version}"]


def _at(line: int | None) -> str:
    return f"setup.py:{line}: " if line else ""


def sdist_line(sdist: Sdist) -> str:
    """The first finding: the sdist, as soon as it is fetched."""
    return one_line(f"sdist: {sdist.filename} sha256 {sdist.sha256}")


def _sdist(found: Findings) -> list[str]:
    return [sdist_line(found.sdist)]


def _variables(found: Findings) -> list[str]:
    """setup.py's force-build variables."""
    lines = []
    for var, value, line in found.setup.env:
        does = "from source instead of fetching a prebuilt wheel" if var.endswith(
            "FORCE_BUILD") else "its CUDA extensions where no GPU is visible"
        lines.append(f'{_at(line)}{var} == "{value}" builds {does}: build.env {var}: "{value}"')
    return lines


def _switches(found: Findings) -> list[str]:
    return switch_lines(found.told, found.undecided)


def _archs(found: Findings) -> list[str]:
    """setup.py's -gencode family and arch variable."""
    setup, lines = found.setup, []
    if setup.gencode:
        also = f" (it reads TORCH_CUDA_ARCH_LIST too, line {setup.arch_list_line})" \
            if setup.arch_list_line else ""
        lines.append(f"{_at(setup.gencode_line)}hard-coded -gencode family: "
                     f"{', '.join(setup.gencode)}{also}")
    if setup.arch_knob and setup.gencode:
        lines.append(f"{_at(setup.arch_knob[1])}arch variable {setup.arch_knob[0]}: the "
                     "package's own; arch.env, format numbers, supported: its -gencode family")
    elif setup.arch_knob:
        lines.append(f"{_at(setup.arch_knob[1])}arch variable {setup.arch_knob[0]}: the "
                     "package's own (not TORCH_CUDA_ARCH_LIST); arch.env, format torch (12.0)")
    return lines


def _build_dir(found: Findings) -> list[str]:
    setup = found.setup
    return [f"{_at(setup.build_dir_var[1])}{setup.build_dir_var[0]} names its CMake build "
            "directory (else a temporary one): build.build_dir_env, so a build resumes from "
            "build/cmake"] if found.cmake and setup.build_dir_var else []


def _made(found: Findings) -> list[str]:
    lines = []
    for patch in found.made:
        what, at = _written_at(patch.file, found.setup)
        lines.append(f"{_at(at)}{what}: wrote {patch.file}: {patch.description}")
    return lines


def _written_at(file: str, setup: Setup) -> tuple[str, int | None]:
    """What a written patch changes, and the setup.py line that needed it: the first kind
    whose stem the file name holds (the run-time pkg_resources one before setup.py's)."""
    kinds: list[tuple[str, str, int | None]] = [
        ("use-ninja", f"use_ninja={setup.no_ninja}", setup.no_ninja_line),
        ("setup-requires", "setup_requires",
         setup.setup_requires[1] if setup.setup_requires else None),
        (CXX20, "an older C++ standard than torch's headers need" if setup.old_std_line else
         "its CMake files ask for an older C++ standard than torch's headers need",
         setup.old_std_line),
        (RUNTIME_PKG_RESOURCES, "the package's modules import pkg_resources", None),
        (CMAKE_ARCHS, "its CMake files hard-code CUDA_ARCHITECTURES", None),
        ("pkg-resources", "import pkg_resources", setup.pkg_resources_line),
        (GPU_PATCH.stem, f'CUDA only with a GPU visible: build.env {FORCE_CUDA}: "1"',
         setup.needs_gpu_line),
        (ARCH_PATCH.stem, "hard-coded -gencode list", setup.gencode_line),
        (ATEN_API, "its C++ and CUDA sources use spellings torch or CUDA 13's CUB removed",
         None),
        (NINJA_ON_PATH, "setup.py gives CMake the ninja module's own binary", None)]
    return next(((what, line) for stem, what, line in kinds if stem in file),
                ("patch", None))


def _extensions(found: Findings) -> list[str]:
    lines = []
    for ext in found.setup.extensions:
        if ext.host_variant:
            lines.append(f"{_at(ext.line)}extension {ext.name} ({ext.callee}): its "
                         f"CppExtension {ext.host_variant} compiles no CUDA: build.host_only "
                         f'"{Extension.glob(ext.host_variant)}"')
        elif ext.cuda:
            lines.append(f"{_at(ext.line)}extension {ext.name} ({ext.callee}): CUDA")
        elif found.cmake_cuda and not ext.sources and found.cmake:
            lines.append(f"{_at(ext.line)}extension {ext.name} ({ext.callee}): built by CMake, "
                         f"whose project compiles CUDA ({found.cmake.cuda_at})")
        else:
            lines.append(f"{_at(ext.line)}extension {ext.name} ({ext.callee}) compiles no CUDA "
                         f'sources: build.host_only "{Extension.glob(ext.name)}"')
    return lines


def _cmake(found: Findings) -> list[str]:
    return cmake_lines(found.cmake, found.pinned) if found.cmake is not None and \
        not found.pure else []


def _kind(found: Findings) -> list[str]:
    """A pure package, or one whose extensions setup.py's reading could not tell."""
    if found.pure:
        return ["kind: pure: " + ("setup.py declares no extension" if found.has_setup_py
                                  else "pyproject.toml's backend builds pure Python") +
                " and the sdist holds no .cu file"]
    if found.cmake is None and not found.setup.extensions:
        return [f"kind: extension: setup.py declares no extension wheelsmith can read, but "
                f"the sdist holds {found.setup.cuda_files} .cu file(s)"]
    return []


def _sources(found: Findings) -> list[str]:
    setup, sources = found.setup, [s for e in found.setup.extensions for s in e.sources]
    if setup.missing:
        return [f"the sdist lacks what its extensions compile: {', '.join(setup.missing)}; "
                "build from the repository instead:", "  source:",
                *[f"    {line}" for line in git_form(found.sdist, found.metadata.homepage)]]
    if found.cmake is not None and not found.cmake.lists:
        return ["the sdist lacks what its extensions compile: CMakeLists.txt (the CMake project "
                "setup.py builds); build from the repository instead:", "  source:",
                *[f"    {line}" for line in git_form(found.sdist, found.metadata.homepage)]]
    if found.cmake_cuda:
        return ["sources: CMake's (the check reads what its build.ninja compiles)"]
    if sources:
        return [f"sources: the sdist holds all {setup.compiled_files} the extensions compile"]
    return ["sources: setup.py computes them; check the sdist holds them"] \
        if setup.extensions else []


def _needed(found: Findings) -> list[str]:
    lines = []
    for patch, line in found.needed:
        example = patch.example()
        lines.append(f"{_at(line)}patch needed: {patch.stem}: {patch.reason}" + (
            f" (start from {example})" if example else ""))
    return lines


def _requires(found: Findings) -> list[str]:
    return requires_lines(found.requires, found.toolchain)


def _libraries(found: Findings) -> list[str]:
    return [needed.finding() for needed in found.libraries]


def _unheld(found: Findings) -> list[str]:
    return [f"setup.py:{line}: patch needed: it imports {module}, a build requirement "
            f"({requirement}) the toolchain {found.toolchain} does not hold: wheelsmith "
            "builds with the toolchain's packages only, never an environment it downloads; "
            "patch setup.py to build without it, else wheelsmith cannot build this package"
            for module, requirement, line in found.unheld_left]


def _excluded(found: Findings) -> list[str]:
    return [f"pyproject.toml: its build requirement {clip(requirement)} excludes the "
            f"{version} the toolchain {found.toolchain} holds: wheelsmith builds with the "
            "toolchain's, so a build that relies on the difference fails, and a runtime pin "
            "on it cannot be met in the channel"
            for requirement, version in found.excluded]


def _thc(found: Findings) -> list[str]:
    lines = [f"{file}:{line}: patch needed: it includes THC/THC.h, which torch removed in "
             "1.11: port what it uses by hand (THCudaCheck -> C10_CUDA_CHECK, the THCState "
             "stream -> at::cuda::getCurrentCUDAStream() from ATen/cuda/CUDAContext.h)"
             for file, line in found.thc[:1]]
    return lines + ([f"THC/THC.h: included by {len(found.thc) - 1} more file(s) of the sdist"]
                    if len(found.thc) > 1 else [])


def _prebuilt(found: Findings) -> list[str]:
    shipped = found.prebuilt
    return [f"{shipped[0]}: patch needed: the sdist ships {len(shipped)} prebuilt binary "
            f"file(s) ({', '.join(shipped[:3])}{', ...' if len(shipped) > 3 else ''}): a wheel "
            "that holds one is refused (wheelsmith builds from source): patch them out and "
            "build them from their sources, or the package has no source build"] \
        if shipped else []


def _none_needed(found: Findings) -> list[str]:
    return ["patches: none of the standard ones is needed"] if (
        not found.needed and not found.written and not found.unheld_left and not found.thc
        and not found.prebuilt and not found.requires.distutils) else []


def _not_modules(found: Findings) -> list[str]:
    return [f"smoke: {name} is not a module name: left out of smoke.import"
            for name in found.not_modules]


def _runtime_lacks(found: Findings) -> list[str]:
    """The package's own modules left out of the smoke test: what they import at run time
    is not in the toolchain (megablocks 0.10.0's stanford-stk)."""
    left = found.runtime_left
    if not left:
        return []
    return [f"smoke: {', '.join(left)} left out of smoke.import, which imports its extension "
            f"modules alone: it needs {', '.join(found.runtime_lacks)} at run time "
            f"(Requires-Dist), which the toolchain {found.toolchain} lacks"]


def _checked(found: Findings) -> list[str]:
    lines = [found.checked.line] if found.checked else []
    if found.checked and found.checked.archs:
        lines.append(f"check: the package builds the arch-specific variant of the default arch "
                     f"itself: arch.default [{yaml_string(found.checked.archs)}]")
    if found.checked and found.not_built:
        lines.append(f"check: its build configured {', '.join(found.checked.extensions)}, "
                     f"not {', '.join(found.not_built)} (built under other switches): left out "
                     "of smoke.import")
    if found.checked and found.checked.rewrite:
        lines.append("check: the package compiles CUDA targets of its own, whatever arch list "
                     "it is told: arch.rewrite: true (the requested targets replace its list in "
                     "the build file before compiling)")
    for leaf, glob in found.configured_host():
        why = "CMake links it from no CUDA object" if is_shared_object(leaf) else \
            "build.ninja has only C++ rules"
        lines.append(f"check: {leaf} compiles no CUDA ({why})"
                     + (f': build.host_only "{glob}"' if glob else
                        ", but no extension name in setup.py says where it lies in the wheel: "
                        "add its path to build.host_only"))
    return lines


def _base(found: Findings) -> list[str]:
    """Where a newer version of a shipped recipe starts, and how its patches came over."""
    if found.base is None:
        return []
    recipe, release = found.base.recipe, found.base.release
    return [f"starts from the shipped recipe {recipe.file} ({recipe.name} {release.version}): "
            "its arch knob, build variables, memory, host_only and smoke test",
            *[f"carried over: {c.line}" for c in found.carried]]


# Each stage of `recipe new` (reading.py) and the findings it makes: a section's lines depend
# only on what the Findings hold once its stage has run, so each is said once, when made.
STAGES: dict[str, tuple[Section, ...]] = {
    "fetch": (_sdist,),
    "setup.py": (_variables, _archs),
    "cmake": (_build_dir, _cmake),
    "carry": (_base,),
    "sources": (_switches, _extensions, _kind, _sources, _thc, _prebuilt, _not_modules),
    "requirements": (_requires, _libraries, _unheld, _excluded, _runtime_lacks),
    "patch": (_made, _needed, _none_needed),
    "check": (_checked,),
}

# the recipe's comments and --json: the order they have always had
ORDER: tuple[Section, ...] = (
    _sdist, _base, _variables, _switches, _archs, _build_dir, _made, _extensions, _cmake, _kind,
    _sources, _needed, _requires, _libraries, _unheld, _excluded, _thc, _prebuilt, _none_needed,
    _not_modules, _runtime_lacks, _checked)


def stage_lines(found: Findings, stage: str) -> list[str]:
    """The findings `stage` made, from the Findings as they stand once it has run."""
    return [one_line(line) for section in STAGES[stage] for line in section(found)]


def report_lines(found: Findings) -> list[str]:
    """The findings, one a line, each with the file:line it comes from, then what the check
    found."""
    return [one_line(line) for section in ORDER for line in section(found)]


# What a finding asks of the user, read from the words every such line has: `todo`, an edit
# by hand (a patch, a carry entry, a source to build from); `fixed`, what the recipe or a patch
# `recipe new` wrote does about it; `info`, the rest. A line that continues the one before
# (indented: the git form of a source) has none.
TODO = ("patch needed", "carry needed", "the sdist lacks what", "could not pin",
        "excludes the", "no longer applies", "cannot be told", "add its path to",
        "no wheel provides it", "no wheel of it")
FIXED = (": wrote ", "carry: into ", "build.env ", "build.host_only ", "build.requires",
         "build.libraries", "build.build_dir_env", "arch.env", "arch.default", "kind: cuda")
SEVERITIES = ("todo", "fixed", "info")


def severity(line: str) -> str | None:
    if line.startswith(" "):
        return None
    if any(word in line for word in TODO):
        return "todo"
    return "fixed" if any(word in line for word in FIXED) else "info"


def said(line: str) -> str:
    """A finding as the terminal shows it: its severity first."""
    level = severity(line)
    return f"{level}: {line}" if level else line


def summary(lines: list[str]) -> str:
    """The last word on the findings told: how many, by severity."""
    counts = Counter(severity(line) for line in lines)
    total = sum(counts[level] for level in SEVERITIES)
    return (f"{total} finding{'' if total == 1 else 's'}: {counts['todo']} to do by hand "
            f"(todo), {counts['fixed']} fixed in the recipe or its patches, {counts['info']} "
            "for information")
