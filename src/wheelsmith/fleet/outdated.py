"""Upstream watch: recipe packages with newer releases, torch newer than the toolchain profiles.

Reads the simple index (PEP 691 JSON or PEP 503 HTML) the sources come from
($WHEELSMITH_INDEX_URL, else $PIP_INDEX_URL, else PyPI). Yanked files and pre-releases are
ignored.
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import Version

from wheelsmith.recipes.simple import simple_page


@dataclass(frozen=True, slots=True)
class Newer:
    project: str
    current: str
    newer: tuple[str, ...]

    @property
    def latest(self) -> str:
        return self.newer[-1]


def releases(project: str) -> list[Version]:
    """Final, non-yanked release versions of `project` on the index, ascending."""
    found = set()
    for file in simple_page(project).files:
        if file.yanked:
            continue
        version = _version_of(file.filename)
        if version is not None and not version.is_prerelease and not version.is_devrelease:
            found.add(version)
    return sorted(found)


def _version_of(filename: str) -> Version | None:
    try:
        if filename.endswith(".whl"):
            return parse_wheel_filename(filename)[1]
        return parse_sdist_filename(filename)[1]
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None


def newer_than(project: str, current: Version) -> Newer | None:
    later = [v for v in releases(project) if v > current]
    if not later:
        return None
    return Newer(str(canonicalize_name(project)), str(current), tuple(str(v) for v in later))
