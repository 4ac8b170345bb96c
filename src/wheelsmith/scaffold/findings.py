"""What `recipe new` found in an sdist (setup.py's reading, its CMake side, the patches it
made, the check's result) as one frozen model, and what follows from it: the kind of package,
its build variables, its host-only extensions and what its smoke test imports."""

from __future__ import annotations

import fnmatch
import keyword
from dataclasses import dataclass
from typing import TYPE_CHECKING

from wheelsmith.inventory import is_shared_object
from wheelsmith.recipes.sources import CarriedSource, GitSource, UrlSource
from wheelsmith.scaffold.buildsystem import NOTHING_PINNED, Pinned
from wheelsmith.scaffold.cmake import POLICY_MINIMUM, CMakeSide
from wheelsmith.scaffold.extensions import Extension, module_of
from wheelsmith.scaffold.libraries import Needed
from wheelsmith.scaffold.patches import (
    FORCE_CUDA,
    GPU_PATCH,
    PSUTIL_PATCH,
    StandardPatch,
    Written,
    needed,
)
from wheelsmith.scaffold.pindownloads import Pin
from wheelsmith.scaffold.rebase import Base, Carried
from wheelsmith.scaffold.sdist import Metadata, Sdist
from wheelsmith.scaffold.setup_py import Setup
from wheelsmith.scaffold.switches import Switch
from wheelsmith.toolchain.overlay import pin_name

if TYPE_CHECKING:
    from wheelsmith.scaffold.check import Checked


