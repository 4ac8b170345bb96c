"""The findings as lines (printed, and kept as comments at the top of the recipe), the recipe
itself, and writing it with the patches `recipe new` made into the user's repository."""

from __future__ import annotations

import hashlib
import logging
import urllib.parse
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from wheelsmith.document import yaml_string
from wheelsmith.errors import NoDeviceCodeError, UsageError, WheelsmithError
from wheelsmith.files import atomic_write_bytes, atomic_write_text
from wheelsmith.inventory import is_shared_object
from wheelsmith.recipes.libraries import library_data
from wheelsmith.recipes.sources import carried_data
from wheelsmith.scaffold.buildsystem import requires_lines
from wheelsmith.scaffold.cmake import arch_lines, cmake_lines
from wheelsmith.scaffold.env_reads import deciding_first
from wheelsmith.scaffold.extensions import Extension
from wheelsmith.scaffold.findings import Findings
from wheelsmith.scaffold.libraries import entry_lines
from wheelsmith.scaffold.patches import (
    CMAKE_ARCHS,
    CXX20,
    FORCE_CUDA,
    GPU_PATCH,
    RUNTIME_PKG_RESOURCES,
)
from wheelsmith.scaffold.rebase import Base
from wheelsmith.scaffold.sdist import Sdist
from wheelsmith.scaffold.setup_py import Setup
from wheelsmith.scaffold.switches import switch_lines
from wheelsmith.toolchain.overlay import pin_name
from wheelsmith.untrusted.text import clip, one_line

log = logging.getLogger(__name__)


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


def _build_lines(found: Findings) -> list[str]:
    setup = found.setup
    lines = []
    for var, value, line in setup.env:
        does = "from source instead of fetching a prebuilt wheel" if var.endswith(
            "FORCE_BUILD") else "its CUDA extensions where no GPU is visible"
        lines.append(f'{_at(line)}{var} == "{value}" builds {does}: build.env {var}: "{value}"')
    lines += switch_lines(found.told, found.undecided)
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
    if found.cmake and setup.build_dir_var:
        lines.append(f"{_at(setup.build_dir_var[1])}{setup.build_dir_var[0]} names its CMake "
                     "build directory (else a temporary one): build.build_dir_env, so a build "
                     "resumes from build/cmake")
    for patch in found.made:
        what, at = _written_at(patch.file, setup)
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
         setup.needs_gpu_line)]
    return next(((what, line) for stem, what, line in kinds if stem in file),
                ("hard-coded -gencode list", setup.gencode_line))


def _extension_lines(found: Findings) -> list[str]:
    lines = []
    for ext in found.setup.extensions:
        if ext.host_variant:
            lines.append(f"{_at(ext.line)}extension {ext.name} ({ext.callee}): its CppExtension "
                         f"{ext.host_variant} compiles no CUDA: build.host_only "
                         f'"{Extension.glob(ext.host_variant)}"')
        elif ext.cuda:
            lines.append(f"{_at(ext.line)}extension {ext.name} ({ext.callee}): CUDA")
        elif found.cmake_cuda and not ext.sources and found.cmake:
            lines.append(f"{_at(ext.line)}extension {ext.name} ({ext.callee}): built by CMake, "
                         f"whose project compiles CUDA ({found.cmake.cuda_at})")
        else:
            lines.append(f"{_at(ext.line)}extension {ext.name} ({ext.callee}) compiles no CUDA "
                         f'sources: build.host_only "{Extension.glob(ext.name)}"')
    if found.pure:
        lines.append("kind: pure: " + ("setup.py declares no extension" if found.has_setup_py
                                       else "pyproject.toml's backend builds pure Python") +
                     " and the sdist holds no .cu file")
    elif found.cmake is not None:
        lines += cmake_lines(found.cmake)
    elif not found.setup.extensions:
        lines.append(f"kind: extension: setup.py declares no extension wheelsmith can read, but "
                     f"the sdist holds {found.setup.cuda_files} .cu file(s)")
    return lines


def _source_lines(found: Findings) -> list[str]:
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


