"""Packages added beside a toolchain's, never in place of one: a recipe's build requirements
(`build.requires`: what its build imports that the toolchain does not hold, vllm's
setuptools-rust, a hatchling backend), the wheels of its host libraries (`build.libraries`:
NVIDIA's NCCL or a CUDA header, builder/hostlibs.py) and a wheel's runtime requirements for its
smoke test (torch-linear-assignment imports scipy). Each set is pinned, installed once per
toolchain venv and pin set into a directory of its own, which the build or the smoke test
finds on PYTHONPATH (a host library by its path) beside the toolchain's site-packages; the
toolchain's venv stays as its profile pins it.

Installed like the toolchain (venv.install_pinned): exactly the pins, no dependency resolution
(`recipe new` writes the whole set), wheels only, from the index the machine's pip uses; made
under a lock in a temporary directory that becomes the real one only when complete.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from wheelsmith import cmd, wheelfile
from wheelsmith.errors import ToolchainError, UsageError, WheelsmithError
from wheelsmith.files import exclusive_lock
from wheelsmith.toolchain.env import Toolchain
from wheelsmith.toolchain.venv import pip_env
from wheelsmith.untrusted import clip, parse_json

COMPLETE = ".wheelsmith-complete"  # written last: with it, the directory is whole


def applicable(pins: tuple[str, ...], toolchain: Toolchain) -> tuple[str, ...]:
    """The pins whose markers hold for the toolchain's Python and CPU (no extra asked for)."""
    where = {key: str(value) for key, value in default_environment().items()}
    where.update(python_version=toolchain.python_version, platform_machine=toolchain.platform,
                 extra="")
    return tuple(pin for pin in pins if (marker := Requirement(pin).marker) is None
                 or marker.evaluate(where))


def pin_name(pin: str) -> str:
    """The canonical name a pin (`NAME==VERSION`, `NAME===VERSION`, markers) installs."""
    return canonicalize_name(Requirement(pin).name)


def check_adds_only(pins: tuple[str, ...], toolchain: Toolchain, recipe: Path) -> None:
    """A build requirement the toolchain holds already is refused: the build would import the
    toolchain's (it comes first on the path), so the pin would say what did not happen."""
    held = {pin_name(pin) for pin in toolchain.pins}
    clash = [pin for pin in applicable(pins, toolchain) if pin_name(pin) in held]
    if clash:
        raise UsageError(f"{recipe}: build.requires names {clash[0]}, which the toolchain "
                         f"{toolchain.name} holds already",
                         hint="a recipe adds packages beside the toolchain's, it never "
                              "replaces one: remove it from build.requires")


REQUIRES = "build-requires"  # the cache's folder of build and runtime requirements
LIBRARIES = "host-libraries"  # ... of host libraries' wheels


def directory(pins: tuple[str, ...], toolchain: Toolchain, cache: Path,
              folder: str = REQUIRES) -> Path:
    """Where `pins` are installed for the toolchain's venv (its Python and CPU)."""
    key = hashlib.sha256("\n".join([str(toolchain.python), toolchain.platform,
                                    *sorted(pins)]).encode()).hexdigest()[:16]
    return cache / folder / f"{toolchain.name}-py{toolchain.python_version}-{key}"


def ensure(pins: tuple[str, ...], toolchain: Toolchain, cache: Path,
           what: str = "the build requirements", folder: str = REQUIRES) -> Path | None:
    """The directory holding `pins` (`what` they are) for this toolchain, installed on first
    use (in the cache's `folder`); None when none applies."""
    wanted = applicable(pins, toolchain)
    if not wanted:
        return None
    root = directory(wanted, toolchain, cache, folder)
    if not (root / COMPLETE).is_file():
        root.parent.mkdir(parents=True, exist_ok=True)
        with exclusive_lock(root.parent / f"{root.name}.lock"):
            if not (root / COMPLETE).is_file():
                _install(wanted, toolchain, root, what)
    return root


def resolution(python: Path | str, args: Sequence[str | Path], *, ignore_installed: bool,
               what: str) -> list[tuple[str, str]]:
    """What pip of `python` would install for `args` (requirements or wheel files): its
    resolution against the index it uses, wheels only, nothing installed; (name, version) each.
    `ignore_installed`: resolve as into an empty environment, else beside what `python` holds."""
    with tempfile.TemporaryDirectory(prefix="wheelsmith-resolve-") as work:
        report = Path(work) / "report.json"
        cmd.run([python, "-m", "pip", "install", "--dry-run",
                 *(["--ignore-installed"] if ignore_installed else []),
                 "--only-binary", ":all:", "--no-input", "--quiet", "--report", report,
                 "--", *args], what=what, env=pip_env(), stream=False)
        return [(item["metadata"]["name"].text(), item["metadata"]["version"].text())
                for item in parse_json(report.read_bytes(), "pip's report")["install"].items()]


@dataclass(frozen=True, slots=True)
class LeftOut:
    """A runtime requirement the smoke test goes without, and why."""

    requirement: str
    why: str

    @property
    def name(self) -> str:
        return pin_name(self.requirement)

    def describe(self) -> str:
        return f"{self.requirement} ({self.why})"


