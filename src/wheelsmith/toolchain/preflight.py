"""Pre-flight before hours of compiling: the arch set against nvcc's CUDA version (floors and
removals), `nvcc --list-gpu-code`, torch's own `_get_cuda_arch_flags` (run in the
toolchain's Python), and matching nvcc/torch CUDA majors. A build for another CPU is checked
for what it needs here (its compiler, qemu-user, the tools that make the root it imports in)
before anything is fetched for it: `cross_tools`, `cross_root`."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from pathlib import Path

from packaging.version import Version

from wheelsmith import cmd
from wheelsmith.arch import ArchSet
from wheelsmith.errors import CommandError, ToolchainError
from wheelsmith.files import atomic_write_text
from wheelsmith.toolchain.env import PROBE_SCRIPT, Toolchain, probe_python
from wheelsmith.toolchain.foreign import find_emulator, root_for
from wheelsmith.toolchain.platform import triple
from wheelsmith.toolchain.profile import SYSTEM
from wheelsmith.untrusted import tool_bounds


def preflight(toolchain: Toolchain, archs: ArchSet,
              min_cuda: tuple[tuple[str, Version], ...] = ()) -> None:
    """Refuse, before compiling, what would fail or silently mis-build later."""
    problems: list[str] = []
    nvcc = toolchain.nvcc_version
    if toolchain.torch_version is not None and nvcc.major != toolchain.torch_cuda.major:
        problems.append(f"CUDA major mismatch: nvcc is {nvcc}, torch {toolchain.torch_version} "
                        f"was built with CUDA {toolchain.torch_cuda}")
    problems += archs.toolkit_problems(Version(f"{nvcc.major}.{nvcc.minor}"))
    needed = dict(min_cuda)
    for arch in archs.archs:
        floor = needed.get(arch.capability)
        if floor is not None and nvcc < floor:
            problems.append(f"the recipe needs CUDA >= {floor} for arch {arch}, nvcc is {nvcc}")
    problems += _nvcc_arch_problems(toolchain, archs)
    if toolchain.torch_version is not None:  # a CUDA-only toolchain has no torch to ask
        problems += _torch_arch_problems(toolchain, archs)
    if problems:
        raise ToolchainError(
            f"the {toolchain.name} toolchain cannot build {archs}: " + "; ".join(problems),
            hint="pick other archs (--arch) or another toolchain (--toolchain)",
        )


def _nvcc_arch_problems(toolchain: Toolchain, archs: ArchSet) -> list[str]:
    if not archs.archs:
        return []
    try:
        result = cmd.run([toolchain.nvcc, "--list-gpu-code"], stream=False,
                         what=f"nvcc ({toolchain.nvcc})", bounds=tool_bounds())
    except CommandError:
        return []  # older nvcc without the flag: the version table above still applies
    listed = result.stdout.split()
    missing = [arch.sm for arch in archs.archs if arch.base_sm not in listed]
    if not missing:
        return []
    return [f"nvcc {toolchain.nvcc_version} cannot generate {', '.join(missing)} (it generates "
            f"{', '.join(sorted(listed, key=_arch_number))})"]


def _arch_number(sm: str) -> int:
    """`sm_75` < `sm_90` < `sm_100`: nvcc's list in compute-capability order."""
    digits = "".join(c for c in sm if c.isdigit())
    return int(digits) if digits else 0


def _torch_arch_problems(toolchain: Toolchain, archs: ArchSet) -> list[str]:
    """Ask the toolchain's torch whether it accepts the arch list. Importing torch takes
    seconds, so a profile venv remembers the answers (they cannot change for its pins)."""
    if not archs.archs:
        return []
    probe = hashlib.sha256(PROBE_SCRIPT.read_bytes()).hexdigest()[:12]  # a new probe re-asks
    memo = (toolchain.python.parent.parent / f"wheelsmith-arch-checks-{probe}.json"
            if toolchain.name != SYSTEM else None)
    known: dict[str, list[str]] = json.loads(memo.read_text()) if memo and memo.is_file() else {}
    wanted = archs.torch_arch_list()
    if wanted not in known:
        env = dict(os.environ, TORCH_CUDA_ARCH_LIST=wanted, CUDA_HOME=str(toolchain.cuda_home))
        info = probe_python(toolchain.python, env=env)
        known[wanted] = ([f"torch {toolchain.torch_version} refuses the arch list: "
                          f"{info.arch_error}"] if info.arch_error is not None else [])
        if memo is not None:
            with contextlib.suppress(OSError):  # a read-only toolchain (an image) just re-asks
                atomic_write_text(memo, json.dumps(known, indent=1, sort_keys=True) + "\n")
    return known[wanted]



def cross_tools(machine: str, *, compiles: bool) -> None:
    """What a build for `machine` needs on this machine whatever its Python: the target's GNU
    compilers (only for a recipe that compiles: a pure one needs none) and qemu-user, which
    runs its import test. Every one missing is named at once, before anything is fetched."""
    problems = []
    if compiles:
        problems += [f"no {triple(machine)}-{tool} (Debian: apt install "
                     f"{tool}-{triple(machine)})" for tool in ("g++", "gcc")
                     if shutil.which(f"{triple(machine)}-{tool}") is None]
    if find_emulator(machine) is None:
        problems.append(f"no qemu-{machine}-static to import-test the wheel under (Debian: apt "
                        "install qemu-user-static)")
    _refuse_cross(machine, problems)


def cross_root(machine: str, python_version: str, cache: Path) -> None:
    """The Debian root of `machine` with that Python the import test runs in: one is made
    already, or this machine can make it (debootstrap, dpkg-deb, a Debian archive)."""
    try:
        root = root_for(machine, python_version, cache)
    except ToolchainError as exc:
        _refuse_cross(machine, [exc.message], exc.hint)
        return
    if root.is_dir():
        return
    _refuse_cross(machine, [f"no {tool} to make the {machine} root to import-test in (Debian: "
                            f"apt install {package}; it runs as root)"
                            for tool, package in (("debootstrap", "debootstrap"),
                                                  ("dpkg-deb", "dpkg"))
                            if shutil.which(tool) is None])


def _refuse_cross(machine: str, problems: list[str], hint: str | None = None) -> None:
    if problems:
        raise ToolchainError(f"cannot build for {machine} here: {'; '.join(problems)}",
                             hint=hint or "install what is missing, or build on a machine of "
                                          "that CPU; nothing was fetched for it")
