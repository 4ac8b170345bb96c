"""HTTP with servers that are not trusted: `exchange` is the one way wheelsmith talks to one
(a page read, a download, an upload's POST, and the redirects between them).

- Bounds: a total deadline for the whole exchange, redirects included (a watchdog shuts the
  connection's sockets when it passes, so a drip, a stall or endless `100 Continue` interim
  answers end there), a timeout for each socket operation (`idle`), a byte cap on the body.
- Any status comes back as an `Answer`. What is not HTTP (a bad status line, a header line
  over 64 KiB, more than 100 headers, a body cut short, a connection broken off) is one
  UntrustedDataError naming the URL; nothing answering there (refused, no such host, no
  route, a proxy that refuses) is a SourceError. Every message shows the URL as `redact` does.
- A body sent compressed (Content-Encoding gzip, x-gzip or deflate, up to three of them) is
  inflated when the request asks for it (`Request.decode`: a page), within the byte cap; any
  other coding is one error naming it. wheelsmith asks for none (`Accept-Encoding:
  identity`), and a download keeps the bytes as sent, as pip does: their sha256 decides.
- Interim answers (1xx but 101) are skipped, not only `100 Continue`; the deadline ends an
  endless stream of them.
- Redirects are followed as `Follow` says, each Location read by `server_url` (a redirect to
  anything but a valid http(s) URL is refused naming it); a POST is never redirected.
- Credentials (`Request.authorization`, or a URL's `user:password@`) go only to the URL they
  came with, never to where it redirects, and are never shown (`redaction.keep_header`),
  whatever a server echoes of them.
- Proxies come from the environment (`http_proxy`, `https_proxy`, `no_proxy`), as urllib
  takes them; a proxy is spoken to over plain HTTP (https through a CONNECT tunnel).
"""

from __future__ import annotations

import contextlib
import enum
import http.client
import re
import ssl
import time
import urllib.parse
import urllib.request
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from wheelsmith.errors import SourceError, UntrustedDataError, WheelsmithError
from wheelsmith.untrusted import CHUNK, SLOW_HINT, Bounds, too_big, too_slow
from wheelsmith.untrusted.addresses import redact, server_url
from wheelsmith.untrusted.connections import (
    PlainProbe,
    Watchdog,
    basic_auth,
    connection,
    origin,
    without_credentials,
)
from wheelsmith.untrusted.redaction import keep_header
from wheelsmith.untrusted.text import clip

REDIRECTS = frozenset({301, 302, 303, 307, 308})
MAX_REDIRECTS = 10  # as urllib, browsers follow at most 20
ERROR_BODY = 64 << 10  # what is kept of an answer that is not 2xx: a message shows a line of it
FOLLOWED = ("GET", "HEAD")
CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie"})
NOT_HTTP_HINT = "check that the URL names an HTTP server, and the server"
DOWN_HINT = "check the URL and that the server is up"
TLS_HINT = "check that the server speaks HTTPS at that port, and its certificate"
INFLATE = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
MAX_CODINGS = 3
CODING_HINT = ("wheelsmith asks for an uncompressed answer (Accept-Encoding: identity): check "
               "the server's configuration")
REDIRECT_HINT = ("a server may send a reader only to another valid http(s) URL; nothing was "
                 "read there: check the URL and the server")


class Follow(enum.Enum):
    """Where a GET's redirects are followed (a POST's never are)."""

    ANYWHERE = "to any http(s) URL"
    SAME_ORIGIN = "to the same scheme, host and port"  # else the 3xx is the answer
    NEVER = "nowhere"


@dataclass(frozen=True, slots=True)
class Request:
    url: str  # may hold credentials (`user:password@`): basic authentication to its host
    method: str = "GET"
    headers: tuple[tuple[str, str], ...] = ()
    body: Iterable[bytes] | None = None  # with a Content-Length header among `headers`
    authorization: str | None = field(default=None, repr=False)  # to `url` only
    decode: bool = False  # a 2xx body sent compressed is inflated (a page), else kept as sent


