"""The boundary for data from outside (docs/security.md): what others wrote reaches wheelsmith's
logic only bounded, parsed into typed models, and with every name in it checked.

- Bounded reads: `read_url`/`copy_url` (http, https, file) stop at `Bounds`, a byte cap and a
  total deadline on the monotonic clock (as `cmd.run(bounds=...)` does for a command's
  output). A watchdog shuts the connection's sockets at the deadline, so a server that drips
  one byte at a time (which never trips a per-read timeout) or never answers ends the read.
- Typed parsing: `parse_json` and `Node`, the getters every model of outside data is built
  from (pages, ledger lines, provenance, probe answers): a wrong shape is one
  UntrustedDataError naming the source and the place in it (`files[3].hashes`), never a
  KeyError. `parse_python` reads code with `ast` (deep nesting: RecursionError, MemoryError).
- Names: `Node.name` (`name_problem`) for a name from data that becomes part of a path (no
  `/`, no `..`, no NUL), `inside` for a joined path that must stay in its root.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import http.client
import json
import os
import re
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
from http import HTTPStatus
from pathlib import Path
from typing import Any, TypeVar

from wheelsmith.errors import SourceError, UntrustedDataError

T = TypeVar("T")
CHUNK = 1 << 16
NOT_FOUND = HTTPStatus.NOT_FOUND.value
MAX_NAME_BYTES = 255
MAX_DEPTH = 200  # of a syntax tree: setup.py files nest a few dozen levels at most


def describe_size(count: int) -> str:
    """`16 MiB`, `512 bytes`: a cap as a person reads it."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if count >= 1 << shift and count % (1 << shift) == 0:
            return f"{count >> shift} {unit}"
    return f"{count} bytes"


def clip(text: str, limit: int = 60) -> str:
    """`text` shown in a message: at most `limit` characters, control characters escaped."""
    shown = text.encode("unicode_escape").decode("ascii")
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def name_problem(name: str) -> str | None:
    """Why `name` is not a plain file name (one path component, nothing that moves or hides
    it), or None when it is one."""
    checks = ((not name, "it is empty"), ("\0" in name, "it holds a NUL byte"),
              ("/" in name or "\\" in name, "it holds a path separator"),
              (name in (".", ".."), f"it is '{name}'"),
              (any(ord(c) < 32 or ord(c) == 127 for c in name), "it holds control characters"),
              (len(name.encode(errors="surrogatepass")) > MAX_NAME_BYTES,
               f"it is longer than {MAX_NAME_BYTES} bytes"))
    return next((why for wrong, why in checks if wrong), None)


def inside(root: Path, relative: str | Path) -> Path:
    """`root / relative`, after checking that it resolves inside `root` (links included)."""
    base = root.resolve()
    try:
        ok = (base / relative).resolve().is_relative_to(base)
    except (RuntimeError, OSError):  # a loop of links
        ok = False
    if not ok:
        raise UntrustedDataError(str(relative), f"leads outside {root}",
                                 hint="a path taken from data never leaves its root: the data "
                                      "is damaged or hostile; nothing was read or written there")
    return root / relative


def _kind(value: object) -> str:
    if isinstance(value, (dict, list, bool)) or value is None:
        return {dict: "an object", list: "a list", bool: "true/false"}.get(type(value), "null")
    shown = json.dumps(value) if isinstance(value, str) else repr(value)
    return f"{'a string' if isinstance(value, str) else 'a number'} ({clip(shown)})"


