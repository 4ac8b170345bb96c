"""Bounded reads of http(s):// and file:// URLs: a byte cap and a total deadline (`Bounds`) on
the monotonic clock, as `cmd.run(bounds=...)` has for a command's output. Over HTTP through
`web.exchange` (whose watchdog ends a server that drips one byte at a time or never answers),
which follows redirects to valid http(s) URLs only.

What a server answers is data: its headers too (a Content-Length of any shape), and where it
redirects. Credentials in a URL (`https://USER:TOKEN@host/simple/`, as pip takes them) go to
that host as HTTP basic authentication, never to a host it redirects to, and never into a
message: every message names the URL as `redact` shows it.
"""

from __future__ import annotations

import os
import re
import stat
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

from wheelsmith.errors import SourceError, UntrustedDataError
from wheelsmith.untrusted import CHUNK, NOT_FOUND, Bounds, clip, too_big, too_slow, web
from wheelsmith.untrusted.addresses import WEB, redact

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")


@dataclass(frozen=True, slots=True)
class Answer:
    url: str
    media_type: str  # the Content-Type without parameters; "" for a file
    data: bytes


def read_url(url: str, bounds: Bounds, *, accept: str | None = None) -> Answer:
    """The whole of `url` (http, https or file), within `bounds`. Not found (HTTP 404, no
    such file): UntrustedDataError with status 404; nothing answers: SourceError."""
    data = bytearray()
    media_type = copy_url(url, data.extend, bounds, accept=accept, decode=True)
    return Answer(url, media_type, bytes(data))


def copy_url(url: str, sink: Callable[[bytes], object], bounds: Bounds, *,
             accept: str | None = None, decode: bool = False) -> str:
    """Hand `url`'s body to `sink` chunk by chunk, within `bounds`; its media type. With
    `decode`, a body a server sent compressed is inflated (web.Request.decode)."""
    scheme = _SCHEME.match(url)
    if scheme is not None and scheme[1].lower() == "file":
        _copy_file(url, sink, bounds)
        return ""
    if scheme is None or scheme[1].lower() not in WEB:
        raise UntrustedDataError(redact(url), "is not an http://, https:// or file:// URL")
    answer = web.exchange(web.Request(url, headers=(("Accept", accept),) if accept else (),
                                      decode=decode), bounds, sink=sink)
    if not 200 <= answer.status < 300:
        raise _answered(redact(url), answer)
    return answer.media_type


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
    try:
        path = urllib.request.url2pathname(urllib.parse.urlsplit(url).path)
    except ValueError:  # brackets that are no IPv6 address
        raise UntrustedDataError(url, "is not a valid file:// URL") from None
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


def _answered(shown: str, answer: web.Answer) -> UntrustedDataError:
    code, where = answer.status, answer.location
    if code == NOT_FOUND:
        return UntrustedDataError(shown, "not found (HTTP 404)", status=code)
    if code in web.REDIRECTS and not where:
        return UntrustedDataError(shown, f"answered HTTP {code} without saying where to",
                                  status=code, hint="the server's redirect is incomplete: "
                                                    "check the URL and the server")
    if code in web.REDIRECTS:  # followed anywhere but where it had been
        return UntrustedDataError(
            shown, f"redirects in a loop (HTTP {code} to {clip(redact(where or ''))})",
            status=code, hint="the server sends the request back where it came from: check "
                              "the URL (its trailing slash) and the server's configuration")
    return UntrustedDataError(shown, f"answered HTTP {code} {clip(answer.reason)}",
                              status=code, hint="the server failed or refused the request: "
                                                "check the URL and the server's log")
