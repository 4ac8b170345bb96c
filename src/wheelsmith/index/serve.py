"""A read-only HTTP server for the index: PEP 691 content negotiation, `.metadata`, no escapes.

Only five kinds of path exist: `/`, `/<channel>/simple/`, `/<channel>/simple/<project>/`, a
project's `<name>-<version>-variants.json` beside its pages (index/variants.py) and
`/files/<xx>/<sha256>/<filename>[.metadata]`. Everything else is a 404 — never a redirect to
PyPI, never a directory listing, never a file outside the index root. Any static server can
serve the same tree (see docs/index-and-clients.md); this one adds JSON/HTML negotiation and
cache headers.

Its clients are not trusted. Each connection carries one request (HTTP/1.0 replies), whose head
must arrive whole within the idle timeout and `HEAD_BYTES`; a reply whose client takes nothing
for the idle timeout is cut. Malformed requests get 400, 414, 431 or 501; at most `connections`
are served at once, and `per_client` of one client (beyond them: 503; listener.py). Every
request, however it ended, is one log line; a bug is one line too (its traceback only with
-vv), never a dead thread or a traceback in the log.
"""

from __future__ import annotations

import contextlib
import http.client
import http.server
import io
import ipaddress
import logging
import os
import re
import socket
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from wheelsmith.errors import FileSystemError, UntrustedDataError
from wheelsmith.index.pages import HTML_TYPE, JSON_TYPE
from wheelsmith.untrusted import inside, local

log = logging.getLogger(__name__)

PAGE_CACHE = "max-age=60, must-revalidate"
FILE_CACHE = "public, max-age=31536000, immutable"
_NAME = r"[a-z0-9][a-z0-9._-]*"
PAGE_RE = re.compile(rf"^/(?P<channel>{_NAME})/simple/(?:(?P<project>{_NAME})/)?$")
NO_SLASH_RE = re.compile(rf"^/{_NAME}/simple(?:/{_NAME})?$")
FILE_RE = re.compile(r"^/files/[0-9a-f]{2}/[0-9a-f]{64}/[^/\x00]+$")
VARIANTS_RE = re.compile(rf"^/{_NAME}/simple/{_NAME}/[A-Za-z0-9_.+!-]+-variants\.json$")
CHUNK = 1 << 16  # a reply is written in pieces of this size, each within the idle timeout
IDLE_S = 30.0  # the default idle timeout
HEAD_BYTES = 1 << 17  # a request line and its headers, together (each line: at most 64 KiB)
SHOWN = 200  # characters of a request line in the log


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    path: Path | None = None
    content_type: str = "text/plain; charset=utf-8"
    cache: str = "no-store"
    vary: bool = False
    location: str | None = None


def negotiate(accept: str | None, query: str) -> str | None:
    """The page format to send: JSON, HTML, or None (nothing acceptable: 406)."""
    fmt = urllib.parse.parse_qs(query).get("format", [None])[0]
    if fmt in (JSON_TYPE, HTML_TYPE, "text/html"):
        return fmt
    if not accept:
        return "text/html"
    best, best_q = None, 0.0
    for part in accept.split(","):
        media, *params = (p.strip() for p in part.split(";"))
        q = 1.0
        for param in params:
            if param.startswith("q="):
                try:
                    q = float(param[2:])
                except ValueError:
                    q = 0.0
        offer = {JSON_TYPE: JSON_TYPE, HTML_TYPE: HTML_TYPE, "text/html": "text/html",
                 "*/*": "text/html", "application/*": JSON_TYPE, "text/*": "text/html"}.get(media)
        if offer is not None and q > best_q:
            best, best_q = offer, q
    return best


def route(root: Path, raw_path: str, accept: str | None) -> Response:
    """Map a request target (`/path?query`, as clients send it) to a file under `root`, or an
    error status."""
    target, _, query = raw_path.partition("#")[0].partition("?")
    path = urllib.parse.unquote(target)
    if "\x00" in path or "/../" in f"{path}/" or "\\" in path:
        return Response(404)
    if path == "/":
        return _file(root, "index.html", "text/html; charset=utf-8", PAGE_CACHE)
    if NO_SLASH_RE.fullmatch(path):  # fullmatch: `$` would match before a final newline
        return Response(301, location=target + "/")
    if PAGE_RE.fullmatch(path):
        return _page(root, path.lstrip("/"), negotiate(accept, query))
    return _static(root, path)


