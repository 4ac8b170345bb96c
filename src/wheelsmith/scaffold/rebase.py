"""A newer release of a shipped recipe: `recipe new NAME==NEWVER` for a NAME wheelsmith ships
starts from the shipped recipe (its arch knob, build variables, memory, host_only, smoke test)
and carries the patches of its nearest version over to the new sdist.

Each hunk is placed exactly, never fuzzily: where its old lines stand at the line it names
(the patch is kept byte for byte), else at the one place in the new file where they all stand
(the patch is written again at the new line numbers). A hunk whose lines stand nowhere, or in
more than one place, no longer applies: it is named by its patch, its header and the new file's
line that differs, and the patch is left out (a standard patch `recipe new` can write itself,
such as the arch-list one, is then written from the new setup.py instead)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import Version

from wheelsmith import locations
from wheelsmith.errors import PatchError, RecipeError
from wheelsmith.recipes.model import PatchRef, Recipe, Release, load_recipe
from wheelsmith.recipes.patch import (
    DEV_NULL,
    FilePatch,
    Hunk,
    ends_with_newline,
    file_diff,
    lines_of,
    parse,
    place,
    read_exactly,
    write_exactly,
)
from wheelsmith.scaffold.patches import Written

_NUMBER_RE = re.compile(r"^\d{4}-")


@dataclass(frozen=True, slots=True)
class Base:
    """The shipped recipe a new version starts from, and the release whose patches it
    carries."""

    recipe: Recipe
    release: Release


@dataclass(frozen=True, slots=True)
class Carried:
    """One patch of the base release, carried over (`written`) or not (None), and what
    happened, in one line."""

    patch: PatchRef
    written: Written | None
    line: str

    @property
    def stem(self) -> str:
        return _NUMBER_RE.sub("", self.patch.path.name).removesuffix(".patch")


def shipped_base(name: str, version: str) -> Base | None:
    """The shipped recipe of `name` and its release nearest below `version` (else the oldest),
    when wheelsmith ships `name` but not `version`; None otherwise."""
    file = locations.data_root().path / "recipes" / f"{canonicalize_name(name)}.yaml"
    if not file.is_file():
        return None
    try:
        recipe = load_recipe(file)
    except RecipeError:
        return None
    wanted = Version(version)
    if recipe.kind == "pure" or any(Version(r.version) == wanted for r in recipe.releases):
        return None
    older = [r for r in recipe.releases if Version(r.version) < wanted]
    release = max(older, key=lambda r: Version(r.version)) if older else min(
        recipe.releases, key=lambda r: Version(r.version))
    return Base(recipe, release)


def carry(release: Release, tree: Path) -> tuple[Carried, ...]:
    """Apply `release`'s patches to `tree` in order, each hunk where it stands exactly; the
    ones that no longer apply are left out (and the tree as it was for them)."""
    carried = []
    for ref in release.patches:
        try:
            carried.append(_carry_one(ref, tree, f"the new {tree.name}"))
        except PatchError as exc:
            carried.append(Carried(ref, None, f"{ref.path.name} of {release.version} no "
                                              f"longer applies: {exc.message}"))
    return tuple(carried)


def _carry_one(ref: PatchRef, tree: Path, where: str) -> Carried:
    text = read_exactly(ref.path)
    header = "" if text.startswith("--- ") or "\n--- " not in text else \
        text[:text.index("\n--- ") + 1]  # the patch's own description, kept
    results: dict[Path, tuple[str | None, str]] = {}
    moves: list[str] = []
    for file_patch in parse(text, ref.path.name):
        target = tree / file_patch.path
        before = read_exactly(target) if target.is_file() else None
        if file_patch.old_path != DEV_NULL and not target.is_file():
            raise PatchError(f"{file_patch.path} is not in {where}")
        after, moved = _place(file_patch, before or "", ref.path.name)
        results[target] = (before, after)
        moves += moved
    for target, (_, after) in results.items():
        target.parent.mkdir(parents=True, exist_ok=True)
        write_exactly(target, after)
    if not moves:
        return Carried(ref, Written(ref.path.name, ref.description, text),
                       f"{ref.path.name}: applies as it is")
    diff = "".join(file_diff(str(target.relative_to(tree)), before, after)
                   for target, (before, after) in results.items())
    return Carried(ref, Written(ref.path.name, ref.description, header + diff),
                   f"{ref.path.name}: rebased ({'; '.join(moves)})")


def _place(file_patch: FilePatch, text: str, name: str) -> tuple[str, list[str]]:
    """`text` with every hunk applied where its old lines stand exactly, and the moves."""
    lines = lines_of(text)
    ending = ends_with_newline(text)
    moves: list[str] = []
    shift = 0
    for hunk in file_patch.hunks:
        named = max(hunk.old_start - 1, 0) + shift if hunk.old else hunk.old_start + shift
        start = _where(hunk, lines, named, file_patch.path, name)
        if start != named:
            moves.append(f"hunk #{hunk.number} on {file_patch.path} {start - named:+d} "
                         f"line(s)")
        ending = place(lines, start, hunk, ending)
        shift = start - (max(hunk.old_start - 1, 0)) + len(hunk.new) - len(hunk.old)
    return "\n".join(lines) + ("\n" if lines and ending else ""), moves


def _where(hunk: Hunk, lines: list[str], named: int, path: str, name: str) -> int:
    """Where the hunk's old lines stand: at `named`, else their one place in the file."""
    size = len(hunk.old)
    if lines[named:named + size] == hunk.old:
        return named
    places = [i for i in range(len(lines) - size + 1) if lines[i:i + size] == hunk.old] \
        if size else []
    if len(places) == 1:
        return places[0]
    what = f"hunk #{hunk.number} (@@ {hunk.header} @@) of {name}"
    if places:
        shown = ", ".join(str(i + 1) for i in places)
        raise PatchError(f"{what}: its lines stand at {path} lines {shown}, not at one place")
    return _differs(hunk, lines, named, path, what)


def _differs(hunk: Hunk, lines: list[str], named: int, path: str, what: str) -> int:
    for index, want in enumerate(hunk.old):
        have = lines[named + index] if named + index < len(lines) else None
        if have != want:
            shown = "past the end of the file" if have is None else f"'{have.strip()}'"
            raise PatchError(f"{what}: {path}:{named + index + 1} is {shown}, the patch "
                             f"expects '{want.strip()}'")
    raise PatchError(f"{what}: {path} is shorter than the hunk")


def renumbered(carried: tuple[Carried, ...]) -> tuple[Written, ...]:
    """The patches carried over, numbered 0001, 0002, ... in their order (the ones that no
    longer apply leave no gap)."""
    kept = [c.written for c in carried if c.written is not None]
    return tuple(Written(f"{i:04d}-{_NUMBER_RE.sub('', w.file)}", w.description, w.text)
                 for i, w in enumerate(kept, start=1))