def _checked_lines(found: Findings) -> list[str]:
    lines = [found.checked.line] if found.checked else []
    if found.checked and found.checked.archs:
        lines.append(f"check: the package builds the arch-specific variant of the default arch "
                     f"itself: arch.default [{_quoted(found.checked.archs)}]")
    for leaf, glob in found.configured_host():
        why = "CMake links it from no CUDA object" if is_shared_object(leaf) else \
            "build.ninja has only C++ rules"
        lines.append(f"check: {leaf} compiles no CUDA ({why})"
                     + (f': build.host_only "{glob}"' if glob else
                        ", but no extension name in setup.py says where it lies in the wheel: "
                        "add its path to build.host_only"))
    return lines


def _base_lines(found: Findings) -> list[str]:
    """Where a newer version of a shipped recipe starts, and how its patches came over."""
    if found.base is None:
        return []
    recipe, release = found.base.recipe, found.base.release
    return [f"starts from the shipped recipe {recipe.file} ({recipe.name} {release.version}): "
            "its arch knob, build variables, memory, host_only and smoke test",
            *[f"carried over: {c.line}" for c in found.carried]]


def report_lines(found: Findings) -> list[str]:
    """The findings, one a line, each with the setup.py line it comes from, then what the
    configure-only check found; what came from the sdist shown as one line, never obeyed."""
    lines = [f"sdist: {found.sdist.filename} sha256 {found.sdist.sha256}", *_base_lines(found),
             *_build_lines(found), *_extension_lines(found), *_source_lines(found)]
    for patch, line in found.needed:
        example = patch.example()
        lines.append(f"{_at(line)}patch needed: {patch.stem}: {patch.reason}" + (
            f" (start from {example})" if example else ""))
    lines += requires_lines(found.requires, found.toolchain)
    lines += [needed.finding() for needed in found.libraries]
    lines += [f"setup.py:{line}: patch needed: it imports {module}, a build requirement "
              f"({requirement}) the toolchain {found.toolchain} does not hold: wheelsmith "
              "builds with the toolchain's packages only, never an environment it downloads; "
              "patch setup.py to build without it, else wheelsmith cannot build this package"
              for module, requirement, line in found.unheld_left]
    lines += [f"pyproject.toml: its build requirement {clip(requirement)} excludes the "
              f"{version} the toolchain {found.toolchain} holds: wheelsmith builds with the "
              "toolchain's, so a build that relies on the difference fails, and a runtime pin "
              "on it cannot be met in the channel"
              for requirement, version in found.excluded]
    lines += [f"{file}:{line}: patch needed: it includes THC/THC.h, which torch removed in "
              "1.11: port what it uses by hand (THCudaCheck -> C10_CUDA_CHECK, the THCState "
              "stream -> at::cuda::getCurrentCUDAStream() from ATen/cuda/CUDAContext.h)"
              for file, line in found.thc[:1]]
    lines += [f"THC/THC.h: included by {len(found.thc) - 1} more file(s) of the sdist"
              ] if len(found.thc) > 1 else []
    lines += [f"{found.prebuilt[0]}: patch needed: the sdist ships {len(found.prebuilt)} "
              f"prebuilt binary file(s) ({', '.join(found.prebuilt[:3])}"
              f"{', ...' if len(found.prebuilt) > 3 else ''}): a wheel that holds one is refused "
              "(wheelsmith builds from source): patch them out and build them from their "
              "sources, or the package has no source build"] if found.prebuilt else []
    if not found.needed and not found.written and not found.unheld_left \
            and not found.thc and not found.prebuilt and not found.requires.distutils:
        lines.append("patches: none of the standard ones is needed")
    lines += [f"smoke: {name} is not a module name: left out of smoke.import"
              for name in found.not_modules]
    return [one_line(line) for line in lines + _checked_lines(found)]  # from the sdist: shown


