"""An index on another server (devpi, pypiserver, Artifactory, a static host), over HTTP: the
one place wheelsmith talks to one.

Reads are a channel's simple API: PEP 691 JSON when the server offers it, else PEP 503 HTML
(pypiserver has no JSON), as filename -> sha256 (and the PEP 658 metadata hash, where served).
Writes are `send`s from upload.py. Every answer is read through `read_bounded` (a size and a
wall-clock limit: a server that drips or never ends cannot hold a command); redirects are
followed only for reads and only within the same origin, so credentials never travel to
another host; a POST is never redirected.
"""

from __future__ import annotations

import base64
import html
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from html.parser import HTMLParser
from http.client import HTTPResponse
from typing import IO, Any

from wheelsmith.errors import PublishError, UntrustedDataError
from wheelsmith.untrusted import parse_json
from wheelsmith.untrusted.urls import redact

TIMEOUT_ENV = "WHEELSMITH_UPLOAD_TIMEOUT"
TIMEOUT_S = 60.0  # one socket operation; one whole answer gets five times that
PAGE_LIMIT = 64 << 20  # a project page (PyPI's largest JSON pages are a few MB)
ANSWER_LIMIT = 1 << 20  # an upload's answer
CHUNK = 1 << 16
MAX_REDIRECTS = 5
ACCEPT = ("application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, "
          "text/html;q=0.1")


def timeout() -> float:
    """Seconds one socket operation may take: $WHEELSMITH_UPLOAD_TIMEOUT, else 60."""
    try:
        value = float(os.environ.get(TIMEOUT_ENV) or TIMEOUT_S)
    except ValueError:
        return TIMEOUT_S
    return value if value > 0 else TIMEOUT_S


def read_bounded(stream: IO[bytes], *, limit: int, deadline: float | None = None,
                 what: str) -> bytes:
    """At most `limit` bytes of `stream`, within `deadline` seconds (default: five socket
    timeouts); more, or slower, is a PublishError naming `what`. The one reader of untrusted
    answers in this module."""
    deadline = deadline if deadline is not None else 5 * timeout()
    ends = time.monotonic() + deadline
    read = getattr(stream, "read1", stream.read)  # what one recv brings: a drip cannot stall it
    parts: list[bytes] = []
    size = 0
    while chunk := read(min(CHUNK, limit + 1 - size)):
        parts.append(chunk)
        size += len(chunk)
        if size > limit:
            raise PublishError(f"{what} sent more than {limit} bytes; stopped reading",
                               hint="check that the URL is the index's, not another page")
        if time.monotonic() > ends:
            raise PublishError(f"{what} took more than {deadline:.0f} s to answer; stopped "
                               "reading", hint="check the server, or try again later")
    return b"".join(parts)


@dataclass(frozen=True, slots=True)
class Auth:
    """A username and a password or token, and where they came from (never shown)."""

    username: str
    password: str = field(repr=False)
    origin: str

    def header(self) -> str:
        pair = f"{self.username}:{self.password}".encode()
        return "Basic " + base64.b64encode(pair).decode()


@dataclass(frozen=True, slots=True)
class Answer:
    """What a server answered: its status, body (bounded) and content type."""

    url: str
    status: int
    body: bytes
    content_type: str

    def text(self, width: int = 300) -> str:
        """The answer as one short, printable line (tags, styles and scripts dropped)."""
        raw = self.body.decode("utf-8", "replace")
        raw = re.sub(r"(?is)<(style|script|title)\b.*?</\1\s*>", " ", raw)
        raw = html.unescape(re.sub(r"(?s)<[^>]*>", " ", raw))
        line = " ".join("".join(c if c.isprintable() else " " for c in raw).split())
        return (line[:width] + "…") if len(line) > width else (line or "(no text)")


class _SameOrigin(urllib.request.HTTPRedirectHandler):
    """Follow a redirect only for a GET and only to the same scheme, host and port."""

    def redirect_request(self, req: urllib.request.Request, fp: IO[bytes], code: int,  # noqa: PLR0917 - urllib's signature
                         msg: str, headers: Any, newurl: str) -> urllib.request.Request | None:
        if req.get_method() != "GET" or _origin(newurl) != _origin(req.full_url):
            return None
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _origin(url: str) -> tuple[str, str | None, int | None]:
    parts = urllib.parse.urlsplit(url)
    return parts.scheme, parts.hostname, parts.port


_OPENER = urllib.request.build_opener(_SameOrigin())
_SameOrigin.max_redirections = MAX_REDIRECTS


