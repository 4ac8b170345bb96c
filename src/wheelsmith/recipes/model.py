"""Recipes: one YAML file per package in `recipes/`, turned into frozen, typed models.

Structure is checked against RECIPE_SCHEMA (schema.py, published for editors by `wheelsmith
schema`); meaning (archs, versions, sources, patch files and their sha256) is checked here.
Every problem is reported at once with its file:line:col.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from wheelsmith import document
from wheelsmith.arch import ArchParseError, ArchSet, parse_arch
from wheelsmith.document import Document, KeyPath
from wheelsmith.errors import UsageError
from wheelsmith.files import sha256_file
from wheelsmith.recipes.envnames import protection
from wheelsmith.recipes.libraries import HostLibrary, library_data, parse_libraries
from wheelsmith.recipes.schema import RECIPE_SCHEMA
from wheelsmith.recipes.sources import (
    CarriedSource,
    LocalSource,
    Source,
    carried_data,
    parse_carried,
    parse_source,
    source_data,
)
from wheelsmith.recipes.stableabi import StableAbi
from wheelsmith.recipes.stableabi import parse as parse_stable_abi


@dataclass(frozen=True, kw_only=True, slots=True)
class PatchRef:
    path: Path
    sha256: str
    description: str


CMAKE_ARGS = "CMAKE_ARGS"  # scikit-build's and scikit-build-core's options for CMake


@dataclass(frozen=True, kw_only=True, slots=True)
class ArchPolicy:
    env: str
    format: Literal["torch", "numbers", "cmake"]
    default: ArchSet
    min_cuda: tuple[tuple[str, Version], ...]
    supported: ArchSet | None = None  # None: whatever torch and nvcc accept
    # the package compiles its own -gencode list, whatever it is told: the pre-build check
    # puts the requested targets in its build file in place of that list (gencode.retarget)
    rewrite: bool = False

    def render(self, archs: ArchSet) -> str:
        """The value of `env`: `9.0;12.0+PTX` (torch), `90;120` (numbers), or CMake's
        CMAKE_CUDA_ARCHITECTURES list `90a-real;120` (cmake: `-real` is SASS alone, a bare
        number SASS and PTX), as a CMake option where `env` is CMAKE_ARGS. A family target is
        told as its base (`12.0f` as `120-real`): the pre-build check makes it the family's."""
        if self.format == "torch":
            return archs.torch_arch_list()
        if self.format == "numbers":
            return archs.numbers_list()
        listed = ";".join(a.base.code if a.ptx else f"{a.base.code}-real" for a in archs.archs)
        return f"-DCMAKE_CUDA_ARCHITECTURES={listed}" if self.env == CMAKE_ARGS else listed

    def unsupported(self, archs: ArchSet) -> list[str]:
        """Requested archs (with +PTX where asked) the package cannot be told to build."""
        if self.supported is None:
            return []
        allowed = {str(a) for a in self.supported.archs}
        return [str(a) for a in archs.archs if str(a) not in allowed]


