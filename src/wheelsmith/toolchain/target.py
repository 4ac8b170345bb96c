"""The user's environment as an input: what a Python environment will load, and the toolchain
profile that builds for it.

An extension wheel loads only into the Python it was built for (cpXY), with the torch minor it
was compiled against, the CUDA major of that torch, and a glibc at least as new as its floor.
The probe (resources/probe.py, shared with the toolchain and doctor) asks the environment;
`Target` answers which wheel files it accepts (pip's own tag rules, from `packaging.tags`), which
index channel is its own, and which profile builds for it.
"""

from __future__ import annotations

import logging
import re
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from shlex import quote
from typing import Any

from packaging.tags import Tag, compatible_tags, cpython_tags, parse_tag
from packaging.version import Version

from wheelsmith import cmd
from wheelsmith.arch import Arch, ArchParseError, ArchSet
from wheelsmith.errors import UsageError
from wheelsmith.toolchain.env import PROBE_BOUNDS, Gpu, ProbeAnswer, probe_python
from wheelsmith.toolchain.platform import ALIASES, host_machine
from wheelsmith.untrusted import Node
from wheelsmith.wheelfile import WheelName

log = logging.getLogger(__name__)


# manylinux tags of the PEP 600 era that pip still maps to a glibc version (PEP 599/571/513)
_LEGACY = {(2, 17): "manylinux2014", (2, 12): "manylinux2010", (2, 5): "manylinux1"}


def channel_name(torch: Version, cuda: Version) -> str:
    """`cu130-torch2.14`: the index channel (one per CUDA x torch minor, all Pythons)."""
    return f"cu{cuda.major}{cuda.minor}-torch{torch.major}.{torch.minor}"


@dataclass(frozen=True, kw_only=True, slots=True)
class Target:
    """A Python environment wheels are built for or installed into, as its probe saw it."""

    python: Path  # the interpreter as the user named it
    version: str  # "3.12"
    torch: Version | None  # torch.__version__, with its local label: 2.11.0+cu128
    torch_cuda: Version | None
    torch_error: str | None
    glibc: tuple[int, int] | None
    machine: str
    gpu: Arch | None
    has_pip: bool
    # the installed torch distribution's version: 2.8.0 for PyPI's wheel (whose
    # torch.__version__ is 2.8.0+cu128), 2.8.0+cu126 from a per-CUDA index; None: unknown
    torch_dist: Version | None = None

    @classmethod
    def from_probe(cls, python: Path, info: ProbeAnswer | Mapping[str, Any]) -> Target:
        """The target of a probe's answer (a mapping is parsed as one first)."""
        answer = info if isinstance(info, ProbeAnswer) else ProbeAnswer.parse(
            Node(dict(info), f"the probe of {python}"))
        major, _, minor = (answer.glibc or "").partition(".")
        return cls(python=python, version=answer.python, torch=answer.torch_full,
                   torch_cuda=answer.torch_cuda, torch_error=answer.torch_error,
                   glibc=(int(major), int(minor)) if major.isdigit() and minor.isdigit()
                   else None, machine=_machine(answer.machine), gpu=_gpu_arch(answer.gpu),
                   has_pip=answer.pip, torch_dist=answer.torch_dist)

    def cuda_torch(self) -> tuple[Version, Version]:
        """Its torch and torch's CUDA; an error naming the environment when it has no CUDA
        torch (extension wheels are built against one)."""
        if self.torch is None:
            raise UsageError(f"{self.python} has no working torch ({self.torch_error})",
                             hint="install the torch you train with into that environment "
                                  "first; wheels are built to match it")
        if self.torch_cuda is None:
            raise UsageError(f"the torch in {self.python} is a CPU-only build ({self.torch})",
                             hint="a CUDA extension needs a CUDA build of torch: install one "
                                  "(e.g. from PyPI, or a per-CUDA PyTorch index)")
        return self.torch, self.torch_cuda

    @property
    def channel(self) -> str:
        return channel_name(*self.cuda_torch())

    @property
    def foreign(self) -> bool:
        """Whether its CPU is not this machine's: wheels for it are cross builds."""
        return self.machine != host_machine()

    def build_options(self) -> str:
        """The `wheelsmith build` options that build for this environment from here: `--python
        PATH` on this machine's CPU; on another, a cross build (`--platform`), which takes its
        Python version and its channel's profile by name."""
        if not self.foreign:
            return f"--python {quote(str(self.python))}"
        return (f"--platform {quote(self.machine)} --python {quote(self.version)} "
                f"--toolchain {quote(self.channel)}")

    def platforms(self) -> list[str]:
        """The platform tags pip accepts here, best first: manylinux down from this glibc."""
        arch = self.machine
        found = []
        if self.glibc is not None:
            for minor in range(self.glibc[1], -1, -1):
                found.append(f"manylinux_{self.glibc[0]}_{minor}_{arch}")
                if (self.glibc[0], minor) in _LEGACY:
                    found.append(f"{_LEGACY[self.glibc[0], minor]}_{arch}")
        return [*found, f"linux_{arch}"]

    def tags(self) -> frozenset[Tag]:
        major, minor = (int(part) for part in self.version.split("."))
        platforms = self.platforms()
        return frozenset([*cpython_tags((major, minor), platforms=platforms),
                          *compatible_tags((major, minor), f"cp{major}{minor}", platforms)])

    def pip(self) -> list[str | Path]:
        """A pip that installs into this environment: its own, else ours run by its Python
        (`pip --python`; uv-made environments have no pip)."""
        if self.has_pip:
            return [self.python, "-m", "pip"]
        return [sys.executable, "-m", "pip", "--python", self.python]

    def accepts(self, filename: str) -> bool:
        """Whether pip in this environment would install this wheel file (its tags)."""
        return bool(parse_tag(WheelName.parse(filename).tags) & self.tags())


