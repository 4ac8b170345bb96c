"""The simple repository API (PEP 691 JSON): which index sdists are looked up on, and a
project's page there, read within bounds and parsed into a typed `Page` (untrusted.py).

A page is data others wrote: its files' names must be plain names, their URLs http(s) (or
file:// on a file:// page), their sha256 well-formed; any other shape, an HTML answer where
JSON was asked for, or a page too large or too slow is one error naming the page's URL.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import sys
import time
from dataclasses import dataclass, field
from typing import Literal, overload

from packaging.utils import canonicalize_name

from wheelsmith import cmd, locations
from wheelsmith.errors import SourceError, UntrustedDataError
from wheelsmith.recipes.sources import PypiSource
from wheelsmith.untrusted import (
    NOT_FOUND,
    PAGE_MAX_FILES,
    PAGE_MAX_OBJECTS,
    Bounds,
    Node,
    parse_json,
    too_slow,
    tool_bounds,
)
from wheelsmith.untrusted.addresses import WEB, redact
from wheelsmith.untrusted.urls import read_url

log = logging.getLogger(__name__)

PAGE_TIMEOUT_S = 120.0  # the whole page; PyPI's largest JSON pages are a few MB
PAGE_MAX_BYTES = 64 << 20
CHECK_EVERY = 4096  # files parsed between looks at the deadline
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
PIP_INDEX_SCRIPT = locations.RESOURCES / "pip_index.py"
_SHA256 = re.compile(r"[0-9a-fA-F]{64}")


@dataclass(frozen=True, slots=True)
class PageFile:
    """One file a project page lists."""

    filename: str  # a plain name
    url: str  # absolute: joined with the page's URL
    sha256: str | None  # lowercase hex; None when the page gives none
    yanked: bool
    size: int | None  # PEP 700; None when the page gives none

    @classmethod
    def parse(cls, page: str, node: Node) -> PageFile:
        allowed = ("http", "https", "file") if page.startswith("file:") else WEB
        url = node["url"].url(page, allowed)  # credentials in `page` kept
        sha256 = node["hashes"].optional("sha256", lambda n: n.text(_SHA256, "a sha256"))
        yanked = node.get("yanked")
        if yanked is not None and not isinstance(yanked.value, (bool, str)):
            raise yanked.fail("expected true/false or a reason")
        return cls(node["filename"].name(), url, sha256.lower() if sha256 else None,
                   yanked is not None and yanked.value is not False,
                   node.optional("size", Node.integer))


@dataclass(frozen=True, slots=True)
class Page:
    """A project's page on a simple index."""

    url: str  # as messages show it (`redact`)
    files: tuple[PageFile, ...]

    @classmethod
    def parse(cls, url: str, node: Node, deadline: Deadline | None = None) -> Page:
        files = []
        for at, item in enumerate(node["files"].items(PAGE_MAX_FILES)):
            if deadline is not None and at % CHECK_EVERY == 0:
                deadline.check()
            files.append(PageFile.parse(url, item))
        return cls(redact(url), tuple(files))


@dataclass(frozen=True, slots=True)
class Deadline:
    """A page's one deadline, for its read and its parse alike."""

    source: str
    seconds: float
    at: float = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "at", time.monotonic() + self.seconds)

    def check(self) -> None:
        if time.monotonic() > self.at:
            raise too_slow(self.source, self.seconds, verb="was not read and parsed")


@dataclass(frozen=True, slots=True)
class PackageIndex:
    """The simple index sdists are looked up on, and where that setting came from."""

    url: str
    origin: str  # WHEELSMITH_INDEX_URL, PIP_INDEX_URL, pip's configuration, pip's default

    @property
    def shown(self) -> str:
        """The URL as messages show it (credentials hidden)."""
        return redact(self.url)

    def fix(self) -> str:
        """What to do when it does not answer."""
        if self.origin == "WHEELSMITH_INDEX_URL":
            return "fix WHEELSMITH_INDEX_URL (a PEP 691 simple index), or unset it to use pip's"
        other = "or set WHEELSMITH_INDEX_URL to a PEP 691 simple index that answers"
        if self.origin == "PIP_INDEX_URL":
            return f"fix PIP_INDEX_URL, {other}"
        if self.origin == "pip's configuration":
            return f"fix index-url in pip's configuration (`pip config list` shows it), {other}"
        return f"check the network and proxy settings, {other}"