def _arch_lines(found: Findings) -> list[str]:
    setup = found.setup
    if found.pure:
        return ["kind: pure"]
    cmake = None if found.cmake is None or setup.gencode else arch_lines(
        found.cmake, setup.arch_knob, found.checked.archs if found.checked else None)
    if cmake is not None:
        return ["kind: cuda", *cmake] if found.kind == "cuda" else cmake
    if setup.arch_knob and setup.gencode:
        supported = [dotted_cc(cc) for cc in setup.gencode]
        default = "12.0" if "12.0" in supported else supported[-1]
        return ["arch:", f"  env: {setup.arch_knob[0]}", "  format: numbers",
                f'  default: ["{default}"]',
                f"  supported: [{', '.join(_quoted(a) for a in supported)}]"]
    return ["arch:", "  env: TORCH_CUDA_ARCH_LIST", "  format: torch", '  default: ["12.0"]']


def render(found: Findings) -> str:
    sdist = found.sdist
    lines = [f"# Written by `wheelsmith recipe new {sdist.project}=={sdist.version}` from "
             f"{sdist.filename}.", *[f"# {line}" for line in report_lines(found)]]
    if found.base is not None:
        env = {var: value for var, value, _ in found.env}
        lines += base_recipe_lines(found.base, env, found.host_only, found.requires.pins)
    else:
        lines += _recipe_lines(found)
    lines += ["versions:", f"  - version: {_quoted(sdist.version)}", "    source:",
              f"      pypi: {_quoted(sdist.project)}", f"      sha256: {_quoted(sdist.sha256)}"]
    if found.base is not None:
        lines += base_version_lines(found.base)
    if found.written:
        lines.append("    patches:")
    for patch in found.written:
        digest = hashlib.sha256(patch.data).hexdigest()
        lines += [f"      - file: {patch.file}", f"        sha256: {_quoted(digest)}",
                  f"        description: {_quoted(patch.description)}"]
    return "\n".join(lines) + "\n"


def _recipe_lines(found: Findings) -> list[str]:
    """The keys above `versions:` of a recipe written from the sdist alone."""
    metadata = found.metadata
    lines = [f"package: {canonicalize_name(found.sdist.project)}"]
    if metadata.summary:
        lines.append(f"summary: {_quoted(metadata.summary)}")
    if metadata.homepage:
        lines.append(f"homepage: {_quoted(metadata.homepage)}")
    lines += _arch_lines(found)
    env = [*found.env, *([("CMAKE_ARGS", found.cmake.cmake_args(), "its CMake options")]
                         if found.cmake and found.cmake.switches else [])]
    build_dir = found.setup.build_dir_var[0] if found.cmake and found.setup.build_dir_var \
        else None
    libraries = entry_lines(found.libraries)
    if env or found.host_only or build_dir or found.requires.pins or libraries:
        lines.append("build:")
    if env:
        lines += ["  env:", *[f"    {var}: {_quoted(value)}  # {one_line(note)}"
                              for var, value, note in env]]
    if build_dir:
        lines.append(f"  build_dir_env: {build_dir}")
    if found.host_only:
        lines.append(f"  host_only: [{', '.join(_quoted(g) for g in found.host_only)}]")
    if found.requires.pins:
        lines.append(f"  requires: {_listed(list(found.requires.pins))}")
    lines += libraries
    if found.imports or found.kind == "cuda":
        lines += ["smoke:", f"  import: {_listed(list(found.imports))}"]
    return lines


def _quoted(text: str) -> str:
    """A value written into the recipe: read back as exactly what was found, never YAML."""
    return yaml_string(text)


def _listed(values: list[str]) -> str:
    return f"[{', '.join(_quoted(v) for v in values)}]"