@dataclass(frozen=True, slots=True)
class RuntimeNeeds:
    """What a wheel requires that the toolchain lacks: the pins pip resolved (`NAME==VERSION`,
    with what they need) and the requirements left out, each with why."""

    pins: tuple[str, ...] = ()
    left_out: tuple[LeftOut, ...] = ()

    def not_installed(self, why: str) -> RuntimeNeeds:
        """These needs where installing the pins failed (`why`): every pin left out too."""
        return RuntimeNeeds((), (*self.left_out, *(LeftOut(pin, why) for pin in self.pins)))


def runtime_needs(wheel: Path, toolchain: Toolchain, extra: tuple[str, ...] = ()
                  ) -> RuntimeNeeds:
    """The wheel's runtime requirements (Requires-Dist, and `extra`; markers evaluated for the
    toolchain) that the toolchain does not hold, with what they need, each `NAME==VERSION` as
    pip of the toolchain resolves them beside what its venv holds, wheels only, from the index
    pip uses; none (and no pip run) when the toolchain holds every one. A requirement on a
    package the toolchain holds is met by the toolchain's, as the build was. Left out, each
    with why: one by URL (`x @ https://...`, which a package's metadata could point anywhere:
    not fetched), and those pip cannot resolve (the others are resolved without them)."""
    held = {pin_name(pin) for pin in toolchain.pins}
    wanted = [req for req in applicable((*wheel_requirements(wheel), *extra), toolchain)
              if pin_name(req) not in held]
    by_url = tuple(LeftOut(req, "a requirement by URL is not fetched") for req in wanted
                   if Requirement(req).url is not None)
    wanted = [req for req in wanted if Requirement(req).url is None]
    if not wanted:
        return RuntimeNeeds((), by_url)
    found, unresolved = _resolvable(wanted, toolchain,
                                    f"pip's resolution of what {wheel.name} needs to import")
    return RuntimeNeeds(tuple(sorted(f"{canonicalize_name(n)}=={v}" for n, v in found
                                     if canonicalize_name(n) not in held)),
                        (*by_url, *unresolved))


def _resolvable(wanted: list[str], toolchain: Toolchain, what: str
                ) -> tuple[list[tuple[str, str]], tuple[LeftOut, ...]]:
    """pip's resolution of `wanted` beside the toolchain's packages; where that fails, of as
    many as resolve together (in their order), and each that does not with pip's reason."""
    try:
        return resolution(toolchain.python, wanted, ignore_installed=False, what=what), ()
    except WheelsmithError as exc:
        if len(wanted) == 1:
            return [], (LeftOut(wanted[0], pip_reason(exc)),)
    accepted: list[str] = []
    found: list[tuple[str, str]] = []
    left_out = []
    for requirement in wanted:
        try:
            found = resolution(toolchain.python, [*accepted, requirement],
                               ignore_installed=False, what=what)
            accepted.append(requirement)
        except WheelsmithError as exc:
            left_out.append(LeftOut(requirement, pip_reason(exc)))
    return found, tuple(left_out)


def pip_reason(error: WheelsmithError) -> str:
    """pip's first `ERROR:` line in `error`'s output (what it could not find), else its
    message."""
    said = next((line.strip().removeprefix("ERROR: ") for line in error.tail
                 if line.strip().startswith("ERROR: ")), error.message)
    return clip(said, 200)


def wheel_requirements(wheel: Path) -> tuple[str, ...]:
    """The wheel's Requires-Dist (one that is no requirement is left out: pip refuses it)."""
    found = []
    for value in wheelfile.headers(wheelfile.read_metadata(wheel)).get_all("Requires-Dist", []):
        try:
            found.append(str(Requirement(value)))
        except InvalidRequirement:
            continue
    return tuple(found)


def _install(pins: tuple[str, ...], toolchain: Toolchain, root: Path, what: str) -> None:
    shutil.rmtree(root, ignore_errors=True)
    log_path = root.parent / f"{root.name}.log"
    staging = Path(tempfile.mkdtemp(prefix=f".{root.name}-", dir=root.parent))
    requirements = staging / "requirements.txt"
    requirements.write_text("\n".join(pins) + "\n")
    target = staging / "site"
    try:
        with log_path.open("w") as log_file:
            cmd.run([toolchain.python, "-m", "pip", "install", "--no-input", "--no-deps",
                     "--only-binary", ":all:", "--target", target, "-r", requirements],
                    what=f"pip install of {what}", log_file=log_file,
                    log_path=log_path, env=pip_env())
        (target / COMPLETE).write_text("\n".join(pins) + "\n")
        target.rename(root)
    except WheelsmithError as exc:
        raise ToolchainError(f"could not install {what} {', '.join(pins)}: "
                             f"{exc.message}", tail=exc.tail, log_file=log_path,
                             hint="each must be a wheel on the index pip uses, for "
                                  f"Python {toolchain.python_version} on "
                                  f"{toolchain.platform}") from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)
