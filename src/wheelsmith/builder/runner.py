"""Where a build runs: on the host (orchestrate.build) or inside a pinned container.

The container runner does what only the host can (resolve the image and its toolchain,
compute the plan and content key, fetch and patch the source) and hands the prepared tree to
the same wheelsmith build inside the image, offline. The wheel it writes is checked again on
the host before it is placed into the output directory.
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from wheelsmith import locations, wheelfile
from wheelsmith.builder import (
    compilecache,
    container,
    finish,
    orchestrate,
    reproducible,
    resume,
)
from wheelsmith.builder.compile import log_path_of, progress_parser
from wheelsmith.builder.plan import BuildPlan
from wheelsmith.builder.request import (
    RUNNER_INFO,
    BuildRequest,
    BuildResult,
    QuietReporter,
    Reporter,
    to_json,
)
from wheelsmith.errors import CompileError, UsageError, VerifyError
from wheelsmith.files import atomic_write_text, scratch_dir
from wheelsmith.recipes import repos
from wheelsmith.toolchain import select, tools
from wheelsmith.toolchain.platform import host_machine, parse_platform
from wheelsmith.toolchain.profile import SYSTEM
from wheelsmith.untrusted.provenance import recorded_provenance

REQUEST_FILE = "request.json"  # the inner build's request, in its work directory


@dataclass(frozen=True, slots=True)
class Prepared:
    """Where a build will run and its plan (whose content key is the one the build gets)."""

    plan: BuildPlan
    engine: container.Engine | None = None  # None: the host
    image: str = ""
    info: dict[str, object] = field(default_factory=dict)


def prepare(request: BuildRequest,
            reporter: Reporter | None = None) -> Prepared:
    """Choose the runner and compute the plan: with a container, from the image's toolchain
    (nothing is installed on the host); on the host, as orchestrate.prepare does."""
    report = reporter or QuietReporter()
    engine = container.detect(request.runner)
    if engine is None:
        if request.runner == "auto":
            report.stage("runner", "host (no container engine works here)")
        return Prepared(orchestrate.prepare(request, report))
    report.stage("runner", f"{engine.name} ({engine.exe})")
    if request.toolchain == SYSTEM or request.configure_only:
        raise UsageError("a container build uses the image's pinned toolchain and builds a "
                         "wheel", hint="drop --toolchain system / --configure-only, or use "
                                       "--runner host")
    if parse_platform(request.platform) != host_machine():
        raise UsageError(f"--platform {request.platform}: a cross build runs on the host "
                         "runner (the image has no cross compiler)",
                         hint="use --runner host, or build in the image on a "
                              f"{parse_platform(request.platform)} machine")
    if request.target is not None:
        raise UsageError(f"--python {request.target} names an environment on this machine; a "
                         "container build is for the image's Python",
                         hint="use --runner host to build for that environment, or --python "
                              "X.Y to pick the image's Python")
    python = request.python_version or container.IMAGE_PYTHON
    profile = select.profile_named(request.toolchain)
    if profile.image_base is None:
        container.base_for(python)  # an image exists for it at all (a Debian release's)
    image, info = container.require_image(engine, profile, python)
    report.stage("image", f"{image} ({str(info.get('Id', '?'))[:12]})")
    plan = orchestrate.prepare(request, report, toolchain=container.toolchain_in(engine, image,
                                                                              profile))
    if plan.recipe.build_requires or plan.recipe.libraries:
        raise UsageError(f"{plan.recipe.name}'s recipe adds build requirements (build.requires) "
                         "or host libraries (build.libraries), and a container build runs in "
                         "the image's pinned packages with --network=none",
                         hint="build it with --runner host")
    return Prepared(plan, engine, image, info)


def build(request: BuildRequest, reporter: Reporter | None = None,
          prepared: Prepared | None = None) -> BuildResult:
    report = reporter or QuietReporter()
    ready = prepared or prepare(request, report)
    if ready.engine is None:
        return orchestrate.build(request, report, plan=ready.plan)
    return orchestrate.already_built(ready.plan, request, report) or _run(
        ready.engine, ready.image, ready.info, plan=ready.plan, request=request, report=report)


def _writable_dir(path: Path) -> Path:
    """A fresh directory the image's non-root builder may write to."""
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    path.chmod(0o777)
    return path


def _run(engine: container.Engine, image: str, info: dict[str, object], *, plan: BuildPlan,
         request: BuildRequest, report: Reporter) -> BuildResult:
    return orchestrate.exclusively(plan, request, report, lambda locked: _run_locked(
        engine, image, info, plan=plan, request=request, report=locked))