@dataclass(frozen=True, slots=True)
class Answer:
    """What the server answered, whatever its status: a redirect is the answer when it was
    not followed (no Location, a loop, another origin under SAME_ORIGIN)."""

    url: str  # the URL that answered: the request's, or the last one it was redirected to
    status: int
    reason: str
    content_type: str  # the header as sent, "" when there is none
    media_type: str  # its type/subtype, lowercase; text/plain when there is none
    location: str | None  # the Location header as sent
    body: bytes  # within the bounds; of a 2xx given to a sink: empty; of another: its start


def exchange(request: Request, bounds: Bounds, *, follow: Follow = Follow.ANYWHERE,
             idle: float | None = None, sink: Callable[[bytes], object] | None = None
             ) -> Answer:
    """`request` and its answer within `bounds` (the deadline is for everything, redirects
    included; each socket operation waits at most `idle` seconds, default the deadline).
    With `sink`, a 2xx answer's body goes there chunk by chunk instead of into the Answer."""
    shown = redact(request.url)
    for name, value in (*request.headers, ("Authorization", request.authorization or "")):
        if name.lower() in CREDENTIAL_HEADERS and value:
            keep_header(name, value)  # never shown, whatever the server echoes
    url = server_url(request.url, request.url, source=shown, where=None,
                     hint="check the URL")
    talk = _Exchange(request, shown, bounds, follow, idle or bounds.seconds, sink)
    try:
        return talk.run(url)
    finally:
        talk.watchdog.cancel()


