"""The sdist `recipe new` reads: chosen on the index pip uses (pinned by the sha256 the index
lists), unpacked (checked like every download), and its metadata."""

from __future__ import annotations

import email.parser
import re
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from wheelsmith import locations
from wheelsmith.builder import shipped
from wheelsmith.errors import UsageError, WheelsmithError
from wheelsmith.recipes import fetch, simple
from wheelsmith.recipes.sources import PypiSource
from wheelsmith.untrusted import local
from wheelsmith.untrusted.text import one_line


@dataclass(frozen=True, slots=True)
class Sdist:
    project: str
    version: str
    filename: str
    sha256: str


@dataclass(frozen=True, slots=True)
class Metadata:
    summary: str
    homepage: str | None
    packages: tuple[str, ...]  # top-level import names
    requires: tuple[str, ...] = ()  # PKG-INFO's Requires-Dist, as written


def choose_sdist(project: str, version: str | None) -> Sdist:
    """The sdist of `version` (default: the newest final release that has one) and the sha256
    the index lists for it."""
    page = simple.simple_page(project, missing_ok=True)
    if page is None:
        raise UsageError(f"{simple.package_index().shown} has no project '{project}'",
                         hint="check the name (the index's own spelling), or the index pip "
                              "uses (`pip config list`)")
    sdists: dict[Version, simple.PageFile] = {}
    for file in page.files:
        found = _sdist_version(project, file.filename)
        if found is not None and file.sha256:
            sdists.setdefault(found, file)
    if version is not None:
        chosen = next((v for v in sdists if v == _version(version)), None)
        if chosen is None:
            listed = ", ".join(str(v) for v in sorted(sdists)[-8:]) or "none"
            raise UsageError(f"{page.url} has no sdist of {project} {version}",
                             hint=f"versions with an sdist there: {listed}")
    else:
        finals = [v for v in sdists if not v.is_prerelease]
        if not finals:
            raise UsageError(f"{page.url} has no sdist of {project}",
                             hint="wheelsmith builds from sources: give a git source in the "
                                  "recipe instead")
        chosen = max(finals)
    file = sdists[chosen]
    spelled = re.sub(r"\.(tar\.gz|zip)$", "", file.filename).rpartition("-")[2]
    assert file.sha256 is not None  # chosen among those with one
    return Sdist(project, spelled, file.filename, file.sha256)


def _version(text: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion as exc:
        raise UsageError(f"'{text}' is not a version") from exc


def _sdist_version(project: str, filename: str) -> Version | None:
    for suffix in (".tar.gz", ".zip"):
        if filename.endswith(suffix):
            name, _, version = filename[: -len(suffix)].rpartition("-")
            if canonicalize_name(name) == canonicalize_name(project):
                try:
                    return Version(version)
                except InvalidVersion:
                    return None
    return None


def unpacked(sdist: Sdist, work: Path) -> Path:
    """The sdist, downloaded into the cache (sha256 checked) and unpacked into `work`."""
    source = PypiSource(project=sdist.project, version=sdist.version, sha256=sdist.sha256)
    return fetch.fetch(source, work, locations.cache_dir())


def read_metadata(tree: Path) -> Metadata:
    """The sdist's summary, home page and top-level modules (PKG-INFO, top_level.txt, else its
    package directories): text from the sdist, each value one line as it shows it."""
    message = email.parser.Parser().parsestr(_text(tree / "PKG-INFO"))
    homepage = message.get("Home-page")
    for url in message.get_all("Project-URL") or []:
        label, _, link = str(url).partition(",")
        if homepage is None and label.strip().lower() in ("homepage", "source", "repository"):
            homepage = link.strip()
    listed = next(tree.glob("*.egg-info/top_level.txt"), None)  # what setup.py installs
    packages = sorted(line.strip() for line in _text(listed).splitlines() if line.strip()) \
        if listed is not None else sorted(p.parent.name for pattern in ("*/__init__.py",
                                                                      "src/*/__init__.py")
                                          for p in tree.glob(pattern))
    return Metadata(one_line(str(message.get("Summary") or "").strip()),
                    one_line(str(homepage).strip()) if homepage else None, tuple(packages),
                    tuple(str(r) for r in message.get_all("Requires-Dist") or []))


METADATA_MAX_BYTES = 4 << 20  # PKG-INFO holds the README: tens of KB


def _text(path: Path) -> str:
    """A metadata file of the sdist, decoded as far as it is UTF-8; "" when there is none, it
    is no regular file, or it is larger than METADATA_MAX_BYTES (a summary is then not
    shown: nothing depends on it)."""
    try:
        data = local.read_at_most(path, METADATA_MAX_BYTES)
    except (OSError, WheelsmithError):
        return ""
    return "" if len(data) > METADATA_MAX_BYTES else data.decode(errors="replace")


def prebuilt_binaries(tree: Path) -> tuple[str, ...]:
    """The ELF files (shared objects, objects, cubins) the unpacked sdist ships: a wheel that
    holds one is refused (builder/shipped.py)."""
    return tuple(path.relative_to(tree).as_posix() for path in shipped.elf_files(tree))
