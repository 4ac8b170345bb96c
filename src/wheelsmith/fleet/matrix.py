"""The nightly build matrix: recipes x versions x toolchain profiles x arch sets x Pythons x
platforms (CPUs).

`matrix.yaml` is validated like a recipe (every problem at once, file:line:col). Expanding
it gives cells in a stable order; a shard `I/N` takes every N-th cell starting at I, so
several CI runners split the work without talking to each other.

Each toolchain profile is one index channel (CUDA x torch) holding every Python; a package
may narrow the top-level `toolchains` and `pythons`. A pure recipe's wheel (py3-none-any) is
the same for every Python and CPU, so it is one cell per channel, built with the first Python
on the first platform. One channel serves every CPU (pip picks by platform tag); a cell for
another CPU than this machine's is a cross build (toolchain/platform.py). x86-64 cells keep the
names they had before platforms were an axis; others end in their platform (`-aarch64`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import Version

from wheelsmith import document
from wheelsmith.arch import ArchParseError, ArchSet
from wheelsmith.document import Document, KeyPath
from wheelsmith.errors import UsageError
from wheelsmith.recipes.model import Recipe, load_recipe
from wheelsmith.toolchain.platform import ALIASES, KNOWN, host_machine
from wheelsmith.toolchain.profile import Profile

STRINGS = {"type": "array", "items": {"type": "string"}, "minItems": 1}
NEEDS = ("farm",)  # what a package's cells may need from the runner (nightly checks it)
MATRIX_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["packages"],
    "properties": {
        "toolchains": {**STRINGS, "description": "toolchain profiles (default: the newest)"},
        "pythons": {**STRINGS, "description": "Python versions, e.g. '3.11' (default: the "
                    "Python running wheelsmith)"},
        "platforms": {**STRINGS, "description": "CPUs the wheels are for: x86_64, aarch64 "
                      "(default: this machine's)"},
        "packages": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["recipe"],
                "properties": {
                    "recipe": {"type": "string"},
                    "toolchains": {**STRINGS, "description": "default: the top-level list"},
                    "pythons": {**STRINGS, "description": "default: the top-level list"},
                    "platforms": {**STRINGS, "description": "default: the top-level list"},
                    "versions": {**STRINGS, "description": "default: the newest in the recipe"},
                    "archs": {**STRINGS, "description": "arch sets, one cell each, e.g. "
                              "'9.0;12.0' (default: the recipe's; not for pure recipes)"},
                    "needs": {"enum": list(NEEDS), "description": "farm: build only where a "
                              "compile farm or a big runner is configured, else skip"},
                },
            },
        },
        "exclude": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "properties": {key: {"type": "string"} for key in
                               ("recipe", "version", "toolchain", "archs", "python",
                                "platform")},
            },
        },
    },
}


@dataclass(frozen=True, kw_only=True, slots=True)
class Cell:
    recipe: str
    version: str
    toolchain: str
    archs: str  # "" for pure recipes
    python: str
    needs: str = ""  # "farm": only where a compile farm or a big runner is configured
    platform: str = "x86_64"  # the CPU the wheel is for (toolchain/platform.py's names)
    entry: int | None = field(default=None, compare=False)  # its package's place in `packages`

    def key(self, name: str) -> str:
        """Where matrix.yaml sets this cell's `name`: `packages[0].archs`."""
        return f"packages[{'' if self.entry is None else self.entry}].{name}"

    @property
    def id(self) -> str:
        archs = self.archs.replace(";", "-").replace("+", "") or "pure"
        cpu = "" if self.platform == "x86_64" else f"-{self.platform}"  # x86-64: names as before
        return f"{self.recipe}-{self.version}-{self.toolchain}-{archs}-py{self.python}{cpu}"

    def as_dict(self) -> dict[str, str]:
        return {"id": self.id, "recipe": self.recipe, "version": self.version,
                "toolchain": self.toolchain, "archs": self.archs, "python": self.python,
                "platform": self.platform}


