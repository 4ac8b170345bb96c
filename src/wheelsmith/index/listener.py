"""Where `wheelsmith serve` listens: the address (errors that name it and what to do) and
the connections, a thread each, at most `connections` at once and at most `per_client` of one
client (its address; an IPv6 client: its /64, the network one host is given): more are
answered 503 at once, so neither a flood of idle connections nor one client holding many of
them blocks the next client, and each idle one ends at the idle timeout. A bug in a request's
thread is one log line, its traceback only with -vv."""

from __future__ import annotations

import contextlib
import errno
import http.server
import ipaddress
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
SHARE = 8  # one client may hold an eighth of them by default (uv downloads 50 files at once)


def per_client_default(connections: int) -> int:
    return max(1, connections // SHARE)


def client_of(host: str) -> str:
    """Whose a connection from `host` is: its address; an IPv6 address's /64 (the network
    one host is given, from which it can take any address); an IPv4-mapped one, the IPv4."""
    try:
        ip = ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        return host
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network(f"{ip}/64", strict=False))
    return str(ip)


class IndexServer(http.server.ThreadingHTTPServer):
    """A thread per connection, at most `connections` at once and `per_client` of one client
    (more are answered 503); a bug in a request's thread is one log line."""

    daemon_threads = True
    request_queue_size = 128

    def __init__(self, address: tuple[Any, ...], handler: type[http.server.BaseHTTPRequestHandler],
                 *, family: socket.AddressFamily, connections: int, per_client: int) -> None:
        self.address_family = family  # IPv4 or IPv6, as the host resolved
        self.connections, self.per_client = connections, per_client
        self._open: dict[str, int] = {}  # client -> its connections open (none: absent)
        self._total = 0
        self._lock = threading.Lock()
        super().__init__(address, handler)

    def process_request(self, request: socket.socket,  # type: ignore[override]
                        client_address: tuple[str, int]) -> None:
        client = client_of(client_address[0])
        refused = self._take(client)
        if refused is not None:
            self._refuse(request, client_address, refused)
            return
        try:
            super().process_request(request, client_address)
        except RuntimeError:  # no thread could be started
            self._give_back(client)
            self._refuse(request, client_address, "no thread could be started")

    def _take(self, client: str) -> str | None:
        """A connection for `client`; why not, when it has its share or all are open."""
        with self._lock:
            held = self._open.get(client, 0)
            if held >= self.per_client:
                return (f"this client holds {held} connections, its share "
                        "(--connections-per-client)")
            if self._total >= self.connections:
                return f"{self.connections} connections are open"
            self._open[client], self._total = held + 1, self._total + 1
        return None

    def _give_back(self, client: str) -> None:
        with self._lock:
            held, self._total = self._open.pop(client) - 1, self._total - 1
            if held:
                self._open[client] = held

    def process_request_thread(self, request: socket.socket,  # type: ignore[override]
                               client_address: tuple[str, int]) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._give_back(client_of(client_address[0]))

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
           connections: int = CONNECTIONS, per_client: int | None = None) -> IndexServer:
    """The server for `root`, listening on `host`:`port` (`per_client` by default an eighth
    of `connections`); UsageError naming the address when it cannot."""
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
                           connections=connections, per_client=per_client or
                           per_client_default(connections))
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