@dataclass(frozen=True, slots=True)
class Node:
    """A value from outside and where it is: `source` (a URL, `file:line`, "the probe of X")
    and `path` inside it (`files[3].hashes`). Every getter checks a shape or fails naming
    both."""

    value: object
    source: str
    path: str = ""

    def fail(self, problem: str, *, hint: str | None = None) -> UntrustedDataError:
        return UntrustedDataError(self.source, f"{self.path}: {problem}" if self.path
                                  else problem, hint=hint)

    def _child(self, key: str | int, value: object) -> Node:
        if isinstance(key, int):
            return Node(value, self.source, f"{self.path}[{key}]")
        return Node(value, self.source, f"{self.path}.{key}" if self.path else key)

    def _as(self, kind: type[T], what: str) -> T:
        if not isinstance(self.value, kind) or (kind is int and isinstance(self.value, bool)):
            raise self.fail(f"expected {what}, found {_kind(self.value)}")
        return self.value

    def __getitem__(self, key: str) -> Node:
        found: dict[str, object] = self._as(dict, "an object")
        if key not in found:
            raise self.fail(f"'{key}' is missing")
        return self._child(key, found[key])

    def get(self, key: str) -> Node | None:
        """The value at `key`; None when it is absent or null."""
        value = self._as(dict, "an object").get(key)
        return None if value is None else self._child(key, value)

    def optional(self, key: str, read: Callable[[Node], T]) -> T | None:
        """`read` of the value at `key`; None when it is absent or null."""
        found = self.get(key)
        return None if found is None else read(found)

    def items(self) -> list[Node]:
        return [self._child(i, v) for i, v in enumerate(self._as(list, "a list"))]

    def entries(self) -> dict[str, Node]:
        return {k: self._child(k, v) for k, v in self._as(dict, "an object").items()}

    def text(self, pattern: re.Pattern[str] | None = None, what: str = "") -> str:
        """A string; with `pattern`, one that matches it whole (`what` names the form)."""
        value = self._as(str, "a string")
        if pattern is not None and not pattern.fullmatch(value):
            raise self.fail(f"'{clip(value)}' is not {what or 'in the expected form'}")
        return value

    def parsed(self, convert: Callable[[str], T], what: str) -> T:
        """`convert` of a string; a ValueError from it: the string is not `what`."""
        value = self.text()
        try:
            return convert(value)
        except ValueError:
            raise self.fail(f"'{clip(value)}' is not {what}") from None

    def integer(self, minimum: int = 0) -> int:
        value = self._as(int, "a whole number")
        if value < minimum:
            raise self.fail(f"{value} is less than {minimum}")
        return value

    def flag(self) -> bool:
        return self._as(bool, "true or false")

    def name(self) -> str:
        """A plain file name: a name from data that becomes part of a path (`name_problem`)."""
        text = self.text()
        problem = name_problem(text)
        if problem is not None:
            raise self.fail(f"'{clip(text)}' is not a plain file name ({problem})")
        return text

    def text_map(self) -> dict[str, str]:
        return {key: node.text() for key, node in self.entries().items()}


def parse_json(data: bytes | str, source: str) -> Node:
    """The JSON document `data` from `source` as a Node; not JSON: one UntrustedDataError."""
    try:
        value: Any = json.loads(data)
    except RecursionError:
        raise UntrustedDataError(source, "its JSON nests too deeply") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, a number too long
        raise UntrustedDataError(source, f"not valid JSON ({clip(str(exc), 100)})") from None
    return Node(value, source)


def parse_python(text: str, source: str) -> ast.Module:
    """`text` (the Python source at `source`) as a syntax tree no deeper than MAX_DEPTH (so
    that code walking it recursively cannot run out of stack); one UntrustedDataError when
    Python cannot read it (a syntax error, a NUL byte, nesting too deep for its parser)."""
    try:
        module = ast.parse(text)
    except (SyntaxError, ValueError) as exc:  # ValueError: a NUL byte, before Python 3.12
        line = getattr(exc, "lineno", None)
        raise UntrustedDataError(f"{source}:{line}" if line else source,
                                 f"not valid Python ({getattr(exc, 'msg', exc)})") from None
    except (RecursionError, MemoryError):
        raise UntrustedDataError(source, "nests too deeply for Python's parser") from None
    stack: list[tuple[ast.AST, int, int]] = [(module, 0, 1)]  # a node, its depth and line
    while stack:
        node, depth, line = stack.pop()
        if depth > MAX_DEPTH:
            raise UntrustedDataError(f"{source}:{line}", f"nests deeper than {MAX_DEPTH} levels")
        stack.extend((child, depth + 1, getattr(child, "lineno", line))
                     for child in ast.iter_child_nodes(node))
    return module


