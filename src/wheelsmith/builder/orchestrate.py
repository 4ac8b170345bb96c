"""The one place that knows the order of the stages:

recipe -> toolchain (+ pre-flight) -> plan -> fetch -> patch -> compile -> verify -> smoke
-> stamp -> output.

Each stage is a call into its own module; this module only sequences them (the host runner;
runner.py puts a container around the same build), holds the work directory's lock, and
makes sure nothing half-built reaches the output directory.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

from wheelsmith import __version__, locations, locks
from wheelsmith.builder import buildenv, hostlibs, reproducible, resume, sbom, shipped
from wheelsmith.builder.compile import compile_package, log_path_of
from wheelsmith.builder.compilesetup import compile_setup, refuse_without_ninja
from wheelsmith.builder.configured import went_on_past
from wheelsmith.builder.finish import (
    check_wheel,
    provenance_record,
    source_epoch,
    up_to_date,
    write_output,
)
from wheelsmith.builder.plan import BuildPlan, archs_for, check_known_bad
from wheelsmith.builder.request import BuildRequest, BuildResult, QuietReporter, Reporter
from wheelsmith.errors import BuildLockedError, VerifyError
from wheelsmith.files import remove_stale_scratch
from wheelsmith.recipes.fetch import carry_in, fetch
from wheelsmith.recipes.patch import apply_all
from wheelsmith.recipes.repos import resolve_recipe
from wheelsmith.recipes.sources import describe_source
from wheelsmith.toolchain import overlay
from wheelsmith.toolchain.env import Toolchain
from wheelsmith.toolchain.platform import parse_platform
from wheelsmith.toolchain.preflight import preflight
from wheelsmith.toolchain.select import resolve_toolchain
from wheelsmith.toolchain.target import interpreter_for
from wheelsmith.untrusted.provenance import recorded_provenance


def prepare(request: BuildRequest, report: Reporter, toolchain: Toolchain | None = None
            ) -> BuildPlan:
    """Everything before fetching: recipe, archs, toolchain, pre-flight, known-bad, the plan
    and its content key. Cheap once the toolchain exists (nightly uses it to skip cells).
    `toolchain`: one resolved elsewhere (a container image's; its pre-flight runs in there)."""
    recipe = resolve_recipe(request.recipe, request.version)
    release = recipe.release(request.version)
    archs = archs_for(recipe, request.archs)
    buildenv.check_extra_env(request.env, buildenv.recipe_sets(recipe, release, archs))
    if toolchain is None:
        for_target = request.target is not None
        if request.toolchain or not for_target:
            report.stage("toolchain", request.toolchain or (
                "default CUDA-only profile (the package links no torch)"
                if recipe.kind == "cuda" else "default profile"))
        python = interpreter_for(request.python_version) if request.python_version \
            else request.python
        toolchain = resolve_toolchain(request.toolchain, python, for_target=for_target,
                                      cuda_only=recipe.kind == "cuda",
                                      say=lambda chosen: report.stage("toolchain", chosen),
                                      machine=parse_platform(request.platform),
                                      compiles=recipe.kind != "pure")
        preflight(toolchain, archs, recipe.arch.min_cuda)
    overlay.check_adds_only(recipe.build_requires, toolchain, recipe.file)
    hostlibs.check(recipe, toolchain)
    if recipe.stable_abi is not None and (
            refused := recipe.stable_abi.refusal(toolchain.torch_version)) is not None:
        raise refused
    check_known_bad(recipe, release, toolchain, archs, report)
    return BuildPlan(recipe=recipe, release=release, archs=archs, toolchain=toolchain,
                     extra_env=request.env, torch_range=request.torch_range)


def build(request: BuildRequest, reporter: Reporter | None = None,
          plan: BuildPlan | None = None) -> BuildResult:
    """The host runner (runner.py chooses between it and a container)."""
    report = reporter or QuietReporter()
    plan = plan or prepare(request, report)
    return already_built(plan, request, report) or build_plan(plan, request, report)


def already_built(plan: BuildPlan, request: BuildRequest, report: Reporter
                  ) -> BuildResult | None:
    """The result for a wheel of exactly this plan already in --out (any runner)."""
    existing = None if request.configure_only else up_to_date(
        plan, request.out_dir.resolve(), rebuild=request.rebuild)
    if existing is None:
        return None
    report.stage("up to date", existing.name)
    return BuildResult(wheel=existing, provenance=recorded_provenance(existing),
                       up_to_date=True, log=None,
                       run=reproducible.read_run(request.work_dir.resolve() / plan.slug()))


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
        resume.prune(request.work_dir.resolve(), keep=plan.slug())
        return already_built(plan, request, locked) or build(locked)


def build_plan(plan: BuildPlan, request: BuildRequest, report: Reporter) -> BuildResult:
    return exclusively(plan, request, report,
                       lambda locked: _build_locked(plan, request, locked))


def _build_locked(plan: BuildPlan, request: BuildRequest, report: Reporter) -> BuildResult:
    started = time.monotonic()
    work = request.work_dir.resolve() / plan.slug()
    work.mkdir(parents=True, exist_ok=True)
    log_path = log_path_of(work)
    log_path.write_text(f"wheelsmith {__version__}: {plan.slug()}\n")
    if request.prepared_source is not None:  # fetched and patched outside (container runs)
        source = request.prepared_source.resolve()
    else:
        source = fetch_and_patch(plan, work, report, fresh=request.fresh)
    refuse_without_ninja(plan, source)
    epoch = source_epoch(source)
    setup = compile_setup(plan, request, work, epoch, source,
                          libraries=libraries(plan, work, report))
    target = "pure Python" if plan.recipe.kind == "pure" else str(plan.archs)
    report.stage("compile", f"{plan.recipe.name} {plan.release.version} for {target}; "
                            f"{setup.describe()}")
    compiled = compile_package(plan, request, setup, source, work=work, report=report)
    if isinstance(compiled, BuildResult):  # --configure-only
        return compiled
    try:
        checked = check_wheel(plan, compiled.raw, request, work, report,
                              libraries=setup.libraries)
    except VerifyError as exc:  # a wheel the build made past an error of its own: that cause
        went_on_past(exc, log_path, source)
        raise
    provenance, run = reproducible.split_record(provenance_record(
        plan, checked, setup, compiled, work=work, seconds=round(time.monotonic() - started, 1),
        vendored=sbom.vendored(source)))
    span = plan.torch_span(checked.torch_range["proven"] if checked.torch_range else None)
    report.stage("stamp", plan.local_label(span))
    wheel = write_output(plan, compiled.raw, request, provenance, epoch,
                         requires=hostlibs.requirements(setup.libraries), span=span)
    reproducible.write_run(work, run)
    resume.finished(work, keep_source=request.keep_work)
    if not request.keep_work:
        shutil.rmtree(work / "smoke", ignore_errors=True)
    return BuildResult(wheel=wheel, provenance=provenance, up_to_date=False, log=log_path,
                       run=run)


def libraries(plan: BuildPlan, work: Path, report: Reporter) -> tuple[hostlibs.Provided, ...]:
    """The recipe's host libraries for this build's toolchain (hostlibs.py), said as they
    are provided."""
    if not hostlibs.applicable(plan.recipe, plan.toolchain):
        return ()
    found = hostlibs.provide(plan.recipe, plan.toolchain, work, locations.cache_dir())
    report.stage("libraries", "; ".join(provided.describe() for provided in found))
    return found


def fetch_and_patch(plan: BuildPlan, work: Path, report: Reporter, *, fresh: bool = False
                    ) -> Path:
    """The patched source tree: the one an unfinished build of this key left (resume.py),
    else fetched and patched anew."""
    what = f"{plan.recipe.name} {plan.release.version}"
    if fresh:
        resume.forget(work)
    kept = resume.kept_source(work, plan.key)
    if kept is not None:
        report.stage("resuming", f"{what}: the patched source and build tree an unfinished build "
                               f"left in {kept.parent} (--fresh starts clean)")
        resume.mark_prepared(work, plan.key, kept)  # in use again: not pruned for its age
        return kept
    report.stage("fetch", f"{what} ({describe_source(plan.release.source)})")
    source = fetch(plan.release.source, resume.source_dir(work), locations.cache_dir())
    epoch = source_epoch(source)  # the release's: what it carries does not move it
    for carried in plan.release.carried:
        report.stage("fetch", f"into {carried.into} ({describe_source(carried.source)})")
        carry_in(carried, source, work / "carry", locations.cache_dir())
    report.stage("patch", f"{len(plan.release.patches)} patch(es)")
    apply_all(plan.release.patches, source)
    reproducible.clamp_mtimes(source, epoch)  # the patched tree keeps the sdist's time
    shipped.record(source, work)  # before anything is built: the binaries the sdist ships
    resume.mark_prepared(work, plan.key, source)
    return source
