"""Is this Python environment on the fast path for this GPU?

A probe run by the examined Python reports torch, the GPU and every installed CUDA-extension
package (those that depend on torch and ship shared objects) plus whether the fast-path
modules import. wheelsmith then reads each shared object's device code with the same
inventory function the build gate uses and classifies it for the target arch:

  sass  a cubin that runs on it (same major, same or lower minor: sm_120 runs on sm_121)
  ptx   only PTX the driver must JIT-compile at start (slow to load; a fallback)
  none  nothing usable: the kernels cannot launch ("no kernel image is available")

Then judge.py weighs what was found, what runs (fastpath.py) and the runtime rules, and
fixes.py turns each gap into a command.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from wheelsmith.arch import Arch
from wheelsmith.doctor.fastpath import ModelView, default_view, installed
from wheelsmith.doctor.judge import NOTHING_KNOWN, Knowledge, judge
from wheelsmith.doctor.report import PackageReport, Report
from wheelsmith.inventory import RANK, coverage, read_device_code
from wheelsmith.toolchain.driver import Driver
from wheelsmith.toolchain.env import probe_python

log = logging.getLogger(__name__)


def probe(python: Path) -> dict[str, Any]:
    """The examined Python's view: the probe every stage shares, with the GPU and packages
    (the answer as read, its shape checked by ProbeAnswer)."""
    answer = probe_python(python, sections=("gpu", "packages"))
    return {**answer.raw, "executable": answer.executable or str(python)}


FAST_PATH_MODULES = ("fla", "causal_conv1d", "mamba_ssm", "flash_attn")


def examine(info: dict[str, Any], arch: Arch, arch_source: str, cuobjdump: Path, *,
            index_url: str, need: tuple[str, ...] = (), model: ModelView | None = None,
            ops: list[dict[str, Any]] | None = None, knowledge: Knowledge = NOTHING_KNOWN,
            driver: Driver | None = None) -> Report:
    """`need`: modules named by --need: they replace the default set (the fast-path packages
    installed), and add to a model's own."""
    gpu = info.get("gpu")
    model = model or default_view(installed(info.get("fast_path", {})))
    needed = set(need) if need and model.source == "default" else set(need) | set(model.modules)
    report = Report(python=info["executable"], python_version=info["python"],
                    torch=info.get("torch_full"),
                    torch_cuda=info.get("torch_cuda"),
                    gpu=f"{gpu['name']} (sm_{gpu['capability'][0]}{gpu['capability'][1]})"
                    if gpu else None, arch=arch, arch_source=arch_source,
                    fast_path={m: {**state, "needed": m in needed}
                               for m, state in info.get("fast_path", {}).items()},
                    model=model, ops=ops, driver=driver)
    for package in info.get("packages", []):
        examined = _package(package, arch, cuobjdump)
        if examined is not None:
            report.packages.append(examined)
    judge(report, info, index_url, knowledge)
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

