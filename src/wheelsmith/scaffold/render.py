"""The recipe `recipe new` writes (its findings, report.py's lines, kept as comments at its
top), and writing it with the patches `recipe new` made into the user's repository."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from wheelsmith.document import yaml_string
from wheelsmith.errors import NoDeviceCodeError, UsageError, WheelsmithError
from wheelsmith.files import atomic_write_bytes, atomic_write_text
from wheelsmith.recipes.libraries import library_data
from wheelsmith.recipes.sources import carried_data
from wheelsmith.scaffold.cmake import arch_lines
from wheelsmith.scaffold.env_reads import deciding_first
from wheelsmith.scaffold.findings import Findings
from wheelsmith.scaffold.libraries import entry_lines
from wheelsmith.scaffold.rebase import Base
from wheelsmith.scaffold.report import dotted_cc, report_lines
from wheelsmith.toolchain.overlay import pin_name
from wheelsmith.untrusted.text import one_line

log = logging.getLogger(__name__)


def _arch_lines(found: Findings) -> list[str]:
    lines = _arch_policy_lines(found)
    return with_rewrite(lines) if found.checked and found.checked.rewrite else lines


def with_rewrite(lines: list[str]) -> list[str]:
    """A recipe's lines with `rewrite: true` at the end of its `arch:` block."""
    if "arch:" not in lines:
        return lines
    end = lines.index("arch:") + 1
    while end < len(lines) and lines[end].startswith("  "):
        end += 1
    if "  rewrite: true" in lines[:end]:
        return lines
    return [*lines[:end], "  rewrite: true", *lines[end:]]


def _arch_policy_lines(found: Findings) -> list[str]:
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
        if found.checked and found.checked.rewrite:
            lines = with_rewrite(lines)
    else:
        lines += _recipe_lines(found)
    lines += ["versions:", f"  - version: {_quoted(sdist.version)}", "    source:",
              f"      pypi: {_quoted(sdist.project)}", f"      sha256: {_quoted(sdist.sha256)}"]
    if found.base is not None:
        lines += base_version_lines(found.base)
    if found.carried_downloads and not (found.base and found.base.release.carried):
        lines += ["    carry:", *[f"      - {_flow(carried_data(carried))}"
                                  for carried in found.carried_downloads]]
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
    if policy.rewrite:
        lines.append("  rewrite: true")
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
