"""Whether a wheel's shared objects load against a torch environment: every symbol they leave
undefined is looked up where the loader would find it, read from the ELF files themselves.

The environment is a site-packages directory (its `torch/lib` and `nvidia/*/lib`) and a
Python. An object's scope is what it links (DT_NEEDED), found through its own RUNPATH and
those directories, and what those link in turn; then the wheel's other objects, the Python's
own exports (the C API an extension uses is the interpreter's) and what `import torch` loads
into the global scope (`libtorch_global_deps.so` and what it links: the CUDA runtime). A
library that is not there and is no torch or CUDA library is the system's (libc, libstdc++:
the manylinux check owns them, and a symbol versioned for one is not looked up here). What
stays undefined — a symbol no library in scope exports, a torch or CUDA library that is not
there — refuses the wheel: it would fail at import with `undefined symbol`. Weak references
may stay undefined (the loader leaves them null). The driver's library comes with the driver:
it is read from the CUDA stubs the environment has (`nvidia/*/lib/stubs/libcuda.so`, which
export its API); where it has none, what an object that links the driver leaves undefined is
left to the driver and counted, not refused.
"""

from __future__ import annotations

import fnmatch
import json
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name

from wheelsmith import locations
from wheelsmith.builder.manylinux import provided_by_torch_or_cuda
from wheelsmith.errors import ToolchainError, WheelsmithError
from wheelsmith.toolchain import overlay
from wheelsmith.toolchain.env import probe_python
from wheelsmith.toolchain.select import profile_named
from wheelsmith.toolchain.venv import MARKER, venv_root
from wheelsmith.untrusted.elf import dynamic_symbols
from wheelsmith.untrusted.linkage import Linkage, demangle, linkage

DRIVER = ("libcuda.so*", "libnvidia-*.so*")  # the driver's: installed with it, never a wheel's
DRIVER_UNREAD = ""  # in `scope`'s missing list: a driver library with no stub to read
TORCH_LIBRARY = ("libtorch*.so*", "libc10*.so*")
GLOBAL_DEPS = "libtorch_global_deps.so"


@dataclass(frozen=True, slots=True)
class TorchEnv:
    """Where the wheel is loaded: the site-packages holding torch and its CUDA libraries, and
    the Python that loads it (None: its C API is not looked up)."""

    site: Path
    python: Path | None
    libraries: tuple[Path, ...] = ()  # more library directories: a build's host libraries'

    def torch_version(self) -> str | None:
        """The torch distribution's version, as its .dist-info directory names it."""
        found = sorted(self.site.glob("torch-*.dist-info"))
        return found[0].name.removesuffix(".dist-info").partition("-")[2] if found else None

    def search_dirs(self) -> tuple[Path, ...]:
        return (self.site / "torch" / "lib", *sorted(self.site.glob("nvidia/*/lib")),
                *self.libraries)


def env_of_python(python: Path) -> TorchEnv:
    """The environment of the interpreter `python` (asked for its site-packages)."""
    info = probe_python(python)
    if info.purelib is None:
        raise ToolchainError(f"{python} did not say where its site-packages is",
                             hint="give the path of a Python interpreter")
    return TorchEnv(Path(info.purelib), Path(info.executable or python))


def env_of_toolchain(name: str | None, python_version: str | None,
                     libraries: tuple[tuple[str, str], ...] = ()) -> TorchEnv | None:
    """The environment of the toolchain venv of profile `name` for that Python, where it is
    in the cache (None: no such profile, or its venv was not made here), with the library
    directories of the host libraries' wheels installed beside it for a build (`libraries`:
    (project, version) each; builder/hostlibs.py), where the cache holds them."""
    if name is None or python_version is None:
        return None
    try:
        root = venv_root(profile_named(name), python_version, locations.cache_dir())
        purelib = json.loads((root / MARKER).read_text())["purelib"]
    except (WheelsmithError, OSError, ValueError, KeyError, TypeError):
        return None
    return TorchEnv(Path(purelib), root / "bin" / "python",
                    host_library_dirs(f"{name}-py{python_version}-", libraries))


