"""Put a verified wheel into the user's own environment.

`wheelsmith install NAME --python ENV` is the role uv's `--torch-backend=auto` plays for torch
itself, for the kernels torch does not ship: it asks the environment for its Python, torch,
CUDA, glibc and GPU (toolchain/target.py), looks in the index channel that matches them for a
wheel its pip accepts and whose arch set has native kernels for the GPU, and pip-installs that
file with its sha256 pinned. When the channel has none, it builds one for the environment (the
same build as `wheelsmith build --python ENV`), publishes it if asked, and installs it. A wheel
it publishes must then be served at `--index`: read back there, or the next install would miss
it again. When another build of the same missing wheel published it first (with other bytes:
builds are not yet bit-reproducible), it installs the index's copy instead.

Every install is `--no-deps` (torch and the rest are the user's) and is followed by an import
of the package's modules in that environment.
"""

from __future__ import annotations

import tempfile
import urllib.parse
import urllib.request
from dataclasses import dataclass, replace
from pathlib import Path

from wheelsmith import cmd
from wheelsmith.arch import ArchSet
from wheelsmith.builder import plan
from wheelsmith.builder.request import BuildRequest, Reporter
from wheelsmith.deliver import check_imports, deliver
from wheelsmith.errors import SourceError, UntrustedDataError, UsageError
from wheelsmith.index.offers import Offer, channel_url, newest, offers, split_channel
from wheelsmith.index.publish import Published
from wheelsmith.recipes import repos
from wheelsmith.recipes.model import Recipe
from wheelsmith.toolchain.platform import host_machine
from wheelsmith.toolchain.target import Target

INDEX_COPY = "published by another build"


@dataclass(frozen=True, kw_only=True, slots=True)
class InstallRequest:
    recipe: str
    version: str | None
    python: Path
    index_url: str  # a wheelsmith index (its channels below it), or the target's channel in it
    archs: ArchSet | None  # default: the GPU's
    publish: bool  # publish a freshly built wheel
    publish_to: Path | None  # there; None: --index's directory (file://), else ./index
    build: BuildRequest  # how a missing wheel is built (out, work dir, jobs, ...)


@dataclass(frozen=True, slots=True)
class Installed:
    wheel: str
    source: str  # "index" | "built"
    channel_url: str
    imports: tuple[str, ...]
    published: str | None = None
    published_to: Path | None = None  # the index directory a built wheel was published to

    def said(self) -> str:
        """Where the installed wheel came from, as the last stage line says it."""
        if self.source == "index":
            return f"{self.wheel} (from the index{'; ' + self.published if self.published else ''})"
        if self.published_to is None:
            return (f"{self.wheel} (built; not published: without --publish the next install "
                    "of it builds it again)")
        return f"{self.wheel} (built; {self.published} to {self.published_to})"


def install(request: InstallRequest, target: Target, report: Reporter) -> Installed:
    directory = publish_dir(request)  # a --publish that names no directory it can know: refused
    recipe = repos.resolve_recipe(request.recipe, request.version)
    archs = archs_for(recipe, request.archs, target)
    base = channel_url(request.index_url, target)
    offer = newest(read_offers(base, recipe.name, target, archs, request.version))
    if offer is not None:
        report.stage("index", f"{offer.filename} (sha256 {offer.sha256[:12]}…)")
        install_offer(target, recipe.name, offer, base)
        return Installed(offer.filename, "index", base, check_imports(target, recipe))
    missing = (f"{base} has no {recipe.name} wheel for Python {target.version}"
               f"{f' on {target.machine}' if target.foreign else ''}"
               f"{f' with {archs} kernels' if archs.archs else ''}")
    if target.foreign:  # never a wheel for this machine's CPU into that environment
        raise UsageError(f"{missing}, and {target.python} runs on {target.machine}: this "
                         f"{host_machine()} machine builds {target.machine} wheels as cross "
                         "builds, named by Python version and profile",
                         hint=f"build and publish one: wheelsmith build {recipe.name}"
                              f"{f' --arch {archs}' if archs.archs else ''} "
                              f"{target.build_options()} --publish, then install again")
    report.stage("index", f"{missing}: building one" + (
        f", to publish to {directory}" if directory is not None else
        " (not published: --publish DIR publishes it)"))
    done = deliver(_build_request(request, archs, target), report,
                   publish_to=directory, install_into=target, keep_index_copy=True)
    assert done.result.wheel is not None
    if done.index_copy:
        assert directory is not None
        return install_index_copy(done.result.wheel.name, recipe, target,
                                  index=request.index_url, directory=directory, report=report)
    assert done.imports is not None
    if done.published is not None and directory is not None:
        check_served(done.published, done.result.wheel, directory, request.index_url, target)
    return Installed(done.result.wheel.name, "built", base, done.imports,
                     done.published.status if done.published else None,
                     directory if done.published is not None else None)