def package_index() -> PackageIndex:
    """$WHEELSMITH_INDEX_URL, else the index the pip wheelsmith runs uses, asked from that pip
    (PIP_INDEX_URL, pip's configuration files, else pip's own default)."""
    own = os.environ.get("WHEELSMITH_INDEX_URL")
    if own:
        return PackageIndex(own.rstrip("/"), "WHEELSMITH_INDEX_URL")
    return _ask_pip(tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("PIP_"))))


@functools.cache
def _ask_pip(pip_environment: tuple[tuple[str, str], ...]) -> PackageIndex:  # noqa: ARG001 - the cache key
    what = "pip (asked which index it uses)"
    result = cmd.run([sys.executable, PIP_INDEX_SCRIPT], stream=False, error=SourceError,
                     what=what, bounds=tool_bounds())
    answer = parse_json((result.stdout.strip().splitlines() or [""])[-1], what)
    url, origin = answer["index_url"].text(), answer["origin"].text()
    log.info("package index: %s (%s)", url, origin)
    return PackageIndex(url.rstrip("/"), origin)


def index_url() -> str:
    return package_index().url


@overload
def simple_page(project: str, base: str | None = None, *, timeout: float = PAGE_TIMEOUT_S,
                missing_ok: Literal[False] = False) -> Page: ...
@overload
def simple_page(project: str, base: str | None = None, *, timeout: float = PAGE_TIMEOUT_S,
                missing_ok: Literal[True]) -> Page | None: ...
def simple_page(project: str, base: str | None = None, *, timeout: float = PAGE_TIMEOUT_S,
                missing_ok: bool = False) -> Page | None:
    """A project's PEP 691 page on a simple index (default: `index_url()`), read within
    `timeout` seconds in all. With `missing_ok`, a project the index does not have (404)
    gives None. A file:// index is read from disk (`index.json` in the project's directory,
    as a wheelsmith index writes it)."""
    index = package_index() if base is None else None
    page = f"{(base or index_url()).rstrip('/')}/{canonicalize_name(project)}/"
    where = f"{page}index.json" if page.startswith("file:") else page
    deadline = Deadline(redact(page), timeout)
    try:
        answer = read_url(where, Bounds(PAGE_MAX_BYTES, timeout), accept=SIMPLE_JSON)
    except UntrustedDataError as exc:
        if missing_ok and exc.status == NOT_FOUND:
            return None
        raise
    except SourceError as exc:  # nothing answers
        if index is None:
            raise
        reason = getattr(exc.__cause__, "reason", exc.__cause__) or exc.message
        raise SourceError(f"the package index {index.shown} (from {index.origin}) does not "
                          f"answer: {reason}", hint=index.fix()) from exc
    try:
        document = parse_json(answer.data, redact(page), max_objects=PAGE_MAX_OBJECTS)
    except UntrustedDataError:
        if answer.media_type != "text/html" and not answer.data.lstrip().startswith(b"<"):
            raise
        raise UntrustedDataError(redact(page), "answered an HTML page, not a PEP 691 JSON page",
                                 hint="give the URL of a PEP 691 simple index (wheelsmith "
                                      "serve's is one); an HTML answer can also be a login "
                                      "page or a proxy in the way") from None
    deadline.check()
    return Page.parse(page, document, deadline)


def sdist_of(filename: str, project: str, version: str) -> bool:
    """`filename` is the sdist of (project, version): `torch_scatter-2.1.2.tar.gz`, and the
    older spelling with the project's own dashes (`pytorch-fast-transformers-0.4.0.tar.gz`)."""
    stem = re.sub(r"\.(tar\.gz|zip)$", "", filename)
    name, _, spelled = stem.rpartition("-")
    return stem != filename and spelled == version and \
        re.sub(r"[-_.]+", "-", name).lower() == re.sub(r"[-_.]+", "-", project).lower()


def pypi_sdist(source: PypiSource) -> PageFile:
    """The sdist of (project, version) with the pinned sha256 on the simple index."""
    page = simple_page(source.project)
    candidates = [f for f in page.files if sdist_of(f.filename, source.project, source.version)]
    for file in candidates:
        if file.sha256 == source.sha256:
            return file
    listed = "; ".join(f"{f.filename} sha256={f.sha256}" for f in candidates) or "none"
    raise SourceError(
        f"no sdist of {source.project} {source.version} on {package_index().shown} has sha256 "
        f"{source.sha256}",
        hint=f"sdists there: {listed}",
    )
