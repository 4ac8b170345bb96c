"""Bounded reads of http(s):// and file:// URLs: a byte cap and a total deadline (`Bounds`) on
the monotonic clock, as `cmd.run(bounds=...)` has for a command's output. A watchdog shuts the
connection's sockets at the deadline, so a server that drips one byte at a time (which never
trips a per-read timeout) or never answers ends the read.

What a server answers is data: its headers too (a Content-Length of any shape), and where it
redirects (only to http(s)). Credentials in a URL (`https://USER:TOKEN@host/simple/`, as pip
takes them) go to that host as HTTP basic authentication, never to a host it redirects to,
and never into a message: every message names the URL as `redact` shows it.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import http.client
import os
import socket
import ssl
import stat
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from wheelsmith.errors import SourceError, UntrustedDataError
from wheelsmith.untrusted import CHUNK, NOT_FOUND, Bounds, clip, too_big, too_slow

WEB = ("http", "https")


@dataclass(frozen=True, slots=True)
class Answer:
    url: str
    media_type: str  # the Content-Type without parameters; "" for a file
    data: bytes


def redact(url: str) -> str:
    """`url` as messages and logs show it: credentials in it become `***`."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]))


def read_url(url: str, bounds: Bounds, *, accept: str | None = None) -> Answer:
    """The whole of `url` (http, https or file), within `bounds`. Not found (HTTP 404, no
    such file): UntrustedDataError with status 404; nothing answers: SourceError."""
    data = bytearray()
    media_type = copy_url(url, data.extend, bounds, accept=accept)
    return Answer(url, media_type, bytes(data))


def copy_url(url: str, sink: Callable[[bytes], object], bounds: Bounds, *,
             accept: str | None = None) -> str:
    """Hand `url`'s body to `sink` chunk by chunk, within `bounds`; its media type."""
    scheme = urllib.parse.urlsplit(url).scheme
    if scheme == "file":
        _copy_file(url, sink, bounds)
        return ""
    if scheme not in WEB:
        raise UntrustedDataError(redact(url), "is not an http://, https:// or file:// URL")
    watchdog = _Watchdog(bounds.seconds)
    try:
        return _copy_http(url, sink, bounds, accept, watchdog)
    finally:
        watchdog.timer.cancel()


def _pump(read: Callable[[int], bytes], sink: Callable[[bytes], object], shown: str,
          bounds: Bounds, deadline: float) -> None:
    total = 0
    while chunk := read(CHUNK):
        total += len(chunk)
        if total > bounds.max_bytes:
            raise too_big(shown, bounds)
        sink(chunk)
        if time.monotonic() > deadline:
            raise too_slow(shown, bounds.seconds)


def _copy_file(url: str, sink: Callable[[bytes], object], bounds: Bounds) -> None:
    path = urllib.request.url2pathname(urllib.parse.urlsplit(url).path)
    try:  # non-blocking: opening a FIFO must not wait for a writer
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except (FileNotFoundError, NotADirectoryError):
        raise UntrustedDataError(url, "no such file", status=NOT_FOUND) from None
    except OSError as exc:
        raise SourceError(f"cannot read {url}: {exc.strerror or exc}") from exc
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UntrustedDataError(url, "is not a regular file")
        _pump(handle.read, sink, url, bounds, time.monotonic() + bounds.seconds)


class _Watchdog:
    """Shuts every socket of one read at its deadline: a blocked read then returns at once."""

    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds
        self.fired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self.timer = threading.Timer(seconds, self._fire)
        self.timer.daemon = True
        self.timer.start()

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def connect(self, address: tuple[str, int], timeout: float | None = None,
                source_address: tuple[str, int] | None = None) -> socket.socket:
        sock = socket.create_connection(address, timeout, source_address)
        with self._lock:
            self._sockets.append(sock)
            if self.fired:
                sock.shutdown(socket.SHUT_RDWR)
        return sock


class _Connection(http.client.HTTPConnection):
    def __init__(self, host: str, *, watchdog: _Watchdog, **kwargs: Any) -> None:
        super().__init__(host, **kwargs)
        self._create_connection = watchdog.connect


class _TLSConnection(http.client.HTTPSConnection):
    def __init__(self, host: str, *, watchdog: _Watchdog, **kwargs: Any) -> None:
        super().__init__(host, **kwargs)
        self._create_connection = watchdog.connect


class _Handler(urllib.request.HTTPSHandler):
    """http and https, over sockets the watchdog can shut."""

    http_request = urllib.request.AbstractHTTPHandler.do_request_

    def __init__(self, watchdog: _Watchdog) -> None:
        self.tls = ssl.create_default_context()
        super().__init__(context=self.tls)
        self.watchdog = watchdog

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_Connection, watchdog=self.watchdog), req)

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_TLSConnection, watchdog=self.watchdog), req,
                            context=self.tls)


