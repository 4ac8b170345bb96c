"""Is this Python environment on the fast path for this GPU?

A probe run by the examined Python reports torch, the GPU and every installed CUDA-extension
package (those that depend on torch and ship shared objects) plus whether the fast-path
modules import. wheelsmith then reads each shared object's device code with the same
inventory function the build gate uses and classifies it for the target arch:

  sass  a cubin that runs on it (same major, same or lower minor: sm_120 runs on sm_121)
  ptx   only PTX the driver must JIT-compile at start (slow to load; a fallback)
  none  nothing usable: the kernels cannot launch ("no kernel image is available")

Each gap gets a fix: `pip install` from the index channel that matches the environment's torch
and CUDA when it has a wheel this environment's pip accepts (its Python, glibc) with native
kernels for the arch (read from the arch set in its local label), else the `wheelsmith build
... --python ENV` that makes one. An index that cannot be read leaves the pip line unchecked,
and the report says so.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wheelsmith.arch import Arch, ArchSet
from wheelsmith.errors import SourceError
from wheelsmith.fetch import simple_page
from wheelsmith.inventory import DeviceCode, read_device_code
from wheelsmith.target import Target
from wheelsmith.toolchain import probe_python
from wheelsmith.wheelfile import WheelName

log = logging.getLogger(__name__)
INDEX_TIMEOUT_S = 5

_SM_RE = re.compile(r"^sm_(\d+)(\d)([af]?)$")
RANK = {"sass": 2, "ptx": 1, "none": 0}


def coverage(code: DeviceCode, target: Arch) -> str:
    """How well one shared object's device code serves `target`."""
    for name in code.sass:
        match = _SM_RE.match(name)
        if match and int(match[1]) == target.major and int(match[2]) <= target.minor and (
                not match[3] or (int(match[2]) == target.minor and match[3] == target.suffix)):
            return "sass"
    for name in code.ptx:
        match = _SM_RE.match(name)
        if match and (int(match[1]), int(match[2])) <= (target.major, target.minor):
            return "ptx"
    return "none"


@dataclass(frozen=True, slots=True)
class PackageReport:
    name: str
    version: str
    status: str  # sass | ptx | none
    # (path, status, sass, ptx) for each shared object that carries device code
    objects: tuple[tuple[str, str, tuple[str, ...], tuple[str, ...]], ...]


