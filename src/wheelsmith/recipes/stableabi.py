"""A recipe's `build.stable_abi`: the oldest torch minor a package written against torch's
stable ABI (torch/csrc/stable, the `aoti_torch_*` C shim) targets, e.g. "2.10".

torch 2.9 has the stable ABI; torch 2.10 added `TORCH_TARGET_VERSION` (torch/csrc/stable/
version.h), the define that makes its headers offer only what the target torch has. So the
floor is a minor from 2.9 on, and the torch that builds it must be 2.10 or newer and no older
than the floor (checked against the toolchain: `refusal`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from packaging.version import Version

from wheelsmith.document import Document
from wheelsmith.errors import Problem, RecipeError

KEY = ("build", "stable_abi")
FIRST_STABLE = Version("2.9")  # torch/csrc/stable's first release
FIRST_TARGETED = Version("2.10")  # the first torch whose headers read TORCH_TARGET_VERSION
MINOR = re.compile(r"(\d+)\.(\d+)")


@dataclass(frozen=True, slots=True)
class StableAbi:
    """The floor ("2.10") and where the recipe sets it (file, line, column)."""

    floor: str
    file: str
    line: int
    column: int

    @property
    def version(self) -> Version:
        return Version(self.floor)

    def target_version(self) -> str:
        """TORCH_TARGET_VERSION's value: major and minor in the top two bytes, as
        torch/headeronly/version.h packs TORCH_ABI_VERSION (0x020a000000000000 for 2.10)."""
        major, minor = self.version.release[:2]
        return f"0x{major:02x}{minor:02x}000000000000"

    def define(self) -> str:
        return f"-DTORCH_TARGET_VERSION={self.target_version()}"

    def refusal(self, torch: Version | None) -> RecipeError | None:
        """Why a toolchain with `torch` (None: it has none) cannot build it, or None."""
        if torch is None:
            why = "the toolchain has no torch (a CUDA-only profile): nothing to target"
        elif torch.release[:2] < FIRST_TARGETED.release:
            why = (f"the toolchain's torch {torch} has no TORCH_TARGET_VERSION (torch "
                   f"{FIRST_TARGETED} added it)")
        elif torch.release[:2] < self.version.release[:2]:
            why = (f"the toolchain's torch {torch} is older than the floor {self.floor}: its "
                   "headers cannot target a newer torch")
        else:
            return None
        return RecipeError([Problem(self.file, self.line, self.column,
                                    f"'build.stable_abi' {self.floor} cannot be built: {why}",
                                    f"build it with a toolchain of torch {FIRST_TARGETED} or "
                                    f"newer, and not older than {self.floor} (--toolchain)")])


def parse(doc: Document, value: object) -> StableAbi | None:
    """`build.stable_abi` of a recipe (None where it is not set or is wrong: a problem at its
    value then)."""
    if not isinstance(value, str):
        return None  # absent, or not a string: the schema says so
    text = value
    line, column = doc.smap.value(KEY)
    if not MINOR.fullmatch(text):
        doc.at_value(KEY, f"'build.stable_abi' is not a torch minor: '{text}'",
                     "write the oldest torch it targets as a quoted MAJOR.MINOR, e.g. \"2.10\"")
        return None
    if Version(text) < FIRST_STABLE:
        doc.at_value(KEY, f"'build.stable_abi' {text} is older than torch's stable ABI, which "
                          f"torch {FIRST_STABLE} introduced",
                     f"write {FIRST_STABLE} or a newer minor")
        return None
    return StableAbi(text, doc.file, line, column)