@dataclass(frozen=True, slots=True)
class Bounds:
    """The most a read may take: `max_bytes` in all, within `seconds` (a total deadline);
    with `quiet_seconds`, a command must print its first byte within that (cmd.run)."""

    max_bytes: int
    seconds: float
    quiet_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class Answer:
    url: str
    media_type: str  # the Content-Type without parameters; "" for a file
    data: bytes


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
    if scheme not in ("http", "https"):
        raise UntrustedDataError(url, "is not an http://, https:// or file:// URL")
    watchdog = _Watchdog(bounds.seconds)
    try:
        return _copy_http(url, sink, bounds, accept, watchdog)
    finally:
        watchdog.timer.cancel()


def too_big(source: str, bounds: Bounds, *, verb: str = "answered",
            hint: str | None = None) -> UntrustedDataError:
    return UntrustedDataError(source, f"{verb} more than {describe_size(bounds.max_bytes)}",
                              hint=hint or "nothing wheelsmith reads there is that large: "
                                           "check that the URL is the one you mean")


def too_slow(source: str, seconds: float, *, verb: str = "did not finish answering",
             hint: str | None = None) -> UntrustedDataError:
    return UntrustedDataError(source, f"{verb} within {seconds:g} s",
                              hint=hint or "the server is down, overloaded or holds the "
                                           "connection open without answering: check it, then "
                                           "try again")


def _pump(read: Callable[[int], bytes], sink: Callable[[bytes], object], url: str,
          bounds: Bounds, deadline: float) -> None:
    total = 0
    while chunk := read(CHUNK):
        total += len(chunk)
        if total > bounds.max_bytes:
            raise too_big(url, bounds)
        sink(chunk)
        if time.monotonic() > deadline:
            raise too_slow(url, bounds.seconds)


def _copy_file(url: str, sink: Callable[[bytes], object], bounds: Bounds) -> None:
    path = Path(urllib.request.url2pathname(urllib.parse.urlsplit(url).path))
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


def _copy_http(url: str, sink: Callable[[bytes], object], bounds: Bounds,
               accept: str | None, watchdog: _Watchdog) -> str:
    """Proxies from the environment and redirects are followed; no scheme but http(s) (a
    redirect to ftp:// or file:// is not)."""
    opener = urllib.request.OpenerDirector()
    for handler in (urllib.request.ProxyHandler(), urllib.request.UnknownHandler(),
                    _Handler(watchdog), urllib.request.HTTPRedirectHandler(),
                    urllib.request.HTTPDefaultErrorHandler(),
                    urllib.request.HTTPErrorProcessor()):
        opener.add_handler(handler)
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})  # noqa: S310 - the scheme was checked
    try:
        with opener.open(request, timeout=bounds.seconds) as response:
            length = response.headers.get("Content-Length", "")
            if length.isdigit() and int(length) > bounds.max_bytes:
                raise too_big(url, bounds)
            _pump(response.read, sink, url, bounds, watchdog.deadline)
            media_type: str = response.headers.get_content_type()
    except urllib.error.HTTPError as exc:
        exc.close()
        raise too_slow(url, bounds.seconds) if watchdog.fired else _answered(url, exc) from None
    except http.client.HTTPException as exc:  # garbage instead of HTTP, a body cut short
        raise too_slow(url, bounds.seconds) if watchdog.fired else UntrustedDataError(
            url, f"did not answer with valid HTTP ({type(exc).__name__}: {clip(str(exc))})",
            hint="check that the URL names an HTTP server, and the server") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        if watchdog.fired or isinstance(reason, TimeoutError):
            raise too_slow(url, bounds.seconds) from None
        raise SourceError(f"nothing answers at {url}: {reason}") from exc
    if watchdog.fired:  # the body ended because the watchdog shut the socket
        raise too_slow(url, bounds.seconds)
    return media_type


def _answered(url: str, exc: urllib.error.HTTPError) -> UntrustedDataError:
    code = exc.code
    if code == NOT_FOUND:
        return UntrustedDataError(url, "not found (HTTP 404)", status=code)
    if 300 <= code < 400:
        where = exc.headers.get("Location") if exc.headers else None
        return UntrustedDataError(
            url, f"redirects in a loop (HTTP {code}{f' to {clip(where)}' if where else ''})",
            status=code, hint="the server sends the request back where it came from: check "
                              "the URL (its trailing slash) and the server's configuration")
    return UntrustedDataError(url, f"answered HTTP {code} {clip(str(exc.reason))}",
                              status=code, hint="the server failed or refused the request: "
                                                "check the URL and the server's log")
