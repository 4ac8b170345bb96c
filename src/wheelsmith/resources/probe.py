"""Run by a toolchain's Python: report the interpreter, its torch, and torch's arch flags.

Prints one line `WHEELSMITH-PROBE {json}`. Never imports wheelsmith: it runs in other envs.
"""

import json
import os
import sys
import sysconfig
import warnings

warnings.simplefilter("ignore")
out = {
    "python": f"{sys.version_info[0]}.{sys.version_info[1]}",
    "purelib": sysconfig.get_paths()["purelib"],
}
try:
    import torch

    out["torch"] = torch.__version__.split("+")[0]
    out["torch_cuda"] = torch.version.cuda
except Exception as exc:  # reported by the caller
    out["torch_error"] = f"{type(exc).__name__}: {exc}"
if os.environ.get("TORCH_CUDA_ARCH_LIST") and "torch" in out:
    try:
        from torch.utils.cpp_extension import _get_cuda_arch_flags

        out["arch_flags"] = _get_cuda_arch_flags()
    except Exception as exc:
        out["arch_error"] = str(exc)
print("WHEELSMITH-PROBE " + json.dumps(out))