def _static(root: Path, path: str) -> Response:
    """A published file or its metadata, or a project's variants file; else 404."""
    if FILE_RE.fullmatch(path):
        ctype = "text/plain; charset=utf-8" if path.endswith(".metadata") else (
            "application/octet-stream")
        return _file(root, path.lstrip("/"), ctype, FILE_CACHE)
    if VARIANTS_RE.fullmatch(path):
        return _file(root, path.lstrip("/"), "application/json", PAGE_CACHE)
    return Response(404)


def _page(root: Path, directory: str, fmt: str | None) -> Response:
    if fmt is None:
        return Response(406, vary=True)
    name = "index.json" if fmt == JSON_TYPE else "index.html"
    ctype = fmt if fmt != "text/html" else "text/html; charset=utf-8"
    found = _file(root, f"{directory}{name}", ctype, PAGE_CACHE)
    return Response(found.status, found.path, found.content_type, found.cache, vary=True)


def _file(root: Path, relative: str, content_type: str, cache: str) -> Response:
    """The file at `relative` under `root`; 404 for none, a link, what is not a regular file
    (a FIFO, a device: `send` opens it only as one), or a path that resolves out of the index
    (a directory in it replaced by a link: what is there is not the index's)."""
    try:  # a name too long for the file system is a file that is not there
        path = inside(root, relative)
        if not path.is_file() or path.is_symlink():
            return Response(404)
    except (OSError, UntrustedDataError):
        return Response(404)
    return Response(200, path, content_type, cache)


class ClientGone(Exception):
    """The connection ended or stalled before its request was answered; says how."""


class HeadTooLarge(http.client.HTTPException):
    """A request head over HEAD_BYTES (http.server answers 431)."""


def send(handler: http.server.BaseHTTPRequestHandler, response: Response, *,
         head: bool) -> None:
    """Send `response`; ClientGone when the client went away or stalled in the middle."""
    with contextlib.ExitStack() as stack:
        source: BinaryIO | None = None
        if response.path is not None:
            try:  # a regular file, not through a link (untrusted.local): a FIFO never blocks
                source = stack.enter_context(local.open_regular(response.path, follow=False))
            except (OSError, FileSystemError):  # gone or replaced since it was routed
                response = Response(404)
        body = b"" if source else f"{response.status}\n".encode()
        size = os.fstat(source.fileno()).st_size if source else len(body)
        handler.send_response(response.status)
        handler.send_header("Content-Type", response.content_type)
        handler.send_header("Content-Length", str(size))
        handler.send_header("Cache-Control", response.cache)
        if response.vary:
            handler.send_header("Vary", "Accept")
        if response.location:
            handler.send_header("Location", response.location)
        handler.end_headers()
        if not head:
            _write(handler, source or io.BytesIO(body), size)


def _write(handler: http.server.BaseHTTPRequestHandler, source: BinaryIO, size: int) -> None:
    sent = 0
    try:
        while chunk := source.read(CHUNK):
            handler.wfile.write(chunk)
            sent += len(chunk)
    except TimeoutError:
        raise ClientGone(f"the client took nothing for {handler.timeout:g} s; {sent} of "
                         f"{size} bytes sent") from None
    except ConnectionError as exc:
        raise ClientGone(f"the client went away ({exc.strerror or type(exc).__name__}); "
                         f"{sent} of {size} bytes sent") from None


class _HeadReader(io.RawIOBase):
    """A connection's bytes as the request head reads them: from `start()`, the head must
    arrive within `seconds` (however slowly it drips) and `HEAD_BYTES`."""

    def __init__(self, sock: socket.socket, seconds: float) -> None:
        super().__init__()
        self._sock, self._seconds = sock, seconds
        self.start()

    def start(self) -> None:
        self._deadline = time.monotonic() + self._seconds
        self._left = HEAD_BYTES

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        if self._left <= 0:
            raise HeadTooLarge(f"a request head over {HEAD_BYTES} bytes")
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise ClientGone(f"no complete request within {self._seconds:g} s")
        self._sock.settimeout(remaining)
        try:
            count = self._sock.recv_into(buffer, min(len(buffer), self._left))
        except TimeoutError:
            raise ClientGone(f"no complete request within {self._seconds:g} s") from None
        finally:
            self._sock.settimeout(self._seconds)  # writes: each piece within the idle timeout
        self._left -= count
        return count


def shown(text: str) -> str:
    """Text from a client as the log shows it: one line, escaped, at most SHOWN characters."""
    escaped = repr(text)[1:-1]
    return escaped if len(escaped) <= SHOWN else f"{escaped[:SHOWN]}… ({len(text)} characters)"


def _why(exc: BaseException) -> str:
    if isinstance(exc, ClientGone | HeadTooLarge):
        return str(exc)
    text = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
    return f"the connection broke ({text})"


