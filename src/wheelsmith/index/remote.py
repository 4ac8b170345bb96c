"""An index on another server (devpi, pypiserver, Artifactory, a static host), over HTTP.

Reads are a channel's simple API: PEP 691 JSON when the server offers it, else PEP 503 HTML
(pypiserver has no JSON), read by the one reader of project pages (`recipes.simple.read_page`)
as filename -> PageFile (its sha256, and the PEP 658 metadata hash, where served).
Writes are `send`s from upload.py. Every exchange goes through `untrusted.web.exchange`: a
byte cap and a total deadline: $WHEELSMITH_UPLOAD_TIMEOUT seconds to read a page, redirects
included, five times that for an upload (and a second more for every `UPLOAD_RATE` bytes it
sends), so a server that drips, stalls or never ends cannot hold a command; what is not HTTP
is one UntrustedDataError naming the URL. Redirects are followed only for reads and only within the
same origin, so credentials never travel to another host; a POST is never redirected. Every
URL a page gives (a link's href, a file's `url`) is read by `server_url`; the page's parse is
within the exchange's deadline too.
"""

from __future__ import annotations

import base64
import html
import math
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from wheelsmith import numbers
from wheelsmith.errors import PublishError, UntrustedDataError
from wheelsmith.recipes.simple import ACCEPT, Deadline, PageFile, read_page
from wheelsmith.untrusted import Bounds, web
from wheelsmith.untrusted.addresses import redact
from wheelsmith.untrusted.redaction import redacted

TIMEOUT_ENV = "WHEELSMITH_UPLOAD_TIMEOUT"
TIMEOUT_S = 60.0  # a page read, whole; an upload gets five times that
TIMEOUT_BOUNDS = numbers.Bounds(1, 3600, unit="seconds", most="an hour")
WHOLE = 5  # an upload's deadline, in page reads
UPLOAD_RATE = 64 << 10  # bytes a second an upload is given time to send at, at least
PAGE_LIMIT = 64 << 20  # a project page (PyPI's largest JSON pages are a few MB)
ANSWER_LIMIT = 1 << 20  # an upload's answer


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


def project_files(simple_url: str, project: str, auth: Auth | None) -> dict[str, PageFile]:
    """What a channel's simple API (`simple_url`, ending in /) lists for `project`: filename
    -> PageFile. A project it does not have (404) lists nothing."""
    page = urllib.parse.urljoin(simple_url, f"{project}/")
    deadline = Deadline(redact(page), timeout())  # the read and the parse: one deadline
    answer = send(page, auth=auth, headers={"Accept": ACCEPT})
    if answer.status == 404:
        return {}
    if answer.status != 200:
        raise PublishError(f"cannot read {page}: HTTP {answer.status}: {answer.text()}",
                           hint=_READ_HINT)
    try:
        files = read_page(answer.url, answer.body, answer.content_type, deadline).files
    except UntrustedDataError as error:
        raise UntrustedDataError(error.source, error.problem,
                                 hint=error.hint or _READ_HINT) from None
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
