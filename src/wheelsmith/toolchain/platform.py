"""The CPU architecture a wheel is for (`--platform`): the machine's own by default; another
one is cross-compiled.

A cross build (aarch64 wheels on an x86-64 machine) keeps the profile's own venv for
everything that runs during the build (Python, setuptools, torch's build code, nvcc, which
writes device code for any CPU), and adds:

- the target's GNU compiler (`aarch64-linux-gnu-g++`, Debian's g++-aarch64-linux-gnu) for host
  code, also as nvcc's `-ccbin`;
- a *target site*: the profile's pins for the target platform (pip `--platform`, `--target`,
  no dependency resolution), whose torch and CUDA runtime libraries the extension links with
  and whose torch the smoke test imports (under qemu-user, foreign.py);
- the target's wheel tag (`_PYTHON_HOST_PLATFORM`) and extension suffix
  (`SETUPTOOLS_EXT_SUFFIX`).

torch's headers are the same for every CPU of one release, so the venv's serve.
"""

from __future__ import annotations

import hashlib
import json
import logging
import platform as _platform
import shutil
from pathlib import Path

from packaging.requirements import Requirement

from wheelsmith import cmd
from wheelsmith.errors import ToolchainError, UsageError, WheelsmithError
from wheelsmith.files import atomic_write_text, exclusive_lock
from wheelsmith.toolchain.profile import Profile, applies, pinned_version

log = logging.getLogger(__name__)

ALIASES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}
KNOWN = ("x86_64", "aarch64")
# torch's wheels for both CPUs are manylinux_2_28; the nvidia-* ones go down to 2_17
SITE_GLIBC = (2, 28)
MARKER = "wheelsmith-target-site.json"


def host_machine() -> str:
    machine = _platform.machine()
    return ALIASES.get(machine.lower(), machine)


def parse_platform(value: str | None) -> str:
    """`--platform`: aarch64 (or arm64), x86_64 (or amd64); None: this machine's."""
    if value is None:
        return host_machine()
    found = ALIASES.get(value.lower())
    if found is None:
        raise UsageError(f"unknown --platform '{value}'",
                         hint=f"one of {', '.join(KNOWN)} (arm64 and amd64 are read as those)")
    return found


def triple(machine: str) -> str:
    return f"{machine}-linux-gnu"


def pip_platforms(machine: str) -> list[str]:
    """pip's `--platform` values for the target site: manylinux_2_28 down to 2_17 (pip takes
    each tag literally, no older ones implied)."""
    major, newest = SITE_GLIBC
    tags = [f"manylinux_{major}_{minor}_{machine}" for minor in range(newest, 16, -1)]
    return [*tags, f"manylinux2014_{machine}"]


def cross_compiler(machine: str, name: str = "g++") -> Path:
    found = shutil.which(f"{triple(machine)}-{name}")
    if found is None:
        package = f"{name}-{triple(machine)}"
        raise ToolchainError(
            f"no {triple(machine)}-{name} here: a {machine} wheel is cross-compiled with the "
            f"{machine} GNU compiler",
            hint=f"install it (Debian: apt install {package}), or build on a {machine} machine")
    return Path(found)


def site_pins(profile: Profile, python_version: str, machine: str) -> list[str]:
    """The profile's requirements that apply on (Python, machine), as exact pins."""
    return [f"{r.name}=={pinned_version(r)}" for r in map(Requirement, profile.requirements)
            if applies(r, python_version, machine)]


def pip_target_options(machine: str, python_version: str) -> list[str]:
    """pip's options that choose wheels for CPython `python_version` on Linux `machine`
    (not this interpreter's): its manylinux tags, Python and ABI."""
    platforms = [arg for tag in pip_platforms(machine) for arg in ("--platform", tag)]
    return [*platforms, "--python-version", python_version, "--implementation", "cp",
            "--abi", "cp" + python_version.replace(".", "")]


def ensure_target_site(profile: Profile, pip_python: Path, python_version: str, machine: str,
                       cache: Path) -> Path:
    """The profile's pins for `machine` unpacked into one directory (made once, marker last)
    by the pip of `pip_python` (the profile's venv)."""
    pins = site_pins(profile, python_version, machine)
    key = hashlib.sha256(json.dumps([pins, profile.pip_index_args(), machine]).encode()
                         ).hexdigest()[:16]
    root = cache / "target-sites" / f"{profile.name}-py{python_version}-{machine}-{key}"
    if not (root / MARKER).is_file():
        with exclusive_lock(root.parent / f"{root.name}.lock"):
            if not (root / MARKER).is_file():
                _install_site(profile, pip_python, python_version, machine, pins=pins,
                              root=root)
    return root


def _install_site(profile: Profile, pip_python: Path, python_version: str, machine: str, *,
                  pins: list[str], root: Path) -> None:
    log.info("fetching the %s %s pins for %s into %s (once; several GB)", profile.name,
             python_version, machine, root)
    shutil.rmtree(root, ignore_errors=True)
    root.parent.mkdir(parents=True, exist_ok=True)
    requirements = root.parent / f"{root.name}.requirements.txt"
    requirements.write_text("\n".join(pins) + "\n")
    log_path = root.parent / f"{root.name}.log"
    argv: list[str | Path] = [
        pip_python, "-m", "pip", "install", "--no-input", "--no-deps", "--only-binary", ":all:",
        *pip_target_options(machine, python_version), *profile.pip_index_args(),
        "--target", root, "-r", requirements]
    try:
        with log_path.open("w") as log_file:
            cmd.run(argv, what=f"pip install of the {machine} pins", log_file=log_file,
                    log_path=log_path)
        link = root / "wheelsmith-link"  # -lcudart needs the unversioned name
        link.mkdir()
        for runtime in sorted(root.glob("nvidia/*/lib/libcudart.so.*"))[:1]:
            (link / "libcudart.so").symlink_to(runtime)
        if not (root / "torch" / "lib").is_dir():
            raise ToolchainError(f"the {machine} pins of {profile.name} hold no torch")
    except WheelsmithError as exc:
        shutil.rmtree(root, ignore_errors=True)
        raise ToolchainError(f"could not fetch the {machine} pins of {profile.name}: "
                             f"{exc.message}", hint=f"pins live in {profile.file}; does PyPI "
                             f"have {machine} wheels of each?", tail=exc.tail,
                             log_file=log_path) from exc
    atomic_write_text(root / MARKER, json.dumps({"machine": machine, "pins": pins}) + "\n")


def cross_env(machine: str, site: Path, nvcc: str, python_version: str) -> dict[str, str]:
    """What a package's build needs to cross-compile for `machine` (`nvcc`: the nvcc command
    the build would use, a compile cache's wrapper included)."""
    gxx, gcc = cross_compiler(machine), cross_compiler(machine, "gcc")
    cp = python_version.replace(".", "")
    return {
        "CC": str(gcc), "CXX": str(gxx), "LDSHARED": f"{gxx} -shared",
        # on the command line, where a compile cache sees it (NVCC_PREPEND_FLAGS it would not)
        "PYTORCH_NVCC": f"{nvcc} -ccbin {gxx}",
        # the target's libraries first: the venv's (x86-64) ones are skipped as incompatible
        "LDFLAGS": f"-L{site / 'wheelsmith-link'} -L{site / 'torch' / 'lib'}",
        "_PYTHON_HOST_PLATFORM": f"linux-{machine}",
        "SETUPTOOLS_EXT_SUFFIX": f".cpython-{cp}-{triple(machine)}.so",
    }
