"""Compile a prepared source tree into a wheel with the package's own build, offline.

The same entry point serves every runner: it runs the package's PEP 517 `build_wheel` hook
with the toolchain's Python (pypa/build's ProjectBuilder, no isolation), inside a network
namespace when the machine allows one (the environment's dead proxies cover the rest),
streams the output to the log file, reports ninja's `[N/M]` progress, and on failure
attaches the log tail and a diagnosis.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import logging
import re
import shutil
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from build import BuildBackendException, BuildException, ProjectBuilder

from wheelsmith import cmd, errors, locations
from wheelsmith.builder import gencode, resume, sample, stableabi
from wheelsmith.builder.compilesetup import CompileSetup, farm_done, read_guard_report
from wheelsmith.builder.configured import (
    configured,
    drop_stand_ins,
    prebuild_outcome,
    sample_failed,
)
from wheelsmith.builder.diagnose import (
    diagnose,
    disk_full,
    explain,
    first_error,
    in_tree,
)
from wheelsmith.builder.pathview import PathView
from wheelsmith.builder.plan import BuildPlan
from wheelsmith.builder.prebuild import PLAN_LINE, RESUME_LINE
from wheelsmith.builder.request import BuildRequest, BuildResult, Reporter
from wheelsmith.errors import (
    CompileError,
    WheelsmithError,
)
from wheelsmith.toolchain.env import Toolchain
from wheelsmith.untrusted.text import clip, python_error

log = logging.getLogger(__name__)


PROGRESS_RE = re.compile(r"^\s*\[(\d+)/(\d+)\]")
FAILED_LINE = "FAILED: "  # ninja, after the [N/M] line of a step that failed


ERROR_RE = re.compile(r"\berror\b|^\s*FAILED:|\bfatal\b|Traceback|Error:", re.IGNORECASE)


PIP_NOISE = ("subprocess-exited-with-error", "This error originates from a subprocess",
             "Failed to build", "failed-wheel-build", "ERROR: Failed building wheel")


FIRST_ERRORS = 12


TAIL_AFTER_ERRORS = 15


ProgressCallback = Callable[[int, int], None]


@functools.cache
def offline_prefix() -> tuple[str, ...]:
    """`unshare -rn` when this machine lets us create a network namespace, else nothing. The
    unshare found on wheelsmith's own PATH, by its full path: the build's PATH is not the one
    to look it up on."""
    unshare = shutil.which("unshare")
    if unshare is None:
        log.warning("unshare not found: the build's network is cut by proxy variables only")
        return ()
    try:
        cmd.run([unshare, "-rn", "true"], stream=False, what="unshare")
    except WheelsmithError:
        log.warning("cannot create a network namespace here: the build's network is cut by "
                    "proxy variables only")
        return ()
    return (unshare, "-rn")


def progress_parser(on_progress: ProgressCallback | None,
                    on_plan: Callable[[str], None] | None = None,
                    on_resume: Callable[[str], None] | None = None,
                    on_sample: Callable[[str], None] | None = None,
                    on_targets: Callable[[str], None] | None = None) -> Callable[[str], None]:
    """ninja's `[N/M]` to `on_progress`, less the steps that failed (ninja counts a step when
    it ends, then prints `FAILED:` for one that failed: a compile a time limit's drain stopped
    showed as done); the pre-build check's plan line to `on_plan`, its resume line (what an
    unfinished build left) to `on_resume`, a sample compile's start (`_C: add.o, add_kernel.o`:
    the extension and its objects) to `on_sample`, its line that a package's own CUDA targets
    were replaced (arch.rewrite) to `on_targets`."""
    failed = 0
    last: tuple[int, int] | None = None

    def on_line(line: str) -> None:
        nonlocal failed, last
        match = PROGRESS_RE.match(line)
        text = line.strip()
        if match and on_progress is not None:
            last = (int(match[1]), int(match[2]))
            on_progress(last[0] - failed, last[1])
        elif text.startswith(FAILED_LINE) and last is not None and on_progress is not None:
            failed += 1
            on_progress(last[0] - failed, last[1])
        elif on_plan is not None and text.startswith(PLAN_LINE):
            on_plan(text.removeprefix(PLAN_LINE))
        elif on_resume is not None and text.startswith(RESUME_LINE):
            on_resume(text.removeprefix(RESUME_LINE))
        elif on_sample is not None and text.startswith(sample.STARTED_LINE):
            on_sample(text.removeprefix(sample.STARTED_LINE).rpartition(" of ")[0])
        elif on_targets is not None and text.startswith(gencode.REWRITTEN):
            on_targets(text.removeprefix(gencode.REWRITTEN))

    return on_line


def first_errors(log_text: str) -> list[str]:
    """The first lines that look like a compiler or Python error, which pip's long tail
    usually pushes out of view."""
    found = []
    for line in log_text.splitlines():
        if ERROR_RE.search(line) and not any(noise in line for noise in PIP_NOISE):
            found.append(line.strip())
            if len(found) == FIRST_ERRORS:
                break
    return found


def compile_wheel(
    *,
    what: str,
    toolchain: Toolchain,
    source: Path,
    env: Mapping[str, str],
    dist: Path,
    log_path: Path,
    on_progress: ProgressCallback | None = None,
    on_plan: Callable[[str], None] | None = None,
    on_resume: Callable[[str], None] | None = None,
    on_sample: Callable[[str], None] | None = None,
    on_targets: Callable[[str], None] | None = None,
    isolate_network: bool = True,
    view: PathView | None = None,
    config_settings: Mapping[str, str | list[str]] | None = None,
) -> Path:
    """Build `source` into exactly one wheel in the empty directory `dist`.

    `isolate_network=False` (a TCP compile cache must be reachable) keeps the host network;
    the package's own setup still only sees proxies that lead nowhere. With a `view` the
    build runs in it (pathview.py): `env` must be the view's. `config_settings`: the PEP 517
    config settings of the backend's hook (a stable-ABI build's abi3 tag).
    """
    if dist.exists():
        shutil.rmtree(dist)
    dist.mkdir(parents=True)
    if view is not None:
        prefix = view.prefix(offline=bool(isolate_network and offline_prefix()))
    else:
        prefix = offline_prefix() if isolate_network else ()
    try:
        with log_path.open("a", encoding="utf-8") as log_file:
            def run_hook(argv: Sequence[str], cwd: str | None = None,
                         extra_environ: Mapping[str, str] | None = None) -> None:
                cmd.run([*prefix, *argv], cwd=Path(cwd) if cwd else source,
                        env={**env, **(extra_environ or {})}, log_file=log_file,
                        log_path=log_path, error=CompileError, what=f"the build of {what}",
                        on_line=progress_parser(on_progress, on_plan, on_resume,
                                                        on_sample, on_targets),
                        python_errors=False)  # the compiler's error first, below

            build_backend(source, toolchain.python, dist, run_hook, what=what, log_path=log_path,
                          config_settings=config_settings)
    except CompileError as exc:
        text = log_path.read_text(errors="replace")
        out_of_space(text, source, view, log_path, exc)
        exc.hint = explain(diagnose(f"{text}\n{exc.message}")) or (
            f"read the full log; the patched source is kept in {source}")
        if view is not None:  # the compiler's messages name the fixed paths
            exc.hint += f" (the log's {view.fixed_source} is {source})"
        compiler_said = first_error(text)
        if compiler_said is not None:
            exc.message += f"; the compiler's first error: {in_tree(compiler_said, source, view)}"
        elif (raised := python_error(text)) is not None:  # setup.py stopped before compiling
            exc.message += f": {clip(in_tree(raised, source, view), 300)}"
        first = first_errors(text)
        if first:
            exc.tail = [*first, "...", *exc.tail[-TAIL_AFTER_ERRORS:]]
        raise
    wheels = sorted(dist.glob("*.whl"))
    if len(wheels) != 1:
        raise CompileError(f"the build of {what} produced {len(wheels)} wheels, expected one",
                           log_file=log_path)
    return wheels[0]



def out_of_space(log_text: str, source: Path, view: PathView | None, log_path: Path,
                 failed: CompileError) -> None:
    """A compile that failed because a file system was full is a DiskFullError (exit 19:
    free space and run it again, it resumes), naming the file it could not write (where it
    really is, not the build's fixed view of it), never a compile failure to read up on."""
    found = disk_full(log_text)
    if found is None:
        return
    line, named = found
    where = (view.outside(named) if view is not None else named) if named else source
    full = errors.disk_full(OSError(errno.ENOSPC, line, str(where)), locations.cache_dir())
    assert full is not None
    full.tail, full.log_file = [line], log_path
    raise full from failed


def build_backend(source: Path, python: Path, dist: Path, run_hook: Callable[..., None], *,
                  what: str, log_path: Path,
                  config_settings: Mapping[str, str | list[str]] | None = None) -> None:
    """The PEP 517 `build_wheel` hook of `source`'s backend, run by the toolchain's Python
    (pypa/build's ProjectBuilder, no isolation: the toolchain env is the build env) through
    `run_hook`. Only that hook runs: no metadata pass (pip's `prepare_metadata_for_build_wheel`
    ran the package's setup.py once more) and never setuptools' `clean --all` (which deletes
    the build tree a rerun resumes from)."""
    try:
        with _warnings_to(log_path):
            ProjectBuilder(source, python_executable=str(python), runner=run_hook).build(
                "wheel", dist, config_settings=dict(config_settings or {}))
    except BuildBackendException as exc:
        if isinstance(exc.exception, WheelsmithError):  # the hook's command failed
            raise exc.exception from None
        raise CompileError(f"the build of {what} failed: {exc}", log_file=log_path) from None
    except BuildException as exc:  # pyproject.toml names no usable backend
        raise CompileError(f"the build of {what} cannot start: {exc}", log_file=log_path,
                           hint="check the package's pyproject.toml [build-system] table"
                           ) from None


@contextlib.contextmanager
def _warnings_to(log_path: Path) -> Iterator[None]:
    """The warnings the build frontend raises for the package's build (BuildBackendWarning:
    NumPy's, setuptools' deprecations) go to the build's log, and to -v's output."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        finally:
            with log_path.open("a", encoding="utf-8") as log_file:
                for warned in caught:
                    line = f"{warned.category.__name__}: {warned.message}"
                    log_file.write(f"{line}\n")
                    log.info("%s", line)


@dataclass(frozen=True, slots=True)
class Compiled:
    raw: Path
    farm: dict[str, Any] | None  # where its compiles ran, when a farm was asked for
    plans: tuple[str, ...]  # the pre-build check's plan lines
    object_seconds: dict[str, float]  # what each object took (resume.object_seconds)


def compile_package(plan: BuildPlan, request: BuildRequest, setup: CompileSetup, source: Path, *,
             work: Path, report: Reporter) -> Compiled | BuildResult:
    """The package's build; a BuildResult when it stopped after configuring."""
    log_path = log_path_of(work)
    plans: list[str] = []

    def on_plan(line: str) -> None:
        plans.append(line)
        name, _, detail = line.partition(": ")
        report.stage("compile", f"plan from {name}'s build.ninja: {detail}")

    what = f"{plan.recipe.name} {plan.release.version}"
    try:
        raw = compile_wheel(what=what, toolchain=plan.toolchain, source=source,
                            env={**setup.env, sample.SAMPLE: "1"} if request.check else setup.env,
                            dist=work / "dist", log_path=log_path, on_progress=report.progress,
                            on_plan=on_plan,
                            on_resume=lambda line: report.stage("resuming", line),
                            on_sample=lambda line: report.stage("compile", f"sample of {line}"),
                            on_targets=lambda line: report.stage("targets", line),
                            isolate_network=not setup.needs_network, view=setup.view,
                            config_settings=stableabi.config_settings(
                                source, plan.toolchain.python_version)
                            if plan.recipe.stable_abi else None)
    except CompileError as exc:
        farm_done(setup, report, failed=True)  # the compile's own error is the one to show
        try:
            sample_failed(exc, what, source, log_path)
            # a CMake build stops itself after its generate step (prebuild.CONFIGURED)
            records = prebuild_outcome(setup.guard, log_path, exc, plan.archs,
                                       tree=lambda text: in_tree(text, source, setup.view))
        except BaseException:
            if request.configure_only:
                drop_stand_ins(source / "build")
            raise
        return configured(records, plan=plan, request=request, source=source,
                          log_path=log_path, report=report)
    except BaseException:
        if setup.farm is not None:
            setup.farm.stop()
        raise
    farm = farm_done(setup, report)
    if request.configure_only:  # objects stood in for (prebuild.stand_in): keep nothing
        return configured(read_guard_report(setup.guard), plan=plan, request=request,
                          source=source, log_path=log_path, report=report)
    return Compiled(raw, farm, tuple(plans), resume.object_seconds(source))


def log_path_of(work: Path) -> Path:
    return work / "build.log"

