"""The environment a package's own build runs in. Pure functions: no I/O except reading the
machine's size.

Only a few variables of the caller's environment pass through; CUDA_HOME is always set from
the toolchain (never guessed from `which nvcc`), the arch list reaches the package through the
recipe's variable, proxies point nowhere so the package's setup cannot download anything,
and MAX_JOBS / NVCC_THREADS (and, in the pre-build check, nvcc's split-compile) are chosen
from cores, memory and the files to compile.

What wheelsmith sets is its own: a build's `--env` adds variables, it never overrides one
(recipes/envnames.py: the names, patterns and why, which a recipe's build.env may not set
either; `check_extra_env`: what the recipe and build_env set). A wheel's provenance may
carry less still (builder/rebuild.py).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from wheelsmith.arch import ArchSet
from wheelsmith.builder import (
    cmakebuild,
    gencode,
    hostlibs,
    parallel,
    prebuild,
    reproducible,
    stableabi,
)
from wheelsmith.builder.parallel import Parallelism
from wheelsmith.builder.plan import BuildPlan
from wheelsmith.recipes.envnames import (
    NO_PROXY,
    PASS_THROUGH,
    PROXIES,
    Protection,
    protection,
)
from wheelsmith.recipes.model import CMAKE_ARGS, Recipe, Release
from wheelsmith.toolchain.env import Toolchain
from wheelsmith.toolchain.platform import cross_env
from wheelsmith.toolchain.venv import STUBS

DEAD_PROXY = "http://127.0.0.1:9"  # the discard port: connections are refused at once
OFFLINE = {"PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1", "PIP_NO_INPUT": "1",
           "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
# Flags wheelsmith sets after the build's own --env and recipe: its flags first, the build's
# kept after them (reproducible.compiler_env), so a build may add to them.
EXTENDED = ("CPPFLAGS", "CFLAGS", "CXXFLAGS", "NVCC_PREPEND_FLAGS")


def machine_size() -> tuple[int, float]:
    """Usable cores (affinity) and available memory in GB (MemAvailable, capped by cgroup)."""
    cores = len(os.sched_getaffinity(0))
    available = _meminfo_available()
    limit = _cgroup_headroom()
    if limit is not None:
        available = min(available, limit)
    return cores, available / 2**30


def _meminfo_available() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return float(line.split()[1]) * 1024
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"))


def _cgroup_headroom() -> float | None:
    base = Path("/sys/fs/cgroup")
    try:
        limit = (base / "memory.max").read_text().strip()
        used = (base / "memory.current").read_text().strip()
    except OSError:
        return None
    if limit == "max":
        return None
    return float(int(limit) - int(used))


def choose_parallelism(cores: int, available_gb: float, per_job_gb: float, n_archs: int,
                       jobs: int | None = None, *, split: str = parallel.AUTO,
                       farm_cpus: int = 0) -> Parallelism:
    """nvcc threads parallelise the per-arch passes of one file; jobs run files side by side;
    split-compile workers let one heavy file use idle cores (the rules: parallel.py).

    Peak memory is about jobs x threads x per-job memory, so both are bounded by what is free.
    """
    return parallel.choose(cores, available_gb, per_job_gb, n_archs, jobs=jobs, split=split,
                           farm_cpus=farm_cpus)


@dataclass(frozen=True, slots=True)
class Guard:
    """Where the pre-build check (the `ninja` launcher, prebuild.py) reports."""

    report: Path
    configure_only: bool = False
    timings: Path | None = None  # an earlier run's seconds per object: longest first


def build_env(
    plan: BuildPlan,
    parallelism: Parallelism,
    *,
    source_date_epoch: int,
    base: Mapping[str, str],
    guard: Guard | None = None,
    compile_cache: Mapping[str, str] | None = None,
    launchers: Path | None = None,
    source: Path | None = None,
    cmake: bool = False,
    requires: Path | None = None,
    libraries: tuple[hostlibs.Provided, ...] = (),
    links: Path | None = None,
) -> dict[str, str]:
    """`launchers`: first on PATH, the pre-build check's `ninja` and the compile cache's
    `c++`. `source`: the tree being built, whose path (and the toolchain's) the compilers map
    to fixed names (reproducible.py; a path view rewrites them with the rest). `cmake`: the
    build runs CMake (cmakebuild.py). `requires`: the recipe's build requirements
    (toolchain/overlay.py), importable after the toolchain's packages. `libraries`: its host
    libraries (hostlibs.py), their linker names in `links`."""
    toolchain = plan.toolchain
    env = {k: base[k] for k in PASS_THROUGH if k in base}
    path = [str(p) for p in toolchain.bin_dirs] + [base.get("PATH", "/usr/bin:/bin")]
    if launchers is not None:
        path.insert(0, str(launchers))
    if guard is not None:
        env.update(guard_env(plan, guard))
    env.update(
        PATH=os.pathsep.join(path),
        CUDA_HOME=str(toolchain.cuda_home),
        CUDA_PATH=str(toolchain.cuda_home),
        TORCH_CUDA_ARCH_LIST=plan.archs.torch_arch_list(),
        MAX_JOBS=str(parallelism.jobs),
        NVCC_THREADS=str(parallelism.nvcc_threads),
        **{parallel.PLAN_ENV: parallelism.to_json()},  # the pre-build check adds the split
        SOURCE_DATE_EPOCH=str(source_date_epoch),
        PYTHONNOUSERSITE="1",
        PYTHONUNBUFFERED="1",  # so build output (and ninja progress) arrives as it happens
        **OFFLINE,
        # newer torch (2.14 does; 2.11 does not) puts a ccache or sccache it finds on PATH in
        # front of the compilers by itself; wheelsmith decides that (compilecache.py,
        # compilefarm.py): --compile-cache off means real compiles, and a cache is the one
        # configured for the build
        TORCH_NO_COMPILER_WRAPPER="1",
    )
    env.update(libraries_env(plan.toolchain, libraries, links))
    if requires is not None:  # a path view puts the toolchain's site-packages before it
        env["PYTHONPATH"] = str(requires) if toolchain.site is None else \
            os.pathsep.join([str(toolchain.site), str(requires)])
    env.update(dict.fromkeys(PROXIES, DEAD_PROXY))
    env.update(dict.fromkeys(NO_PROXY, ""))
    env.update(compile_cache or {})
    if toolchain.target_site is not None and plan.recipe.kind != "pure":  # no compiler: no cross
        env.update(cross_env(toolchain.platform, toolchain.target_site,
                             env.get("PYTORCH_NVCC", str(toolchain.nvcc)),
                             toolchain.python_version))
    recipe = recipe_sets(plan.recipe, plan.release, plan.archs, source)
    env.update(recipe)
    check_extra_env(plan.extra_env, recipe, env)  # what is set up to here is not --env's
    env.update(dict(plan.extra_env))
    env.update(stableabi.build_flags(plan.recipe.stable_abi, env))  # none: not a stable build
    if source is not None:
        maps = reproducible.path_maps(toolchain, source, hostlibs.path_maps(libraries))
        env.update(reproducible.compiler_env(maps, env))
        if cmake:
            env.update(cmakebuild.cmake_env(
                env, source=source, nvcc=toolchain.nvcc, jobs=parallelism.jobs,
                launchers=launchers, build_dir_env=plan.recipe.build_dir_env,
                prefix_flags=shlex.split(env.get("CPPFLAGS", ""))))
    return env


def libraries_env(toolchain: Toolchain, libraries: tuple[hostlibs.Provided, ...],
                  links: Path | None) -> dict[str, str]:
    """CPATH (gcc reads it, and nvcc preprocesses with it): the headers of the libraries
    torch's wheels bring, then those of the host libraries; what the host libraries add
    (hostlibs.environment); and LIBRARY_PATH ending in the toolkit's driver stubs, for a
    package that links the driver API (`-lcuda`: torch-lap-cuda): the link takes the stub's
    soname, libcuda.so.1, which the machine's driver provides at run time."""
    env = hostlibs.environment(libraries, links)
    includes = dict.fromkeys([*toolchain.library_includes, *hostlibs.include_dirs(libraries)])
    if includes:
        env["CPATH"] = os.pathsep.join(map(str, includes))
    stubs = toolchain.cuda_home / "lib" / STUBS
    if stubs.is_dir():
        env["LIBRARY_PATH"] = os.pathsep.join(
            [*filter(None, env.get("LIBRARY_PATH", "").split(os.pathsep)), str(stubs)])
    return env


def guard_env(plan: BuildPlan, guard: Guard) -> dict[str, str]:
    """What the pre-build check (prebuild.py) is told: the expected targets, where to report,
    configure-only, an earlier run's seconds."""
    env = {prebuild.EXPECT_SASS: ",".join(sorted(plan.archs.sass)),
           prebuild.EXPECT_PTX: ",".join(sorted(plan.archs.ptx)),
           prebuild.REPORT: str(guard.report)}
    if plan.archs.family_codes:
        env[gencode.FAMILY] = ",".join(sorted(plan.archs.family_codes))
    if plan.recipe.arch.rewrite:
        env[gencode.REWRITE] = f"{env[prebuild.EXPECT_SASS]};{env[prebuild.EXPECT_PTX]}"
    if guard.configure_only:
        env[prebuild.CONFIGURE_ONLY] = "1"
    if guard.timings is not None:
        env[prebuild.TIMINGS] = str(guard.timings)
    return env


def recipe_sets(recipe: Recipe, release: Release, archs: ArchSet, source: Path | None = None
                ) -> dict[str, str]:
    """What a recipe sets for a build: its arch knob (the requested archs), its build env, and
    the directories of the sources the release carries (in the tree at `source`; relative
    without one), each in its variable or as a CMake option. The CMake options join those the
    recipe gives in CMAKE_ARGS, the arch list's last where it goes there."""
    knob = recipe.arch
    env = {} if knob.env == CMAKE_ARGS else {knob.env: knob.render(archs)}
    env.update({**dict(recipe.env), **dict(release.env)})
    options = [env.get(CMAKE_ARGS, "")]
    for carried in release.carried:
        where = str(carried.into if source is None else source / carried.into)
        if carried.env:
            env[carried.env] = where
        if carried.cmake:
            options.append(shlex.quote(f"-D{carried.cmake}={where}"))
    if knob.env == CMAKE_ARGS:
        options.append(knob.render(archs))
    if any(options):
        env[CMAKE_ARGS] = " ".join(filter(None, options))
    return env


def check_extra_env(extra_env: Iterable[tuple[str, str]], recipe: Mapping[str, str],
                    ours: Mapping[str, str] | None = None) -> None:
    """Refuse an --env that names a protected variable, one the recipe sets (`recipe_sets`),
    or one in `ours` (what build_env set up to then). Before anything is fetched, without
    `ours`; build_env checks again with everything it set."""
    for name, _ in extra_env:
        found = protection(name)
        if found is None and name in recipe:
            found = Protection(name, "the recipe sets it for this build (its build env, arch "
                                     "knob or a carried source)",
                               "change it in the recipe (build.env)")
        if found is None and name in (ours or {}):
            found = Protection(name, "wheelsmith sets it for this build", "nothing to set")
        if found is not None:
            raise found.error()
