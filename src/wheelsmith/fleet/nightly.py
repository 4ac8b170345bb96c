"""Nightly: build every matrix cell that is missing or changed, never letting one failure stop
the rest, and publish only what passed.

Each verdict comes from evidence of the outcome, never from what a run expected. A cell is
skipped as done only when the index's ledger (`--index`) lists its wheel in its channel, not
yanked (verdict.py), or when every published index (`--published`, read over HTTP: a devpi
index, an `index export` on a static host) lists the wheel it makes: running nightly twice in
a row builds nothing the second time. What publish would refuse (verdict.py, with publish's own
rules) fails the cell before anything is compiled. A wheel an earlier run left in the output
directory is not a verdict: the build finds it there (compiling nothing) and it is published.
Each cell's outcome (built, skipped, failed with the error class and message) goes into the
report (report.py). Downloads are retried with backoff inside recipes/fetch.py; other failures
are final for the night.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from wheelsmith.arch import ArchSet
from wheelsmith.builder import compilefarm, runner
from wheelsmith.builder.finish import made_by
from wheelsmith.builder.plan import BuildPlan
from wheelsmith.builder.request import BuildRequest, BuildResult, QuietReporter, Reporter
from wheelsmith.deliver import deliver
from wheelsmith.errors import MissingToolkitError, OutOfTimeError, UsageError, WheelsmithError
from wheelsmith.fleet import verdict
from wheelsmith.fleet.matrix import Cell
from wheelsmith.index import ledger, remote
from wheelsmith.recipes.simple import PageFile

log = logging.getLogger(__name__)

BIG_RUNNER_CORES = 32  # where a `needs: farm` cell may build without a compile farm


@dataclass(slots=True)
class CellResult:
    cell: Cell
    status: str  # built | skipped | partial (out of time; resumes next run) | failed
    reason: str = ""
    seconds: float = 0.0
    wheel: str | None = None
    size: int | None = None
    archs_found: list[str] = field(default_factory=list)
    key: str | None = None
    published: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Settings:
    out_dir: Path
    work_dir: Path
    index_dir: Path
    publish: bool
    jobs: int | None = None
    compile_cache: str | None = None
    runner: str = "host"  # host | podman | docker | auto (runner.py)
    time_limit: float | None = None  # seconds a cell's build may run; then it is partial
    drain: float | None = None  # its last seconds start no compile (None: cmd.default_drain)
    published: tuple[str, ...] = ()  # simple API URLs with {channel}: what is there is built


class Published:
    """What the published indexes list, read over HTTP once per channel and project."""

    def __init__(self, templates: tuple[str, ...]) -> None:
        self.templates = templates
        self._pages: dict[str, dict[str, PageFile]] = {}

    def find(self, plan: BuildPlan) -> str | None:
        """Where the wheel `plan` makes is published (`NAME at URL`, each index), or None
        when an index lacks it."""
        found = []
        project = ledger.normalize(plan.recipe.name)
        for template in self.templates:
            simple = template.replace("{channel}", plan.toolchain.channel()).rstrip("/") + "/"
            page = f"{simple}{project}/"
            if page not in self._pages:  # builders hold no credentials: public reads
                self._pages[page] = remote.project_files(simple, project, None)
            name = next((n for n in self._pages[page] if made_by(n, plan)), None)
            if name is None:
                return None
            found.append(f"{name} at {simple}")
        return "; ".join(found) or None


def request_for(cell: Cell, settings: Settings) -> BuildRequest:
    return BuildRequest(
        recipe=cell.recipe, version=cell.version,
        archs=ArchSet.parse([cell.archs]) if cell.archs else None,
        toolchain=cell.toolchain, python_version=cell.python,
        out_dir=settings.out_dir, work_dir=settings.work_dir, jobs=settings.jobs,
        compile_cache=settings.compile_cache, runner=settings.runner, platform=cell.platform)


def unmet_needs(cell: Cell) -> str | None:
    """Why this runner cannot build the cell (matrix.yaml's `needs`), or None."""
    if cell.needs != "farm":
        return None
    farm = os.environ.get(compilefarm.ENV, "")
    cores = len(os.sched_getaffinity(0))
    if (farm and farm != "off") or cores >= BIG_RUNNER_CORES:
        return None
    return (f"needs a compile farm or a big runner: ${compilefarm.ENV} is not set and this "
            f"runner has {cores} cores (fewer than {BIG_RUNNER_CORES})")


def run_cell(cell: Cell, settings: Settings, reporter: Reporter,
             published: Published | None = None) -> CellResult:
    started = time.monotonic()
    unmet = unmet_needs(cell)
    if unmet is not None:  # a precondition of this runner, like a missing toolkit
        return CellResult(cell, "skipped", unmet)
    try:
        request = request_for(cell, settings)
        prepared = runner.prepare(request, reporter)  # a container's plan: the image's toolchain
        plan = prepared.plan
        _check_python(cell, plan.toolchain.python_version, settings.runner)
        held = verdict.published_wheel(cell, plan, settings.index_dir)  # or what it refuses
        if held is not None:
            return CellResult(cell, "skipped", f"already published: {held.filename} in channel "
                              f"{held.channel} of {ledger.at(settings.index_dir)}",
                              key=plan.key, wheel=held.filename, published="already published")
        where = published.find(plan) if published else None
        if where is not None:
            return CellResult(cell, "skipped", f"already published: {where}", key=plan.key)
        return _build_cell(cell, settings, request, prepared=prepared, reporter=reporter,
                           started=started)
    except MissingToolkitError as error:  # a precondition of this runner, not a failure
        return CellResult(cell, "skipped", error.message, time.monotonic() - started)
    except WheelsmithError as error:
        log.warning("cell %s failed: %s", cell.id, error.message)
        reason = f"exit {error.exit_code}: {error.message}"  # the code names the kind (docs/cli.md)
        if error.hint:
            reason += f" (hint: {error.hint.splitlines()[0]})"
        return CellResult(cell, "failed", reason, time.monotonic() - started)


def _build_cell(cell: Cell, settings: Settings, request: BuildRequest, *,
                prepared: runner.Prepared, reporter: Reporter, started: float) -> CellResult:
    """Build (a wheel of this key in --out is taken as it is), publish; out of its time
    budget, a cell is partial and keeps what it finished."""
    try:
        done = deliver(request, reporter, prepared=prepared, time_limit=settings.time_limit,
                       drain=settings.drain,
                       publish_to=settings.index_dir if settings.publish else None,
                       advice=lambda refusal: verdict.matrix_advice(cell, refusal))
    except OutOfTimeError as error:
        log.warning("cell %s ran out of its time: partial (%s)", cell.id, error.progress)
        return CellResult(cell, "partial", f"partial ({error.progress}), resumes next run",
                          round(time.monotonic() - started, 1), key=prepared.plan.key)
    outcome = _built(cell, done.result, time.monotonic() - started)
    outcome.published = done.published.status if done.published else None
    if done.result.up_to_date:
        outcome.reason = (f"its wheel was in {settings.out_dir} (an earlier run built it), "
                          + ("published now" if done.published else "not published"))
    return outcome


def _check_python(cell: Cell, toolchain_python: str, where: str) -> None:
    """A cell builds for its own Python, never silently for the one an image happens to have."""
    if toolchain_python != cell.python:
        raise UsageError(f"{cell.id} is for Python {cell.python}, but its toolchain (--runner "
                         f"{where}) has Python {toolchain_python}",
                         hint="exclude that Python from container builds, or use --runner host")


def _built(cell: Cell, result: BuildResult, seconds: float) -> CellResult:
    assert result.wheel is not None
    found = sorted({sm for d in result.provenance.get("device_code", []) for sm in d["sass"]})
    return CellResult(cell, "built", "", round(seconds, 1), wheel=result.wheel.name,
                      size=result.wheel.stat().st_size, archs_found=found,
                      key=result.provenance.get("key"))


def run(cells: Iterable[Cell], settings: Settings,
        reporter: Reporter | None = None) -> list[CellResult]:
    report = reporter or QuietReporter()
    published = Published(settings.published) if settings.published else None
    results = []
    for cell in cells:
        report.stage("cell", cell.id)
        results.append(run_cell(cell, settings, report, published))
        report.stage(results[-1].status, results[-1].reason or results[-1].wheel or cell.id)
    return results