def send(url: str, *, auth: Auth | None, method: str = "GET",
         body: Iterable[bytes] | None = None, headers: Mapping[str, str] | None = None,
         limit: int = PAGE_LIMIT, what: str) -> Answer:
    """One HTTP exchange; every status comes back as an Answer (a 3xx that was not followed
    too). A server that cannot be reached is a PublishError naming `what` and the URL."""
    request = urllib.request.Request(url, data=body, method=method,  # noqa: S310 - http(s) only
                                     headers=dict(headers or {}))
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise PublishError(f"{what}: {url} is not an http:// or https:// URL")
    if auth is not None:
        request.add_unredirected_header("Authorization", auth.header())
    try:
        with _OPENER.open(request, timeout=timeout()) as response:
            return _answer(url, response, limit, what)
    except urllib.error.HTTPError as error:
        with error:
            return _answer(url, error, min(limit, ANSWER_LIMIT), what)
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise PublishError(f"{what}: {url} does not answer: {reason}",
                           hint="check the URL and that the server is up") from error


def _answer(url: str, response: HTTPResponse | urllib.error.HTTPError, limit: int,
            what: str) -> Answer:
    body = read_bounded(response, limit=limit, what=f"{what} ({url})")
    return Answer(url, response.status or 0, body, response.headers.get("Content-Type", ""))


@dataclass(frozen=True, slots=True)
class RemoteFile:
    """A file a server lists on a project page."""

    filename: str
    url: str
    sha256: str | None
    metadata_sha256: str | None  # PEP 658: None where the server serves no .metadata


def project_files(simple_url: str, project: str, auth: Auth | None) -> dict[str, RemoteFile]:
    """What a channel's simple API (`simple_url`, ending in /) lists for `project`: filename
    -> RemoteFile. A project it does not have (404) lists nothing."""
    page = urllib.parse.urljoin(simple_url, f"{project}/")
    answer = send(page, auth=auth, headers={"Accept": ACCEPT}, what="reading the index")
    if answer.status == 404:
        return {}
    if answer.status != 200:
        raise PublishError(f"cannot read {page}: HTTP {answer.status}: {answer.text()}",
                           hint=_READ_HINT)
    files = _json_files(answer) if "json" in answer.content_type else _html_files(answer)
    return {f.filename: f for f in files}


_READ_HINT = ("the simple API URL (--simple, else the upload URL + simple/) must be the "
              "channel's index, e.g. http://HOST/USER/{channel}/+simple/ for devpi")


def check_index(simple_url: str, auth: Auth | None) -> None:
    """The channel's simple root answers 200: a wrong --simple URL would read as 'the
    project is not there' for every project."""
    answer = send(simple_url, auth=auth, headers={"Accept": ACCEPT}, what="reading the index")
    if answer.status != 200:
        raise PublishError(f"no simple index at {simple_url}: HTTP {answer.status}: "
                           f"{answer.text()}", hint=_READ_HINT)


def _json_files(answer: Answer) -> list[RemoteFile]:
    try:
        data: Any = parse_json(answer.body, redact(answer.url)).value  # depth, duplicates, NaN
        found = []
        for item in data["files"]:
            meta = item.get("core-metadata") or item.get("dist-info-metadata")
            found.append(RemoteFile(
                str(item["filename"]), urllib.parse.urljoin(answer.url, str(item["url"])),
                _str_or_none((item.get("hashes") or {}).get("sha256")),
                _str_or_none(meta.get("sha256")) if isinstance(meta, dict) else None))
    except UntrustedDataError as error:
        raise PublishError(f"{redact(answer.url)} is not a PEP 691 page: {error.message}",
                           hint=_READ_HINT) from error
    except (KeyError, TypeError, AttributeError) as error:
        raise PublishError(f"{redact(answer.url)} is not a PEP 691 page: {error}",
                           hint=_READ_HINT) from error
    return found


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[dict[str, str | None], list[str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.links.append((dict(attrs), []))

    def handle_data(self, data: str) -> None:
        if self.links:
            self.links[-1][1].append(data)


def _html_files(answer: Answer) -> list[RemoteFile]:
    parser = _Links()
    parser.feed(answer.body.decode("utf-8", "replace"))
    found = []
    for attrs, text in parser.links:
        href = attrs.get("href")
        if not href:
            continue
        url, _, fragment = urllib.parse.urljoin(answer.url, href).partition("#")
        filename = "".join(text).strip() or urllib.parse.unquote(url.rsplit("/", 1)[-1])
        meta = attrs.get("data-core-metadata") or attrs.get("data-dist-info-metadata")
        found.append(RemoteFile(filename, url, _hash(fragment), _hash(meta or "")))
    return found


def _hash(text: str) -> str | None:
    name, _, value = text.partition("=")
    return value if name == "sha256" and re.fullmatch(r"[0-9a-f]{64}", value) else None
