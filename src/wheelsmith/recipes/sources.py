"""Where a recipe's code comes from: a release's source, and the sources it carries (what the
package's build would download, as CMake's FetchContent or a git submodule the sdist lacks),
each pinned and fetched by recipes/fetch.py."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from wheelsmith import document
from wheelsmith.document import Document, KeyPath


@dataclass(frozen=True, kw_only=True, slots=True)
class PypiSource:
    project: str
    version: str
    sha256: str


@dataclass(frozen=True, kw_only=True, slots=True)
class UrlSource:
    url: str
    sha256: str


@dataclass(frozen=True, kw_only=True, slots=True)
class GitSource:
    url: str
    commit: str
    tag: str | None = None  # must name `commit` when given


@dataclass(frozen=True, kw_only=True, slots=True)
class LocalSource:
    path: Path


Source = PypiSource | UrlSource | GitSource | LocalSource

# Where a source comes from, in the words of the recipe's reader: the one place a source kind is
# rendered for people (stage lines, messages). Never a class name.
SOURCE_WORDS: dict[type[Source], str] = {
    PypiSource: "the package index",
    UrlSource: "an archive URL",
    GitSource: "a git repository",
    LocalSource: "a local directory",
}


def describe_source(source: Source) -> str:
    return SOURCE_WORDS[type(source)]


def parse_source(doc: Document, recipe: Path, data: dict[str, Any], version: str,
                 path: KeyPath) -> Source:
    """The source at `path` of the recipe file `recipe`; a problem is reported on `doc`."""
    kinds = [k for k in ("pypi", "url", "git", "path") if k in data]
    if len(kinds) != 1:
        found = ", ".join(kinds) or "none"
        doc.at_value(path, f"'{document.render_path(path)}' needs exactly one of pypi, url, git, "
                           f"path (found {found})")
        return LocalSource(path=Path())
    kind = kinds[0]
    for extra, applies in (("sha256", ("pypi", "url")), ("commit", ("git",)), ("tag", ("git",))):
        if extra in data and kind not in applies:
            doc.at_key((*path, extra), f"'{extra}' does not apply to a {kind} source")
    if kind == "pypi":
        return PypiSource(project=data["pypi"], version=version, sha256=data.get("sha256", ""))
    if kind == "url":
        return UrlSource(url=data["url"], sha256=data.get("sha256", ""))
    if kind == "git":
        return GitSource(url=data["git"], commit=data.get("commit", ""), tag=data.get("tag"))
    # its existence is checked when it is fetched: a recipe stays valid on machines (or in a
    # container) where the directory is not, as long as nothing is fetched from it there
    return LocalSource(path=(recipe.resolve().parent / data["path"]).resolve())


def source_data(source: Source) -> dict[str, str]:
    if isinstance(source, PypiSource):
        return {"pypi": source.project, "sha256": source.sha256}
    if isinstance(source, UrlSource):
        return {"url": source.url, "sha256": source.sha256}
    if isinstance(source, GitSource):
        return {"git": source.url, "commit": source.commit,
                **({"tag": source.tag} if source.tag else {})}
    return {"path": str(source.path)}


@dataclass(frozen=True, kw_only=True, slots=True)
class CarriedSource:
    """A source the package's build would download, fetched and pinned like the release's and
    placed at `into` in its tree before the patches; `env` and `cmake` name the variables
    (the package's own, CMake's FETCHCONTENT_SOURCE_DIR_<NAME> in CMAKE_ARGS) that are given
    its directory."""
    into: PurePosixPath
    source: Source
    env: str | None = None
    cmake: str | None = None


def parse_carried(doc: Document, recipe: Path, entries: list[dict[str, Any] | None],
                  base: KeyPath, env: set[str]) -> tuple[CarriedSource, ...]:
    """A release's `carry` list; `env`: the variables the recipe sets otherwise."""
    carried: list[CarriedSource] = []
    taken = {"env": set(env), "cmake": set[str]()}
    for index, entry in enumerate(entries):
        where: KeyPath = (*base, "carry", index)
        if entry is None or "into" not in entry or "source" not in entry:
            continue  # reported by the schema
        into = _into(doc, entry["into"], (*where, "into"))
        source = parse_source(doc, recipe, entry["source"], "", (*where, "source"))
        if isinstance(source, PypiSource):
            doc.at_key((*where, "source", "pypi"), f"'{document.render_path(where)}.source' is "
                       "an sdist of the index: a carried source is a url, git or path source",
                       "give the archive's URL and its sha256")
        for key in ("env", "cmake"):
            name = entry.get(key)
            if name is None:
                continue
            if name in taken[key]:
                doc.at_value((*where, key), f"'{document.render_path((*where, key))}': {name} is "
                             "set twice: here and by the recipe's arch, env or another carried "
                             "source", "set it in one place")
            taken[key].add(name)
        if into is None:
            continue
        for other in carried:
            if into == other.into or other.into in into.parents or into in other.into.parents:
                doc.at_value((*where, "into"), f"'{document.render_path((*where, 'into'))}': "
                             f"'{into}' overlaps the carried '{other.into}'",
                             "give each carried source a directory of its own")
                break
        else:
            carried.append(CarriedSource(into=into, source=source, env=entry.get("env"),
                                         cmake=entry.get("cmake")))
    return tuple(carried)


def _into(doc: Document, value: str, path: KeyPath) -> PurePosixPath | None:
    """A directory inside the source tree, as written: relative, without `.`, `..` or empty
    parts, in printable characters that are not a shell's or CMake's."""
    parts = value.split("/")
    if not _INTO_RE.fullmatch(value) or any(p in ("", ".", "..") for p in parts):
        doc.at_value(path, f"'{document.render_path(path)}' is not a directory inside the "
                           f"source tree: {value!r}",
                     "write a relative path such as third_party/cutlass (letters, digits, "
                     "'.', '_', '-' and '/'; no '..')")
        return None
    return PurePosixPath(value)


_INTO_RE = re.compile(r"[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*")


def carried_data(carried: CarriedSource) -> dict[str, Any]:
    return {"into": str(carried.into), "source": source_data(carried.source),
            **{key: value for key, value in (("env", carried.env), ("cmake", carried.cmake))
               if value is not None}}
