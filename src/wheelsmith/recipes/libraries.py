"""Host libraries: what a build needs that is no Python package (NCCL, cuDNN, a CUDA header
the compiler packages lack, HDF5), named in a recipe's `build.libraries`.

Each is a component NVIDIA publishes as a wheel, pinned exactly (`nvidia-nccl-cu13==2.28.3`;
a bare name is the toolchain's own copy, which the build is pointed at), or an archive of an
install prefix (include/, lib/) fetched by url and sha256, named by `name`. `cuda` limits an
entry to the toolchains of one CUDA major, so one recipe names the `-cu12` and `-cu13` wheels
of a library for the channels of each. The build's side (installing, pointing the build at
them, the gates of the wheel) is builder/hostlibs.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from wheelsmith import document
from wheelsmith.document import Document, KeyPath
from wheelsmith.recipes.sources import UrlSource

NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")  # PEP 508's project name
UNPINNED = re.compile(r"[*,;@<>!~\[\]\s]")  # a wildcard, a second clause, a marker, a URL
CUDA_SUFFIX = re.compile(r"-cu(\d+)$")  # nvidia-nccl-cu13: a wheel of one CUDA major
WHERE = ("build", "libraries")


@dataclass(frozen=True, kw_only=True, slots=True)
class HostLibrary:
    """One entry of build.libraries: a wheel (`NAME==VERSION`, or `NAME`: the toolchain's own)
    or an archive of an install prefix named `name`; for the toolchains of CUDA `cuda` only,
    where given."""

    index: int  # its place in build.libraries, for messages
    wheel: str | None = None
    archive: UrlSource | None = None
    name: str | None = None
    cuda: int | None = None

    @property
    def where(self) -> str:
        return f"build.libraries[{self.index}]"

    @property
    def project(self) -> str | None:
        """The wheel's canonical project name."""
        return canonicalize_name(Requirement(self.wheel).name) if self.wheel else None

    @property
    def version(self) -> str | None:
        """The wheel's pinned version; None for the toolchain's own (a bare name)."""
        if self.wheel is None:
            return None
        return next((spec.version for spec in Requirement(self.wheel).specifier), None)

    @property
    def for_cuda(self) -> int | None:
        """The CUDA major its wheel's name says it is built for (`-cu13`), if it says one."""
        found = CUDA_SUFFIX.search(self.project or "")
        return int(found[1]) if found else None

    def applies(self, cuda_major: int) -> bool:
        return self.cuda is None or self.cuda == cuda_major

    def describe(self) -> str:
        if self.wheel is not None:
            return self.wheel
        assert self.archive is not None
        return f"{self.name} (archive {self.archive.url})"


def parse_libraries(doc: Document, entries: list[dict[str, Any] | None], kind: str
                    ) -> tuple[HostLibrary, ...]:
    """build.libraries; every problem reported on `doc` at its line."""
    if entries and kind == "pure":
        doc.at_key(WHERE, "'build.libraries' in a pure recipe: a pure wheel compiles nothing",
                   "remove build.libraries, or set the recipe's kind to extension")
        return ()
    found: list[HostLibrary] = []
    for index, entry in enumerate(entries):
        if entry is None:
            continue
        library = _library(doc, index, entry)
        if library is None:
            continue
        key = (library.project or library.name or "").lower()
        if any((other.project or other.name or "").lower() == key and
               (other.cuda is None or library.cuda is None or other.cuda == library.cuda)
               for other in found):
            doc.at_value((*WHERE, index), f"'{library.where}' names {key} a second time for "
                         "the same toolchains", "name each library once (give each CUDA "
                         "major's entry its `cuda`)")
            continue
        found.append(library)
    return tuple(found)


def _library(doc: Document, index: int, entry: dict[str, Any]) -> HostLibrary | None:
    path: KeyPath = (*WHERE, index)
    shown = document.render_path(path)
    kinds = [key for key in ("wheel", "archive") if key in entry]
    if len(kinds) != 1:
        doc.at_value(path, f"'{shown}' needs exactly one of wheel, archive (found "
                           f"{', '.join(kinds) or 'none'})",
                     "wheel: NAME==VERSION (a wheel of the index), or archive: {url, sha256} "
                     "with name")
        return None
    cuda = int(entry["cuda"]) if "cuda" in entry else None
    if kinds == ["archive"]:
        if "name" not in entry:
            doc.at_key(path, f"'{shown}' is an archive without a name",
                       "name: the library's name, e.g. hdf5 (its variables: HDF5_ROOT, ...)")
            return None
        return HostLibrary(index=index, archive=UrlSource(url=entry["archive"]["url"],
                                                          sha256=entry["archive"]["sha256"]),
                           name=entry["name"], cuda=cuda)
    if "name" in entry:
        doc.at_key((*path, "name"), f"'{shown}.name' is for an archive: a wheel's variables "
                   "are named after the directories it installs", "remove it")
    library = HostLibrary(index=index, wheel=_wheel(doc, (*path, "wheel"), entry["wheel"]),
                          cuda=cuda)
    if library.wheel is None:
        return None
    if cuda is not None and library.for_cuda not in (None, cuda):
        doc.at_value((*path, "cuda"), f"'{shown}': {library.project} is built for CUDA "
                     f"{library.for_cuda}, but its cuda says {cuda}",
                     f"write cuda: \"{library.for_cuda}\", or name the wheel of CUDA {cuda}")
    return library


def _wheel(doc: Document, path: KeyPath, value: str) -> str | None:
    """NAME==VERSION (or ===), or a bare NAME: no range, extras, URL or markers."""
    shown = document.render_path(path)
    value = value.strip()
    name = re.match(r"[\w.-]*", value)[0]  # type: ignore[index]
    rest = value[len(name):].strip()
    operator = next((op for op in ("===", "==") if rest.startswith(op)), "")
    version = rest[len(operator):].strip()
    if not NAME.fullmatch(name):
        doc.at_value(path, f"'{shown}' does not start with a project name: '{value}'",
                     "write NAME==VERSION, e.g. nvidia-nccl-cu13==2.30.7")
    elif rest and (not operator or UNPINNED.search(version)):
        doc.at_value(path, f"'{shown}' is not pinned to one version: '{value}'",
                     "write NAME==VERSION (no range, extras, markers or URL: `cuda` picks the "
                     "toolchains), or NAME alone for the toolchain's own copy")
    elif operator and not _is_version(version):
        doc.at_value(path, f"'{shown}': '{version}' is not a version ({value})",
                     f"write {name}==VERSION, a release on the index pip uses")
    else:
        return f"{name}{operator}{version}"
    return None


def _is_version(text: str) -> bool:
    try:
        Version(text)
    except InvalidVersion:
        return False
    return True


def library_data(library: HostLibrary) -> dict[str, Any]:
    """What the content key holds of an entry."""
    data: dict[str, Any] = {"wheel": library.wheel} if library.wheel else {
        "archive": {"url": library.archive.url, "sha256": library.archive.sha256}
        if library.archive else {}, "name": library.name}
    return data | ({"cuda": str(library.cuda)} if library.cuda is not None else {})