@dataclass(slots=True)
class Report:
    python: str
    python_version: str
    torch: str | None
    torch_cuda: str | None
    gpu: str | None
    arch: Arch
    arch_source: str  # "gpu" | "--arch"
    packages: list[PackageReport] = field(default_factory=list)
    fast_path: dict[str, dict[str, Any]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    fixes: list[str] = field(default_factory=list)
    channel: str | None = None  # the index channel URL that matches this environment

    @property
    def healthy(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        return {
            "healthy": self.healthy, "python": self.python,
            "python_version": self.python_version, "channel": self.channel, "torch": self.torch,
            "torch_cuda": self.torch_cuda, "gpu": self.gpu, "arch": str(self.arch),
            "arch_source": self.arch_source,
            "packages": [{"name": p.name, "version": p.version, "status": p.status,
                          "shared_objects": [{"path": o[0], "status": o[1], "sass": list(o[2]),
                                              "ptx": list(o[3])} for o in p.objects]}
                         for p in self.packages],
            "fast_path": self.fast_path, "problems": self.problems, "fixes": self.fixes,
        }


def probe(python: Path) -> dict[str, Any]:
    """The examined Python's view: the probe every stage shares, with the GPU and packages."""
    return probe_python(python, sections=("gpu", "packages"))


FAST_PATH_MODULES = ("fla", "causal_conv1d", "mamba_ssm", "flash_attn")
DEFAULT_NEED = ("fla", "causal_conv1d")  # GatedDeltaNet hybrids (Qwen3.5/3.6): fla + conv1d


def examine(info: dict[str, Any], arch: Arch, arch_source: str, cuobjdump: Path, *,
            index_url: str, need: tuple[str, ...] = DEFAULT_NEED) -> Report:
    gpu = info.get("gpu")
    report = Report(python=info["executable"], python_version=info["python"],
                    torch=info.get("torch_full"),
                    torch_cuda=info.get("torch_cuda"),
                    gpu=f"{gpu['name']} (sm_{gpu['capability'][0]}{gpu['capability'][1]})"
                    if gpu else None, arch=arch, arch_source=arch_source,
                    fast_path={m: {**state, "needed": m in need}
                               for m, state in info.get("fast_path", {}).items()})
    for package in info.get("packages", []):
        examined = _package(package, arch, cuobjdump)
        if examined is not None:
            report.packages.append(examined)
    _judge(report, info, index_url)
    return report


def _package(package: dict[str, Any], arch: Arch, cuobjdump: Path) -> PackageReport | None:
    """None for a package whose shared objects carry no device code at all (safetensors'
    Rust library, numpy): it is not a CUDA extension, so no arch can be missing from it."""
    objects = []
    for path in package["shared_objects"]:
        code = read_device_code(Path(path), cuobjdump, Path(path).name)
        if code.empty:
            continue  # a host-only helper library
        objects.append((code.path, coverage(code, arch), tuple(sorted(code.sass)),
                        tuple(sorted(code.ptx))))
    if not objects:
        return None
    status = min((o[1] for o in objects), key=RANK.__getitem__)
    return PackageReport(package["name"], package["version"], status, tuple(objects))


def _judge(report: Report, info: dict[str, Any], index_url: str) -> None:
    if report.torch is None:
        report.problems.append(f"torch does not import: {info.get('torch_error', 'missing')}")
        return
    if not report.torch_cuda:
        report.problems.append(f"torch {report.torch} is a CPU-only build: no CUDA kernel runs")
        return
    target = Target.from_probe(Path(report.python), info)
    base = f"{index_url.rstrip('/')}/{target.channel}/simple/"
    report.channel = base
    to_install: dict[str, None] = {}
    for package in report.packages:
        if package.status == "ptx":
            report.problems.append(f"{package.name} {package.version} has only PTX for "
                                   f"{report.arch.sm}: the driver JIT-compiles it at start")
            to_install[package.name] = None
        elif package.status == "none":
            report.problems.append(f"{package.name} {package.version} has no kernel for "
                                   f"{report.arch.sm}: its ops fail or the model falls back")
            to_install[package.name] = None
    for module, state in report.fast_path.items():
        if state["needed"] and not state["ok"]:
            report.problems.append(f"fast path: `import {module}` fails ({state['error']}): "
                                   "models fall back to slow PyTorch code")
            to_install[state["dist"]] = None
    _fixes(report, target, list(to_install))


def _fixes(report: Report, target: Target, names: list[str]) -> None:
    """A pip line for what the channel has for this Python and arch, a build line for what it
    lacks."""
    base = report.channel or ""
    offered: list[str] = []
    readable = True
    for name in (name for entry in names for name in entry.split()):
        offers = index_offers(name, base, report.arch, target) if readable else None
        readable = offers is not None
        if offers is False:
            report.fixes.append(
                f"wheelsmith build {name} --arch {report.arch} --python {report.python} "
                f"--publish   # the index has no {name} wheel for Python {target.version} with "
                f"{report.arch.sm} kernels")
        else:
            offered.append(name)
    if offered:
        unchecked = "" if readable else "   # not checked: the index could not be read"
        report.fixes.insert(0, f"pip install --index-url {base} --no-deps --force-reinstall "
                               f"{' '.join(offered)}{unchecked}")


def index_offers(project: str, base: str, arch: Arch, target: Target) -> bool | None:
    """Whether the channel at `base` has a wheel of `project` that `target` accepts, with
    native kernels for `arch` (or a pure one); None when the index cannot be read (the fix is
    then left unchecked)."""
    try:
        _, page = simple_page(project, base, timeout=INDEX_TIMEOUT_S, missing_ok=True)
    except SourceError as exc:
        log.info("the fix is not checked against the index: %s", exc)
        return None
    if page is None:
        return False
    return any(serves(file["filename"], arch) for file in page.get("files", [])
               if file["filename"].endswith(".whl") and not file.get("yanked")
               and target.accepts(file["filename"]))


def serves(filename: str, arch: Arch) -> bool:
    """Whether a wheel runs natively on `arch`, judged from the arch set in its label; a
    pure wheel does, and so is assumed of a wheel wheelsmith did not stamp."""
    local = WheelName.parse(filename).version.local
    code = ArchSet.label_device_code(local) if local else None
    if code is None:
        return True
    sass, ptx = code
    return coverage(DeviceCode(filename, sass, ptx), arch) == "sass"
