"""Put a verified wheel into the user's own environment.

`wheelsmith install NAME --python ENV` is the role uv's `--torch-backend=auto` plays for torch
itself, for the kernels torch does not ship: it asks the environment for its Python, torch,
CUDA, glibc and GPU (target.py), looks in the index channel that matches them for a wheel its
pip accepts and whose arch set has native kernels for the GPU, and pip-installs that file with
its sha256 pinned. When the channel has none, it builds one for the environment (the same
build as `wheelsmith build --python ENV`), publishes it if asked, and installs it.

Every install is `--no-deps` (torch and the rest are the user's) and is followed by an import
of the package's modules in that environment.
"""

from __future__ import annotations

import json
import logging
import tempfile
import urllib.parse
from dataclasses import dataclass, replace
from pathlib import Path

from packaging.version import Version

from wheelsmith import cmd, doctor, pipeline, publish, runner
from wheelsmith.arch import ArchSet
from wheelsmith.errors import SourceError, UsageError, VerifyError
from wheelsmith.fetch import simple_page
from wheelsmith.recipe import Recipe
from wheelsmith.smoke import SMOKE_SCRIPT
from wheelsmith.target import Target
from wheelsmith.wheelfile import WheelName

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Offer:
    """A wheel in an index channel that the target accepts."""

    filename: str
    url: str
    sha256: str
    version: Version


@dataclass(frozen=True, kw_only=True, slots=True)
class InstallRequest:
    recipe: str
    version: str | None
    python: Path
    index_url: str  # base URL of a wheelsmith index (its channels below it)
    archs: ArchSet | None  # default: the GPU's
    publish_to: Path | None  # an index directory a freshly built wheel is published to
    build: pipeline.BuildRequest  # how a missing wheel is built (out, work dir, jobs, ...)


@dataclass(frozen=True, slots=True)
class Installed:
    wheel: str
    source: str  # "index" | "built"
    channel_url: str
    imports: tuple[str, ...]
    published: str | None = None


def install(request: InstallRequest, target: Target, report: pipeline.Reporter) -> Installed:
    recipe = pipeline.resolve_recipe(request.recipe)
    archs = archs_for(recipe, request.archs, target)
    base = f"{request.index_url.rstrip('/')}/{target.channel}/simple/"
    offer = find_offer(base, recipe.name, target, archs, request.version)
    if offer is not None:
        report.stage("index", f"{offer.filename} (sha256 {offer.sha256[:12]}…)")
        install_offer(target, recipe.name, offer, base)
        return Installed(offer.filename, "index", base, check_imports(target, recipe))
    report.stage("index", f"{base} has no {recipe.name} wheel for Python {target.version}"
                          f"{f' with {archs} kernels' if archs.archs else ''}: building one")
    built = runner.build(_build_request(request, archs, target), report)
    assert built.wheel is not None
    published = None
    if request.publish_to is not None:
        done = publish.publish(built.wheel, request.publish_to)
        report.stage("publish", f"{done.status}: {request.publish_to}/{done.page}")
        published = done.status
    install_file(target, built.wheel)
    return Installed(built.wheel.name, "built", base, check_imports(target, recipe), published)


def archs_for(recipe: Recipe, requested: ArchSet | None, target: Target) -> ArchSet:
    """--arch, else the target's GPU; none for a pure recipe."""
    if recipe.kind != "pure" and requested is None:
        if target.gpu is None:
            raise UsageError(f"no GPU is visible to the torch in {target.python}, so there is "
                             "no arch to look for", hint="pass the arch of the GPU you will run"
                                                         " on, e.g. --arch 12.0")
        requested = ArchSet((target.gpu,))
    return pipeline.archs_for(recipe, requested)


def find_offer(base: str, project: str, target: Target, archs: ArchSet,
               version: str | None) -> Offer | None:
    """The newest wheel of `project` in the channel at `base` that the target's pip accepts
    and that has native kernels for every arch in `archs`; None when there is none."""
    try:
        page_url, page = simple_page(project, base, missing_ok=True)
    except SourceError as exc:
        raise UsageError(f"cannot read the index: {exc.message}",
                         hint="start it (wheelsmith serve), or point --index at it") from exc
    if page is None:
        return None
    offers = []
    for item in page.get("files", []):
        name = item["filename"]
        if not name.endswith(".whl") or item.get("yanked") or not target.accepts(name):
            continue
        wheel_version = WheelName.parse(name).version
        if version is not None and wheel_version.public != Version(version).public:
            continue
        if all(doctor.serves(name, arch) for arch in archs.archs):
            offers.append(Offer(name, urllib.parse.urljoin(page_url, item["url"]),
                                item["hashes"]["sha256"], wheel_version))
    return max(offers, key=lambda o: o.version, default=None)


def install_offer(target: Target, project: str, offer: Offer, base: str) -> None:
    """pip-install exactly that file from the channel, its sha256 pinned."""
    with tempfile.TemporaryDirectory(prefix="wheelsmith-install-") as scratch:
        requirements = Path(scratch) / "requirements.txt"
        requirements.write_text(f"{project}=={offer.version} --hash=sha256:{offer.sha256}\n")
        cmd.run([*target.pip(), "install", "--no-input", "--no-deps", "--force-reinstall",
                 "--require-hashes", "--index-url", base, "-r", requirements],
                what=f"pip install of {offer.filename} into {target.python}")


def install_file(target: Target, wheel: Path) -> None:
    cmd.run([*target.pip(), "install", "--no-input", "--no-deps", "--force-reinstall", wheel],
            what=f"pip install of {wheel.name} into {target.python}")


def check_imports(target: Target, recipe: Recipe) -> tuple[str, ...]:
    """Import the package's modules in the target environment (torch first, as it would)."""
    spec = {"imports": list(recipe.smoke_imports), "gpu": None, "archs": "", "sass": []}
    result = cmd.run([target.python, SMOKE_SCRIPT, json.dumps(spec)], stream=False,
                     error=VerifyError, what=f"import of {recipe.name} in {target.python}")
    return tuple(line.removeprefix("imported ") for line in result.stdout.splitlines()
                 if line.startswith("imported "))


def _build_request(request: InstallRequest, archs: ArchSet, target: Target
                   ) -> pipeline.BuildRequest:
    return replace(request.build, recipe=request.recipe, version=request.version,
                   archs=archs if archs.archs else None, python=target.python,
                   target=target.python)