@dataclass(frozen=True, kw_only=True, slots=True)
class Release:
    version: str
    source: Source
    patches: tuple[PatchRef, ...]
    env: tuple[tuple[str, str], ...]
    carried: tuple[CarriedSource, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class Recipe:
    name: str
    kind: Literal["extension", "pure", "cuda"]  # cuda: CUDA code that links no torch
    file: Path
    summary: str
    homepage: str
    arch: ArchPolicy
    env: tuple[tuple[str, str], ...]
    memory_per_job_gb: float
    host_only: tuple[str, ...]
    build_dir_env: str | None  # the variable the package takes its CMake build directory from
    build_requires: tuple[str, ...]  # pinned packages the build imports beside the toolchain's
    libraries: tuple[HostLibrary, ...]  # what it needs that is no Python package (libraries.py)
    smoke_imports: tuple[str, ...]
    smoke_gpu: str | None
    releases: tuple[Release, ...]
    stable_abi: StableAbi | None = None  # build.stable_abi (recipes/stableabi.py)

    @property
    def latest(self) -> Release:
        return max(self.releases, key=lambda r: Version(r.version))

    def release(self, version: str | None) -> Release:
        if version is None:
            return self.latest
        for release in self.releases:
            if Version(release.version) == Version(version):
                return release
        known = ", ".join(r.version for r in self.releases)
        raise UsageError(f"recipe {self.name} has no version {version}",
                         hint=f"versions in {self.file.name}: {known}")


def patch_dir(recipe_file: Path, package: str, version: str) -> Path:
    """`patches/<package>/<version>/`, next to the `recipes/` directory of `recipe_file`."""
    return recipe_file.resolve().parent.parent / "patches" / package / version


def load_recipe(path: Path, display: str | None = None) -> Recipe:
    """Load and fully validate one recipe; raises RecipeError listing every problem."""
    doc = document.load(path, display or _shown(path))
    data = document.validate(doc, RECIPE_SCHEMA)
    recipe = _build(doc, path, data if isinstance(data, dict) else {})
    doc.raise_if_problems()
    return recipe


def _wheelsmiths(doc: Document, where: KeyPath, env: dict[str, str]) -> None:
    """Each variable of a recipe's env that is wheelsmith's (a loader's, an interpreter's, the
    toolchain's: recipes/envnames.py), a problem at its key: set last, it would override what
    wheelsmith set for the build (PATH, LD_PRELOAD, PYTHONPATH, CUDA_HOME, MAX_JOBS...)."""
    for name in env:
        found = protection(name)
        if found is not None:
            doc.at_key((*where, name), *found.in_recipe())


def _build(doc: Document, path: Path, data: dict[str, Any]) -> Recipe:
    """Check meaning and build the model; `data` holds only structurally valid parts."""
    name = data.get("package", "")
    if name and not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?", name):
        doc.at_value(("package",), f"'package' is not a valid project name: '{name}'")
    arch = data.get("arch", {})
    build = data.get("build", {})
    smoke = data.get("smoke", {})
    policy = ArchPolicy(
        env=arch.get("env", "TORCH_CUDA_ARCH_LIST"),
        format=arch.get("format", "torch"),
        default=_arch_set(doc, arch.get("default", ["12.0"]), ("arch", "default")),
        min_cuda=_min_cuda(doc, arch.get("min_cuda", {})),
        supported=_arch_set(doc, arch["supported"], ("arch", "supported"))
        if "supported" in arch else None,
        rewrite=bool(arch.get("rewrite", False)),
    )
    _wheelsmiths(doc, ("build", "env"), build.get("env", {}))
    sets = {policy.env, CMAKE_ARGS, *build.get("env", {}),
            *filter(None, [build.get("build_dir_env")])}
    releases = tuple(_release(doc, path, name, i, entry, sets=sets) for i, entry in
                     enumerate(data.get("versions", [])) if entry is not None)
    _check_unique_versions(doc, releases)
    return Recipe(
        name=canonicalize_name(name),
        kind=data.get("kind", "extension"),
        file=path,
        summary=data.get("summary", ""),
        homepage=data.get("homepage", ""),
        arch=policy,
        env=tuple(sorted(build.get("env", {}).items())),
        memory_per_job_gb=float(build.get("memory_per_job_gb", 3.0)),
        host_only=tuple(build.get("host_only", [])),
        build_dir_env=build.get("build_dir_env"),
        build_requires=_requires(doc, build.get("requires", [])),
        libraries=parse_libraries(doc, build.get("libraries", []), data.get("kind", "")),
        smoke_imports=tuple(smoke.get("import", [])),
        smoke_gpu=smoke.get("gpu"),
        releases=releases,
        stable_abi=parse_stable_abi(doc, build.get("stable_abi")),
    )


def _requires(doc: Document, values: list[str]) -> tuple[str, ...]:
    """build.requires: each a requirement pinned to one version (`NAME==VERSION`, markers
    allowed), no extras (they would pull what the pins do not name), no name twice."""
    pins: dict[str, str] = {}
    for index, value in enumerate(values):
        path: KeyPath = ("build", "requires", index)
        try:
            requirement = Requirement(value)
        except InvalidRequirement as exc:
            doc.at_value(path, f"'build.requires[{index}]' is not a requirement: {exc}",
                         "write NAME==VERSION")
            continue
        operators = [s.operator for s in requirement.specifier]
        if requirement.url or requirement.extras or operators not in (["=="], ["==="]) or \
                "*" in str(requirement.specifier):
            doc.at_value(path, f"'build.requires[{index}]' is not pinned to one version: "
                               f"'{value}'", "write NAME==VERSION (no range, extras or URL): "
                                             "every build gets the same packages")
            continue
        name = canonicalize_name(requirement.name)
        if name in pins and requirement.marker is None:
            doc.at_value(path, f"'build.requires' names {name} twice")
        pins[name] = value
    return tuple(values)


def _arch_set(doc: Document, values: list[str | None], path: KeyPath) -> ArchSet:
    bad = False
    for index, value in enumerate(values):
        if value is None:
            bad = True
            continue
        try:
            parse_arch(value)
        except ArchParseError as exc:
            doc.at_value((*path, index), exc.message, exc.hint)
            bad = True
    if bad:
        return ArchSet(())
    try:
        return ArchSet.parse([v for v in values if v is not None])
    except ArchParseError as exc:
        doc.at_value(path, exc.message, exc.hint)
        return ArchSet(())


def _min_cuda(doc: Document, table: dict[str, str]) -> tuple[tuple[str, Version], ...]:
    result = []
    for key, value in table.items():
        path: KeyPath = ("arch", "min_cuda", key)
        try:
            arch = parse_arch(key)
        except ArchParseError as exc:
            doc.at_key(path, exc.message, exc.hint)
            continue
        try:
            result.append((arch.capability, Version(value)))
        except InvalidVersion:
            doc.at_value(path, f"'arch.min_cuda.{key}' is not a CUDA version: '{value}'",
                         "write e.g. '12.8'")
    return tuple(sorted(result))


def _release(doc: Document, path: Path, package: str, index: int,
             entry: dict[str, Any], *, sets: set[str]) -> Release:
    """`sets`: the variables the recipe sets for every version."""
    base: KeyPath = ("versions", index)
    version = entry.get("version", "0")
    try:
        if (local := Version(version).local) is not None:
            doc.at_value((*base, "version"), f"'{version}' has a local version label "
                         f"(+{local}): a wheel's local label is wheelsmith's (+cu...), which "
                         "says what built it", f"write the release's public version, "
                         f"'{Version(version).public}'")
    except InvalidVersion:
        doc.at_value((*base, "version"), f"'{version}' is not a valid version (PEP 440)")
    source = (parse_source(doc, path, entry["source"], version, (*base, "source"))
              if "source" in entry else LocalSource(path=Path()))
    patches = _patches(doc, path, package, version,
                       entries=entry.get("patches", []), base=base)
    env = tuple(sorted(entry.get("env", {}).items()))
    _wheelsmiths(doc, (*base, "env"), entry.get("env", {}))
    carried = parse_carried(doc, path, entry.get("carry", []), base, env={*sets, *dict(env)})
    return Release(version=version, source=source, patches=patches, env=env, carried=carried)


def _patches(doc: Document, recipe: Path, package: str, version: str, *,
             entries: list[dict[str, Any] | None], base: KeyPath) -> tuple[PatchRef, ...]:
    directory = patch_dir(recipe, package, version)
    refs = []
    for index, entry in enumerate(entries):
        where: KeyPath = (*base, "patches", index)
        if entry is None or "file" not in entry or "sha256" not in entry:
            continue  # reported by the schema
        patch = directory / entry["file"]
        refs.append(PatchRef(path=patch, sha256=entry["sha256"],
                             description=entry.get("description", "")))
        shown = _in_project(recipe, patch)
        if patch.exists() and not patch.is_file():
            doc.at_value((*where, "file"), f"{shown} is not a regular file",
                         "a patch is a regular file in the recipe's repository")
            continue
        if not patch.is_file():
            doc.at_value((*where, "file"), f"patch file not found: {shown}",
                         f"patches for {package} {version} live in "
                         f"{_in_project(recipe, directory)}/")
            continue
        actual = sha256_file(patch)
        if actual != entry["sha256"]:
            doc.at_value((*where, "sha256"), f"sha256 mismatch for {shown}: the file has {actual}",
                         "if you changed the patch on purpose, put the new sha256 here")
    listed = {r.path.name for r in refs}
    if directory.is_dir():
        for stray in sorted(p.name for p in directory.glob("*.patch")):
            if stray not in listed:
                doc.at_value((*base, "version"), f"{_in_project(recipe, directory / stray)} is "
                             "not listed in this version's patches",
                             "list it (with its sha256) or delete it")
    return tuple(refs)


def _in_project(recipe: Path, path: Path) -> str:
    """`path` relative to the project (the directory above recipes/)."""
    return str(path.relative_to(recipe.resolve().parent.parent))


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _check_unique_versions(doc: Document, releases: tuple[Release, ...]) -> None:
    seen: set[Version] = set()
    for index, release in enumerate(releases):
        try:
            parsed = Version(release.version)
        except InvalidVersion:
            continue
        if parsed in seen:
            doc.at_value(("versions", index, "version"),
                         f"version {release.version} is listed twice")
        seen.add(parsed)


def recipe_files(recipes_dir: Path) -> Iterator[Path]:
    yield from sorted(recipes_dir.glob("*.yaml"))


def canonical(recipe: Recipe, release: Release) -> dict[str, Any]:
    """Everything about (recipe, release) that changes the built wheel, as plain data."""
    return {
        "package": recipe.name,
        "kind": recipe.kind,
        "version": release.version,
        "source": source_data(release.source),
        "patches": [{"file": p.path.name, "sha256": p.sha256} for p in release.patches],
        "arch": {"env": recipe.arch.env, "format": recipe.arch.format,
                 **({"rewrite": True} if recipe.arch.rewrite else {})},
        "env": dict(recipe.env) | dict(release.env),
        **({"build_dir_env": recipe.build_dir_env} if recipe.build_dir_env else {}),
        **({"requires": list(recipe.build_requires)} if recipe.build_requires else {}),
        **({"stable_abi": recipe.stable_abi.floor} if recipe.stable_abi else {}),
        **({"carry": [carried_data(c) for c in release.carried]} if release.carried else {}),
        **({"libraries": [library_data(library) for library in recipe.libraries]}
           if recipe.libraries else {}),
    }