class _Redirects(urllib.request.HTTPRedirectHandler):
    """Followed to http(s) only: a redirect elsewhere (ftp://, which urllib would follow, or
    file://) is the HTTP error `_answered` names."""

    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str,  # noqa: PLR0917 - urllib's signature
                         headers: Any, newurl: str) -> urllib.request.Request | None:
        if urllib.parse.urlsplit(newurl).scheme not in WEB:
            raise urllib.error.HTTPError(req.full_url, code, msg, headers, fp)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _request(url: str, accept: str | None) -> urllib.request.Request:
    """The request for `url`, its credentials (if any) taken out of it into an Authorization
    header that is not sent on to where the server redirects."""
    parts = urllib.parse.urlsplit(url)
    plain = urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
    request = urllib.request.Request(plain, headers={"Accept": accept} if accept else {})  # noqa: S310 - the scheme was checked
    if "@" in parts.netloc:
        user, _, password = parts.netloc.rpartition("@")[0].partition(":")
        pair = f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}"
        token = base64.b64encode(pair.encode()).decode("ascii")
        request.add_unredirected_header("Authorization", f"Basic {token}")
    return request


def _copy_http(url: str, sink: Callable[[bytes], object], bounds: Bounds,
               accept: str | None, watchdog: _Watchdog) -> str:
    """Proxies from the environment and redirects (to http or https) are followed."""
    opener = urllib.request.OpenerDirector()
    for handler in (urllib.request.ProxyHandler(), urllib.request.UnknownHandler(),
                    _Handler(watchdog), _Redirects(), urllib.request.HTTPDefaultErrorHandler(),
                    urllib.request.HTTPErrorProcessor()):
        opener.add_handler(handler)
    shown = redact(url)
    try:
        with opener.open(_request(url, accept), timeout=bounds.seconds) as response:
            length = response.length  # http.client's reading of Content-Length, or None
            if length is not None and length > bounds.max_bytes:
                raise too_big(shown, bounds)
            _pump(response.read, sink, shown, bounds, watchdog.deadline)
            media_type: str = response.headers.get_content_type()
    except urllib.error.HTTPError as exc:
        exc.close()
        raise too_slow(shown, bounds.seconds) if watchdog.fired else _answered(shown, exc) \
            from None
    except http.client.HTTPException as exc:  # garbage instead of HTTP, a body cut short
        raise too_slow(shown, bounds.seconds) if watchdog.fired else UntrustedDataError(
            shown, f"did not answer with valid HTTP ({type(exc).__name__}: {clip(str(exc))})",
            hint="check that the URL names an HTTP server, and the server") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        if watchdog.fired or isinstance(reason, TimeoutError):
            raise too_slow(shown, bounds.seconds) from None
        raise SourceError(f"nothing answers at {shown}: {reason}") from exc
    if watchdog.fired:  # the body ended because the watchdog shut the socket
        raise too_slow(shown, bounds.seconds)
    return media_type


REDIRECTS = (301, 302, 303, 307, 308)  # what urllib follows


def _answered(shown: str, exc: urllib.error.HTTPError) -> UntrustedDataError:
    code, where = exc.code, exc.headers.get("Location") if exc.headers else None
    target = urllib.parse.urljoin(exc.url, where) if where else ""
    if code == NOT_FOUND:
        return UntrustedDataError(shown, "not found (HTTP 404)", status=code)
    if code in REDIRECTS and not where:
        return UntrustedDataError(shown, f"answered HTTP {code} without saying where to",
                                  status=code, hint="the server's redirect is incomplete: "
                                                    "check the URL and the server")
    if code in REDIRECTS and urllib.parse.urlsplit(target).scheme not in WEB:
        return UntrustedDataError(
            shown, f"redirects to {clip(redact(target))} (HTTP {code}), which is not an "
                   "http(s) URL", status=code,
            hint="a server may send a reader only to another http(s) URL; nothing was read "
                 "there: check the URL and the server")
    if code in REDIRECTS:
        return UntrustedDataError(
            shown, f"redirects in a loop (HTTP {code} to {clip(redact(where or ''))})",
            status=code, hint="the server sends the request back where it came from: check "
                              "the URL (its trailing slash) and the server's configuration")
    return UntrustedDataError(shown, f"answered HTTP {code} {clip(str(exc.reason))}",
                              status=code, hint="the server failed or refused the request: "
                                                "check the URL and the server's log")