class IndexHandler(http.server.BaseHTTPRequestHandler):
    """One connection: one request (HTTP/1.0 replies), answered from `root`, logged in one
    line however it ends. `make_handler` sets `root` and `timeout` (the idle timeout)."""

    server_version = "wheelsmith"
    sys_version = ""
    protocol_version = "HTTP/1.0"  # one request per connection
    root: Path
    timeout = IDLE_S
    _head: _HeadReader
    _status: int | str = "-"
    _note = ""  # how the request ended, when not plainly
    _in_error = False  # inside send_error: its own log line is the request's

    def setup(self) -> None:
        super().setup()
        self.rfile.close()
        self._head = _HeadReader(self.connection, self.timeout)
        self.rfile = io.BufferedReader(self._head)

    def handle_one_request(self) -> None:
        self._head.start()
        self._status, self._note, self.raw_requestline = "-", "", b""
        try:
            super().handle_one_request()
        except (ClientGone, HeadTooLarge, OSError) as exc:
            self.close_connection = True
            self._note = _why(exc)
        except Exception as exc:  # a bug: a 500 when nothing was sent yet, and one line
            self.close_connection = True
            log.debug("the traceback of a bug in wheelsmith serve:", exc_info=True)
            if self._status == "-":
                with contextlib.suppress(OSError):
                    self.send_error(500)
            self._note = (f"a bug in wheelsmith serve (please report it): "
                          f"{type(exc).__name__}: {exc}")
        finally:
            self._log_line()

    def parse_request(self) -> bool:
        if len(self.raw_requestline.split()) == 2:  # HTTP/0.9: no headers follow its line
            self.rfile = io.BytesIO(b"\r\n")  # its line is all: answered now, not at close
        return super().parse_request()

    def do_GET(self) -> None:
        send(self, route(self.root, self.path, self.headers.get("Accept")), head=False)

    def do_HEAD(self) -> None:
        send(self, route(self.root, self.path, self.headers.get("Accept")), head=True)

    def send_error(self, code: int, message: str | None = None,
                   explain: str | None = None) -> None:
        # its phrase, without the request line http.server quotes in it: the reply does not
        # echo what the client sent, the log shows it once; the limit that was passed, if any
        phrase = (message or self.responses.get(code, ("",))[0]).split(" (", 1)[0]
        self._note = f"{phrase} ({explain})" if explain else phrase
        self._in_error = True
        try:
            super().send_error(code, phrase, explain)
        finally:
            self._in_error = False

    def send_response_only(self, code: int, message: str | None = None) -> None:
        if self.request_version == "HTTP/0.9":  # a reply without status line or headers
            self.request_version = "HTTP/1.0"
        super().send_response_only(code, message)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:  # noqa: ARG002
        self._status = int(code) if isinstance(code, int) else code

    def log_error(self, format: str, *args: object) -> None:
        if not self._in_error:
            self._note = format % args

    def log_message(self, format: str, *args: object) -> None:
        log.info("%s %s", self.client_address[0], shown(format % args))

    def _log_line(self) -> None:
        if not self.raw_requestline and not self._note:
            return  # a connection closed without a byte: nothing was asked
        line = shown(self.raw_requestline.rstrip(b"\r\n").decode("latin-1")) or "-"
        headers = getattr(self, "headers", None)
        accept = shown(headers.get("Accept", "-")) if headers is not None else "-"
        note = f"; {shown(self._note)}" if self._note else ""
        log.info('%s "%s" %s accept="%s"%s', self.client_address[0], line, self._status,
                 accept, note)


def make_handler(root: Path, idle_s: float = IDLE_S) -> type[IndexHandler]:
    """The handler for `root` with an idle timeout of `idle_s` seconds."""
    return type("Handler", (IndexHandler,), {"root": root.resolve(), "timeout": idle_s})


def _loopback(host: str) -> bool:
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def banner(root: Path, url: str, host: str) -> list[str]:
    """The install commands for each channel being served, as pip and uv take them (plain
    http to another host than this one needs the clients' consent)."""
    pip, uv = ("pip install", "uv pip install") if _loopback(host) else (
        f"pip install --trusted-host {host}", f"uv pip install --allow-insecure-host {host}")
    channels = sorted(p.parent.parent.name for p in root.glob("*/simple/index.html"))
    if not channels:
        return [f"  no channel yet; once one is published: {pip} --index-url "
                f"{url}/CHANNEL/simple/ --no-deps PACKAGE"]
    return [f"  {tool} --index-url {url}/{channel}/simple/ --no-deps PACKAGE"
            for channel in channels for tool in (pip, uv)]
