"""Run by a toolchain's Python: import a freshly built wheel's modules, then (on a GPU the
wheel was built for) run the recipe's tiny GPU op. Argument: a JSON spec from smoke.py.
"""

import importlib
import json
import sys
import warnings

warnings.simplefilter("ignore")
spec = json.loads(sys.argv[1])
import torch  # noqa: E402 - load libtorch first, as the package's own __init__ would

for module in spec["imports"]:
    importlib.import_module(module)
    print("imported", module)
if spec["gpu"]:
    if not torch.cuda.is_available():
        print("gpu op: skipped (no GPU)")
    else:
        major, minor = torch.cuda.get_device_capability()
        if [major, minor] not in spec["sass"]:
            print(f"gpu op: skipped (GPU is sm_{major}{minor}, the wheel is for {spec['archs']})")
        else:
            exec(compile(spec["gpu"], "<recipe smoke.gpu>", "exec"), {})  # noqa: S102 - recipe code
            print(f"gpu op: ok on sm_{major}{minor}")
