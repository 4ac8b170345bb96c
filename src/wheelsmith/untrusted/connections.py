"""Connections to a server that is not trusted, for `web.exchange`: through the environment's
proxy (`http_proxy`, `https_proxy`, `no_proxy`, as urllib takes them; https through a CONNECT
tunnel), TLS with the system's trust store, Basic credentials from a URL's `user:password@`
that go only where they came with, every 1xx interim answer skipped, and a `Watchdog` that
shuts a connection's sockets at the exchange's deadline. An https URL whose handshake fails,
or takes longer than PROBE_AFTER_S, has its port asked plain HTTP (`PlainProbe`): a server
without TLS is named as such at once, never "nothing answers" or a wait for the deadline."""

from __future__ import annotations

import base64
import contextlib
import functools
import http.client
import socket
import ssl
import threading
import time
import urllib.parse
import urllib.request

from wheelsmith.untrusted.addresses import redact, server_url
from wheelsmith.untrusted.redaction import keep_header


class _Response(http.client.HTTPResponse):
    """http.client skips the interim answer `100 Continue` only; every 1xx but 101 (a
    protocol switch, never asked for) is interim (RFC 9110 15.2): `103 Early Hints` too."""

    def _read_status(self) -> tuple[str, int, str]:
        version, status, reason = super()._read_status()  # type: ignore[misc]
        if 100 < status < 200 and status != 101:
            return version, http.client.CONTINUE, reason  # begin() skips its head
        return version, status, reason


def basic_auth(url: str) -> str | None:
    """Basic authentication from the `user:password@` of `url`, if it has one."""
    userinfo, at, _ = urllib.parse.urlsplit(url).netloc.rpartition("@")
    if not at:
        return None
    user, _, password = userinfo.partition(":")
    pair = f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}"
    header = "Basic " + base64.b64encode(pair.encode()).decode("ascii")
    keep_header("Authorization", header)  # never shown, as the URL's userinfo is not
    return header


def without_credentials(url: str) -> str:
    """A URL a server redirected to: credentials in it are never sent."""
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def origin(url: str) -> tuple[str, str | None, int]:
    parts = urllib.parse.urlsplit(url)
    return parts.scheme, parts.hostname, parts.port or _default_port(parts.scheme)


def _default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80


@functools.cache
def _tls() -> ssl.SSLContext:
    return ssl.create_default_context()


def connection(parts: urllib.parse.SplitResult, timeout: float, watchdog: Watchdog
               ) -> tuple[http.client.HTTPConnection, str, dict[str, str]]:
    """A connection for `parts` (through the environment's proxy, if it has one for it), its
    sockets watched by `watchdog`; the request target to send on it and the headers that
    proxy needs."""
    host, port = parts.hostname or "", parts.port or _default_port(parts.scheme)
    target = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
    tls = parts.scheme == "https"
    proxy = _proxy(parts.scheme, host)
    if proxy is None:
        return _open(host, port, timeout, watchdog, tls=tls), target, {}
    via, via_port = proxy.hostname or "", proxy.port or 80
    auth = basic_auth(urllib.parse.urlunsplit(proxy))
    extra = {"Proxy-Authorization": auth} if auth else {}
    if tls:
        conn = _open(via, via_port, timeout, watchdog, tls=True)
        conn.set_tunnel(host, port, headers=extra)
        return conn, target, {}
    absolute = urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2],
                                                      fragment=""))
    return _open(via, via_port, timeout, watchdog, tls=False), absolute, extra


def _open(host: str, port: int, timeout: float, watchdog: Watchdog, *, tls: bool
          ) -> http.client.HTTPConnection:
    conn = (_TLSConnection(host, port, timeout=timeout, context=_tls()) if tls
            else http.client.HTTPConnection(host, port, timeout=timeout))
    conn.response_class = _Response
    conn._create_connection = watchdog.connect  # type: ignore[attr-defined]
    if isinstance(conn, _TLSConnection):
        conn.watchdog = watchdog
    return conn