@dataclass(frozen=True, slots=True)
class Findings:
    """All `recipe new` read from the sdist, and the patches it made."""

    sdist: Sdist
    metadata: Metadata
    setup: Setup
    written: tuple[Written, ...]
    checked: Checked | None = None  # the check, once it ran
    base: Base | None = None  # the shipped recipe a newer version starts from (rebase.py)
    carried: tuple[Carried, ...] = ()  # its patches, carried over or not
    cmake: CMakeSide | None = None  # its build runs CMake (scaffold/cmake.py)
    # what setup.py imports of its build requirements the toolchain lacks (buildsystem.py):
    # (module, requirement, line), and the toolchain's name
    unheld: tuple[tuple[str, str, int], ...] = ()
    toolchain: str = ""
    excluded: tuple[tuple[str, str], ...] = ()  # (requirement, the version the toolchain holds)
    thc: tuple[tuple[str, int], ...] = ()  # where its sources include THC/THC.h (aten_api.py)
    prebuilt: tuple[str, ...] = ()  # the ELF files the sdist ships (builder/shipped.py)
    requires: Pinned = NOTHING_PINNED  # build.requires: what the toolchain lacks, pinned
    has_setup_py: bool = True  # else pyproject.toml alone (a pure backend, or CMake's)
    # the variables its build reads that a recipe may set, each with its file:line
    switches: tuple[tuple[str, str], ...] = ()
    # those that may turn its CUDA build on (switches.py): setup.py's, its own modules'
    switched: tuple[Switch, ...] = ()
    libraries: tuple[Needed, ...] = ()  # the host libraries it needs (scaffold/libraries.py)
    # what it needs at run time that the toolchain lacks (buildsystem.runtime_lacking): its
    # smoke test imports its extension modules alone
    runtime_lacks: tuple[str, ...] = ()
    pins: tuple[Pin, ...] = ()  # what its CMake would download, pinned (pindownloads.py)

    @property
    def carried_downloads(self) -> tuple[CarriedSource, ...]:
        return tuple(p.carried for p in self.pins if p.carried is not None)

    @property
    def pinned(self) -> dict[str, tuple[str, str]]:
        """For each download's file:line, its carry entry in words, or ("", why not)."""
        return {p.at: (_carry_words(p.carried), "") if p.carried else ("", p.why)
                for p in self.pins}

    @property
    def unheld_left(self) -> tuple[tuple[str, str, int], ...]:
        """The imports of build requirements the toolchain lacks that build.requires does not
        pin (its resolution failed)."""
        pinned = {pin_name(pin) for pin in self.requires.pins}
        return tuple(u for u in self.unheld if pin_name(u[1]) not in pinned)

    @property
    def needed(self) -> tuple[tuple[StandardPatch, int], ...]:
        """The standard patches to write by hand (patches.needed), less the one that takes
        psutil out where build.requires pins it."""
        pinned = {pin_name(pin) for pin in self.requires.pins}
        return tuple((patch, line) for patch, line in needed(self.setup, self.written)
                     if not (patch is PSUTIL_PATCH and "psutil" in pinned))

    @property
    def cmake_cuda(self) -> bool:
        """Its build runs CMake, which compiles CUDA: an extension of no sources is CMake's."""
        return self.cmake is not None and self.cmake.cuda_at is not None

    @property
    def kind(self) -> str:
        """pure, cuda (CUDA code that links no torch: a CUDA-only channel), or extension."""
        if self.pure:
            return "pure"
        return "cuda" if self.cmake_cuda and self.cmake and not self.cmake.links_torch \
            else "extension"

    @property
    def made(self) -> tuple[Written, ...]:
        """The patches `recipe new` made itself (not carried over from the base)."""
        kept = sum(c.written is not None for c in self.carried)
        return self.written[kept:]

    @property
    def env(self) -> tuple[tuple[str, str, str], ...]:
        """The recipe's build variables, each with what in the sdist asks for it (`file:line`
        and why: its comment): the CUDA switches of setup.py and of the modules of its own it
        runs, FORCE_CUDA=1 where a written patch reads it, CMake's policy minimum where a
        CMake file asks for an older policy version than the toolchain's CMake takes."""
        told = {s.name: s for s in self.switched if s.value is not None}
        found = {var: (value, told[var].note if var in told and told[var].value == value
                       else f"setup.py:{line}") for var, value, line in self.setup.env}
        for switch in told.values():
            found.setdefault(switch.name, (switch.value or "", switch.note))
        patch = next((w.file for w in self.written if GPU_PATCH.stem in w.file), None)
        if patch is not None and FORCE_CUDA not in found:
            found[FORCE_CUDA] = ("1", f"setup.py:{self.setup.needs_gpu_line or 0}: "
                                      f"{patch} makes it stand in for a GPU")
        policies = self.cmake.old_policies if self.cmake else ()
        if policies:
            more = f" (and {len(policies) - 1} more)" if len(policies) > 1 else ""
            found[POLICY_MINIMUM[0]] = (POLICY_MINIMUM[1], f"{policies[0][0]}: "
                                                           f"{policies[0][1]}{more}")
        return tuple((var, value, note) for var, (value, note) in found.items())

    @property
    def undecided(self) -> tuple[Switch, ...]:
        """The switches of its build whose value turning CUDA on could not be told."""
        return tuple(s for s in self.switched if s.value is None)

    @property
    def told(self) -> tuple[Switch, ...]:
        """The switches told from the modules of its own that setup.py runs (setup.py's are
        its own lines)."""
        own = {var for var, _, _ in self.setup.env}
        return tuple(s for s in self.switched if s.value is not None and s.name not in own)

    @property
    def pure(self) -> bool:
        """Never while setup.py declares an extension or builds one through a module of its
        own, or the sdist holds a .cu file."""
        return not self.setup.extensions and not self.setup.cuda_files and \
            self.setup.extension_build is None

    @property
    def host_only(self) -> tuple[str, ...]:
        globs = self._read_host_only() + tuple(g for _, g in self.configured_host() if g)
        return tuple(dict.fromkeys(globs))

    def _read_host_only(self) -> tuple[str, ...]:
        return tuple(Extension.glob(e.host_variant) if e.host_variant else Extension.glob(e.name)
                     for e in self.setup.extensions if e.host_variant or not (
                         e.cuda or (self.cmake_cuda and not e.sources)))

    def configured_host(self) -> tuple[tuple[str, str | None], ...]:
        """The extensions the check found C++ only that setup.py's reading did
        not, each with its host_only glob (None: no extension name says where it lies)."""
        found: list[tuple[str, str | None]] = []
        for leaf in self.checked.host_modules if self.checked else ():
            if is_shared_object(leaf):  # a library a CMake project links from no CUDA object
                found.append((leaf, f"*/{leaf}*"))
                continue
            module = module_of(leaf, self.setup.extensions)
            path = module.replace(".", "/") + ".so" if module else None
            if path is None or not any(fnmatch.fnmatch(path, g) for g in self._read_host_only()):
                found.append((leaf, Extension.glob(module) if module else None))
        return tuple(found)

    @property
    def imports(self) -> tuple[str, ...]:
        """What the smoke test imports; none for a package that links no torch (its shared
        libraries are loaded instead: its Python side needs runtime dependencies such as
        numpy, which the toolchain does not hold)."""
        return tuple(n for n in self._import_names() if _module_name(n))

    @property
    def not_modules(self) -> tuple[str, ...]:
        """What the sdist names as its modules that no import statement could name."""
        return tuple(n for n in self._import_names() if not _module_name(n))

    @property
    def not_built(self) -> tuple[str, ...]:
        """setup.py's extensions that the check's build did not configure (another branch of
        its switches: torch-ans's `_C_cpu` beside the `_C` a CUDA build makes)."""
        built = self.checked.extensions if self.checked else ()
        return tuple(e.name for e in self.setup.extensions if built and "*" not in e.name
                     and e.name.rsplit(".", 1)[-1] not in built)

    def _import_names(self) -> tuple[str, ...]:
        if self.kind == "cuda":
            return ()
        names = self._extension_names()
        left = self.runtime_left
        return tuple(dict.fromkeys([*(p for p in self.metadata.packages if p not in left),
                                    *names]))

    def _extension_names(self) -> list[str]:
        return [e.name for e in self.setup.extensions
                if "*" not in e.name and e.name not in self.not_built]

    @property
    def runtime_left(self) -> tuple[str, ...]:
        """The package's own modules its smoke test leaves out, for its extension modules
        alone: they need at run time what the toolchain lacks (runtime_lacks)."""
        if self.kind == "cuda" or not self.runtime_lacks or not self._extension_names():
            return ()
        return self.metadata.packages


def _module_name(name: str) -> bool:
    """A dotted name of identifiers that are not keywords: `import` takes it as it is."""
    return all(part.isidentifier() and not keyword.iskeyword(part) for part in name.split("."))


def _carry_words(carried: CarriedSource) -> str:
    source = carried.source
    pinned = f"sha256 {source.sha256}" if isinstance(source, UrlSource) else \
        f"commit {source.commit}" if isinstance(source, GitSource) else str(source)
    return (f"carry: into {carried.into}, pinned by {pinned}, cmake: {carried.cmake} (the "
            "offline build finds it there)")
