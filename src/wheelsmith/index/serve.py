"""A read-only HTTP server for the index: PEP 691 content negotiation, `.metadata`, no escapes.

Only four kinds of path exist: `/`, `/<channel>/simple/`, `/<channel>/simple/<project>/` and
`/files/<xx>/<sha256>/<filename>[.metadata]`. Everything else is a 404 — never a redirect to
PyPI, never a directory listing, never a file outside the index root. Any static server can
serve the same tree (see docs/index.md); this one adds JSON/HTML negotiation and cache headers.
"""

from __future__ import annotations

import http.server
import logging
import re
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from wheelsmith.index.pages import HTML_TYPE, JSON_TYPE

log = logging.getLogger(__name__)

PAGE_CACHE = "max-age=60, must-revalidate"
FILE_CACHE = "public, max-age=31536000, immutable"
_NAME = r"[a-z0-9][a-z0-9._-]*"
PAGE_RE = re.compile(rf"^/(?P<channel>{_NAME})/simple/(?:(?P<project>{_NAME})/)?$")
NO_SLASH_RE = re.compile(rf"^/{_NAME}/simple(?:/{_NAME})?$")
FILE_RE = re.compile(r"^/files/[0-9a-f]{2}/[0-9a-f]{64}/[^/\x00]+$")
CHUNK = 1 << 20


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
    """Map a request path to a file under `root`, or an error status."""
    parts = urllib.parse.urlsplit(raw_path)
    path = urllib.parse.unquote(parts.path)
    if "\x00" in path or "/../" in f"{path}/" or "\\" in path:
        return Response(404)
    if path == "/":
        return _file(root / "index.html", "text/html; charset=utf-8", PAGE_CACHE)
    if NO_SLASH_RE.match(path):
        return Response(301, location=parts.path + "/")
    if PAGE_RE.match(path):
        return _page(root / path.lstrip("/"), negotiate(accept, parts.query))
    if FILE_RE.match(path):
        ctype = "text/plain; charset=utf-8" if path.endswith(".metadata") else (
            "application/octet-stream")
        return _file(root / path.lstrip("/"), ctype, FILE_CACHE)
    return Response(404)


def _page(directory: Path, fmt: str | None) -> Response:
    if fmt is None:
        return Response(406, vary=True)
    name = "index.json" if fmt == JSON_TYPE else "index.html"
    ctype = fmt if fmt != "text/html" else "text/html; charset=utf-8"
    found = _file(directory / name, ctype, PAGE_CACHE)
    return Response(found.status, found.path, found.content_type, found.cache, vary=True)


def _file(path: Path, content_type: str, cache: str) -> Response:
    if not path.is_file() or path.is_symlink():
        return Response(404)
    return Response(200, path, content_type, cache)


def send(handler: http.server.BaseHTTPRequestHandler, response: Response, *,
         head: bool) -> None:
    body = b"" if response.path else f"{response.status}\n".encode()
    size = response.path.stat().st_size if response.path else len(body)
    handler.send_response(response.status)
    handler.send_header("Content-Type", response.content_type)
    handler.send_header("Content-Length", str(size))
    handler.send_header("Cache-Control", response.cache)
    if response.vary:
        handler.send_header("Vary", "Accept")
    if response.location:
        handler.send_header("Location", response.location)
    handler.end_headers()
    if head:
        return
    if response.path is None:
        handler.wfile.write(body)
        return
    with response.path.open("rb") as source:
        while chunk := source.read(CHUNK):
            handler.wfile.write(chunk)


def make_handler(root: Path) -> type[http.server.BaseHTTPRequestHandler]:
    resolved = root.resolve()

    class Handler(http.server.BaseHTTPRequestHandler):
        server_version = "wheelsmith"
        sys_version = ""

        def do_GET(self) -> None:
            send(self, route(resolved, self.path, self.headers.get("Accept")), head=False)

        def do_HEAD(self) -> None:
            send(self, route(resolved, self.path, self.headers.get("Accept")), head=True)

        def log_request(self, code: int | str = "-", size: int | str = "-") -> None:  # noqa: ARG002
            accept = self.headers.get("Accept", "-") if self.headers else "-"
            log.info('%s "%s" %s accept="%s"', self.client_address[0], self.requestline, code,
                     accept)

        def log_message(self, format: str, *args: object) -> None:
            log.warning("%s %s", self.client_address[0], format % args)

    return Handler


def make_server(root: Path, host: str, port: int) -> http.server.ThreadingHTTPServer:
    return http.server.ThreadingHTTPServer((host, port), make_handler(root))