def host_library_dirs(prefix: str, libraries: tuple[tuple[str, str], ...]) -> tuple[Path, ...]:
    """The NVIDIA library directories of the cache's first host-libraries directory (named
    `prefix`...) that holds every one of `libraries` at its version."""
    if not libraries:
        return ()
    wanted = [f"{canonicalize_name(name).replace('-', '_')}-{version}.dist-info"
              for name, version in libraries]
    for site in sorted((locations.cache_dir() / overlay.LIBRARIES).glob(f"{prefix}*")):
        if site.is_dir() and all((site / info).is_dir() for info in wanted):
            return tuple(sorted(site.glob("nvidia/*/lib")))
    return ()


@dataclass(frozen=True, slots=True)
class Unresolved:
    """A symbol an object needs that nothing in its scope exports."""

    object: str  # the wheel's member
    symbol: str  # as the object names it
    shown: str  # demangled
    library: str  # the library that should have it

    def describe(self) -> str:
        return f"{self.object}: {self.shown} (from {self.library}) is not defined"


@dataclass(frozen=True, slots=True)
class Resolution:
    """What resolving every object's imports found."""

    torch: str | None  # the torch version resolved against
    resolved: int  # symbols found
    unresolved: tuple[Unresolved, ...]
    missing: tuple[tuple[str, str], ...]  # (object, a torch or CUDA library it links, not there)
    left_to_driver: int = 0  # undefined in an object that links a driver with no stub here

    @property
    def ok(self) -> bool:
        return not self.unresolved and not self.missing

    @property
    def where(self) -> str:
        """The environment, as messages name it."""
        return f"torch {self.torch}" if self.torch else "its environment (which has no torch)"

    def findings(self) -> list[str]:
        return [f"{obj}: links {soname}, which {self.where} does not have"
                for obj, soname in self.missing] + [u.describe() for u in self.unresolved]

    def as_dict(self) -> dict[str, object]:
        return {"torch": self.torch, "resolved": self.resolved,
                "unresolved": [{"object": u.object, "symbol": u.symbol, "demangled": u.shown,
                                "library": u.library} for u in self.unresolved],
                "missing_libraries": [{"object": o, "library": s} for o, s in self.missing],
                "left_to_the_driver": self.left_to_driver}


@dataclass
class _Libraries:
    """The libraries of one environment, each read once."""

    env: TorchEnv
    exports: dict[Path, frozenset[str]] = field(default_factory=dict)
    links: dict[Path, Linkage | None] = field(default_factory=dict)

    def find(self, soname: str, runpath: tuple[str, ...], origin: Path) -> Path | None:
        dirs = [Path(p.replace("$ORIGIN", str(origin)).replace("${ORIGIN}", str(origin)))
                for p in runpath]
        return next((d / soname for d in (*dirs, *self.env.search_dirs())
                     if (d / soname).is_file()), None)

    def stub(self, soname: str) -> Path | None:
        """The environment's stub of a driver library (it exports the driver's API)."""
        return next((d / "stubs" / name for d in self.env.search_dirs()
                     for name in (soname, soname.split(".so", maxsplit=1)[0] + ".so")
                     if (d / "stubs" / name).is_file()), None)

    def read(self, path: Path) -> tuple[frozenset[str], Linkage | None]:
        if path not in self.exports:
            self.exports[path] = dynamic_symbols(path) or frozenset()
            self.links[path] = linkage(path)
        return self.exports[path], self.links[path]

    def scope(self, start: Linkage, origin: Path) -> tuple[frozenset[str], list[str]]:
        """The exports of everything `start` links, breadth first, and the torch or CUDA
        libraries it links that are not there (a driver library without a stub here:
        `DRIVER_UNREAD`)."""
        names: set[str] = set()
        missing: list[str] = []
        seen: set[str] = set()
        queue = deque((soname, start.runpath, origin) for soname in start.needed)
        while queue:
            soname, runpath, where = queue.popleft()
            if soname in seen:
                continue
            seen.add(soname)
            driver = any(fnmatch.fnmatchcase(soname, p) for p in DRIVER)
            path = self.stub(soname) if driver else self.find(soname, runpath, where)
            if driver and path is None:
                missing.append(DRIVER_UNREAD)
                continue
            if path is None:
                missing += [soname] if provided_by_torch_or_cuda(soname) else []
                continue
            exported, linked = self.read(path)
            names |= exported
            if linked is not None:
                queue.extend((n, linked.runpath, path.parent) for n in linked.needed)
        return frozenset(names), missing


