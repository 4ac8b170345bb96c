"""A `Toolchain`: a usable build environment (Python, CUDA_HOME, torch and nvcc versions),
whether a profile's venv or `system` (the current interpreter's torch and an installed CUDA
toolkit). Interpreters are asked about themselves by the probe script (resources/probe.py),
never by importing their torch here."""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import Version

from wheelsmith import cmd, locations
from wheelsmith.errors import CommandError, ToolchainError, UntrustedDataError
from wheelsmith.toolchain.platform import host_machine
from wheelsmith.toolchain.profile import SYSTEM
from wheelsmith.untrusted import Bounds, Node, parse_json, tool_bounds


@dataclass(frozen=True, kw_only=True, slots=True)
class Toolchain:
    """A usable build environment, probed and ready for the pre-flight check."""

    name: str
    python: Path
    python_version: str
    cuda_home: Path
    torch_version: Version | None  # None: a CUDA-only toolchain (cu130), for packages without torch
    torch_cuda: Version  # torch's CUDA; a CUDA-only toolchain's own
    nvcc_version: Version
    cuobjdump: Path | None
    pins: tuple[str, ...]
    platform: str = field(default_factory=host_machine)  # the CPU the wheels are for
    # a cross build's target site (platform.py): the target's torch and CUDA runtime
    target_site: Path | None = None
    # the site-packages torch is imported from, when known (a profile's venv): the build sees
    # it at a path that does not name the Python (builder/pathview.py)
    site: Path | None = None
    # the include directories of the libraries torch's wheels bring beside the CUDA toolkit
    # (cuDNN, NCCL, cuSPARSELt, NVSHMEM under site-packages/nvidia/): on the build's CPATH
    library_includes: tuple[Path, ...] = ()

    @property
    def nvcc(self) -> Path:
        return self.cuda_home / "bin" / "nvcc"

    @property
    def bin_dirs(self) -> tuple[Path, ...]:
        return (self.python.parent, self.cuda_home / "bin")

    def channel(self) -> str:
        """`cu130-torch2.14`: the index channel wheels of this toolchain belong to (`cu130`
        for a CUDA-only one)."""
        cuda = f"cu{self.torch_cuda.major}{self.torch_cuda.minor}"
        torch = self.torch_version
        return f"{cuda}-torch{torch.major}.{torch.minor}" if torch is not None else cuda

    def identity(self) -> dict[str, Any]:
        """What the content key and the provenance record say about the toolchain."""
        found = {"name": self.name, "python": self.python_version,
                 "torch": str(self.torch_version) if self.torch_version else None,
                 "torch_cuda": str(self.torch_cuda),
                 "nvcc": str(self.nvcc_version), "pins": list(self.pins)}
        if self.platform != "x86_64":  # keys of x86-64 wheels stay what they were
            found["platform"] = self.platform
        return found

    @property
    def cross(self) -> bool:
        """Building for another CPU than this machine's (with a target site)."""
        return self.target_site is not None


def library_includes(site: Path, cuda_home: Path) -> tuple[Path, ...]:
    """The `nvidia/*/include` directories of `site` that add headers to the CUDA toolkit at
    `cuda_home`: a directory holding a name the toolkit's include directory also holds (CUDA
    12's nvidia/cuda_runtime, nvidia/cublas ...: perhaps another release of the toolkit's own
    headers) is left out, so nothing on CPATH can stand in for a toolkit header."""
    toolkit = {entry.name for entry in _entries(cuda_home / "include")}
    return tuple(include for include in sorted(site.glob("nvidia/*/include"))
                 if include.is_dir() and include.resolve() != (cuda_home / "include").resolve()
                 and not any(entry.name in toolkit for entry in _entries(include)))


def _entries(directory: Path) -> list[Path]:
    try:
        return list(directory.iterdir())
    except OSError:
        return []


PROBE_SCRIPT = locations.RESOURCES / "probe.py"
PROBE_MARKER = "WHEELSMITH-PROBE "
# an interpreter prints probe.py's first line at once, then imports torch (seconds; a GPU's
# first use can take a minute); the answer is a few KB, doctor's list of packages a few MB
PROBE_BOUNDS = Bounds(max_bytes=32 << 20, seconds=180.0, quiet_seconds=20.0)
_VERSION = re.compile(r"\d+\.\d+")


@dataclass(frozen=True, slots=True)
class Gpu:
    name: str
    capability: tuple[int, int]


@dataclass(frozen=True, kw_only=True, slots=True)
class ProbeAnswer:
    """What an interpreter said about itself (resources/probe.py), every field checked: an
    answer of another shape is one UntrustedDataError naming the probe and the field."""

    python: str  # "3.12"
    torch: Version | None  # torch.__version__ without its local label
    torch_full: Version | None  # with it: 2.11.0+cu128
    torch_dist: Version | None  # the installed distribution's version
    torch_cuda: Version | None
    torch_error: str | None
    gpu: Gpu | None
    machine: str | None
    glibc: str | None
    pip: bool
    executable: str | None
    purelib: str | None
    arch_error: str | None
    raw: dict[str, Any]  # the whole answer (doctor reads its packages), its shape checked

    @classmethod
    def parse(cls, answer: Node) -> ProbeAnswer:
        def version(key: str) -> Version | None:
            return answer.optional(key, lambda n: n.parsed(Version, "a version"))

        def text(key: str) -> str | None:
            return answer.optional(key, Node.text)

        _check_packages(answer)
        return cls(python=answer["python"].text(_VERSION, "a Python version (3.12)"),
                   torch=version("torch"), torch_full=version("torch_full"),
                   torch_dist=version("torch_dist"), torch_cuda=version("torch_cuda"),
                   torch_error=text("torch_error"), gpu=answer.optional("gpu", _gpu),
                   machine=text("machine"), glibc=text("glibc"),
                   pip=answer.optional("pip", Node.flag) or False,
                   executable=text("executable"), purelib=text("purelib"),
                   arch_error=text("arch_error"),
                   raw={key: node.value for key, node in answer.entries().items()})


