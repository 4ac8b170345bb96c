"""How one compile runs: the build environment, the parallelism, the pre-build check's `ninja`
launcher (answering `ninja --version` before anything compiles), and the compile cache or the
compile farm session with its launchers; what kept a farm out is said, never hidden."""

from __future__ import annotations

import ast
import json
import logging
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wheelsmith import cmd, locations
from wheelsmith.builder import (
    buildenv,
    cmakebuild,
    compilecache,
    compilefarm,
    hostlibs,
    parallel,
    pathview,
    prebuild,
    resume,
)
from wheelsmith.builder.plan import BuildPlan
from wheelsmith.builder.request import BuildRequest, Reporter
from wheelsmith.errors import CompileFarmError, SourceError, ToolchainError, UsageError
from wheelsmith.files import atomic_write_text
from wheelsmith.toolchain import overlay
from wheelsmith.untrusted import parse_python

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CompileSetup:
    """How one compile runs: environment, parallelism, pre-build guard, compile cache, and the
    compile farm (its session when in use, else what kept it out)."""

    env: dict[str, str]
    parallelism: parallel.Parallelism
    guard: buildenv.Guard | None
    cache: compilecache.CompileCache | None
    farm: compilefarm.Session | None = None
    farm_note: str = ""
    view: pathview.PathView | None = None  # the paths the compile sees (pathview.py)
    source: Path = Path()  # the source tree (real)
    libraries: tuple[hostlibs.Provided, ...] = ()  # the recipe's host libraries (hostlibs.py)

    @property
    def source_seen(self) -> Path:
        """The source tree as the compilers see it."""
        return self.view.fixed_source if self.view else self.source

    def describe(self) -> str:
        if self.farm is not None:
            where = f"{self.farm_note}; nvcc and c++ through sccache"
        else:
            cached = f"cache: {self.cache.describe()}" if self.cache else "no compile cache"
            where = f"{self.farm_note}; {cached}" if self.farm_note else cached
        if self.view is not None:
            where = f"{where}; {self.view.describe()}"
        return f"{self.parallelism.describe()}; {where}"

    @property
    def needs_network(self) -> bool:
        """A farm or a TCP cache must be reached from the build: no network namespace."""
        return self.farm is not None or bool(self.cache and self.cache.needs_network)


def compile_setup(plan: BuildPlan, request: BuildRequest, work: Path, epoch: int,
                  source: Path, *, libraries: tuple[hostlibs.Provided, ...] = ()
                  ) -> CompileSetup:
    farm, health, note = farm_session(request, work)
    # --configure-only leaves build files to read and run by hand: they name the real paths
    view = None if request.configure_only else pathview.resolve(
        plan.toolchain, source, farm=farm is not None)
    cores, available = buildenv.machine_size()
    parallelism = buildenv.choose_parallelism(
        cores, available, plan.recipe.memory_per_job_gb, len(plan.archs.archs), request.jobs,
        split=split_setting(request.split_compile), farm_cpus=health.cpus if farm else 0)
    launchers = work / compilecache.LAUNCHER_DIR
    shutil.rmtree(launchers, ignore_errors=True)
    guard = install_guard(plan, work, launchers, configure_only=request.configure_only,
                          timed=request.earlier_object_seconds)
    cache = None if farm else compilecache.resolve(request.compile_cache, locations.cache_dir())
    compiler_env = None
    if farm is not None:
        for name, script in farm.launchers().items():
            write_launcher(launchers / name, script)
        compiler_env = farm.compiler_env(plan.toolchain)
    elif cache is not None:
        (work / "ccache-stats.log").unlink(missing_ok=True)
        for name, script in cache.launchers().items():
            write_launcher(launchers / name, script)
        compiler_env = cache.env(plan.toolchain, work)
    requires = overlay.ensure(plan.recipe.build_requires, plan.toolchain, locations.cache_dir())
    env = buildenv.build_env(plan, parallelism, source_date_epoch=epoch, base=os.environ,
                             guard=guard, compile_cache=compiler_env, launchers=launchers,
                             source=source, cmake=cmakebuild.uses_cmake(source),
                             requires=requires, libraries=libraries,
                             links=work / hostlibs.LINKS if libraries else None)
    return CompileSetup(view.env(env) if view else env, parallelism, guard, cache, farm, note,
                        view, source, libraries)


def split_setting(value: str | None) -> str:
    """--split-compile, else $WHEELSMITH_SPLIT_COMPILE, else auto."""
    text = value if value is not None else os.environ.get(parallel.SPLIT_ENV, parallel.AUTO)
    try:
        return parallel.parse_split(text)
    except parallel.SplitSettingError as exc:
        raise UsageError(f"--split-compile: {exc}",
                         hint="auto (the default), off, fast (nvcc's own split: bytes not "
                              "reproducible), or N workers (0: one per CPU)") from None