def load(path: Path, find_recipe: Callable[[str], Path], *, default_toolchain: str,
         default_python: str, profiles: dict[str, Profile] | None = None,
         default_platform: str | None = None) -> list[Cell]:
    """Validate `matrix.yaml` and expand it into cells (stable order, excludes applied);
    `find_recipe` gives the recipe file of a name (repos.find). With `profiles`, each
    toolchain must be one of them and cover each of its Pythons. Platforms default to
    `default_platform` (None: this machine's)."""
    doc = document.load(path)
    data = document.validate(doc, MATRIX_SCHEMA)
    data = data if isinstance(data, dict) else {}
    toolchains = [t for t in data.get("toolchains", [default_toolchain]) if t]
    pythons = [p for p in data.get("pythons", [default_python]) if p]
    platforms = _platforms(doc, (), data.get("platforms")) or [default_platform or host_machine()]
    cells: list[Cell] = []
    for index, entry in enumerate(data.get("packages", [])):
        if entry is not None and "recipe" in entry:
            path_to = ("packages", index)
            own_toolchains = [t for t in entry.get("toolchains", toolchains) if t]
            own_pythons = [p for p in entry.get("pythons", pythons) if p]
            own_platforms = (_platforms(doc, path_to, entry["platforms"])
                             if "platforms" in entry else platforms)
            if profiles is not None:
                where = path_to if "toolchains" in entry or "pythons" in entry else ()
                _check_axes(doc, where, profiles, own_toolchains, own_pythons)
                _check_platforms(doc, path_to if "platforms" in entry else (), profiles,
                                 own_toolchains, own_platforms)
            cells += _expand(doc, find_recipe, path_to, entry, toolchains=own_toolchains,
                             pythons=own_pythons, platforms=own_platforms)
    excludes = [e for e in data.get("exclude", []) if e]
    doc.raise_if_problems()
    kept = [c for c in cells if not any(_excluded(c, e) for e in excludes)]
    return sorted(dict.fromkeys(kept), key=lambda c: c.id)  # a cell twice: its first entry


def _expand(doc: Document, find_recipe: Callable[[str], Path], path: KeyPath,
            entry: dict[str, Any], *, toolchains: list[str], pythons: list[str],
            platforms: list[str]) -> list[Cell]:
    try:
        recipe = load_recipe(find_recipe(entry["recipe"]))
    except UsageError as exc:
        doc.at_value((*path, "recipe"), exc.message, exc.hint)
        return []
    versions = _versions(doc, recipe, path, entry.get("versions"))
    arch_sets = _arch_sets(doc, recipe, path, entry.get("archs"))
    if len(arch_sets) > 1:
        doc.at_key((*path, "archs"), f"{recipe.name} has {len(arch_sets)} arch sets, but a "
                   "channel holds one arch set per version (pip picks by label, not by GPU)",
                   hint="list one set that covers every GPU you serve, e.g. '9.0;10.0;12.0+PTX'")
    if recipe.kind == "pure":  # py3-none-any: one wheel per channel, whatever Python and CPU
        pythons, platforms = pythons[:1], platforms[:1]
    needs = str(entry["needs"]) if entry.get("needs") in NEEDS else ""
    return [Cell(recipe=recipe.name, version=v, toolchain=t, archs=a, python=p, needs=needs,
                 platform=m, entry=path[-1] if isinstance(path[-1], int) else None)
            for v in versions for a in arch_sets for t in toolchains for p in pythons
            for m in platforms]


def _platforms(doc: Document, path: KeyPath, wanted: list[str] | None) -> list[str]:
    """A `platforms` list in wheelsmith's names (arm64 is aarch64, amd64 x86_64); an unknown
    one is a problem at its position."""
    found = []
    for position, value in enumerate(wanted or []):
        name = ALIASES.get(str(value).lower())
        if name is None:
            doc.at_value((*path, "platforms", position), f"unknown platform '{value}'",
                         f"one of {', '.join(KNOWN)} (arm64 and amd64 are read as those)")
        elif name not in found:
            found.append(name)
    return found


