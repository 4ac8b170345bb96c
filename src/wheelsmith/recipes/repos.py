"""Recipe repositories: where `wheelsmith build NAME` finds the recipe of NAME.

A repository has the layout of wheelsmith's own data: `recipes/NAME.yaml` and
`patches/NAME/VERSION/`. They are searched in order and the first match wins, as Spack's repos
are: the `--recipes DIR` options in the order given, then the directories in
$WHEELSMITH_RECIPES (separated by ':'), then the recipes wheelsmith ships (its data root's). A
recipe found again in a later repository is shadowed there; `wheelsmith recipes` shows both.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import Version

from wheelsmith import locations
from wheelsmith.errors import UsageError
from wheelsmith.recipes.model import Recipe, load_recipe, recipe_files

log = logging.getLogger(__name__)


ENV = "WHEELSMITH_RECIPES"


OPTION = "--recipes"


@dataclass(frozen=True, slots=True)
class Repo:
    root: Path
    origin: str  # --recipes, WHEELSMITH_RECIPES, or the data root's origin

    @property
    def recipes(self) -> Path:
        return self.root / "recipes"

    @property
    def user(self) -> bool:
        return self.origin in (OPTION, ENV)

    def describe(self) -> str:
        return f"{self.root} ({self.origin})"


@dataclass(frozen=True, slots=True)
class Entry:
    """One recipe file; `shadowed_by` is the earlier repository whose recipe of the same
    name is used instead."""

    name: str  # canonical
    file: Path
    repo: Repo
    shadowed_by: Repo | None = None


def check_user_repo(path: Path, origin: str) -> Path:
    """A user repository, resolved: it must exist and hold recipes."""
    if not path.is_dir():
        raise UsageError(f"{origin} {path}: no such directory",
                         hint=f"a recipe repository holds recipes/NAME.yaml (and patches/); "
                              f"start one with: wheelsmith recipe new NAME --recipes {path}")
    if next(recipe_files(path / "recipes"), None) is None:
        raise UsageError(f"{origin} {path}: holds no recipes (no {path / 'recipes'}/*.yaml)",
                         hint=f"point {origin} at the directory above recipes/, or add one: "
                              f"wheelsmith recipe new NAME --recipes {path}")
    return path.resolve()


def user_dirs() -> list[Path]:
    """The directories in $WHEELSMITH_RECIPES, in order."""
    return [Path(entry) for entry in os.environ.get(ENV, "").split(os.pathsep) if entry]


_option_dirs: list[Path] = []  # --recipes of this command line, checked


def use_option(paths: list[Path]) -> None:
    """The `--recipes` directories (already checked): searched before $WHEELSMITH_RECIPES."""
    _option_dirs[:] = paths


def repos() -> list[Repo]:
    """Every repository in search order; a directory named twice counts once."""
    builtin = locations.data_root()
    found: list[Repo] = []
    named = [(p, OPTION) for p in _option_dirs] + [(check_user_repo(p, ENV), ENV)
                                                   for p in user_dirs()]
    for root, origin in named:
        if root not in (r.root for r in found) and root != builtin.path:
            found.append(Repo(root, origin))
    return [*found, Repo(builtin.path, builtin.origin)]


def entries() -> list[Entry]:
    """Every recipe file of every repository, in search order, each marked with the
    repository that shadows it (None for the one in use)."""
    first: dict[str, Repo] = {}
    result = []
    for repo in repos():
        for file in recipe_files(repo.recipes):
            name = canonicalize_name(file.stem)
            result.append(Entry(name, file, repo, first.get(name)))
            first.setdefault(name, repo)
    return result


def _matches(name: str) -> list[Entry]:
    """Every recipe file of `name`, in search order; none is an error naming every repository
    searched."""
    wanted = canonicalize_name(name)
    matches = [e for e in entries() if e.name == wanted]
    if not matches:
        searched = "; ".join(r.describe() for r in repos())
        known = ", ".join(sorted({e.name for e in entries()})) or "none"
        raise UsageError(f"no recipe named '{name}' in {searched}",
                         hint=f"recipes there: {known}; write one with: wheelsmith recipe new "
                              f"{name} --recipes DIR")
    return matches


def find(name: str) -> Entry:
    """The recipe file called `name` in the first repository that has one."""
    return _matches(name)[0]


def recipe_file(name: str) -> Path:
    """The file of the recipe called `name` (see `find`)."""
    return find(name).file


def in_use() -> list[Entry]:
    """The first recipe file of each name (a later one may still add versions: resolve_recipe)."""
    return [e for e in entries() if e.shadowed_by is None]


def resolve_recipe(name: str, version: str | None = None) -> Recipe:
    """The recipe that builds `name` (at `version`). A user recipe adds versions to a later
    repository's recipe of the same name (the shipped one) instead of hiding it: `version` is
    taken from the first repository whose recipe lists it, and without a version the recipe
    holding the newest one is used (the first on a tie). A version two repositories list is
    the first one's; the other is named in a warning."""
    recipes = [load_recipe(e.file) for e in _matches(name)]
    if version is None:
        newest = max(Version(r.latest.version) for r in recipes)
        chosen = next(r for r in recipes if Version(r.latest.version) == newest)
        wanted = newest
    else:
        wanted = Version(version)
        holding = [r for r in recipes if any(Version(x.version) == wanted for x in r.releases)]
        if not holding:
            known = ", ".join(f"{r.file}: {', '.join(x.version for x in r.releases)}"
                              for r in recipes)
            raise UsageError(f"recipe {recipes[0].name} has no version {version}",
                             hint=f"versions in {known}")
        chosen = holding[0]
    for later in recipes[recipes.index(chosen) + 1:]:
        if any(Version(x.version) == wanted for x in later.releases):
            log.warning("warning: %s shadows %s for version %s (the first repository wins; "
                        "remove it from one of them to use the other)", chosen.file,
                        later.file, wanted)
    return chosen
