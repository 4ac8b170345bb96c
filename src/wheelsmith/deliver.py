"""One flow from a request to a usable wheel: build (verified) -> publish -> install -> import.

`wheelsmith build`, `wheelsmith install` (when the channel has no wheel) and nightly all go
through `deliver`; each asks for the steps it wants. Installs are `--no-deps` (torch and the
rest are the user's) and are followed by an import of the package's modules there.
"""

from __future__ import annotations

import json
from pathlib import Path

from wheelsmith import cmd
from wheelsmith.build.smoke import SMOKE_SCRIPT
from wheelsmith.errors import VerifyError
from wheelsmith.recipes.model import Recipe
from wheelsmith.toolchain.target import Target


def install_file(target: Target, wheel: Path) -> None:
    cmd.run([*target.pip(), "install", "--no-input", "--no-deps", "--force-reinstall", wheel],
            what=f"pip install of {wheel.name} into {target.python}")


def check_imports(target: Target, recipe: Recipe) -> tuple[str, ...]:
    """Import the package's modules in the target environment (torch first, as it would)."""
    spec = {"imports": list(recipe.smoke_imports), "gpu": None, "archs": "", "sass": []}
    result = cmd.run([target.python, SMOKE_SCRIPT, json.dumps(spec)], stream=False,
                     error=VerifyError, what=f"import of {recipe.name} in {target.python}")
    return tuple(line.removeprefix("imported ") for line in result.stdout.splitlines()
                 if line.startswith("imported "))

