"""A build's host libraries (`build.libraries`, recipes/libraries.py): what it needs that is
no Python package, provided before it compiles.

- A wheel the toolchain does not hold (`nvidia-cuda-profiler-api==13.0.85`) is installed,
  pinned and without its dependencies, beside the toolchain's packages (toolchain/overlay.py:
  once per toolchain venv and pin set, from the index pip uses).
- A wheel the toolchain holds (torch's NCCL and cuDNN) is its copy, reused: nothing is
  installed. Another version is refused before anything is fetched: torch loads its own at
  run time, so a build against another would say what did not happen. A bare name
  (`nvidia-nccl-cu13`) means the toolchain's copy, whichever version its profile pins.
- Either way the finished wheel requires the wheel it was built against (Requires-Dist,
  `Provided.requirement`: that version or newer within its major, the shared objects' ABI),
  so a user's pip installs it too; the build's binary audit and smoke test find its shared
  objects where that install puts them.
- An archive (url, sha256) of an install prefix is fetched and unpacked once into the cache.

Where each lies is read from its files, never assumed: a wheel's from its RECORD, an
archive's from its tree. An install prefix is the directory above an `include` or `lib`
directory (`nvidia/nccl`, `nvidia/cu13`, an archive's top). The build gets every prefix's
include directory on CPATH (after the toolchain's), its library directory on LIBRARY_PATH,
the prefix on CMAKE_PREFIX_PATH, and, for a prefix named after its library (not the CUDA
toolkit's tree, `nvidia/cuNN`, whose variables are the toolchain's), the variables CMake find
modules and setup.py files read: NAME_ROOT, NAME_ROOT_DIR, NAME_HOME, NAME_PATH, NAME_DIR (its
CMake package file's directory where it has one, else the prefix), NAME_INCLUDE_DIR and
NAME_LIB_DIR. NVIDIA's wheels hold only versioned shared objects (libnccl.so.2), so the
linker names a `-lnccl` or CMake's find_library looks for are links in the work directory's
`host-libraries/lib`, on LIBRARY_PATH and CMAKE_PREFIX_PATH too. Every variable is
wheelsmith's: `--env` cannot set one (buildenv.protection), nor the recipe's build.env.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass
from importlib.metadata import distributions
from pathlib import Path, PurePosixPath
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from wheelsmith.errors import SourceError, UsageError
from wheelsmith.files import exclusive_lock
from wheelsmith.recipes.fetch import fetch
from wheelsmith.recipes.libraries import HostLibrary
from wheelsmith.recipes.model import Recipe
from wheelsmith.toolchain import overlay
from wheelsmith.toolchain.env import Toolchain

INSTALLED, TOOLCHAIN, ARCHIVE = "installed", "toolchain", "archive"
ORIGIN_WORDS = {INSTALLED: "installed beside the toolchain", TOOLCHAIN: "the toolchain's",
                ARCHIVE: "unpacked from its archive"}
LINKS = "host-libraries"  # in the work directory: lib/ holds the linker names
LIBRARIES_AS = "/wheelsmith/libraries"  # the installed libraries' name in the binaries
CUDA_TREE = re.compile(r"cu\d+|cuda(_\w+)?")  # nvidia/cu13, CUDA 12's nvidia/cuda_runtime
SHARED = re.compile(r"^lib.+\.so(\.\d+)*$")
CONFIG = re.compile(r"^.+(Config|-config)\.cmake$")
SUFFIXES = ("ROOT", "ROOT_DIR", "HOME", "PATH")  # each the prefix


@dataclass(frozen=True, slots=True)
class Prefix:
    """One install prefix of a library: its include and library directories, its CMake
    package file's directory, and the name of its variables (None: the CUDA toolkit's tree)."""

    root: Path
    name: str | None
    include: Path | None
    lib: Path | None
    cmake: Path | None = None

    def variables(self) -> dict[str, str]:
        if self.name is None:
            return {}
        found = {f"{self.name}_{suffix}": str(self.root) for suffix in SUFFIXES}
        found[f"{self.name}_DIR"] = str(self.cmake or self.root)
        if self.include is not None:
            found[f"{self.name}_INCLUDE_DIR"] = str(self.include)
        if self.lib is not None:
            found[f"{self.name}_LIB_DIR"] = str(self.lib)
        return found


@dataclass(frozen=True, slots=True)
class Provided:
    """A host library as this build has it: where from, its version, the directory its
    files lie in (`site`), its install prefixes and its shared objects."""

    library: HostLibrary
    origin: str  # INSTALLED, TOOLCHAIN or ARCHIVE
    version: str | None
    site: Path
    prefixes: tuple[Prefix, ...]
    shared: tuple[Path, ...] = ()

    @property
    def what(self) -> str:
        if self.library.project is not None:
            return f"{self.library.project} {self.version}"
        return f"{self.library.name} ({self.library.archive.url if self.library.archive else ''})"

    def requirement(self) -> str | None:
        """What the finished wheel requires of it: its wheel's project at this version or
        newer within its major (its shared objects' ABI); None for an archive (no wheel to
        require: linked statically, or the user's to provide)."""
        if self.origin == ARCHIVE or self.version is None:
            return None
        return f"{self.library.project}>={self.version},=={self.version.split('.')[0]}.*"

    def lib_dirs(self) -> tuple[Path, ...]:
        return tuple(p.lib for p in self.prefixes if p.lib is not None)

    def describe(self) -> str:
        where = ", ".join(str(p.root.relative_to(self.site)) if p.root != self.site else "."
                          for p in self.prefixes)
        return f"{self.what} ({ORIGIN_WORDS[self.origin]}: {where})"

    def record(self) -> dict[str, Any]:
        """What the provenance says of it."""
        archive = self.library.archive
        return {"library": self.library.describe(), "from": self.origin,
                **({"project": self.library.project} if self.library.project else {}),
                **({"version": self.version} if self.version else {}),
                **({"requires": self.requirement()} if self.requirement() else {}),
                **({"name": self.library.name, "url": archive.url, "sha256": archive.sha256}
                   if archive is not None else {}),
                "prefixes": [p.root.relative_to(self.site).as_posix() for p in self.prefixes],
                "variables": sorted(v for p in self.prefixes for v in p.variables())}


def applicable(recipe: Recipe, toolchain: Toolchain) -> tuple[HostLibrary, ...]:
    return tuple(lib for lib in recipe.libraries if lib.applies(toolchain.torch_cuda.major))


def held(toolchain: Toolchain) -> dict[str, str]:
    """The toolchain's pinned packages: name -> version."""
    found: dict[str, str] = {}
    for pin in overlay.applicable(toolchain.pins, toolchain):
        requirement = Requirement(pin)
        found[canonicalize_name(requirement.name)] = next(
            (spec.version for spec in requirement.specifier), "")
    return found


def check(recipe: Recipe, toolchain: Toolchain) -> None:
    """Before anything is fetched: each wheel that applies is of the toolchain's CUDA major,
    and one the toolchain holds is its version (or a bare name)."""
    holds = held(toolchain)
    major = toolchain.torch_cuda.major
    for library in applicable(recipe, toolchain):
        project, version = library.project, library.version
        at = f"{recipe.file}: {library.where}"
        if project is None:
            continue
        if library.for_cuda not in (None, major):
            raise UsageError(f"{at}: {project} is built for CUDA {library.for_cuda}, and the "
                             f"toolchain {toolchain.name} is CUDA {toolchain.torch_cuda}",
                             hint=f"give the entry cuda: \"{library.for_cuda}\", and name the "
                                  f"wheel of CUDA {major} in an entry of its own")
        if project in holds and version not in (None, holds[project]):
            raise UsageError(f"{at} names {library.wheel}, and the toolchain {toolchain.name} "
                             f"holds {project}=={holds[project]}: torch loads its own at run "
                             "time", hint=f"write wheel: {project} (the toolchain's copy, "
                                          "whichever version its profile pins)")
        if project not in holds and version is None:
            raise UsageError(f"{at} names {project} alone, the toolchain's copy, and the "
                             f"toolchain {toolchain.name} holds none",
                             hint=f"pin the wheel to install: {project}==VERSION")


def provide(recipe: Recipe, toolchain: Toolchain, work: Path, cache: Path
            ) -> tuple[Provided, ...]:
    """The recipe's host libraries for this toolchain, installed or fetched where they must
    be, and their linker names in `work`/host-libraries/lib."""
    wanted = applicable(recipe, toolchain)
    holds = held(toolchain)
    pins = tuple(lib.wheel for lib in wanted if lib.wheel and lib.project not in holds)
    installed = overlay.ensure(pins, toolchain, cache, what="the host libraries",
                               folder=overlay.LIBRARIES) if pins else None
    found = []
    for library in wanted:
        if library.archive is not None:
            found.append(_archive(library, cache))
        elif library.project in holds:
            assert toolchain.site is not None  # a toolchain of pins knows its site-packages
            found.append(_wheel(library, toolchain.site, TOOLCHAIN, toolchain))
        else:
            assert installed is not None
            found.append(_wheel(library, installed, INSTALLED, toolchain))
    _check_variables(recipe, found)
    link_names(found, work / LINKS)
    return tuple(found)


def _wheel(library: HostLibrary, site: Path, origin: str, toolchain: Toolchain) -> Provided:
    """An installed wheel's library, read from its RECORD in `site`."""
    dist = next((d for d in distributions(path=[str(site)])
                 if canonicalize_name(d.metadata["Name"] or "") == library.project), None)
    if dist is None:
        raise SourceError(f"{library.where}: {library.wheel} is not installed in {site}",
                          hint="remove the directory to install it again")
    files = [PurePosixPath(str(f)) for f in dist.files or [] if ".." not in str(f)]
    cuda_home = _relative(toolchain.cuda_home, site)
    prefixes = [prefix for prefix in layout(site, files, lambda p: None if p == cuda_home or
                                            CUDA_TREE.fullmatch(p.name) else p.name)]
    _check_wheel_layout(library, prefixes, site, toolchain, origin)
    return Provided(library, origin, dist.version, site, tuple(prefixes),
                    tuple(site / f for f in files if SHARED.match(f.name)))


def _relative(path: Path, site: Path) -> PurePosixPath | None:
    try:
        return PurePosixPath(path.resolve().relative_to(site.resolve()).as_posix())
    except ValueError:
        return None


def _check_wheel_layout(library: HostLibrary, prefixes: list[Prefix], site: Path,
                        toolchain: Toolchain, origin: str) -> None:
    """A wheel that installs no include or lib directory, into another CUDA's tree, or (one
    installed beside it) a header of the toolchain's CUDA toolkit is refused."""
    if not prefixes:
        raise UsageError(f"{library.where}: {library.wheel} installs no include or lib "
                         "directory: it is no library a build compiles or links against",
                         hint="name the wheel that holds the headers and libraries")
    major = toolchain.torch_cuda.major
    for prefix in prefixes:
        if (found := re.fullmatch(r"cu(\d+)", prefix.root.name)) and int(found[1]) != major:
            raise UsageError(f"{library.where}: {library.wheel} installs into "
                             f"{prefix.root.relative_to(site)}, CUDA {found[1]}'s tree, and the "
                             f"toolchain {toolchain.name} is CUDA {toolchain.torch_cuda}",
                             hint=f"name its release for CUDA {major}")
        shadowed = _shadowed(prefix, toolchain.cuda_home / "include") \
            if origin == INSTALLED else None
        if shadowed is not None:
            raise UsageError(f"{library.where}: {library.wheel} holds {shadowed}, a header of "
                             f"the toolchain's CUDA toolkit: it would stand in for the "
                             "toolkit's own", hint="the toolchain's CUDA provides it: remove "
                                                   "the entry, or use a toolchain of that CUDA")


def _shadowed(prefix: Prefix, toolkit: Path) -> str | None:
    if prefix.include is None:
        return None
    return next((f.relative_to(prefix.include).as_posix() for f in sorted(
        prefix.include.rglob("*")) if f.is_file() and
                 (toolkit / f.relative_to(prefix.include)).exists()), None)


def layout(site: Path, files: list[PurePosixPath], name_of: Any) -> list[Prefix]:
    """The install prefixes of `files` (relative to `site`): each directory above a file's
    first `include` or `lib`/`lib64` part, with those directories and the directory of a CMake
    package file under it; `name_of(prefix)` names its variables (None: none)."""
    roles: dict[PurePosixPath, dict[str, Path]] = {}
    for file in files:
        parts = file.parts
        at = next((i for i, part in enumerate(parts[:-1])
                   if part in ("include", "lib", "lib64")), None)
        if at is None:
            continue
        prefix = PurePosixPath(*parts[:at])
        role = "include" if parts[at] == "include" else "lib"
        found = roles.setdefault(prefix, {})
        found.setdefault(role, site / prefix / parts[at])
        if CONFIG.match(file.name):
            found.setdefault("cmake", (site / file).parent)
    return [Prefix(site / prefix, _variable(name_of(prefix)), found.get("include"),
                   found.get("lib"), found.get("cmake")) for prefix, found in sorted(
        roles.items())]


def _variable(name: str | None) -> str | None:
    return re.sub(r"\W", "_", name).upper() if name else None


def _archive(library: HostLibrary, cache: Path) -> Provided:
    """An archive's library: unpacked once into the cache; its prefix the shallowest directory
    above an include or lib directory."""
    root = unpacked(library, cache)
    files = [PurePosixPath(p.relative_to(root).as_posix()) for p in sorted(root.rglob("*"))
             if p.is_file() and p.name != overlay.COMPLETE]
    prefixes = layout(root, files, lambda _: library.name)
    if not prefixes:
        raise SourceError(f"{library.where}: the archive {library.describe()} holds no include "
                          "or lib directory", hint="give the archive of an install prefix "
                                                   "(include/, lib/)")
    depth = min(len(p.root.parts) for p in prefixes)
    top = [p for p in prefixes if len(p.root.parts) == depth]
    if len(top) > 1:
        named = ", ".join(str(p.root.relative_to(root)) for p in top)
        raise SourceError(f"{library.where}: the archive {library.describe()} holds "
                          f"{len(top)} install prefixes ({named})",
                          hint="give the archive of one install prefix (include/, lib/)")
    return Provided(library, ARCHIVE, None, root, (top[0],),
                    tuple(root / f for f in files if SHARED.match(f.name)))


def unpacked(library: HostLibrary, cache: Path) -> Path:
    """The archive's tree in the cache (its top directory), fetched and unpacked once."""
    assert library.archive is not None
    root = cache / overlay.LIBRARIES / "archives" / library.archive.sha256[:32]
    if (root / overlay.COMPLETE).is_file():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(root.parent / f"{root.name}.lock"):
        if not (root / overlay.COMPLETE).is_file():
            shutil.rmtree(root, ignore_errors=True)
            staging = Path(tempfile.mkdtemp(prefix=f".{root.name}-", dir=root.parent))
            try:
                tree = fetch(library.archive, staging / "tree", cache)
                (tree / overlay.COMPLETE).write_text(library.archive.sha256 + "\n")
                tree.rename(root)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
    return root


def _check_variables(recipe: Recipe, found: list[Provided]) -> None:
    """Two prefixes whose variables share a name are refused: each variable says one place.
    (A recipe's build.env cannot set one: recipes/envnames.py refuses it where it is read.)"""
    taken: dict[str, str] = {}
    for provided in found:
        for prefix in provided.prefixes:
            for name in prefix.variables():
                if name in taken and taken[name] != provided.library.where:
                    raise UsageError(f"{recipe.file}: {provided.library.where} and "
                                     f"{taken[name]} both set {name}",
                                     hint="name the library once")
                taken[name] = provided.library.where


def linker_name(soname: str) -> str:
    """The name a `-l` finds a shared object by: libnccl.so for libnccl.so.2."""
    return re.sub(r"(\.so)(\.\d+)+$", r"\1", soname)


def link_names(found: list[Provided], links: Path) -> None:
    """In `links`/lib, a link by its linker name (libnccl.so) to each versioned shared object
    (libnccl.so.2) of a library directory that lacks it; made anew each build."""
    shutil.rmtree(links, ignore_errors=True)
    (links / "lib").mkdir(parents=True)
    for provided in found:
        for so in provided.shared:
            name = linker_name(so.name)
            target = links / "lib" / name
            if name != so.name and not (so.parent / name).exists() and not target.exists():
                target.symlink_to(so)


def environment(found: tuple[Provided, ...], links: Path | None) -> dict[str, str]:
    """What the build is told of its host libraries (less CPATH: `include_dirs`)."""
    if not found:
        return {}
    prefixes = [p for provided in found for p in provided.prefixes]
    env = {name: value for p in prefixes for name, value in p.variables().items()}
    libs = [str(p.lib) for p in prefixes if p.lib] + ([str(links / "lib")] if links else [])
    roots = [str(p.root) for p in prefixes] + ([str(links)] if links else [])
    return {**env, "LIBRARY_PATH": ":".join(dict.fromkeys(libs)),
            "CMAKE_PREFIX_PATH": ":".join(dict.fromkeys(roots))}


def include_dirs(found: tuple[Provided, ...]) -> list[Path]:
    return list(dict.fromkeys(p.include for provided in found for p in provided.prefixes
                              if p.include))


def requirements(found: tuple[Provided, ...]) -> tuple[str, ...]:
    return tuple(sorted(filter(None, (provided.requirement() for provided in found))))


def lib_dirs(found: tuple[Provided, ...]) -> tuple[Path, ...]:
    """Every library directory of the host libraries: where the binary audit and a torch-free
    wheel's smoke test find their shared objects (as a user's pip install of the required
    wheels puts them)."""
    return tuple(dict.fromkeys(d for provided in found for d in provided.lib_dirs()))


def path_maps(found: tuple[Provided, ...]) -> list[tuple[Path, str]]:
    """Each installed or unpacked library's directory and its name in the binaries (the
    toolchain's are the toolchain's)."""
    return [(p.site, LIBRARIES_AS if p.origin == INSTALLED else f"{LIBRARIES_AS}/{p.library.name}")
            for p in found if p.origin != TOOLCHAIN]
