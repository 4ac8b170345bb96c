"""The one place that knows the order of the stages:

recipe -> toolchain (+ pre-flight) -> plan -> fetch -> patch -> compile -> verify -> smoke
-> stamp -> output.

Each stage is a call into its own module; this module only sequences them, reports progress
and makes sure nothing half-built reaches the output directory.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from wheelsmith import (
    __version__,
    buildenv,
    cmd,
    compilecache,
    compilefarm,
    diagnose,
    knownbad,
    locations,
    locks,
    manylinux,
    parallel,
    prebuild,
    repos,
    target,
)
from wheelsmith.arch import ArchSet
from wheelsmith.compile import compile_wheel
from wheelsmith.errors import (
    BuildLockedError,
    CompileError,
    CompileFarmError,
    KnownBadError,
    OutputError,
    SourceError,
    ToolchainError,
    UsageError,
    VerifyError,
)
from wheelsmith.fetch import fetch
from wheelsmith.files import place_no_clobber, remove_stale_scratch, scratch_dir, sha256_file
from wheelsmith.inventory import DeviceCode, wheel_inventory
from wheelsmith.patch import apply_all
from wheelsmith.plan import BuildPlan
from wheelsmith.recipe import Recipe, Release, load_recipe
from wheelsmith.smoke import smoke_test
from wheelsmith.stamp import read_provenance, stamp
from wheelsmith.target import interpreter_for
from wheelsmith.toolchain import (
    SYSTEM,
    Profile,
    Toolchain,
    Tools,
    default_profile_name,
    ensure_profile,
    ensure_tools,
    find_profile,
    load_profiles,
    preflight,
    system_cuobjdump,
    system_toolchain,
)
from wheelsmith.verify import IGNORES_ARCH_HINT, check, check_pure, verify_wheel
from wheelsmith.wheelfile import WheelName

log = logging.getLogger(__name__)

RUNNER_INFO = "WHEELSMITH_RUNNER_INFO"  # set by a container runner: engine, image id, digest


class Reporter(Protocol):
    """How the library tells its caller where it is; the CLI decides how that looks."""

    def stage(self, name: str, detail: str) -> None: ...

    def progress(self, done: int, total: int) -> None: ...


class QuietReporter:
    def stage(self, name: str, detail: str) -> None:
        log.info("%s: %s", name, detail)

    def progress(self, done: int, total: int) -> None:
        pass


@dataclass(frozen=True, kw_only=True, slots=True)
class BuildRequest:
    recipe: str
    version: str | None = None
    archs: ArchSet | None = None
    toolchain: str | None = None
    python: Path = field(default_factory=lambda: Path(sys.executable))
    # The environment the wheel is for (`--python`): without --toolchain its torch and CUDA
    # choose the profile; the wheel is also import-tested there.
    target: Path | None = None
    python_version: str | None = None  # `--python X.Y`: python3.X here, or the image's Python
    out_dir: Path = Path("wheelhouse")
    work_dir: Path = Path("build/wheelsmith")
    jobs: int | None = None
    split_compile: str | None = None  # auto | off | N; None: $WHEELSMITH_SPLIT_COMPILE or auto
    compile_farm: str | None = None  # scheduler URL | off; None: $WHEELSMITH_COMPILE_FARM
    compile_farm_required: bool = False  # fail instead of compiling here
    env: tuple[tuple[str, str], ...] = ()
    configure_only: bool = False
    compile_cache: str | None = None  # None: $WHEELSMITH_COMPILE_CACHE or the local default
    runner: str = "host"  # host | podman | docker | auto
    keep_container: bool = False
    prepared_source: Path | None = None  # a tree already fetched and patched (inside a container)
    rebuild: bool = False
    keep_work: bool = False
    wait: bool = True  # for another build of the same key in the work dir (else refuse)


@dataclass(frozen=True, kw_only=True, slots=True)
class BuildResult:
    wheel: Path | None  # None after --configure-only
    provenance: dict[str, Any]
    up_to_date: bool
    log: Path | None
    configured: tuple[dict[str, Any], ...] = ()  # what each build.ninja targets


def resolve_recipe(name: str) -> Recipe:
    """The recipe called `name` from the first recipe repository that has one."""
    return load_recipe(repos.find(name).file)


def profile_named(name: str | None) -> Profile:
    """A profile from the profile directories (None: the default, else the newest)."""
    toolchains = locations.profile_dirs()
    return find_profile(toolchains, name or default_profile_name(toolchains))


def resolve_toolchain(name: str | None, python: Path, report: Reporter | None = None,
                      *, for_target: bool = False) -> Toolchain:
    """The toolchain called `name`; without a name, the one for the target environment
    `python` (for_target) or else the newest profile."""
    if name == SYSTEM:
        return system_toolchain(python)
    if name is None and for_target:
        found = target.probe(python)
        profiles = load_profiles(locations.profile_dirs())
        profile = target.select_profile(found, profiles)
        torch, cuda = found.cuda_torch()
        (report or QuietReporter()).stage(
            "toolchain", f"{profile.name}, chosen for {python} (Python {found.version}, torch "
                         f"{torch}, CUDA {cuda})")
        return ensure_profile(profile, python, locations.cache_dir())
    return ensure_profile(profile_named(name), python, locations.cache_dir())


def prepare(request: BuildRequest, report: Reporter, toolchain: Toolchain | None = None
            ) -> BuildPlan:
    """Everything before fetching: recipe, archs, toolchain, pre-flight, known-bad, the plan
    and its content key. Cheap once the toolchain exists (nightly uses it to skip cells).
    `toolchain`: one resolved elsewhere (a container image's; its pre-flight runs in there)."""
    recipe = resolve_recipe(request.recipe)
    release = recipe.release(request.version)
    archs = archs_for(recipe, request.archs)
    if toolchain is None:
        for_target = request.target is not None
        if request.toolchain or not for_target:
            report.stage("toolchain", request.toolchain or "default profile")
        python = interpreter_for(request.python_version) if request.python_version \
            else request.python
        toolchain = resolve_toolchain(request.toolchain, python, report, for_target=for_target)
        preflight(toolchain, archs, recipe.arch.min_cuda)
    check_known_bad(recipe, release, toolchain, archs, report)
    return BuildPlan(recipe=recipe, release=release, archs=archs, toolchain=toolchain,
                     extra_env=request.env)


def build(request: BuildRequest, reporter: Reporter | None = None,
          plan: BuildPlan | None = None) -> BuildResult:
    """The host runner (runner.py chooses between it and a container)."""
    report = reporter or QuietReporter()
    plan = plan or prepare(request, report)
    return already_built(plan, request, report) or _build_plan(plan, request, report)


def already_built(plan: BuildPlan, request: BuildRequest, report: Reporter
                  ) -> BuildResult | None:
    """The result for a wheel of exactly this plan already in --out (any runner)."""
    existing = None if request.configure_only else _up_to_date(
        plan, request.out_dir.resolve(), rebuild=request.rebuild)
    if existing is None:
        return None
    report.stage("up to date", existing.name)
    return BuildResult(wheel=existing, provenance=read_provenance(existing) or {},
                       up_to_date=True, log=None)


def archs_for(recipe: Recipe, requested: ArchSet | None) -> ArchSet:
    """The archs to build: none for pure recipes, else --arch (default: the recipe's), which
    must be ones the package's knob can express."""
    if recipe.kind == "pure":
        if requested is not None:
            raise UsageError(f"{recipe.name} is pure Python: it has no device code, so --arch "
                             "does not apply", hint="leave out --arch")
        return ArchSet(())
    archs = requested or recipe.arch.default
    unsupported = recipe.arch.unsupported(archs)
    if unsupported:
        supported = str(recipe.arch.supported).replace(";", ", ")
        raise UsageError(f"{recipe.name} cannot be built for {', '.join(unsupported)}: its "
                         f"{recipe.arch.env} knob only knows {supported}",
                         hint="pick archs from that list (an sm_120 cubin also runs on sm_121, "
                              "an sm_100 cubin on sm_103)")
    return archs


def check_known_bad(recipe: Recipe, release: Release, toolchain: Toolchain, archs: ArchSet,
                     report: Reporter) -> None:
    rules = knownbad.load(locations.project_root() / knownbad.FILE)
    found = knownbad.matching(rules, recipe.name, release.version, nvcc=toolchain.nvcc_version,
                              torch=toolchain.torch_version, archs=archs)
    refused = [r for r in found if r.action == "refuse"]
    for rule in found:
        if rule.action == "warn":
            log.warning("known issue: %s", rule.describe())
            report.stage("warning", rule.describe())
    if refused:
        raise KnownBadError(
            f"refusing to build {recipe.name} {release.version} for {archs} with nvcc "
            f"{toolchain.nvcc_version}: " + " ".join(r.describe() for r in refused),
            hint=f"the rule is in {knownbad.FILE}; choose other archs or another version")


@dataclass(frozen=True, slots=True)
class _Setup:
    """How one compile runs: environment, parallelism, pre-build guard, compile cache, and the
    compile farm (its session when in use, else what kept it out)."""

    env: dict[str, str]
    parallelism: parallel.Parallelism
    guard: buildenv.Guard | None
    cache: compilecache.CompileCache | None
    farm: compilefarm.Session | None = None
    farm_note: str = ""

    def describe(self) -> str:
        if self.farm is not None:
            where = f"{self.farm_note}; nvcc and c++ through sccache"
        else:
            cached = f"cache: {self.cache.describe()}" if self.cache else "no compile cache"
            where = f"{self.farm_note}; {cached}" if self.farm_note else cached
        return f"{self.parallelism.describe()}; {where}"

    @property
    def needs_network(self) -> bool:
        """A farm or a TCP cache must be reached from the build: no network namespace."""
        return self.farm is not None or bool(self.cache and self.cache.needs_network)


class _LockedReporter:
    """Reports on, keeping the build lock's record of the stage current."""

    def __init__(self, report: Reporter, held: locks.Held) -> None:
        self.report, self.held = report, held

    def stage(self, name: str, detail: str) -> None:
        self.held.stage(name)
        self.report.stage(name, detail)

    def progress(self, done: int, total: int) -> None:
        self.report.progress(done, total)


def exclusively(plan: BuildPlan, request: BuildRequest, report: Reporter,
                build: Callable[[Reporter], BuildResult]) -> BuildResult:
    """Run `build` (any runner's) holding the lock of the plan's work directory for its whole
    life: one build per work dir and content key. Another build of the key waits for it
    (`request.wait`, else BuildLockedError) and then finds the wheel up to date; a lock whose
    holder died is taken over once what it left running is ended."""
    where = request.work_dir / plan.slug()
    what = f"another build of {plan.recipe.name} {plan.release.version} is running in {where}"

    def busy(holder: locks.Holder | None) -> None:
        who = holder.describe() if holder else "its holder wrote no record"
        if not request.wait:
            raise BuildLockedError(f"{what}: {who}",
                                   hint="leave out --no-wait to wait for it (then the wheel is "
                                        "up to date), or build in another --work-dir")
        report.stage("waiting", f"{what}: {who}")

    def taken_over(holder: locks.Holder, ended: int) -> None:
        report.stage("takeover", f"the last build in {where} ({holder.describe()}) is gone; "
                                 f"ended {ended} process(es) it left running")

    lock = request.work_dir.resolve() / f"{plan.slug()}.lock"
    with locks.hold(lock, on_busy=busy, on_takeover=taken_over) as held:
        locked = _LockedReporter(report, held)
        out_dir = request.out_dir.resolve()
        if out_dir.is_dir():
            remove_stale_scratch(out_dir)
        return already_built(plan, request, locked) or build(locked)


def _build_plan(plan: BuildPlan, request: BuildRequest, report: Reporter) -> BuildResult:
    return exclusively(plan, request, report,
                       lambda locked: _build_locked(plan, request, locked))


def _build_locked(plan: BuildPlan, request: BuildRequest, report: Reporter) -> BuildResult:
    started = time.monotonic()
    work = request.work_dir.resolve() / plan.slug()
    work.mkdir(parents=True, exist_ok=True)
    log_path = log_path_of(work)
    log_path.write_text(f"wheelsmith {__version__}: {plan.slug()}\n")
    what = f"{plan.recipe.name} {plan.release.version}"

    if request.prepared_source is not None:  # fetched and patched outside (container runs)
        source = request.prepared_source.resolve()
    else:
        source = fetch_and_patch(plan, work, report)
    epoch = _source_epoch(source)

    setup = _compile_setup(plan, request, work, epoch)
    target = "pure Python" if plan.recipe.kind == "pure" else str(plan.archs)
    report.stage("compile", f"{what} for {target}; {setup.describe()}")
    compiled = _compile(plan, request, setup, source, work=work, report=report)
    if isinstance(compiled, BuildResult):
        return compiled
    raw = compiled.raw

    inventory, smoke_output, platform = _check_wheel(plan, raw, request, work, report)
    provenance = _provenance(plan, inventory, parallelism=setup.parallelism,
                             seconds=round(time.monotonic() - started, 1), raw_name=raw.name,
                             smoke_output=smoke_output)
    provenance["prebuild_check"] = (list(_read_guard_report(setup.guard))
                                    or "not run (the build used no ninja)")
    provenance["platform"] = platform
    provenance["runner"] = json.loads(os.environ.get(RUNNER_INFO, '{"engine": "host"}'))
    provenance["compile_cache"] = ({"backend": setup.cache.describe(),
                                    **compilecache.stats(work)} if setup.cache else None)
    provenance["compile_farm"] = compiled.farm
    provenance["build"]["plan"] = list(compiled.plans)
    report.stage("stamp", plan.local_label())
    wheel = _write_output(plan, raw, request, provenance, epoch)
    if not request.keep_work:
        shutil.rmtree(work / "src", ignore_errors=True)
        shutil.rmtree(work / "smoke", ignore_errors=True)
    return BuildResult(wheel=wheel, provenance=provenance, up_to_date=False, log=log_path)


@dataclass(frozen=True, slots=True)
class _Compiled:
    raw: Path
    farm: dict[str, Any] | None  # where its compiles ran, when a farm was asked for
    plans: tuple[str, ...]  # the pre-build check's plan lines


def _compile(plan: BuildPlan, request: BuildRequest, setup: _Setup, source: Path, *,
             work: Path, report: Reporter) -> _Compiled | BuildResult:
    """The package's build; a BuildResult when it stopped after configuring."""
    log_path = log_path_of(work)
    plans: list[str] = []

    def on_plan(line: str) -> None:
        plans.append(line)
        report.stage("compile", f"plan from build.ninja: {line}")

    try:
        raw = compile_wheel(what=f"{plan.recipe.name} {plan.release.version}",
                            toolchain=plan.toolchain, source=source, env=setup.env,
                            dist=work / "dist", log_path=log_path, on_progress=report.progress,
                            on_plan=on_plan, isolate_network=not setup.needs_network)
    except CompileError as exc:
        _farm_done(setup, report, failed=True)  # the compile's own error is the one to show
        return _configured(_prebuild_outcome(setup.guard, log_path, exc), log_path, report)
    except BaseException:
        if setup.farm is not None:
            setup.farm.stop()
        raise
    farm = _farm_done(setup, report)
    if request.configure_only:  # no CUDA rule stopped it (e.g. a pure package): keep nothing
        return _configured(_read_guard_report(setup.guard), log_path, report)
    return _Compiled(raw, farm, tuple(plans))


def fetch_and_patch(plan: BuildPlan, work: Path, report: Reporter) -> Path:
    what = f"{plan.recipe.name} {plan.release.version}"
    report.stage("fetch", f"{what} ({type(plan.release.source).__name__})")
    source = fetch(plan.release.source, work / "src", locations.cache_dir())
    report.stage("patch", f"{len(plan.release.patches)} patch(es)")
    apply_all(plan.release.patches, source)
    return source


def _compile_setup(plan: BuildPlan, request: BuildRequest, work: Path, epoch: int) -> _Setup:
    farm, health, note = _farm_session(request, work)
    cores, available = buildenv.machine_size()
    parallelism = buildenv.choose_parallelism(
        cores, available, plan.recipe.memory_per_job_gb, len(plan.archs.archs), request.jobs,
        split=split_setting(request.split_compile), farm_cpus=health.cpus if farm else 0)
    launchers = work / "launchers"
    shutil.rmtree(launchers, ignore_errors=True)
    guard = _install_guard(plan, work, launchers, configure_only=request.configure_only)
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
    env = buildenv.build_env(plan, parallelism, source_date_epoch=epoch, base=os.environ,
                             guard=guard, compile_cache=compiler_env, launchers=launchers)
    return _Setup(env, parallelism, guard, cache, farm, note)


def split_setting(value: str | None) -> str:
    """--split-compile, else $WHEELSMITH_SPLIT_COMPILE, else auto."""
    text = value if value is not None else os.environ.get(parallel.SPLIT_ENV, parallel.AUTO)
    try:
        return parallel.parse_split(text)
    except parallel.SplitSettingError as exc:
        raise UsageError(f"--split-compile: {exc}",
                         hint="auto (the default), off, or N workers (0: nvcc's own)") from None


def _farm_session(request: BuildRequest, work: Path
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


def _farm_done(setup: _Setup, report: Reporter, *, failed: bool = False
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


def _configured(records: tuple[dict[str, Any], ...], log_path: Path,
                report: Reporter) -> BuildResult:
    """The result of a build that stopped after generating its build files."""
    report.stage("configured", "; ".join(
        f"{Path(c['build_ninja']).parent.name}: SASS {', '.join(c['sass'])}" for c in records)
        or "the build had no CUDA compile step; no wheel is kept")
    return BuildResult(wheel=None, provenance={}, up_to_date=False, log=log_path,
                       configured=records)


def _check_wheel(plan: BuildPlan, raw: Path, request: BuildRequest, work: Path,
                 report: Reporter) -> tuple[list[DeviceCode], str, dict[str, Any]]:
    """The device-code gate, the platform tag (manylinux.py), then the smoke test."""
    report.stage("verify", f"device code of {raw.name}")
    inventory = check_device_code(plan, raw, cuobjdump_for(plan.toolchain, request.python))
    platform = manylinux.assess(raw, auditwheel_for(plan.toolchain, request.python))
    report.stage("platform", platform.describe())
    toolchain = plan.toolchain
    report.stage("smoke", "import against torch " + str(toolchain.torch_version))
    smoke_output = _smoke(plan, raw, toolchain.python, [toolchain.python, "-m", "pip"], work)
    if request.target is not None and request.target != toolchain.python:
        env = target.probe(request.target)
        report.stage("smoke", f"import in {request.target} against its torch {env.torch}")
        smoke_output += "\n" + _smoke(plan, raw, request.target, env.pip(), work)
    return inventory, smoke_output, platform.as_dict()


def _smoke(plan: BuildPlan, raw: Path, python: Path, pip: list[str | Path], work: Path) -> str:
    return smoke_test(raw, python=python, pip=pip, cuda_home=plan.toolchain.cuda_home,
                      imports=plan.recipe.smoke_imports, gpu_code=plan.recipe.smoke_gpu,
                      archs=plan.archs, scratch=work / "smoke", log_path=log_path_of(work))


def check_device_code(plan: BuildPlan, wheel: Path, cuobjdump: Path) -> list[DeviceCode]:
    """The device-code gate of a plan's wheel: exactly the requested archs, or none at all
    for a pure recipe. Used where the wheel is built and again on the host after a container."""
    inventory = wheel_inventory(wheel, cuobjdump)
    if plan.recipe.kind == "pure":
        check_pure(wheel.name, inventory)
    else:
        check(wheel.name, inventory, plan.archs, plan.recipe.host_only)
    return inventory


def log_path_of(work: Path) -> Path:
    return work / "build.log"


def _install_guard(plan: BuildPlan, work: Path, launchers: Path, *, configure_only: bool
                   ) -> buildenv.Guard | None:
    """Put the pre-build check's `ninja` in front of the real one (prebuild.py). A CUDA
    build without ninja is refused: torch would fall back to compiling one file at a time,
    MAX_JOBS unused, and no build.ninja would exist for the pre-build arch check."""
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
    return buildenv.Guard(report, configure_only)


def write_launcher(path: Path, script: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(script)
    path.chmod(0o755)


def _read_guard_report(guard: buildenv.Guard | None) -> tuple[dict[str, Any], ...]:
    if guard is None or not guard.report.is_file():
        return ()
    return tuple(json.loads(line) for line in guard.report.read_text().splitlines() if line)


def _prebuild_outcome(guard: buildenv.Guard | None, log_path: Path,
                      exc: CompileError) -> tuple[dict[str, Any], ...]:
    """A build the pre-build check stopped: a mismatch becomes a VerifyError; a
    configure-only stop is a result; anything else re-raises the compile error."""
    text = log_path.read_text(errors="replace")
    missing = next((line for line in text.splitlines() if prebuild.SOURCE_CHECK in line), None)
    if missing is not None:
        raise SourceError(missing.strip().removeprefix("wheelsmith "),
                          hint=diagnose.SOURCES_MISSING.remedy, log_file=log_path) from exc
    mismatch = next((line for line in text.splitlines()
                     if "wheelsmith pre-build check:" in line), None)
    if mismatch is not None:
        raise VerifyError(mismatch.strip().removeprefix("wheelsmith "), hint=IGNORES_ARCH_HINT,
                          log_file=log_path) from exc
    configured = _read_guard_report(guard)
    if guard is not None and guard.configure_only and "wheelsmith configure-only:" in text:
        return configured
    raise exc


def cuobjdump_for(toolchain: Toolchain | None, python: Path) -> Path:
    """Which cuobjdump reads device code, first found of: $WHEELSMITH_CUOBJDUMP, the
    toolchain's own, an installed CUDA toolkit's, else the default profile's pinned tools venv
    (installed from PyPI on first use)."""
    explicit = os.environ.get("WHEELSMITH_CUOBJDUMP")
    if explicit:
        return Path(explicit)
    if toolchain is not None and toolchain.cuobjdump is not None:
        return toolchain.cuobjdump
    installed = system_cuobjdump()
    if installed is not None:
        return installed
    return _default_tools(python).cuobjdump


def auditwheel_for(toolchain: Toolchain | None, python: Path) -> Path | None:
    """The profile's auditwheel: in the toolchain venv, else on PATH, else in the tools venv
    (installed on first use). None when none can be had (an offline machine building with a
    system toolchain): the platform check is then recorded as not done, never guessed."""
    if toolchain is not None and toolchain.name != SYSTEM:
        candidate = toolchain.python.parent / "auditwheel"
        if candidate.is_file():
            return candidate
    on_path = shutil.which("auditwheel")
    if on_path is not None:
        return Path(on_path)
    try:
        return _default_tools(python).auditwheel
    except ToolchainError as exc:
        log.warning("the platform tag is not checked: no auditwheel (%s)", exc)
        return None


def _default_tools(python: Path) -> Tools:
    """The default profile's tools venv (cuobjdump, auditwheel), installed on first use."""
    return ensure_tools(profile_named(None), python, locations.cache_dir())


def verify(wheel: Path, archs: ArchSet, *, python: Path, host_only: tuple[str, ...] = ()
           ) -> list[DeviceCode]:
    """`wheelsmith verify`: the post-build check, on any wheel."""
    return verify_wheel(wheel, archs, cuobjdump_for(None, python), host_only)


def _source_epoch(root: Path) -> int:
    """SOURCE_DATE_EPOCH from the newest file of the unpacked source (stable per sdist)."""
    newest = 0.0
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            if not path.is_symlink():
                newest = max(newest, path.stat().st_mtime)
    return int(newest)


def _expected_prefix(plan: BuildPlan) -> str:
    dist = plan.recipe.name.replace("-", "_")
    return f"{dist}-{plan.release.version}+{plan.local_label()}-"


def _up_to_date(plan: BuildPlan, out_dir: Path, *, rebuild: bool) -> Path | None:
    """A wheel in `out_dir` built from exactly this plan, if any; refuse silent overwrites."""
    if not out_dir.is_dir():
        return None
    for wheel in sorted(out_dir.glob(_expected_prefix(plan) + "*.whl")):
        key = (read_provenance(wheel) or {}).get("key")
        if key == plan.key and not rebuild:
            return wheel
        if key != plan.key and not rebuild:
            raise OutputError(
                f"{wheel} exists and was built from different inputs (key {str(key)[:12]}, "
                f"now {plan.key[:12]})",
                hint="pass --rebuild to replace it, or choose another --out directory",
            )
    return None


def _provenance(plan: BuildPlan, inventory: list[DeviceCode], *,
                parallelism: parallel.Parallelism, seconds: float, raw_name: str,
                smoke_output: str) -> dict[str, Any]:
    recipe, release, toolchain = plan.recipe, plan.release, plan.toolchain
    return {
        "schema": 1,
        "tool": f"wheelsmith {__version__}",
        "key": plan.key,
        "recipe": {"file": recipe.file.name, "file_sha256": sha256_file(recipe.file),
                   "package": recipe.name, "version": release.version},
        "source": plan.key_inputs()["recipe"]["source"],
        "patches": [{"file": p.path.name, "sha256": p.sha256} for p in release.patches],
        "toolchain": {**toolchain.identity(), "channel": toolchain.channel()},
        "nvcc": str(toolchain.nvcc_version),
        "archs_requested": str(plan.archs),
        "extra_env": dict(plan.extra_env),
        "device_code": [d.as_dict() for d in inventory],
        "build": {"seconds": seconds, "max_jobs": parallelism.jobs,
                  "nvcc_threads": parallelism.nvcc_threads,
                  "split_compile": parallelism.split_setting,
                  "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                  "raw_wheel": raw_name},
        "smoke": smoke_output.strip().splitlines(),
    }


def _write_output(plan: BuildPlan, raw: Path, request: BuildRequest,
                  provenance: dict[str, Any], epoch: int) -> Path:
    """Stamp into a scratch directory inside the output, then move the finished file in."""
    out_dir = request.out_dir.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    with scratch_dir(out_dir) as scratch:
        stamped = stamp(raw, scratch, label=plan.local_label(),
                        torch_requirement=plan.torch_requirement(), provenance=provenance,
                        epoch=epoch, platform=provenance["platform"]["tag"])
        return place(stamped, out_dir, rebuild=request.rebuild)


def place(finished: Path, out_dir: Path, *, rebuild: bool) -> Path:
    """Move a finished wheel (on the same filesystem) into `out_dir`, never over another."""
    final = out_dir / finished.name
    WheelName.parse(final.name)  # the stamped name must stay a valid wheel filename
    if rebuild and final.exists():
        log.info("replacing %s (--rebuild)", final)
        finished.replace(final)
    elif not place_no_clobber(finished, final):
        raise OutputError(f"{final} appeared while building; not overwriting it",
                          hint="pass --rebuild to replace it")
    return final
