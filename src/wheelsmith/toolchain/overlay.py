"""A recipe's build requirements (`build.requires`): the packages its build imports that the
toolchain does not hold (vllm's setuptools-rust, a hatchling backend), each pinned, installed
once per toolchain venv and pin set into a directory of their own, which the build finds on
PYTHONPATH after the toolchain's site-packages: a recipe adds packages, it never replaces one of
the toolchain's, and the toolchain's venv stays as its profile pins it.

Installed like the toolchain (venv.install_pinned): exactly the pins, no dependency resolution
(`recipe new` writes the whole set), wheels only, from the index the machine's pip uses; made
under a lock in a temporary directory that becomes the real one only when complete.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from wheelsmith import cmd
from wheelsmith.errors import ToolchainError, UsageError, WheelsmithError
from wheelsmith.files import exclusive_lock
from wheelsmith.toolchain.env import Toolchain
from wheelsmith.toolchain.venv import pip_env

COMPLETE = ".wheelsmith-complete"  # written last: with it, the directory is whole


def applicable(pins: tuple[str, ...], toolchain: Toolchain) -> tuple[str, ...]:
    """The pins whose markers hold for the toolchain's Python and CPU."""
    where = {key: str(value) for key, value in default_environment().items()}
    where.update(python_version=toolchain.python_version, platform_machine=toolchain.platform)
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


def directory(pins: tuple[str, ...], toolchain: Toolchain, cache: Path) -> Path:
    """Where `pins` are installed for the toolchain's venv (its Python and CPU)."""
    key = hashlib.sha256("\n".join([str(toolchain.python), toolchain.platform,
                                    *sorted(pins)]).encode()).hexdigest()[:16]
    return cache / "build-requires" / f"{toolchain.name}-py{toolchain.python_version}-{key}"


def ensure(pins: tuple[str, ...], toolchain: Toolchain, cache: Path) -> Path | None:
    """The directory holding the recipe's build requirements for this toolchain, installed
    on first use; None when none applies."""
    wanted = applicable(pins, toolchain)
    if not wanted:
        return None
    root = directory(wanted, toolchain, cache)
    if not (root / COMPLETE).is_file():
        root.parent.mkdir(parents=True, exist_ok=True)
        with exclusive_lock(root.parent / f"{root.name}.lock"):
            if not (root / COMPLETE).is_file():
                _install(wanted, toolchain, root)
    return root


def _install(pins: tuple[str, ...], toolchain: Toolchain, root: Path) -> None:
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
                    what="pip install of the recipe's build requirements", log_file=log_file,
                    log_path=log_path, env=pip_env())
        (target / COMPLETE).write_text("\n".join(pins) + "\n")
        target.rename(root)
    except WheelsmithError as exc:
        raise ToolchainError(f"could not install the build requirements {', '.join(pins)}: "
                             f"{exc.message}", tail=exc.tail, log_file=log_path,
                             hint="each must be a wheel on the index pip uses, for "
                                  f"Python {toolchain.python_version} on "
                                  f"{toolchain.platform}") from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)