def _run_locked(engine: container.Engine, image: str, info: dict[str, object], *,
                plan: BuildPlan, request: BuildRequest, report: Reporter) -> BuildResult:
    cache = _local_cache_only(request)
    work = request.work_dir.resolve() / plan.slug()
    work.mkdir(parents=True, exist_ok=True)
    log_path = log_path_of(work)
    log_path.write_text(f"wheelsmith container build: {plan.slug()} in {image}\n")
    source = orchestrate.fetch_and_patch(plan, work, report, fresh=request.fresh)
    for path in [source, *source.rglob("*")]:  # the builder in the image writes build/ here
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | 0o777 if path.is_dir() else
                       path.stat().st_mode | 0o666)
    ccache = _container_ccache(cache)
    mounts = container.Mounts(project=locations.project_root(), source=source,
                              out=_writable_dir(work / "container-out"),
                              work=_writable_dir(work / "container-work"), ccache=ccache,
                              recipes=tuple(r.root for r in repos.repos() if r.user))
    timed = timings_for_image(work, mounts.work)
    (mounts.work / REQUEST_FILE).write_text(to_json(inner_request(plan, request, ccache,
                                                                 timed=timed)))
    runner_info = {"engine": engine.name, "image": image, "image_id": info.get("Id"),
                   "digest": info.get("Digest")}
    target = str(plan.archs) if plan.archs.archs else "pure Python"
    report.stage("compile", f"{plan.recipe.name} {plan.release.version} for {target} in "
                            f"{engine.name}, --network=none")
    with log_path.open("a", encoding="utf-8") as log_file:
        container.run_build(engine, image, mounts,
                            ["build-request", f"{container.WORK_IN_IMAGE}/{REQUEST_FILE}"],
                            env={RUNNER_INFO: json.dumps(runner_info)},
                            keep=request.keep_container, log_file=log_file, log_path=log_path,
                            on_line=progress_parser(report.progress, on_resume=lambda line:
                                                    report.stage("resuming", line)))
    return _check_and_place(plan, request, mounts.out, report, work)


def _local_cache_only(request: BuildRequest) -> compilecache.CompileCache | None:
    """Before anything is fetched: a container build has no network, so no farm and no TCP
    cache; the compile cache it may use (None: off)."""
    if request.compile_farm not in (None, "off") or request.compile_farm_required:
        raise UsageError("container builds run with --network=none, so a compile farm cannot "
                         "be reached", hint="use --runner host with --compile-farm")
    cache = compilecache.resolve(request.compile_cache, locations.cache_dir())
    if cache is not None and cache.needs_network:
        raise UsageError("container builds run with --network=none, so a TCP compile cache "
                         "cannot be reached", hint="use a local cache, or --runner host")
    return cache


def _container_ccache(cache: compilecache.CompileCache | None) -> Path | None:
    """The local compile cache's directory for container builds (its own: the image's
    compilers are not the host's), writable by the image's builder; None without a cache."""
    if cache is None:
        return None
    ccache = cache.local.parent / "ccache-container"
    ccache.mkdir(parents=True, exist_ok=True)
    ccache.chmod(0o777)
    return ccache


def timings_for_image(work: Path, container_work: Path) -> Path | None:
    """The earlier runs' seconds per object (the host's work directory keeps them), written
    for the build inside; its path there, or None when no earlier run was timed."""
    seconds = resume.earlier_object_seconds(work)
    if not seconds:
        return None
    atomic_write_text(container_work / resume.TIMINGS_FILE, json.dumps(seconds) + "\n")
    return Path(container.WORK_IN_IMAGE) / resume.TIMINGS_FILE


def inner_request(plan: BuildPlan, request: BuildRequest, ccache: Path | None, *,
                  timed: Path | None = None) -> BuildRequest:
    """The request the wheelsmith inside the image runs: the host's, with the plan's
    resolved choices and the container's paths. Every other field is carried as it is, so a
    field added to BuildRequest reaches the container build without a line here."""
    return replace(
        request, recipe=plan.recipe.name, version=plan.release.version,
        archs=plan.archs if plan.archs.archs else None, toolchain=plan.toolchain.name,
        python=Path(container.PYTHON_IN_IMAGE), target=None, python_version=None,
        out_dir=Path(container.OUT_IN_IMAGE), work_dir=Path(container.WORK_IN_IMAGE),
        prepared_source=Path(container.SOURCE_IN_IMAGE), rebuild=True,
        compile_cache=container.CCACHE_IN_IMAGE if ccache is not None else "off",
        runner="host", keep_container=False, earlier_object_seconds=timed)


def _check_and_place(plan: BuildPlan, request: BuildRequest, out: Path, report: Reporter,
                     work: Path) -> BuildResult:
    log_path = log_path_of(work)
    wheels = sorted(out.glob("*.whl"))
    if len(wheels) != 1:
        raise CompileError(f"the container build left {len(wheels)} wheels, expected one",
                           log_file=log_path)
    report.stage("verify", f"again on the host: {wheels[0].name}")
    broken = wheelfile.check(wheels[0])
    if broken:
        raise VerifyError(f"the container wrote {wheels[0].name}, which is not a valid wheel",
                          findings=broken, log_file=log_path)
    finish.check_built(plan, wheels[0], tools.cuobjdump_for(None, Path(sys.executable)), work)
    out_dir = request.out_dir.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    with scratch_dir(out_dir) as scratch:
        staged = scratch / wheels[0].name  # same filesystem as the output: link works
        shutil.copyfile(wheels[0], staged)
        final = finish.place(staged, out_dir, rebuild=request.rebuild)
    resume.finished(out.parent, keep_source=request.keep_work)
    inner = sorted((out.parent / "container-work").glob(f"*/{reproducible.RUN_FILE}"))
    run = reproducible.read_run(inner[0].parent) if inner else {}
    reproducible.write_run(out.parent, run)
    return BuildResult(wheel=final, provenance=recorded_provenance(final),
                       up_to_date=False, log=log_path, run=run)
