"""What a torch tried by the torch range needs beside it that the environment lacks.

A torch wheel pins its CUDA libraries and Triton exactly (`Requires-Dist: nvidia-nvshmem-cu13
==3.4.5; platform_system == "Linux"`). The range runs each torch with the environment's own
packages; where the environment has another version of one of those pins (a torch 2.15 tried
in a torch 2.14 environment: its libtorch_nvshmem.so needs a newer NVSHMEM), the torch does not
import, and the range would say so of a torch the wheel runs under. So each `==` requirement of
the torch wheel whose marker holds for the environment's Python and that the environment does
not meet is installed beside that torch (`pip install --no-deps --target`, as this machine
configures pip), first on the path with it, and named in the trial.
"""

from __future__ import annotations

import json
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from wheelsmith import cmd, wheelfile
from wheelsmith.errors import VerifyError
from wheelsmith.toolchain.venv import pip_env
from wheelsmith.untrusted import LONG, tool_bounds

# the environment's marker values and installed versions, as its own Python and pip see them
PROBE = ("import json, importlib.metadata as m\n"
         "from pip._vendor.packaging.markers import default_environment\n"
         "print(json.dumps({'markers': default_environment(), 'installed': {\n"
         "    d.metadata['Name']: d.version for d in m.distributions() if d.metadata['Name']}}))")


def environment(python: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(marker values, {canonical name: version}) of `python`'s environment."""
    answer = cmd.run([python, "-c", PROBE], stream=False, what=f"the packages of {python}",
                     error=VerifyError, bounds=tool_bounds())
    data = json.loads(answer.stdout.strip().splitlines()[-1])
    installed = {str(canonicalize_name(str(k))): str(v) for k, v in data["installed"].items()}
    return {str(k): str(v) for k, v in data["markers"].items()}, installed


def pins(metadata: str, markers: dict[str, str]) -> list[tuple[str, str]]:
    """The (name, version) of each `Requires-Dist: NAME==VERSION` in `metadata` whose marker
    holds for `markers` (no extra asked); a requirement of another form is not a pin."""
    found: list[tuple[str, str]] = []
    for line in metadata.partition("\n\n")[0].splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        try:
            requirement = Requirement(line.split(":", 1)[1].strip())
        except InvalidRequirement:
            continue
        if requirement.marker is not None and \
                not requirement.marker.evaluate({**markers, "extra": ""}):
            continue
        specs = list(requirement.specifier)
        if len(specs) == 1 and specs[0].operator == "==" and "*" not in specs[0].version:
            found.append((canonicalize_name(requirement.name), specs[0].version))
    return found


def unmet(python: Path, torch_wheel: Path) -> list[str]:
    """`NAME==VERSION` for each pin of `torch_wheel` that `python`'s environment does not
    meet (another version, or none), in the wheel's order."""
    markers, installed = environment(python)
    metadata = wheelfile.read_metadata(torch_wheel).decode("utf-8", "replace")
    return [f"{name}=={version}" for name, version in pins(metadata, markers)
            if installed.get(name) != version]


def install(python: Path, wanted: tuple[str, ...], site: Path, torch: str) -> None:
    """`wanted` (no dependencies) into `site`, beside the torch there."""
    if not wanted:
        return
    cmd.run([python, "-m", "pip", "install", "--no-deps", "--no-compile", "--only-binary=:all:",
             "--disable-pip-version-check", "--target", site, *wanted], stream=False,
            env=pip_env(), what=f"pip install of what {torch} pins beside it",
            error=VerifyError, bounds=tool_bounds(LONG))