def _gpu(node: Node) -> Gpu:
    field = node["capability"]
    capability = field.items()
    if len(capability) != 2:
        raise field.fail("expected [major, minor]")
    return Gpu(node["name"].text(), (capability[0].integer(), capability[1].integer()))


def _check_packages(answer: Node) -> None:
    """The sections doctor asks for, when present: their shape, as judge.py reads them."""
    for package in answer.optional("packages", Node.items) or []:
        package["name"].text()
        package["version"].text()
        for path in package["shared_objects"].items():
            path.text()
    for state in (answer.optional("fast_path", Node.entries) or {}).values():
        state["ok"].flag()
        for key in ("dist", "error", "missing"):
            state.optional(key, Node.text)
    answer.optional("dists", Node.text_map)


def probe_python(python: Path, env: dict[str, str] | None = None,
                 sections: tuple[str, ...] = ()) -> ProbeAnswer:
    """Ask an interpreter about itself and its torch (run in a subprocess: torch is not ours);
    `sections`: also "gpu" and/or "packages" (the installed extensions, for doctor). Its
    output is bounded (PROBE_BOUNDS) and its answer parsed (ProbeAnswer)."""
    if not Path(python).exists():
        raise ToolchainError(f"{python} does not exist", hint="give the path of a Python "
                             "interpreter, e.g. /path/to/venv/bin/python")
    source = f"the probe of {python}"
    hint = f"is {python} a Python interpreter (3.8 or newer)? give the path of one"
    try:
        result = cmd.run([Path(python).absolute(), PROBE_SCRIPT, *sections], stream=False, env=env,
                         what=source, bounds=PROBE_BOUNDS, hint=hint)
    except CommandError as exc:  # not executable, not a program, not a working Python
        raise ToolchainError(f"{python} is not a Python interpreter: {exc.message}",
                             hint="give the path of a Python interpreter", tail=exc.tail) from exc
    for line in result.stdout.splitlines():
        if line.startswith(PROBE_MARKER):
            try:
                return ProbeAnswer.parse(parse_json(line.removeprefix(PROBE_MARKER), source))
            except UntrustedDataError as exc:
                exc.hint = exc.hint or hint
                raise
    raise ToolchainError(f"{python} did not answer the probe", hint=hint)


def nvcc_version(nvcc: Path) -> Version:
    result = cmd.run([nvcc, "--version"], stream=False, error=ToolchainError,
                     what=f"nvcc ({nvcc})", bounds=tool_bounds())
    match = re.search(r"release [\d.]+, V(\d+\.\d+\.\d+)", result.stdout)
    if match is None:
        raise ToolchainError(f"cannot read the CUDA version from `{nvcc} --version`")
    return Version(match[1])


def find_cuobjdump(root: Path) -> Path | None:
    hits = sorted(root.glob("**/bin/cuobjdump"))
    return hits[0] if hits else None


def is_toolkit(home: Path) -> bool:
    return (home / "bin" / "nvcc").is_file() and (home / "include" / "cuda_runtime.h").is_file()


def system_cuda_home() -> Path:
    """CUDA_HOME or CUDA_PATH when set; else the toolkit around `nvcc` on PATH, then
    /usr/local/cuda. A guess must look like a toolkit (bin/nvcc and include/cuda_runtime.h):
    `/usr/local/bin/nvcc` is often a link or a wrapper script, and `/usr/local` is no toolkit
    (the trap torch's own guess falls into)."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            return Path(os.environ[var])
    nvcc = shutil.which("nvcc")
    guesses = [Path(nvcc).resolve().parent.parent] if nvcc else []
    guesses.append(Path("/usr/local/cuda"))
    return next((g for g in guesses if is_toolkit(g)), guesses[0])


def system_cuobjdump() -> Path | None:
    """cuobjdump of an installed CUDA toolkit (CUDA_HOME first, then PATH), if any."""
    candidate = system_cuda_home() / "bin" / "cuobjdump"
    if candidate.is_file():
        return candidate
    found = shutil.which("cuobjdump")
    return Path(found) if found else None


def system_toolchain(python: Path) -> Toolchain:
    cuda_home = system_cuda_home()
    if not (cuda_home / "bin" / "nvcc").is_file():
        raise ToolchainError(f"no nvcc in {cuda_home}/bin",
                             hint="set CUDA_HOME to an installed CUDA toolkit, or use a profile")
    info = probe_python(python)
    if info.torch_error is not None:
        raise ToolchainError(f"torch does not import in {python}: {info.torch_error}",
                             hint="install torch there, or use a pinned toolchain profile")
    if info.torch is None or info.torch_cuda is None:
        raise ToolchainError(f"the torch in {python} is a CPU-only build ({info.torch})",
                             hint="a CUDA extension needs a CUDA build of torch")
    return Toolchain(
        name=SYSTEM,
        python=python,
        python_version=info.python,
        cuda_home=cuda_home,
        torch_version=info.torch,
        torch_cuda=info.torch_cuda,
        nvcc_version=nvcc_version(cuda_home / "bin" / "nvcc"),
        cuobjdump=system_cuobjdump(),
        pins=(),
    )