def refuse_free_threaded(version: str) -> None:
    """`3.14t`, a free-threaded Python, refused by name: torch publishes cp314t wheels, but no
    interpreter wheelsmith builds with is one (Debian forky, the source of the images' 3.14
    and 3.15, ships none), so no wheel of ours would carry that ABI."""
    if re.fullmatch(r"3\.\d+t", version):
        base = version.removesuffix("t")
        raise UsageError(f"Python {version} is free-threaded: wheelsmith builds only for "
                         f"GIL-enabled Pythons (Debian forky, where the build images' 3.14 and "
                         f"3.15 come from, ships no free-threaded interpreter)",
                         hint=f"build for the GIL-enabled Python {base}: --python {base}")


def interpreter_for(version: str) -> Path:
    """The interpreter for a Python version: this one if it matches, else python3.X on PATH."""
    if version == f"{sys.version_info[0]}.{sys.version_info[1]}":
        return Path(sys.executable)
    found = shutil.which(f"python{version}")
    if found is None:
        raise UsageError(f"python{version} is not installed here",
                         hint="install it (or put it on PATH), or give the interpreter's path")
    answer = cmd.run([found, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                     stream=False, ok_returncodes=range(256), what=f"python{version}",
                     bounds=PROBE_BOUNDS, hint="fix PATH, or give the interpreter's path")
    if answer.returncode != 0 or answer.stdout.strip() != version:
        said = (answer.stderr.strip().splitlines() or [answer.stdout.strip()])[0].strip()
        raise UsageError(f"python{version} on PATH ({found}) does not run as Python {version}: "
                         f"{said}", hint="fix PATH, or give the interpreter's path")
    return Path(found)


def _machine(reported: str | None) -> str:
    """The probe's `platform.machine()` in wheelsmith's names (arm64 is aarch64); none: this
    machine's."""
    if not reported:
        return host_machine()
    return ALIASES.get(reported.lower(), reported)


def _gpu_arch(gpu: Gpu | None) -> Arch | None:
    if gpu is None:
        return None
    major, minor = gpu.capability
    try:
        return ArchSet.parse([f"{major}.{minor}"]).archs[0]
    except (ArchParseError, IndexError):
        log.warning("GPU %s: compute capability %s.%s is not one wheelsmith knows",
                    gpu.name, major, minor)
        return None


def probe(python: Path, *, gpu: bool = False) -> Target:
    return Target.from_probe(python, probe_python(python, sections=("gpu",) if gpu else ()))

