"""An index on another server (devpi, pypiserver, Artifactory, a static host), over HTTP.

Reads are a channel's simple API: PEP 691 JSON when the server offers it, else PEP 503 HTML
(pypiserver has no JSON), as filename -> sha256 (and the PEP 658 metadata hash, where served).
Writes are `send`s from upload.py. Every exchange goes through `untrusted.web.exchange`: a
byte cap and a total deadline: $WHEELSMITH_UPLOAD_TIMEOUT seconds to read a page, redirects
included, five times that for an upload (and a second more for every `UPLOAD_RATE` bytes it
sends), so a server that drips, stalls or never ends cannot hold a command; what is not HTTP
is one UntrustedDataError naming the URL. Redirects are followed only for reads and only within the
same origin, so credentials never travel to another host; a POST is never redirected. Every
URL a page gives (a link's href, a file's `url`) is read by `server_url`.
"""

from __future__ import annotations

import base64
import html
import math
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from html.parser import HTMLParser

from wheelsmith import numbers
from wheelsmith.errors import PublishError, UntrustedDataError
from wheelsmith.untrusted import (
    PAGE_MAX_FILES,
    PAGE_MAX_OBJECTS,
    Bounds,
    Node,
    name_problem,
    parse_json,
    web,
)
from wheelsmith.untrusted.addresses import redact, server_url
from wheelsmith.untrusted.redaction import redacted
from wheelsmith.untrusted.text import clip

TIMEOUT_ENV = "WHEELSMITH_UPLOAD_TIMEOUT"
TIMEOUT_S = 60.0  # a page read, whole; an upload gets five times that
TIMEOUT_BOUNDS = numbers.Bounds(1, 3600, unit="seconds", most="an hour")
WHOLE = 5  # an upload's deadline, in page reads
UPLOAD_RATE = 64 << 10  # bytes a second an upload is given time to send at, at least
PAGE_LIMIT = 64 << 20  # a project page (PyPI's largest JSON pages are a few MB)
ANSWER_LIMIT = 1 << 20  # an upload's answer
ACCEPT = ("application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, "
          "text/html;q=0.1")
_SHA256 = re.compile(r"[0-9a-f]{64}")


def timeout() -> float:
    """Seconds reading one page may take in all: $WHEELSMITH_UPLOAD_TIMEOUT, else 60."""
    return numbers.from_env(TIMEOUT_ENV, TIMEOUT_S, TIMEOUT_BOUNDS)


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
        raw = redacted(self.body.decode("utf-8", "replace"))  # before a cut could halve one
        raw = re.sub(r"(?is)<(style|script|title)\b.*?</\1\s*>", " ", raw)
        raw = html.unescape(re.sub(r"(?s)<[^>]*>", " ", raw))
        line = " ".join("".join(c if c.isprintable() else " " for c in raw).split())
        return (line[:width] + "…") if len(line) > width else (line or "(no text)")


def send(url: str, *, auth: Auth | None, method: str = "GET",
         body: Iterable[bytes] | None = None, headers: Mapping[str, str] | None = None,
         limit: int = PAGE_LIMIT, sending: int | None = None) -> Answer:
    """One HTTP exchange (`sending`: the bytes `body` holds, for an upload); every status
    comes back as an Answer (a 3xx that was not followed too). A read is given `timeout()`
    seconds in all, an upload WHOLE times that and a second for every UPLOAD_RATE bytes it
    sends. What is not HTTP, too much or too slow is an UntrustedDataError naming the URL;
    nothing answering there, a SourceError."""
    seconds = timeout() if sending is None else \
        WHOLE * timeout() + math.ceil(sending / UPLOAD_RATE)
    request = web.Request(url, method, tuple((headers or {}).items()), body,
                          auth.header() if auth is not None else None, decode=True)
    answer = web.exchange(request, Bounds(limit, seconds), follow=web.Follow.SAME_ORIGIN,
                          idle=timeout() + 1)  # a read ends at its deadline, not idle
    return Answer(answer.url, answer.status, answer.body, answer.content_type)


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
    answer = send(page, auth=auth, headers={"Accept": ACCEPT})
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
    answer = send(simple_url, auth=auth, headers={"Accept": ACCEPT})
    if answer.status != 200:
        raise PublishError(f"no simple index at {simple_url}: HTTP {answer.status}: "
                           f"{answer.text()}", hint=_READ_HINT)


def _json_files(answer: Answer) -> list[RemoteFile]:
    shown = redact(answer.url)
    try:
        page = parse_json(answer.body, shown, max_objects=PAGE_MAX_OBJECTS)  # and depth,
        return [_json_file(item, answer.url)  # duplicates, NaN, control characters
                for item in page["files"].items(PAGE_MAX_FILES)]
    except UntrustedDataError as error:
        raise UntrustedDataError(error.source, f"is not a PEP 691 page: {error.problem}",
                                 hint=_READ_HINT) from None


def _json_file(item: Node, page: str) -> RemoteFile:
    hashes = item.get("hashes")
    return RemoteFile(item["filename"].name(), item["url"].url(page),
                      hashes.optional("sha256", _sha256) if hashes is not None else None,
                      _metadata_sha256(item))


def _metadata_sha256(item: Node) -> str | None:
    """PEP 658's hash of the file's METADATA (`core-metadata`, once `dist-info-metadata`):
    true or an object of hashes; None where it is not served or has no sha256."""
    for key in ("core-metadata", "dist-info-metadata"):
        meta = item.get(key)
        if meta is not None and isinstance(meta.value, dict):
            return meta.optional("sha256", _sha256)
    return None


def _sha256(node: Node) -> str:
    return node.text(_SHA256, "a sha256 (64 lowercase hex digits)")


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


_ANCHOR = re.compile(rb"<a[\s/>]", re.IGNORECASE)


def _html_files(answer: Answer) -> list[RemoteFile]:
    anchors = len(_ANCHOR.findall(answer.body))
    if anchors > PAGE_MAX_FILES:  # refused before the (slow) HTML parser reads them
        raise UntrustedDataError(redact(answer.url), f"lists {anchors:,} links, more than the "
                                 f"{PAGE_MAX_FILES:,} wheelsmith reads", hint=_READ_HINT)
    parser = _Links()
    parser.feed(answer.body.decode("utf-8", "replace"))
    parser.close()
    shown = redact(answer.url)
    found = []
    for number, (attrs, text) in enumerate(parser.links, 1):
        href = attrs.get("href")
        if not href:
            continue
        where = f"its link {number}"
        url, _, fragment = server_url(href, answer.url, source=shown, where=where,
                                      hint=_READ_HINT).partition("#")
        filename = "".join(text).strip() or urllib.parse.unquote(url.rsplit("/", 1)[-1])
        problem = name_problem(filename)
        if problem is not None:
            raise UntrustedDataError(shown, f"{where}: '{clip(filename)}' is not a plain file "
                                            f"name ({problem})", hint=_READ_HINT)
        meta = attrs.get("data-core-metadata") or attrs.get("data-dist-info-metadata")
        found.append(RemoteFile(filename, url, _hash(fragment), _hash(meta or "")))
    return found


def _hash(text: str) -> str | None:
    name, _, value = text.partition("=")
    return value if name == "sha256" and _SHA256.fullmatch(value) else None
