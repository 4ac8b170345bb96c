"""Run by the Python being examined: its torch, GPU, CUDA-extension packages (their shared
objects) and whether the fast-path modules import. Prints `WHEELSMITH-DOCTOR {json}`."""

import importlib
import json
import re
import sys
import warnings
from importlib import metadata
from typing import Any

warnings.simplefilter("ignore")
FAST_PATH = {"fla": "flash-linear-attention fla-core", "causal_conv1d": "causal-conv1d",
             "mamba_ssm": "mamba-ssm", "flash_attn": "flash-attn"}
NOT_EXTENSIONS = re.compile(r"^(torch|triton|nvidia-.*|cuda-.*|jax.*|cupy.*)$")


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


out: dict[str, Any] = {"python": sys.executable, "torch": None, "torch_cuda": None,
                       "gpu": None, "packages": [], "fast_path": {}}
try:
    import torch

    out["torch"] = torch.__version__
    out["torch_cuda"] = torch.version.cuda
    if torch.cuda.is_available():
        out["gpu"] = {"name": torch.cuda.get_device_name(0),
                      "capability": list(torch.cuda.get_device_capability(0))}
except Exception as exc:
    out["torch_error"] = f"{type(exc).__name__}: {exc}"

fast_dists = {normalize(d) for names in FAST_PATH.values() for d in names.split()}
for dist in metadata.distributions():
    name = normalize(dist.metadata["Name"] or "")
    if not name or NOT_EXTENSIONS.match(name):
        continue
    # torch itself, not an optional extra (safetensors: `torch; extra == "torch"`)
    needs_torch = any(re.match(r"torch\b", r) and "extra" not in r.partition(";")[2]
                      for r in dist.requires or [])
    shared = [str(dist.locate_file(f)) for f in dist.files or []
              if f.name.endswith(".so") or ".so." in f.name]
    if shared and (needs_torch or name in fast_dists):
        out["packages"].append({"name": name, "version": dist.version, "shared_objects": shared})

for module, dist_name in FAST_PATH.items():
    try:
        importlib.import_module(module)
        out["fast_path"][module] = {"dist": dist_name, "ok": True, "error": None}
    except Exception as exc:  # any failure means the model falls back
        out["fast_path"][module] = {"dist": dist_name, "ok": False,
                                    "error": f"{type(exc).__name__}: {exc}"}
print("WHEELSMITH-DOCTOR " + json.dumps(out))