def _check_axes(doc: Document, path: KeyPath, profiles: dict[str, Profile],
                toolchains: list[str], pythons: list[str]) -> None:
    """Every toolchain is a profile, and every profile was resolved for every Python."""
    for position, name in enumerate(toolchains):
        profile = profiles.get(name)
        if profile is None:
            doc.at_value((*path, "toolchains", position), f"no toolchain profile '{name}'",
                         f"profiles: {', '.join(sorted(profiles))}")
            continue
        for index, python in enumerate(pythons):
            if python not in profile.pythons:
                doc.at_value((*path, "pythons", index), f"the {name} profile was resolved for "
                             f"Python {', '.join(profile.pythons)}, not {python}",
                             f"regenerate it with --python {python}, or exclude the cells")


def _check_platforms(doc: Document, path: KeyPath, profiles: dict[str, Profile],
                     toolchains: list[str], platforms: list[str]) -> None:
    """Every platform is one each profile that records its platforms was resolved for."""
    for name in toolchains:
        profile = profiles.get(name)
        recorded = profile.platforms if profile is not None else None  # None: not recorded
        for index, machine in enumerate(platforms):
            if recorded is not None and machine not in recorded:
                doc.at_value((*path, "platforms", index), f"the {name} profile was resolved "
                             f"for {', '.join(recorded)}, not {machine}",
                             "exclude the cells, or regenerate the profile once its pins have "
                             f"{machine} wheels")


def _versions(doc: Document, recipe: Recipe, path: KeyPath, wanted: list[str] | None
              ) -> list[str]:
    if not wanted:
        return [recipe.latest.version]
    known = {r.version for r in recipe.releases}
    for position, version in enumerate(wanted):
        if version not in known:
            doc.at_value((*path, "versions", position),
                         f"recipe {recipe.name} has no version {version}",
                         f"versions in {recipe.file.name}: {', '.join(sorted(known))}")
    return [v for v in wanted if v in known]


def _arch_sets(doc: Document, recipe: Recipe, path: KeyPath, wanted: list[str] | None
               ) -> list[str]:
    if recipe.kind == "pure":
        if wanted:
            doc.at_key((*path, "archs"), f"{recipe.name} is pure Python: archs do not apply")
        return [""]
    result = []
    for position, value in enumerate(wanted or [str(recipe.arch.default)]):
        try:
            archs = ArchSet.parse([value])
        except ArchParseError as exc:
            doc.at_value((*path, "archs", position), exc.message, exc.hint)
            continue
        if recipe.arch.unsupported(archs):
            doc.at_value((*path, "archs", position), f"{recipe.name} cannot be built for "
                         f"{', '.join(recipe.arch.unsupported(archs))}",
                         f"its knob only knows {recipe.arch.supported}")
            continue
        result.append(str(archs))
    return result


def _excluded(cell: Cell, rule: dict[str, str]) -> bool:
    values = cell.as_dict()
    return all(values.get(key) == value for key, value in rule.items())


def shard(cells: list[Cell], spec: str | None) -> list[Cell]:
    """`I/N`: every N-th cell starting at I (0-based)."""
    if not spec:
        return cells
    try:
        index, count = (int(part) for part in spec.split("/"))
    except ValueError:
        raise UsageError(f"--shard: '{spec}' is not I/N", hint="e.g. --shard 0/4") from None
    if count < 1 or not 0 <= index < count:
        raise UsageError(f"--shard: '{spec}' needs 0 <= I < N")
    return cells[index::count]


def github_matrix(cells: list[Cell], shards: int) -> str:
    """The `strategy.matrix` JSON a GitHub Actions plan job emits: each Python's cells split
    over up to `shards` runners, one entry per runner with its `python` (for setup-python) and
    its `shard` of that Python's cells (`wheelsmith nightly --python X.Y --shard I/N`)."""
    include = []
    for python in sorted({c.python for c in cells}, key=Version):
        mine = [c for c in cells if c.python == python]
        count = min(shards, len(mine))
        include += [{"python": python, "shard": f"{i}/{count}",
                     "cells": [c.id for c in mine[i::count]]} for i in range(count)]
    return json.dumps({"include": include}, separators=(",", ":"))