@dataclass
class _Exchange:
    request: Request
    shown: str
    bounds: Bounds
    follow: Follow
    idle: float
    sink: Callable[[bytes], object] | None
    watchdog: Watchdog = field(init=False)

    def __post_init__(self) -> None:
        self.watchdog = Watchdog(self.bounds.seconds)

    def run(self, url: str) -> Answer:
        body, authorization = self.request.body, self.request.authorization or basic_auth(url)
        seen: set[str] = set()
        while True:
            conn, target, extra = self._connect(url)
            try:
                with self._mapped():
                    headers = {"Accept-Encoding": "identity", **dict(self.request.headers),
                               **extra}
                    if authorization:
                        headers["Authorization"] = authorization
                    _send(conn, self.request.method, target, body, headers)
                    with contextlib.closing(conn.getresponse()) as response:  # it owns the socket
                        following = self._next(url, response, seen)
                        if following is None:
                            return self._answer(url, response)
            finally:
                conn.close()
            seen.add(url)
            url, body, authorization = following, None, None

    def _connect(self, url: str) -> tuple[http.client.HTTPConnection, str, dict[str, str]]:
        parts = urllib.parse.urlsplit(url)
        conn, target, extra = connection(parts, self.idle, self.watchdog)
        probe = PlainProbe(parts, self.watchdog)  # asks plain HTTP if the handshake lasts
        try:
            conn.connect()
        except http.client.HTTPException as exc:  # a proxy's answer to CONNECT that is no HTTP
            conn.close()
            raise self._failed(exc) from None
        except (OSError, ValueError) as exc:  # refused, no such host, TLS, a proxy's refusal
            reached = conn.sock is not None  # the TCP connection was made: TLS failed on it
            conn.close()
            if reached and parts.scheme == "https" and probe.plain():
                raise self._plain(parts) from None
            if self.watchdog.fired:
                raise too_slow(self.shown, self.bounds.seconds) from None
            if reached and isinstance(exc, ssl.SSLError):
                raise SourceError(f"the TLS handshake with {self.shown} failed: "
                                  f"{_ssl_reason(exc)}", hint=TLS_HINT) from exc
            raise SourceError(f"nothing answers at {self.shown}: {exc}", hint=DOWN_HINT) \
                from exc
        finally:
            probe.cancel()
        return conn, target, extra

    def _plain(self, parts: urllib.parse.SplitResult) -> UntrustedDataError:
        """An https URL whose port speaks plain HTTP: final (asking again cannot help)."""
        plain = urllib.parse.urlunsplit(parts._replace(scheme="http"))
        return UntrustedDataError(self.shown, "the TLS handshake failed: the server there "
                                              "answers plain HTTP, not HTTPS",
                                  hint=f"speaks plain HTTP? use {redact(plain)}")

    @contextlib.contextmanager
    def _mapped(self) -> Iterator[None]:
        """Whatever breaks once connected as the one error that says so."""
        try:
            yield
        except _FromSink as taken:  # where the body goes failed (a full disk): not the server
            raise taken.error from taken.error.__cause__
        except WheelsmithError:
            raise
        except (OSError, http.client.HTTPException, ValueError, OverflowError) as exc:
            raise self._failed(exc) from None

    def _failed(self, exc: Exception) -> UntrustedDataError:
        if self.watchdog.fired:
            return too_slow(self.shown, self.bounds.seconds)
        if isinstance(exc, TimeoutError):
            return UntrustedDataError(self.shown, f"sent nothing for {self.idle:g} s",
                                      hint=SLOW_HINT)
        if isinstance(exc, OSError) and not isinstance(exc, http.client.HTTPException):
            return UntrustedDataError(self.shown, f"broke off the connection ({clip(str(exc))})",
                                      hint=NOT_HTTP_HINT)
        return UntrustedDataError(self.shown, f"did not answer with valid HTTP "
                                              f"({_malformed(exc)})", hint=NOT_HTTP_HINT)

    def _next(self, url: str, response: http.client.HTTPResponse,
              seen: set[str]) -> str | None:
        """Where the answer redirects to, when that is followed; None: it is the answer."""
        location = response.getheader("Location")
        if response.status not in REDIRECTS or location is None or \
                self.follow is Follow.NEVER or self.request.method not in FOLLOWED:
            return None
        target = without_credentials(server_url(
            location, url, source=self.shown, where=f"its redirect (HTTP {response.status})",
            hint=REDIRECT_HINT))
        if self.follow is Follow.SAME_ORIGIN and origin(target) != origin(url):
            return None
        if target in seen or target == url or len(seen) >= MAX_REDIRECTS:
            return None  # a loop: the redirect is the answer
        return target

    def _answer(self, url: str, response: http.client.HTTPResponse) -> Answer:
        ok = 200 <= response.status < 300
        kept = bytearray()
        sink = self.sink if ok and self.sink is not None else kept.extend
        if ok and response.length is not None and response.length > self.bounds.max_bytes:
            raise too_big(self.shown, self.bounds)
        inflated = []
        if ok and self.request.decode:
            for coding in self._codings(response.getheader("Content-Encoding")):
                sink = _Inflate(sink, coding, self.bounds, self.shown)
                inflated.append(sink)
        self._pump(response, sink, self.bounds.max_bytes if ok else ERROR_BODY, cut=not ok)
        for inflate in reversed(inflated):
            inflate.finish()
        return Answer(url, response.status, response.reason,
                      response.getheader("Content-Type") or "",
                      response.headers.get_content_type(), response.getheader("Location"),
                      bytes(kept))

    def _codings(self, header: str | None) -> list[str]:
        """The codings a body was sent in, in the order they were applied (RFC 9110 8.4)."""
        codings = [c.strip().lower() for c in (header or "").split(",")]
        codings = [c for c in codings if c and c != "identity"]
        unknown = [c for c in codings if c not in INFLATE]
        if unknown or len(codings) > MAX_CODINGS:
            what = (f"in the coding {clip(unknown[0])!r}, which wheelsmith does not read"
                    if unknown else f"in {len(codings)} codings, more than {MAX_CODINGS}")
            raise UntrustedDataError(self.shown, f"sent its answer compressed {what} "
                                                 "(Content-Encoding)", hint=CODING_HINT)
        return codings

    def _pump(self, response: http.client.HTTPResponse, sink: Callable[[bytes], object],
              limit: int, *, cut: bool) -> None:
        """The body into `sink`: more than `limit` bytes is an error (with `cut`: the rest
        is left unread), and so is one that ends before its Content-Length or its deadline."""
        total = 0
        while chunk := response.read1(CHUNK):
            total += len(chunk)
            if total > limit:
                if cut:
                    _into(sink, chunk[: len(chunk) - (total - limit)])
                    return
                raise too_big(self.shown, self.bounds)
            _into(sink, chunk)
            if time.monotonic() > self.watchdog.deadline:
                raise too_slow(self.shown, self.bounds.seconds)
        if self.watchdog.fired:  # the body ended because the watchdog shut the socket
            raise too_slow(self.shown, self.bounds.seconds)
        if response.length:  # what http.client counts down: bytes it was promised and not sent
            raise UntrustedDataError(self.shown, f"ended its answer {response.length} bytes "
                                                 "short of its Content-Length",
                                     hint=NOT_HTTP_HINT)