def python_exports(python: Path) -> frozenset[str]:
    """What the interpreter exports (a static build's executable) and its libpython."""
    binary = python.resolve()
    libraries = _Libraries(TorchEnv(binary.parent, None))
    exported, linked = libraries.read(binary)
    names = set(exported)
    for soname in linked.needed if linked is not None else ():
        path = libraries.find(soname, (*linked.runpath, "$ORIGIN/../lib"), binary.parent) \
            if linked is not None and soname.startswith("libpython") else None
        names |= libraries.read(path)[0] if path is not None else frozenset()
    return frozenset(names)


def resolve(objects: list[tuple[str, Path]], env: TorchEnv) -> Resolution:
    """Resolve the imports of `objects` ((member name, file)) against `env`."""
    libraries = _Libraries(env)
    read = {name: libraries.read(path) for name, path in objects}
    python = python_exports(env.python) if env.python is not None else frozenset()
    # `import torch` loads this library, and what it links, with RTLD_GLOBAL (the CUDA runtime)
    loaded, _ = libraries.scope(Linkage((GLOBAL_DEPS,), (), {}), env.site / "torch" / "lib")
    found = driver = 0
    unresolved: list[tuple[str, str, str]] = []
    missing: list[tuple[str, str]] = []
    for name, _ in objects:
        linked = read[name][1]
        if linked is None:
            continue
        scope, absent = libraries.scope(linked, env.site / Path(name).parent)  # installed
        missing += [(name, soname) for soname in absent if soname != DRIVER_UNREAD]
        others = frozenset().union(*(e for n, (e, _) in read.items() if n != name))
        for item in linked.imports:
            if item.weak or (item.library is not None and not _in_env(libraries, item.library)):
                continue
            if item.name in scope or item.name in others or item.name in python or \
                    item.name in loaded:
                found += 1
            elif DRIVER_UNREAD in absent and item.library is None:
                driver += 1
            else:
                unresolved.append((name, item.name, item.library or _torch_libraries(linked)))
    shown = demangle([symbol for _, symbol, _ in unresolved])
    return Resolution(env.torch_version(), found,
                      tuple(Unresolved(o, s, shown.get(s, s), lib) for o, s, lib in unresolved),
                      tuple(missing), driver)


UNKNOWN_PROVIDER = "the libraries it links"


def _torch_libraries(linked: Linkage) -> str:
    """The torch libraries an object links: where an unversioned symbol of it should be."""
    return " or ".join(n for n in linked.needed if is_torch_library(n)) or UNKNOWN_PROVIDER


def _in_env(libraries: _Libraries, soname: str) -> bool:
    """Whether a versioned import's library is one resolved here (torch's, CUDA's, one in the
    environment), not the system's."""
    return provided_by_torch_or_cuda(soname) or any(
        (d / soname).is_file() for d in libraries.env.search_dirs())


def is_torch_library(soname: str) -> bool:
    return any(fnmatch.fnmatchcase(soname, p) for p in TORCH_LIBRARY)


def exports_beside_torch(linked: Linkage, env: TorchEnv, origin: Path) -> frozenset[str]:
    """What an object's scope in `env` exports apart from torch's own libraries: the CUDA
    and other libraries it links (and theirs), and what `import torch` loads globally."""
    libraries = _Libraries(env)
    others = Linkage((*(n for n in linked.needed if not is_torch_library(n)), GLOBAL_DEPS),
                     (), {}, linked.runpath)
    return libraries.scope(others, origin)[0]