def farm_session(request: BuildRequest, work: Path
                  ) -> tuple[compilefarm.Session | None, compilefarm.Health, str]:
    """The build's sccache session when the farm checks out; else None and why, or (with
    --compile-farm-required) CompileFarmError."""
    farm = compilefarm.resolve(request.compile_farm, required=request.compile_farm_required,
                               cache_root=locations.cache_dir())
    if farm is None:
        return None, compilefarm.Health(), ""
    session = compilefarm.start(farm, work)
    try:
        health = compilefarm.check(session)
    except BaseException:
        session.stop()
        raise
    if health.ok:
        return session, health, (f"compile farm {farm.scheduler}: {health.servers} build "
                                 f"server(s), {health.cpus} CPUs")
    session.stop()
    if farm.required:
        raise CompileFarmError(f"compile farm {farm.scheduler}: {health.problem}",
                               hint=f"start the scheduler and build servers (docs/nightly.md), "
                                    f"check ${compilefarm.TOKEN_ENV}, or leave out "
                                    "--compile-farm-required to compile here")
    log.warning("compile farm %s not used: %s", farm.scheduler, health.problem)
    return None, health, (f"compile farm {farm.scheduler} not used: {health.problem}; "
                          "compiling here")


def farm_done(setup: CompileSetup, report: Reporter, *, failed: bool = False
               ) -> dict[str, Any] | None:
    """Stop the build's sccache server and say where its compiles ran. With
    --compile-farm-required, compiles the farm lost (done here instead) fail the build."""
    if setup.farm is None:
        return {"used": False, "reason": setup.farm_note} if setup.farm_note else None
    try:
        stats = setup.farm.stats()
    finally:
        setup.farm.stop()
    report.stage("farm", stats.describe())
    if stats.fell_back and setup.farm.farm.required and not failed:
        raise CompileFarmError(
            f"compile farm {setup.farm.farm.scheduler}: {stats.fell_back} compile(s) fell back "
            f"to local compilation ({stats.reason}); --compile-farm-required",
            hint="check the build servers (a server that died or cannot run the toolchain); "
                 "nothing was written to --out")
    return {"used": True, "scheduler": setup.farm.farm.scheduler, **stats.as_dict()}


def install_guard(plan: BuildPlan, work: Path, launchers: Path, *, configure_only: bool,
                  timed: Path | None = None) -> buildenv.Guard | None:
    """Put the pre-build check's `ninja` in front of the real one (prebuild.py). A CUDA
    build without ninja is refused: torch would fall back to compiling one file at a time,
    MAX_JOBS unused, and no build.ninja would exist for the pre-build arch check. `timed`: an
    earlier run's seconds per object written by the runner outside (a container build's work
    directory is fresh each run), used as it is; else this work directory's earlier runs."""
    toolchain = plan.toolchain
    search = os.pathsep.join([*map(str, toolchain.bin_dirs), os.environ.get("PATH", "")])
    real = shutil.which("ninja", path=search)
    if real is None:
        if plan.recipe.kind == "pure" and not configure_only:
            return None
        raise ToolchainError(
            f"ninja is not installed for {toolchain.python}: torch would compile one file at a "
            "time (its slow fallback) and the pre-build arch check could not run",
            hint=f"install it into that environment: {toolchain.python} -m pip install ninja")
    launcher = launchers / "ninja"
    write_launcher(launcher, prebuild.wrapper_script(sys.executable, real))
    # torch asks `ninja --version` and, when that fails, compiles one file at a time without
    # a word: the launcher must answer in an environment as bare as the build's
    cmd.run([launcher, "--version"], env={"PATH": "/usr/bin:/bin"}, stream=False,
            error=ToolchainError, what=f"the pre-build check's ninja launcher ({launcher})",
            hint=f"its output above says why; it runs {sys.executable} (the Python running "
                 "wheelsmith), which must start with -I and import the standard library")
    report = work / "prebuild.jsonl"
    report.unlink(missing_ok=True)
    timings = work / resume.TIMINGS_FILE  # for longest first (prebuild.py)
    timings.unlink(missing_ok=True)
    if timed is None and (seconds := resume.earlier_object_seconds(work)):
        atomic_write_text(timings, json.dumps(seconds) + "\n")
        timed = timings
    return buildenv.Guard(report, configure_only, timed)


def ninja_switched_off(setup_py: Path) -> int | None:
    """The line where setup.py passes `use_ninja=False` to torch's BuildExtension (read, never
    run), else None. Such a build compiles one file at a time: no build.ninja, so no pre-build
    check, no MAX_JOBS, no split-compile, and --configure-only could not stop it."""
    try:
        module = parse_python(setup_py.read_text(errors="replace"), str(setup_py))
    except (OSError, SourceError):  # the build's Python will say what is wrong with it
        return None
    return next((node.lineno for node in ast.walk(module)
                 if isinstance(node, ast.keyword) and node.arg == "use_ninja"
                 and isinstance(node.value, ast.Constant) and node.value.value is False), None)


def refuse_without_ninja(plan: BuildPlan, source: Path) -> None:
    """A CUDA build whose setup.py turns ninja off is refused before anything compiles."""
    line = None if plan.recipe.kind == "pure" else ninja_switched_off(source / "setup.py")
    if line is not None:
        raise SourceError(
            f"setup.py:{line} passes use_ninja=False: torch would compile one file at a time, "
            "with no build.ninja for the pre-build arch check, MAX_JOBS or split-compile "
            "(and --configure-only could not stop before compiling)",
            hint="add the use-ninja patch to the recipe: `wheelsmith recipe new` writes it "
                 "(patches/NAME/VERSION/0001-use-ninja.patch turns it into use_ninja=True)")


def write_launcher(path: Path, script: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(script)
    path.chmod(0o755)


def read_guard_report(guard: buildenv.Guard | None) -> tuple[dict[str, Any], ...]:
    if guard is None or not guard.report.is_file():
        return ()
    return tuple(json.loads(line) for line in guard.report.read_text().splitlines() if line)

