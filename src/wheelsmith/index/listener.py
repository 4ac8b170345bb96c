"""Where `wheelsmith serve` listens: the address (errors that name it and what to do) and
the connections, a thread each, at most `connections` at once (more are answered 503 at once,
so a flood of idle connections never blocks the next client); a bug in a request's thread is
one log line, its traceback only with -vv."""

from __future__ import annotations

import contextlib
import errno
import http.server
import logging
import socket
import sys
import threading
from pathlib import Path
from typing import Any

from wheelsmith.errors import UsageError
from wheelsmith.index.serve import IDLE_S, make_handler

log = logging.getLogger(__name__)

CONNECTIONS = 1024  # served at once; more are answered 503


class IndexServer(http.server.ThreadingHTTPServer):
    """A thread per connection, at most `connections` at once (more are answered 503); a bug
    in a request's thread is one log line."""

    daemon_threads = True
    request_queue_size = 128

    def __init__(self, address: tuple[Any, ...], handler: type[http.server.BaseHTTPRequestHandler],
                 *, family: socket.AddressFamily, connections: int) -> None:
        self.address_family = family  # IPv4 or IPv6, as the host resolved
        self.connections = connections
        self._slots = threading.BoundedSemaphore(connections)
        super().__init__(address, handler)

    def process_request(self, request: socket.socket,  # type: ignore[override]
                        client_address: tuple[str, int]) -> None:
        if not self._slots.acquire(blocking=False):
            self._refuse(request, client_address, f"{self.connections} connections are open")
            return
        try:
            super().process_request(request, client_address)
        except RuntimeError:  # no thread could be started
            self._slots.release()
            self._refuse(request, client_address, "no thread could be started")

    def process_request_thread(self, request: socket.socket,  # type: ignore[override]
                               client_address: tuple[str, int]) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def _refuse(self, request: socket.socket, client_address: tuple[str, int],
                why: str) -> None:
        with contextlib.suppress(OSError):
            request.setblocking(False)
            request.send(b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 4\r\n"
                         b"Retry-After: 5\r\nConnection: close\r\n\r\n503\n")
        self.shutdown_request(request)
        log.warning('%s "-" 503 accept="-"; %s', client_address[0], why)

    def handle_error(self, request: object, client_address: object) -> None:  # noqa: ARG002
        error = sys.exc_info()[1]
        where = client_address[0] if isinstance(client_address, tuple) else client_address
        log.error("%s a bug in wheelsmith serve (please report it): %s: %s", where,
                  type(error).__name__, error)
        log.debug("its traceback:", exc_info=True)


HOST_HINT = ("pass --host 127.0.0.1 (this machine only), 0.0.0.0 (every interface) or one of "
             "this machine's addresses")


def authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def listen(root: Path, host: str, port: int, *, idle_s: float = IDLE_S,
           connections: int = CONNECTIONS) -> IndexServer:
    """The server for `root`, listening on `host`:`port`; UsageError naming the address when
    it cannot."""
    where = authority(host, port)
    try:
        family, _, _, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    except (OSError, UnicodeError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(f"cannot serve on {where}: the host name does not resolve ({why})",
                         hint=HOST_HINT) from None
    try:
        return IndexServer(address, make_handler(root, idle_s), family=family,
                           connections=connections)
    except OSError as exc:
        raise bind_error(exc, where) from None


def bind_error(exc: OSError, where: str) -> UsageError:
    if exc.errno == errno.EADDRINUSE:
        return UsageError(f"cannot serve on {where}: the address is in use (another server "
                          "listens there)", hint="stop that server, or pass another --port "
                                                 "(--port 0 picks a free one)")
    if exc.errno == errno.EADDRNOTAVAIL:
        return UsageError(f"cannot serve on {where}: it is not an address of this machine",
                          hint=HOST_HINT)
    if exc.errno == errno.EACCES:
        return UsageError(f"cannot serve on {where}: permission denied (ports below 1024 "
                          "need privileges)", hint="pass --port 8080, or another from 1024 up")
    return UsageError(f"cannot serve on {where}: {exc.strerror or exc}", hint=HOST_HINT)