def _ssl_reason(exc: ssl.SSLError) -> str:
    """What OpenSSL said, without the place in Python's C source it was said from."""
    return clip(re.sub(r" \(_ssl\.c:\d+\)$", "", str(exc)), 120)


def _malformed(exc: Exception) -> str:
    """What was wrong with an answer http.client could not read, in words (never a class
    name: the reader knows HTTP, not Python)."""
    if isinstance(exc, http.client.IncompleteRead):
        return (f"its body ended after {len(exc.partial)} bytes, short of what it announced, "
                "or its chunked encoding is malformed")
    if isinstance(exc, http.client.LineTooLong):
        what = re.search(r"reading (.+)$", str(exc))  # "got more than 65536 bytes when reading X"
        return f"a {what[1] if what else 'line'} longer than 64 KiB"
    if isinstance(exc, http.client.RemoteDisconnected):
        return "it closed the connection without answering"
    if isinstance(exc, http.client.BadStatusLine):
        line = str(exc.args[0]).strip() if exc.args else ""
        return f"its status line {clip(line)!r} is not HTTP/1.x" if line else \
            "it sent no status line"
    if isinstance(exc, http.client.UnknownProtocol):
        return f"it speaks {clip(str(exc.args[0]) if exc.args else '?')}, not HTTP/1.x"
    detail = str(exc)
    return clip(detail) if detail else "a malformed answer"


class _Inflate:
    """A 2xx body sent in `coding`, inflated into `sink`: at most the bounds' byte cap comes
    out (a small body that inflates without end is too big, not a machine's memory)."""

    def __init__(self, sink: Callable[[bytes], object], coding: str, bounds: Bounds,
                 shown: str) -> None:
        self._sink, self._coding, self._bounds, self._shown = sink, coding, bounds, shown
        self._left = bounds.max_bytes
        self._inflater = zlib.decompressobj(INFLATE[coding])

    def __call__(self, data: bytes) -> None:
        while data:
            try:
                out = self._inflater.decompress(data, self._left + 1)
            except zlib.error as exc:
                raise self._bad(str(exc)) from None
            self._left -= len(out)
            if self._left < 0:
                raise too_big(self._shown, self._bounds, verb="inflates to")
            if out:
                self._sink(out)
            data = self._inflater.unconsumed_tail
            if self._inflater.eof and self._inflater.unused_data:
                if self._coding == "deflate":
                    raise self._bad("data after the end of its deflate stream")
                data = self._inflater.unused_data  # another gzip member follows (RFC 1952)
                self._inflater = zlib.decompressobj(INFLATE[self._coding])

    def finish(self) -> None:
        if not self._inflater.eof:
            raise self._bad("it ends inside the compressed stream")

    def _bad(self, why: str) -> UntrustedDataError:
        return UntrustedDataError(self._shown, f"sent a body that is not valid {self._coding} "
                                               f"(Content-Encoding): {clip(why)}",
                                  hint=NOT_HTTP_HINT)


class _FromSink(Exception):
    """What the sink raised, carried past the mapping of the connection's errors."""

    def __init__(self, error: Exception) -> None:
        super().__init__(error)
        self.error = error


def _into(sink: Callable[[bytes], object], chunk: bytes) -> None:
    try:
        sink(chunk)
    except Exception as exc:
        raise _FromSink(exc) from exc


def _send(conn: http.client.HTTPConnection, method: str, target: str,
          body: Iterable[bytes] | None, headers: dict[str, str]) -> None:
    """The request; a server that stops reading an upload's body (it answered early: a 401,
    a 413) has its say: the answer is read all the same."""
    try:
        conn.request(method, target, body=body, headers=headers)
    except (BrokenPipeError, ConnectionResetError):
        if body is None:
            raise
