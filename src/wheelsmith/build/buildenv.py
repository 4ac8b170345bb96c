"""The environment a package's own build runs in. Pure functions: no I/O except reading the
machine's size.

Only a few variables of the caller's environment pass through; CUDA_HOME is always set from
the toolchain (never guessed from `which nvcc`), the arch list reaches the package through the
recipe's variable, proxies point nowhere so the package's setup cannot download anything,
and MAX_JOBS / NVCC_THREADS (and, in the pre-build check, nvcc's split-compile) are chosen
from cores, memory and the files to compile.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from wheelsmith.build import cmakebuild, parallel, prebuild, reproducible
from wheelsmith.build.parallel import Parallelism
from wheelsmith.build.plan import BuildPlan
from wheelsmith.recipes.model import CMAKE_ARGS
from wheelsmith.toolchain.platform import cross_env

PASS_THROUGH = ("HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TMPDIR", "TERM")
DEAD_PROXY = "http://127.0.0.1:9"  # the discard port: connections are refused at once


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
) -> dict[str, str]:
    """`launchers`: first on PATH, the pre-build check's `ninja` and the compile cache's
    `c++`. `source`: the tree being built, whose path (and the toolchain's) the compilers map
    to fixed names (reproducible.py; a path view rewrites them with the rest). `cmake`: the
    build runs CMake (cmakebuild.py)."""
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
        PIP_CONFIG_FILE=os.devnull,
        PIP_NO_INDEX="1",
        PIP_NO_INPUT="1",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        # newer torch (2.14 does; 2.11 does not) puts a ccache or sccache it finds on PATH in
        # front of the compilers by itself; wheelsmith decides that (compilecache.py,
        # compilefarm.py): --compile-cache off means real compiles, and a cache is the one
        # configured for the build
        TORCH_NO_COMPILER_WRAPPER="1",
    )
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
                "all_proxy"):
        env[var] = DEAD_PROXY
    env["no_proxy"] = env["NO_PROXY"] = ""
    env.update(compile_cache or {})
    if toolchain.target_site is not None:
        env.update(cross_env(toolchain.platform, toolchain.target_site,
                             env.get("PYTORCH_NVCC", str(toolchain.nvcc)),
                             toolchain.python_version))
    env.update(package_env(plan))
    if source is not None:
        env.update(reproducible.compiler_env(reproducible.path_maps(toolchain, source), env))
        if cmake:
            env.update(cmakebuild.cmake_env(
                env, source=source, nvcc=toolchain.nvcc, jobs=parallelism.jobs,
                launchers=launchers, build_dir_env=plan.recipe.build_dir_env,
                prefix_flags=shlex.split(env.get("CPPFLAGS", ""))))
    return env


def guard_env(plan: BuildPlan, guard: Guard) -> dict[str, str]:
    """What the pre-build check (prebuild.py) is told: the expected targets, where to report,
    configure-only, an earlier run's seconds."""
    env = {prebuild.EXPECT_SASS: ",".join(sorted(plan.archs.sass)),
           prebuild.EXPECT_PTX: ",".join(sorted(plan.archs.ptx)),
           prebuild.REPORT: str(guard.report)}
    if guard.configure_only:
        env[prebuild.CONFIGURE_ONLY] = "1"
    if guard.timings is not None:
        env[prebuild.TIMINGS] = str(guard.timings)
    return env


def package_env(plan: BuildPlan) -> dict[str, str]:
    """The arch list in the recipe's variable, then the recipe's, the version's and --env's
    variables; an arch list that goes into CMAKE_ARGS joins the CMake options given there."""
    arch = plan.recipe.arch
    env = {} if arch.env == CMAKE_ARGS else {arch.env: arch.render(plan.archs)}
    env.update({**dict(plan.recipe.env), **dict(plan.release.env), **dict(plan.extra_env)})
    if arch.env == CMAKE_ARGS:
        env[CMAKE_ARGS] = " ".join(filter(None, [env.get(CMAKE_ARGS), arch.render(plan.archs)]))
    return env
