"""The simple repository API: which index sdists are looked up on, and a project's page on an
index, read within bounds and parsed into a typed `Page` (untrusted.py). The one reader of a
project's page, for install, doctor, recipe new, outdated and publish --to alike.

A page is asked for as PEP 691 JSON, else PEP 503 HTML (pip's Accept), and read as what its
Content-Type says it is (a file's, or another type's, by its first character): a static host
answers `…/project/` with its index.html whatever was asked. Both are held to the same rules:
a file's name must be a plain name, its URL http(s) (or file:// on a file:// page), its sha256
and its metadata's sha256 well-formed; any other shape, an HTML page that links no file and
does not say it is a simple index's (a login page, a proxy in the way), or a page too large
or too slow is one error naming the page's URL and, where it is one file's, which.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import sys
import time
import urllib.parse
from dataclasses import dataclass, field, replace
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
    clip,
    name_problem,
    parse_json,
    too_slow,
    tool_bounds,
)
from wheelsmith.untrusted.addresses import WEB, redact, server_url
from wheelsmith.untrusted.markup import Anchor, parse_links
from wheelsmith.untrusted.urls import Answer, read_url

log = logging.getLogger(__name__)

PAGE_TIMEOUT_S = 120.0  # the whole page; PyPI's largest JSON pages are a few MB
PAGE_MAX_BYTES = 64 << 20
CHECK_EVERY = 4096  # files parsed between looks at the deadline
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
ACCEPT = f"{SIMPLE_JSON}, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"
NOT_A_PAGE_HINT = ("give the URL of a simple index (PEP 503 or PEP 691: wheelsmith serve's and "
                   "index export's are both), whose links to files have the file's name as "
                   "their text; an HTML page that links no files can also be a login page or a "
                   "proxy in the way")
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
    metadata_sha256: str | None  # PEP 658; None where it is not served or has no sha256
    place: str  # where the page names it: `files[3].filename` (JSON), `its link 4` (HTML)

    @classmethod
    def parse(cls, page: str, node: Node) -> PageFile:
        """A file of a PEP 691 page."""
        url = node["url"].url(page, _schemes(page))  # credentials in `page` kept
        sha256 = node["hashes"].optional("sha256", _sha256)
        yanked = node.get("yanked")
        if yanked is not None and not isinstance(yanked.value, (bool, str)):
            raise yanked.fail("expected true/false or a reason")
        name = node["filename"]
        return cls(name.name(), url, sha256, yanked is not None and yanked.value is not False,
                   node.optional("size", Node.integer), _json_metadata(node), name.path)

    @classmethod
    def from_anchor(cls, page: str, base: str, anchor: Anchor) -> PageFile | None:
        """The file a PEP 503 link names (its URL joined with `base`), or None when the link
        is no file's: its text is not the name its URL ends in, as PEP 503 says it must be
        (a parent directory, a page's navigation)."""
        source = redact(page)
        url = server_url(anchor.href, base, source=source, where=anchor.where,
                         schemes=_schemes(page))
        url, _, fragment = url.partition("#")
        name = urllib.parse.unquote(urllib.parse.urlsplit(url).path.rpartition("/")[2])
        if not name or anchor.text != name:
            return None
        problem = name_problem(name)
        if problem is not None:
            raise UntrustedDataError(source, f"{anchor.where}: '{clip(name)}' is not a plain "
                                             f"file name ({problem})")
        meta = anchor.get("data-core-metadata") or anchor.get("data-dist-info-metadata")
        return cls(name, url, _hash_in(fragment, source, f"{anchor.where}: its URL's fragment"),
                   anchor.get("data-yanked") is not None, None,
                   _hash_in(meta or "", source, f"{anchor.where}: its metadata"), anchor.where)


def _schemes(page: str) -> tuple[str, ...]:
    """What a page's file URLs may be: http(s), and file:// on a file:// page."""
    return ("http", "https", "file") if page.startswith("file:") else WEB


def _sha256(node: Node) -> str:
    return node.text(_SHA256, "a sha256").lower()


def _json_metadata(item: Node) -> str | None:
    """PEP 658's sha256 of a file's METADATA (`core-metadata`, once `dist-info-metadata`):
    true or an object of hashes; None where it is not served or has no sha256."""
    for key in ("core-metadata", "dist-info-metadata"):
        meta = item.get(key)
        if meta is not None and isinstance(meta.value, dict):
            return meta.optional("sha256", _sha256)
    return None


def _hash_in(text: str, source: str, what: str) -> str | None:
    """The sha256 in `text`, `NAME=VALUE` pairs joined by `&` (a link's fragment, its
    data-core-metadata); None when it names none (`true`, an md5)."""
    for pair in text.split("&"):
        name, _, value = pair.partition("=")
        if name == "sha256":
            if not (value.isascii() and _SHA256.fullmatch(value)):
                raise UntrustedDataError(source, f"{what}: 'sha256={clip(value)}' is not a "
                                                 "sha256 (64 hex digits)")
            return value.lower()
    return None


@dataclass(frozen=True, slots=True)
class Page:
    """A project's page on a simple index."""

    url: str  # as messages show it (`redact`)
    files: tuple[PageFile, ...]

    @classmethod
    def parse(cls, url: str, node: Node, deadline: Deadline | None = None) -> Page:
        """A PEP 691 page."""
        files = []
        for at, item in enumerate(node["files"].items(PAGE_MAX_FILES)):
            if deadline is not None and at % CHECK_EVERY == 0:
                deadline.check()
            files.append(PageFile.parse(url, item))
        return cls(redact(url), tuple(files))

    @classmethod
    def from_html(cls, url: str, data: bytes, deadline: Deadline | None = None) -> Page:
        """A PEP 503 page: the files its links name (`PageFile.from_anchor`). One that links
        none is taken for an empty project's page only when it says it is a simple index's
        (PEP 629's pypi:repository-version)."""
        shown = redact(url)
        links = parse_links(data, shown, max_links=PAGE_MAX_FILES,
                            check=deadline.check if deadline is not None else lambda: None)
        base = url if links.base is None else server_url(
            links.base, url, source=shown, where="its <base href>", schemes=_schemes(url))
        files = []
        for anchor in links.anchors:
            if deadline is not None and anchor.number % CHECK_EVERY == 0:
                deadline.check()
            found = PageFile.from_anchor(url, base, anchor)
            if found is not None:
                files.append(found)
        if not files and links.repository_version is None:
            what = f"whose {len(links.anchors):,} link(s) name no file" if links.anchors else \
                "that links no files"
            raise UntrustedDataError(shown, f"answered an HTML page {what}, not a PEP 503 "
                                            "project page", hint=NOT_A_PAGE_HINT)
        return cls(shown, tuple(files))


def read_page(url: str, data: bytes, content_type: str, deadline: Deadline | None = None
              ) -> Page:
    """The project page at `url` from what a server answered there (`content_type`: its
    Content-Type): PEP 691 JSON or PEP 503 HTML (`page_format`)."""
    if page_format(content_type, data) == "html":
        return Page.from_html(url, data, deadline)
    document = parse_json(data, redact(url), max_objects=PAGE_MAX_OBJECTS)
    if deadline is not None:
        deadline.check()
    return Page.parse(url, document, deadline)


def page_format(content_type: str, data: bytes) -> str:
    """`json` or `html`: by the media type (PEP 691's, application/json, text/html); a
    file's, or one of another type, by its first character that is not white space."""
    media = content_type.partition(";")[0].strip().lower()
    if media.endswith(("/json", "+json")):
        return "json"
    if media.endswith(("/html", "+html")):
        return "html"
    return "html" if _MARKUP_FIRST.match(data) else "json"


_MARKUP_FIRST = re.compile(rb"\s*<")


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
            return ("fix WHEELSMITH_INDEX_URL (a PEP 503 or PEP 691 simple index), or unset it "
                    "to use pip's")
        other = "or set WHEELSMITH_INDEX_URL to a simple index (PEP 503 or PEP 691) that answers"
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
    """A project's page on a simple index (default: `index_url()`), PEP 691 JSON or PEP 503
    HTML, read within `timeout` seconds in all. With `missing_ok`, a project the index does
    not have (404) gives None. A file:// index is read from disk (`index.json` in the
    project's directory, as a wheelsmith index writes it, else its `index.html`)."""
    index = package_index() if base is None else None
    page = f"{(base or index_url()).rstrip('/')}/{canonicalize_name(project)}/"
    deadline = Deadline(redact(page), timeout)
    try:
        answer = _answer(page, Bounds(PAGE_MAX_BYTES, timeout))
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
    return read_page(page, answer.data, answer.media_type, deadline)


def _answer(page: str, bounds: Bounds) -> Answer:
    """What `page` answers when JSON is preferred; a file:// page is its directory's
    index.json, else its index.html (a PEP 503 tree on disk)."""
    if not page.startswith("file:"):
        return read_url(page, bounds, accept=ACCEPT)
    try:
        return replace(read_url(f"{page}index.json", bounds), media_type=SIMPLE_JSON)
    except UntrustedDataError as exc:
        if exc.status != NOT_FOUND:
            raise
    return replace(read_url(f"{page}index.html", bounds), media_type="text/html")


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