def base_recipe_lines(base: Base, env: dict[str, str], host_only: tuple[str, ...],
                      requires: tuple[str, ...] = ()) -> list[str]:
    """The recipe's keys above `versions:`, the base recipe's, with the build variables,
    host_only globs and build requirements the new sdist adds (the base's values win)."""
    recipe = base.recipe
    lines = [f"package: {recipe.name}"]
    lines += [f"summary: {_quoted(recipe.summary)}"] if recipe.summary else []
    lines += [f"homepage: {_quoted(recipe.homepage)}"] if recipe.homepage else []
    policy = recipe.arch
    lines += ["arch:", f"  env: {policy.env}", f"  format: {policy.format}",
              f"  default: {_listed([str(a) for a in policy.default.archs])}"]
    if policy.supported is not None:
        lines.append(f"  supported: {_listed([str(a) for a in policy.supported.archs])}")
    if policy.min_cuda:
        lines.append("  min_cuda: {" + ", ".join(f"{_quoted(a)}: {_quoted(str(v))}"
                                                 for a, v in policy.min_cuda) + "}")
    merged = {**env, **dict(recipe.env)}
    globs = list(dict.fromkeys((*recipe.host_only, *host_only)))
    lines += ["build:", *(["  env:", *[f"    {k}: {_quoted(v)}" for k, v in sorted(
        merged.items())]] if merged else []),
              f"  memory_per_job_gb: {recipe.memory_per_job_gb:g}",
              *([f"  host_only: {_listed(globs)}"] if globs else [])]
    pins = {pin_name(p): p for p in (*requires, *recipe.build_requires)}
    lines += [f"  requires: {_listed(sorted(pins.values()))}"] if pins else []
    lines += ["  libraries:", *[f"    - {_flow(library_data(lib))}"
                                for lib in recipe.libraries]] if recipe.libraries else []
    lines += ["smoke:", f"  import: {_listed(list(recipe.smoke_imports))}"]
    if recipe.smoke_gpu:
        lines += ["  gpu: |", *[f"    {row}".rstrip() for row in recipe.smoke_gpu.splitlines()]]
    return lines


def base_version_lines(base: Base) -> list[str]:
    """The base release's own variables and carried sources, in a new version's entry: what
    its build needed, pinned as the base release had them (the comment says to check them)."""
    release = base.release
    lines = ["    env:", *[f"      {k}: {_quoted(v)}" for k, v in release.env]] \
        if release.env else []
    if release.carried:
        lines += [f"    # carried as {release.version} carries them: check that this version "
                  "needs the same", "    carry:"]
    lines += [f"      - {_flow(carried_data(carried))}" for carried in release.carried]
    return lines


def _flow(data: dict[str, Any]) -> str:
    """`data` as one YAML flow mapping, every string quoted as `_quoted` quotes it."""
    return "{" + ", ".join(f"{key}: {_flow(value) if isinstance(value, dict) else _quoted(value)}"
                           for key, value in data.items()) + "}"


def write(found: Findings, repo: Path) -> list[Path]:
    """The recipe in `repo`/recipes/NAME.yaml and its patches in
    `repo`/patches/NAME/VERSION/ (the files, recipe first); an existing file is never
    replaced."""
    file = recipe_file(found, repo)
    patch_dir = repo / "patches" / canonicalize_name(found.sdist.project) / found.sdist.version
    taken = [f for f in [file, *(patch_dir / p.file for p in found.written)] if f.exists()]
    if taken:
        raise UsageError(f"{taken[0]} exists already",
                         hint=f"add version {found.sdist.version} to it by hand, or remove it "
                              "first")
    for patch in found.written:
        patch_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(patch_dir / patch.file, patch.data)
    file.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(file, render(found))
    log.info("wrote %s", file)
    return [file, *(patch_dir / p.file for p in found.written)]


def recipe_file(found: Findings, repo: Path) -> Path:
    return repo / "recipes" / f"{canonicalize_name(found.sdist.project)}.yaml"


def rewrite(found: Findings, repo: Path) -> None:
    """The recipe `write` wrote, rendered again with what the check found."""
    atomic_write_text(recipe_file(found, repo), render(found))


MAX_SWITCHES = 10  # named in a hint


def explained(error: WheelsmithError, found: Findings) -> WheelsmithError:
    """A check's error with what the sdist says about it: for a build that compiled nothing
    for the GPU, the variables its build reads (setup.py and the modules of its own it
    imports), one of which decides that (deepspeed's DS_ACCELERATOR and DS_BUILD_OPS): those
    whose words may decide it first."""
    if isinstance(error, NoDeviceCodeError) and found.switches:
        named = ", ".join(f"{name} ({where})"
                          for name, where in deciding_first(found.switches)[:MAX_SWITCHES])
        more = len(found.switches) - MAX_SWITCHES
        error.hint = (f"its build reads {named}{f' and {more} more' if more > 0 else ''}: "
                      "set the ones that turn its CUDA build on in the recipe's build.env "
                      f"(a value such as 1 or cuda); {error.hint}")
    return error