class _TLSConnection(http.client.HTTPSConnection):
    """HTTPSConnection whose TLS socket the watchdog holds from before the handshake (the plain
    socket it wraps is detached by then: shutting that one down would end nothing)."""

    watchdog: Watchdog | None = None

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)  # TCP, and a proxy's tunnel
        hostname = self._tunnel_host or self.host  # type: ignore[attr-defined]
        tls = self._context.wrap_socket(  # type: ignore[attr-defined]
            self.sock, server_hostname=hostname, do_handshake_on_connect=False)
        self.sock = tls
        if self.watchdog is not None:
            self.watchdog.watch(tls)
        tls.do_handshake()


PROBE_AFTER_S = 2.0  # a TLS server answers a ClientHello in a few round trips
PLAIN_PROBE_S = 5.0  # how long the plain HTTP question waits for its answer


class PlainProbe:
    """Whether an https URL's port speaks plain HTTP, asked once: when its handshake fails
    (`plain`), or while the handshake runs past PROBE_AFTER_S (a plain HTTP server waits for
    the end of a request head that never comes): a yes then shuts the exchange's sockets
    (`watchdog.shut`), so that the handshake ends now. Never through a proxy."""

    def __init__(self, parts: urllib.parse.SplitResult, watchdog: Watchdog) -> None:
        self.parts, self.watchdog = parts, watchdog
        self.answer: bool | None = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(PROBE_AFTER_S, self._during)
        self._timer.daemon = True
        if parts.scheme == "https" and _proxy(parts.scheme, parts.hostname or "") is None:
            self._timer.start()

    def cancel(self) -> None:
        self._timer.cancel()

    def plain(self) -> bool:
        self.cancel()
        with self._lock:
            if self.answer is None:
                self.answer = self.parts.scheme == "https" and _proxy(
                    self.parts.scheme, self.parts.hostname or "") is None and _speaks_plain_http(
                    self.parts, self.watchdog.deadline - time.monotonic())
            return self.answer

    def _during(self) -> None:
        if self.plain():
            self.watchdog.shut()


def _speaks_plain_http(parts: urllib.parse.SplitResult, seconds: float) -> bool:
    host, port = parts.hostname or "", parts.port or _default_port(parts.scheme)
    head = b""
    try:
        with socket.create_connection((host, port), max(0.1, min(seconds, PLAIN_PROBE_S))) as sock:
            sock.sendall(b"HEAD / HTTP/1.0\r\nHost: " + host.encode("idna") + b"\r\n\r\n")
            while len(head) < len(b"HTTP/") and (piece := sock.recv(16)):
                head += piece
    except (OSError, UnicodeError):
        return False
    return head.startswith(b"HTTP/")


def _proxy(scheme: str, host: str) -> urllib.parse.SplitResult | None:
    """The environment's proxy for `scheme` URLs, unless `no_proxy` spares `host`."""
    setting = urllib.request.getproxies().get(scheme)
    if not setting or urllib.request.proxy_bypass(host):
        return None
    given = setting if "://" in setting else f"http://{setting}"
    checked = server_url(given, given, source=f"the {scheme}_proxy setting {redact(given)}",
                         where=None, hint=f"fix the {scheme}_proxy variable, or unset it")
    return urllib.parse.urlsplit(checked)


class Watchdog:
    """Shuts every socket of one exchange at its deadline: a blocked read then returns."""

    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds
        self.fired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def cancel(self) -> None:
        self._timer.cancel()

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
        self.shut()

    def shut(self) -> None:
        """Shut every socket of the exchange now: what blocks on one returns."""
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def connect(self, address: tuple[str, int], timeout: float | None = None,
                source_address: tuple[str, int] | None = None) -> socket.socket:
        return self.watch(socket.create_connection(address, timeout, source_address))

    def watch(self, sock: socket.socket) -> socket.socket:
        """`sock` shut at the deadline (or by `shut`)."""
        with self._lock:
            self._sockets.append(sock)
            if self.fired:
                sock.shutdown(socket.SHUT_RDWR)
        return sock