def read_offers(base: str, project: str, target: Target, archs: ArchSet | None = None,
                version: str | None = None) -> list[Offer]:
    """The channel's offers; nothing answering there is a usage error (the index is not
    started, or --index is wrong), while an answer that is not a page (an HTTP error, a
    redirect loop, an HTML page that links no files, too much, too slow) says what was
    answered and what to check."""
    try:
        return offers(base, project, target, archs.archs if archs else (), version=version)
    except UntrustedDataError:
        raise
    except SourceError as exc:
        raise UsageError(f"cannot read the index: {exc.message}",
                         hint="start it (wheelsmith serve), or point --index at it") from exc


def install_index_copy(filename: str, recipe: Recipe, target: Target, *, index: str,
                       directory: Path, report: Reporter) -> Installed:
    """Another build of the same missing wheel published `filename` first, with other bytes
    (builds are not yet bit-reproducible): install the index's copy, sha256 pinned, as every
    later install will, instead of failing after a full build."""
    base = channel_url(index, target)
    found = [o for o in read_offers(base, recipe.name, target) if o.filename == filename]
    if not found:
        raise UsageError(
            f"the index in {directory} already has {filename} ({INDEX_COPY}, other bytes than "
            f"this build's), but --index {index} does not serve it, so neither can be installed",
            hint="pass --publish DIR, the DIR that `wheelsmith serve --index DIR` serves")
    report.stage("publish", f"the index already has {filename} ({INDEX_COPY}); installing "
                            "its copy")
    install_offer(target, recipe.name, found[0], base)
    return Installed(filename, "index", base, check_imports(target, recipe), INDEX_COPY)


def publish_dir(request: InstallRequest) -> Path | None:
    """Where a built wheel is published: --publish DIR; without DIR the directory of a
    file:// --index. None: not asked to publish. A bare --publish with an --index over HTTP
    is refused: only its server knows the directory it serves."""
    if not request.publish:
        return None
    if request.publish_to is not None:
        return request.publish_to
    base, _ = split_channel(request.index_url)
    if base.startswith("file:"):
        return Path(urllib.request.url2pathname(urllib.parse.urlsplit(base).path))
    raise UsageError(f"--publish names no directory, and --index {base} is read over HTTP: only "
                     "its server knows the directory it serves",
                     hint="pass --publish DIR, the DIR that `wheelsmith serve --index DIR` serves "
                          "(or a file:// --index, which is published into)")


def check_served(published: Published, wheel: Path, directory: Path, index: str,
                 target: Target) -> None:
    """The channel `wheel` was published to, read back through `index`, must offer it: else
    --publish went to a directory --index does not serve, and every later install would miss
    it again."""
    channel = f"{split_channel(index)[0]}/{published.channel}/simple/"
    try:
        found = offers(channel, published.project, target, ())
        unreadable = ""
    except SourceError as exc:
        found, unreadable = [], f" (it cannot be read: {exc.message})"
    if any(offer.filename == published.filename for offer in found):
        return
    where = directory if directory.is_absolute() else f"{directory} ({directory.resolve()})"
    raise UsageError(
        f"{published.filename} is installed in {target.python} and published to {where}, but "
        f"--index {index} does not serve it{unreadable}: the next install will not find it",
        hint="pass --publish DIR, the DIR that `wheelsmith serve --index DIR` serves (this "
             f"wheel: wheelsmith publish {wheel} --index DIR)")


def archs_for(recipe: Recipe, requested: ArchSet | None, target: Target) -> ArchSet:
    """--arch, else the target's GPU; none for a pure recipe."""
    if recipe.kind != "pure" and requested is None:
        if target.gpu is None:
            raise UsageError(f"no GPU is visible to the torch in {target.python}, so there is "
                             "no arch to look for", hint="pass the arch of the GPU you will run"
                                                         " on, e.g. --arch 12.0")
        requested = ArchSet((target.gpu,))
    return plan.archs_for(recipe, requested)


def install_offer(target: Target, project: str, offer: Offer, base: str) -> None:
    """pip-install exactly that file from the channel, its sha256 pinned."""
    with tempfile.TemporaryDirectory(prefix="wheelsmith-install-") as scratch:
        requirements = Path(scratch) / "requirements.txt"
        requirements.write_text(f"{project}=={offer.version} --hash=sha256:{offer.sha256}\n")
        cmd.run([*target.pip(), "install", "--no-input", "--no-deps", "--force-reinstall",
                 "--require-hashes", "--index-url", base, "-r", requirements],
                what=f"pip install of {offer.filename} into {target.python}")


def _build_request(request: InstallRequest, archs: ArchSet, target: Target
                   ) -> BuildRequest:
    return replace(request.build, recipe=request.recipe, version=request.version,
                   archs=archs if archs.archs else None, python=target.python,
                   target=target.python)

