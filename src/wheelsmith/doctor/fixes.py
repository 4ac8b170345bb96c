"""Doctor's fixes: a `pip install` from the environment's channel for what it offers, a
`wheelsmith build ... --publish` for what it lacks. An index that cannot be read leaves the pip
line unchecked, and the line says so. A fast-path package that is installed but does not import
because a module it imports is missing (fla without einops) gets that dependency installed, not
itself again."""

from __future__ import annotations

import logging
import shlex
import urllib.parse
import urllib.request

from wheelsmith.arch import Arch
from wheelsmith.errors import SourceError, WheelsmithError
from wheelsmith.index.offers import offers, split_channel
from wheelsmith.recipes.repos import resolve_recipe
from wheelsmith.toolchain.target import Target
from wheelsmith.untrusted.text import one_line

log = logging.getLogger(__name__)
INDEX_TIMEOUT_S = 5

# the distribution that provides a module, for the dependencies of the fast-path packages whose
# import may be missing (a module not here: the fix names the module and says so)
DISTRIBUTIONS = {"einops": "einops", "triton": "triton", "packaging": "packaging",
                 "ninja": "ninja", "transformers": "transformers", "yaml": "pyyaml"}


def dependency_lines(dependencies: dict[str, str]) -> list[str]:
    """`pip install DIST` for each missing dependency (-> the fast-path module needing it)."""
    lines = []
    for dependency, module in dependencies.items():
        dist = DISTRIBUTIONS.get(dependency)
        if dist is not None:
            lines.append(f"pip install {shlex.quote(dist)}   # {one_line(module)} imports "
                         f"{one_line(dependency)}, which is not installed")
        else:
            lines.append(f"pip install {shlex.quote(dependency)}   # '{one_line(dependency)}' "
                         f"is the module named by {one_line(module)}'s import error; its "
                         "distribution may have another name")
    return lines


def fix_lines(names: list[str], base: str, arch: Arch, target: Target, python: str, *,
              after: str | None = None) -> list[str]:
    """A pip line for what the channel at `base` has for this Python and arch (first), a build
    line for what it lacks (`after`: to run once that is installed)."""
    offered: list[str] = []
    builds: list[str] = []
    readable = True
    for name in dict.fromkeys(name for entry in names for name in entry.split()):
        offered_here = _index_has(name, base, arch, target) if readable else None
        readable = offered_here is not None
        if offered_here is False:
            builds.append(_build_line(name, base, arch, target, python, after=after))
        else:
            offered.append(name)
    if not offered:
        return builds
    unchecked = "" if readable else "   # not checked: the index could not be read"
    return [f"pip install --index-url {shlex.quote(base)} --no-deps --force-reinstall "
            f"{' '.join(map(shlex.quote, offered))}{unchecked}", *builds]


def _build_line(name: str, base: str, arch: Arch, target: Target, python: str, *,
                after: str | None) -> str:
    """`wheelsmith build` for what the channel at `base` lacks, published into that index:
    `--arch` only for an extension (build refuses it for a pure recipe)."""
    pure = _is_pure(name)
    options = target.build_options() if target.foreign else f"--python {shlex.quote(python)}"
    index, where = _index_dir(base)
    return (f"wheelsmith build {shlex.quote(name)}{'' if pure else f' --arch {arch}'} {options} "
            f"--publish --index {index}   # {f'once {after} is in, ' if after else ''}the index "
            f"has no {name} wheel for Python {target.version}"
            f"{f' on {target.machine}' if target.foreign else ''}"
            f"{'' if pure else f' with {arch.sm} kernels'}{where}")


def _is_pure(name: str) -> bool:
    """Whether the recipe called `name` is pure Python (no recipe, or a broken one: not
    known to be, and its build line keeps --arch)."""
    try:
        return resolve_recipe(name).kind == "pure"
    except WheelsmithError:
        return False


def _index_dir(base: str) -> tuple[str, str]:
    """The `--index` directory that publishes into the index of the channel URL `base`, and
    what to say about it: a file:// index is that directory; one over HTTP is served from a
    directory that only its server knows, named DIR in the line."""
    root = split_channel(base)[0]
    parts = urllib.parse.urlsplit(root)
    if parts.scheme == "file":
        return shlex.quote(urllib.request.url2pathname(parts.path)), ""
    return "DIR", f"; DIR: the index directory that `wheelsmith serve` serves as {root}"


def _index_has(project: str, base: str, arch: Arch, target: Target) -> bool | None:
    """Whether the channel at `base` offers `target` a wheel of `project` with native kernels
    for `arch` (or a pure one); None when the index cannot be read."""
    try:
        return bool(offers(base, project, target, (arch,), timeout=INDEX_TIMEOUT_S))
    except SourceError as exc:
        log.info("the fix is not checked against the index: %s", exc)
        return None
