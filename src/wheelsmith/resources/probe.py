"""Run by another Python (a toolchain's, a target environment's, the one doctor examines):
report the interpreter and its torch and, when asked, the GPU, the installed CUDA-extension
packages, every installed distribution's version (for doctor's runtime rules) and whether the
fast-path modules import. With TORCH_CUDA_ARCH_LIST set, also torch's arch flags for it.

Arguments: any of `gpu`, `packages`. Prints `WHEELSMITH-PROBE-STARTED` at once (the reader
allows an interpreter little time to show it runs, and more for torch's import), then one line
`WHEELSMITH-PROBE {json}`. Never imports wheelsmith: it runs in other environments.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import platform
import re
import sys
import sysconfig
import warnings
from importlib import metadata
from pathlib import Path
from typing import Any

print("WHEELSMITH-PROBE-STARTED", flush=True)
warnings.simplefilter("ignore")
FAST_PATH = {"fla": "flash-linear-attention fla-core", "causal_conv1d": "causal-conv1d",
             "mamba_ssm": "mamba-ssm", "flash_attn": "flash-attn"}
# what the fast path is used through, where that is more than the package's top level: `import fla`
# alone succeeds without einops (fla imports lazily), `import fla.ops.gated_delta_rule` does not
FAST_PATH_IMPORTS = {"fla": "fla.ops.gated_delta_rule",
                     "mamba_ssm": "mamba_ssm.ops.selective_scan_interface"}
NOT_EXTENSIONS = re.compile(r"^(torch|triton|nvidia-.*|cuda-.*|jax.*|cupy.*)$")


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def glibc() -> str | None:
    try:
        name = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):
        return None
    return name.split()[-1] if name.startswith("glibc") else None


def packages(out: dict[str, Any]) -> None:
    fast_dists = {normalize(d) for names in FAST_PATH.values() for d in names.split()}
    for dist in metadata.distributions():
        name = normalize(dist.metadata["Name"] or "")
        if name:
            out["dists"].setdefault(name, dist.version)
        if not name or NOT_EXTENSIONS.match(name):
            continue
        # torch itself, not an optional extra (safetensors: `torch; extra == "torch"`)
        needs_torch = any(re.match(r"torch\b", r) and "extra" not in r.partition(";")[2]
                          for r in dist.requires or [])
        shared = [str(dist.locate_file(f)) for f in dist.files or []
                  if f.name.endswith(".so") or ".so." in f.name]
        if shared and (needs_torch or name in fast_dists):
            out["packages"].append({"name": name, "version": dist.version,
                                    "shared_objects": shared})
    for module, dist_name in FAST_PATH.items():
        try:
            importlib.import_module(FAST_PATH_IMPORTS.get(module, module))
            out["fast_path"][module] = {"dist": dist_name, "ok": True, "error": None,
                                        "missing": None}
        except Exception as exc:  # any failure means the model falls back
            # missing: the module a ModuleNotFoundError names (the package, or a dependency)
            missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
            out["fast_path"][module] = {"dist": dist_name, "ok": False,
                                        "error": f"{type(exc).__name__}: {exc}",
                                        "missing": missing}


out: dict[str, Any] = {
    "python": f"{sys.version_info[0]}.{sys.version_info[1]}",
    "implementation": sys.implementation.name,
    "executable": sys.executable,
    "purelib": sysconfig.get_paths()["purelib"],
    "machine": platform.machine(),
    "glibc": glibc(),
    # a directory look, not importlib.util.find_spec("pip"): asking the import system for
    # pip makes setuptools' distutils shim switch itself off, and torch's arch flags then fail
    "pip": any((Path(p) / "pip" / "__init__.py").is_file() for p in sys.path if p),
    "torch": None,
    "torch_full": None,
    "torch_dist": None,  # the installed distribution's version: PyPI's has no +cuXYZ label
    "torch_cuda": None,
    "gpu": None,
}
try:
    import torch

    out["torch_full"] = torch.__version__
    out["torch"] = torch.__version__.split("+")[0]
    with contextlib.suppress(metadata.PackageNotFoundError):  # a torch without its metadata
        out["torch_dist"] = metadata.version("torch")
    out["torch_cuda"] = torch.version.cuda
    if "gpu" in sys.argv[1:] and torch.cuda.is_available():
        out["gpu"] = {"name": torch.cuda.get_device_name(0),
                      "capability": list(torch.cuda.get_device_capability(0))}
except Exception as exc:  # reported by the caller
    out["torch_error"] = f"{type(exc).__name__}: {exc}"
if os.environ.get("TORCH_CUDA_ARCH_LIST") and out["torch"]:
    try:
        from torch.utils.cpp_extension import _get_cuda_arch_flags

        out["arch_flags"] = _get_cuda_arch_flags()
    except Exception as exc:
        out["arch_error"] = str(exc)
if "packages" in sys.argv[1:]:
    out["packages"], out["fast_path"], out["dists"] = [], {}, {}
    packages(out)
print("WHEELSMITH-PROBE " + json.dumps(out))
