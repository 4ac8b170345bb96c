"""One flow from a request to a usable wheel: build (verified) -> publish -> install -> import.

`wheelsmith build`, `wheelsmith install` (when the channel has no wheel) and nightly all go
through `deliver`; each asks for the steps it wants. Installs are `--no-deps` (torch and the
rest are the user's) and are followed by an import of the package's modules there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from wheelsmith import cmd
from wheelsmith.builder import resume, runner
from wheelsmith.builder.request import BuildRequest, BuildResult, Reporter
from wheelsmith.builder.runner import Prepared
from wheelsmith.builder.smoke import SMOKE_SCRIPT
from wheelsmith.errors import FileConflictError, OutOfTimeError, VerifyError
from wheelsmith.index.publish import Published, publish
from wheelsmith.index.rules import Advice
from wheelsmith.recipes.model import Recipe
from wheelsmith.recipes.repos import resolve_recipe
from wheelsmith.toolchain.target import Target
from wheelsmith.untrusted import LONG, tool_bounds


def install_file(target: Target, wheel: Path) -> None:
    cmd.run([*target.pip(), "install", "--no-input", "--no-deps", "--force-reinstall", wheel],
            what=f"pip install of {wheel.name} into {target.python}")


def out_of_time(reached: cmd.TimeLimitReached, request: BuildRequest,
                prepared: Prepared | None) -> OutOfTimeError:
    if prepared is None:
        return OutOfTimeError(f"{reached} before the build was planned",
                              progress="stopped before compiling",
                              hint="run it again with a longer --time-limit")
    work = request.work_dir.resolve() / prepared.plan.slug()
    done = resume.progress_text(work)
    return OutOfTimeError(f"{reached}: partial ({done}), kept in {work}", progress=done,
                          hint="run the same build again: it resumes from there "
                               "(--fresh starts over)")


def check_imports(target: Target, recipe: Recipe) -> tuple[str, ...]:
    """Import the package's modules in the target environment (torch first, as it would)."""
    spec = {"imports": list(recipe.smoke_imports), "gpu": None, "archs": "", "sass": []}
    result = cmd.run([target.python, SMOKE_SCRIPT, json.dumps(spec)], stream=False,
                     error=VerifyError, what=f"import of {recipe.name} in {target.python}",
                     bounds=tool_bounds(LONG))
    return tuple(line.removeprefix("imported ") for line in result.stdout.splitlines()
                 if line.startswith("imported "))



@dataclass(frozen=True, slots=True)
class Delivered:
    result: BuildResult  # its wheel is None after --configure-only
    published: Published | None = None  # None: not asked to publish
    imports: tuple[str, ...] | None = None  # None: not asked to install
    # publishing met the index's own copy of this filename, with other bytes (keep_index_copy):
    # neither published nor installed; the caller installs the index's copy
    index_copy: bool = False


def deliver(request: BuildRequest, report: Reporter, *, prepared: Prepared | None = None,
            publish_to: Path | None = None, install_into: Target | None = None,
            keep_index_copy: bool = False, time_limit: float | None = None,
            drain: float | None = None, advice: Advice | None = None) -> Delivered:
    """Build (verified, on the runner the request names), then publish the wheel to the index
    at `publish_to` and install it into `install_into`, as asked. A build that made no wheel
    (configure-only) goes no further. A build still running after `time_limit` seconds is
    stopped (OutOfTimeError) and keeps what it finished for the next run; in its last
    `drain` seconds (default: cmd.default_drain) no compile starts, and those in flight may
    finish.

    Publishing refuses a filename the index holds with other bytes (builds are not yet
    bit-reproducible, so two builds of one missing wheel differ): with `keep_index_copy` the
    flow stops there instead, `index_copy` set, for the caller to install the index's copy.
    `advice` words the hint of a refusal for the caller's users (default: publish's options)."""
    ready = prepared
    try:
        with cmd.time_limit(time_limit, drain=drain):
            ready = ready or runner.prepare(request, report)
            result = runner.build(request, report, ready)
    except cmd.TimeLimitReached as reached:
        raise out_of_time(reached, request, ready) from None
    if result.wheel is None:
        return Delivered(result)
    published = None
    if publish_to is not None:
        try:
            published = publish(result.wheel, publish_to, advice=advice)
        except FileConflictError:
            if not keep_index_copy:
                raise
            return Delivered(result, index_copy=True)
        report.stage("publish", f"{published.status}: {publish_to}/{published.page}"
                     + (f"; {published.spread()}" if published.spread() else ""))
    imports = None
    if install_into is not None:
        report.stage("install", f"{result.wheel.name} into {install_into.python}")
        install_file(install_into, result.wheel)
        imports = check_imports(install_into, resolve_recipe(request.recipe, request.version))
    return Delivered(result, published, imports)
