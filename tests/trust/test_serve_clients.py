"""`wheelsmith serve` facing untrusted clients (docs/security.md): generated raw requests,
requests that drip, downloads stopped half-way, a flood of idle connections, and the
addresses it cannot listen on. The real server in a subprocess, real sockets on 127.0.0.1.

Every request, however malformed, gets a status from the allowed set or a closed connection,
and is one line in the server's log; no traceback, ever; the server answers a good request
afterwards."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
import string
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import Server, serve
from tests.hostile import assert_orderly, run_bounded
from tests.wheels import make_wheel
from wheelsmith.index import serve as serve_module
from wheelsmith.index.listener import listen
from wheelsmith.index.publish import publish

CHANNEL = "cu130-torch2.14"
PAGE = f"/{CHANNEL}/simple/demo-ext/"
IDLE_S = 2  # the servers here: --idle-timeout 2
ALLOWED = {200, 301, 400, 404, 406, 414, 431, 501, 505}
REQUEST_LINE = re.compile(r'127(?:\.\d{1,3}){3} "(?P<line>[^\n]*)" (?P<status>\d{3}|-) '
                          r'accept="[^\n]*?"(?:; (?P<note>[^\n]+))?')


def published_index(root: Path, wheels: Path, blob: int = 0) -> Path:
    """An index with demo-ext in CHANNEL (its wheel `blob` random bytes larger)."""
    wheels.mkdir(parents=True, exist_ok=True)
    files = {"demo_ext/__init__.py": b"x = 1\n"}
    if blob:
        files["demo_ext/blob.bin"] = os.urandom(blob)
    wheel = make_wheel(wheels, "demo-ext", "1.0+cu.13.0.torch.2.14.sm.120", files=files)
    publish(wheel, root, channel=CHANNEL)
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    base = tmp_path_factory.mktemp("serve")
    root = published_index(base / "index", base / "wheels")
    with serve(root, base / "serve.log", "--idle-timeout", str(IDLE_S)) as running:
        yield running


def address(server: Server) -> tuple[str, int]:
    host, port = server.url.removeprefix("http://").split(":")
    return host, int(port)


def exchange(server: Server, data: bytes) -> bytes:
    """Send `data` on a connection of its own, end our side, and read the reply until the
    server closes the connection (it has then logged the request)."""
    with socket.create_connection(address(server), timeout=IDLE_S + 30) as sock:
        with contextlib.suppress(OSError):  # the server may refuse the rest and close
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        reply = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(1 << 16):
                reply += chunk
        return reply


def status(reply: bytes) -> int | None:
    """The status of a reply, None for a closed connection."""
    if not reply:
        return None
    match = re.match(rb"HTTP/1\.0 (\d{3}) ", reply)
    assert match, f"not an HTTP reply: {reply[:200]!r}"
    return int(match[1])


def request_lines(server: Server) -> list[str]:
    return [line for line in server.log.read_text(errors="replace").splitlines()
            if re.match(r"127(\.\d{1,3}){3} ", line)]


def assert_log_orderly(server: Server) -> None:
    text = server.log.read_text(errors="replace")
    assert "Traceback" not in text, text[-3000:]
    assert "a bug in wheelsmith serve" not in text, text[-3000:]
    for line in request_lines(server):
        assert REQUEST_LINE.fullmatch(line), line


def good_request(server: Server) -> None:
    reply = exchange(server, f"GET {PAGE} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert status(reply) == 200, reply[:300]


def render(method: str, target: str, version: str, headers: list[tuple[str, str]],
           newline: str) -> bytes:
    line = " ".join(part for part in (method, target, version) if part)
    head = [line, *(f"{name}: {value}" for name, value in headers)]
    return (newline.join(head) + newline + newline).encode("utf-8", "surrogatepass")


_TOKEN = string.ascii_letters + string.digits + "-_\x00\x7f :\t"
METHODS = st.sampled_from(["GET", "HEAD", "POST", "PUT", "OPTIONS", "CONNECT", "get", ""]) | \
    st.text(_TOKEN, max_size=12)
TARGETS = st.one_of(
    st.sampled_from(["/", f"/{CHANNEL}/simple/", PAGE, f"/{CHANNEL}/simple/demo-ext", "*",
                     "//[x", "http://x/", "/files/../ledger.jsonl", "/%00", "/a/../../etc"]),
    st.text(max_size=80).map(lambda text: "/" + urllib.parse.quote(text, safe="/%?#&=")),
    st.text(max_size=120),
    st.integers(4000, 70_000).map(lambda size: "/" + "a" * size))
VERSIONS = st.sampled_from(["HTTP/1.1", "HTTP/1.0", "HTTP/0.9", "HTTP/2.0", "HTTP/1.1x",
                            "HTTP/", "http/1.1", ""])
HEADER = st.tuples(st.text(_TOKEN, max_size=30),
                   st.text(max_size=60) | st.integers(1000, 100_000).map(lambda n: "v" * n))
HEADERS = st.lists(HEADER, max_size=12) | st.integers(50, 400).map(
    lambda count: [("X-Many", "y")] * count)
REQUESTS = st.binary(min_size=1, max_size=4096) | st.builds(
    render, METHODS, TARGETS, VERSIONS, HEADERS, st.sampled_from(["\r\n", "\n"]))


@given(data=REQUESTS)
def test_generated_requests_get_a_status_or_a_closed_connection_and_one_log_line(
        server: Server, data: bytes) -> None:
    before = len(request_lines(server))
    reply = exchange(server, data)
    assert status(reply) in ALLOWED | {None}, reply[:300]
    assert len(request_lines(server)) == before + 1, request_lines(server)[before:]
    assert_log_orderly(server)
    good_request(server)


@pytest.mark.parametrize("line", [b"GET /\r\n", b"GET " + PAGE.encode() + b"\n",
                                  b"GET /nothing\r\n"])
def test_an_http_0_9_request_is_answered_at_once_with_the_connection_open(
        server: Server, line: bytes) -> None:
    """Its line is the whole request: the reply comes before the client ends its side (it
    came only once the client closed, at the idle timeout at the latest)."""
    start = time.monotonic()
    with socket.create_connection(address(server), timeout=IDLE_S + 30) as sock:
        sock.sendall(line)
        reply = b""
        while chunk := sock.recv(1 << 16):
            reply += chunk
    assert time.monotonic() - start < IDLE_S / 2
    assert status(reply) == (404 if b"nothing" in line else 200), reply[:300]
    assert_log_orderly(server)


@pytest.mark.parametrize(("data", "code", "note"), [
    (b"GET / HTTP/1.1\r\n" + b"X: y\r\n" * 300 + b"\r\n", 431,
     "Too many headers (got more than 100 headers)"),
    (b"GET / HTTP/1.1\r\nX: " + b"a" * 100_000 + b"\r\n\r\n", 431,
     "Line too long (got more than 65536 bytes when reading header line)"),
    (b"GET / HTTP/1.1\r\n" + (b"X: " + b"a" * 10_000 + b"\r\n") * 20 + b"\r\n", 431,
     "Too many headers (a request head over 131072 bytes)"),
    (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n", 414, "Request-URI Too Long"),
    (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 garbage\r\n\r\n", 400,  # TLS
     "Bad HTTP/0.9 request type"),
    (b"GET / extra HTTP/1.1\r\n\r\n", 400, "Bad request syntax"),
    (b"GET / HTTP/2.0\r\n\r\n", 505, "Invalid HTTP version"),
    (b"BREW /pot HTTP/1.1\r\n\r\n", 501, "Unsupported method"),
])
def test_malformed_requests_get_their_status_and_one_line_saying_why(
        server: Server, data: bytes, code: int, note: str) -> None:
    before = len(request_lines(server))
    assert status(exchange(server, data)) == code
    (line,) = request_lines(server)[before:]
    match = REQUEST_LINE.fullmatch(line)
    assert match, line
    assert (match["status"], match["note"]) == (str(code), note)
    assert len(line) < 400, line  # the request line is shown shortened
    assert_log_orderly(server)
    good_request(server)


def test_a_request_that_drips_is_cut_at_the_idle_timeout(server: Server) -> None:
    before = len(request_lines(server))
    start = time.monotonic()
    # the server closes: the next byte is refused (or recv sees the end)
    with socket.create_connection(address(server), timeout=30) as sock, \
            contextlib.suppress(OSError):
        for byte in b"GET / HTTP/1.1\r\nX-Slow: " + b"y" * 100:
            sock.sendall(bytes([byte]))
            time.sleep(0.25)  # each byte well within the idle timeout
        assert sock.recv(1024) == b"", "the server never closed the connection"
    assert time.monotonic() - start < IDLE_S + 5
    (line,) = request_lines(server)[before:]
    assert line == f'127.0.0.1 "-" - accept="-"; no complete request within {IDLE_S} s'
    good_request(server)


def threads(pid: int) -> int:
    status_text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"^Threads:\s+(\d+)$", status_text, re.MULTILINE)[1])  # type: ignore[index]


def test_a_flood_of_idle_connections_neither_blocks_others_nor_keeps_threads(
        server: Server) -> None:
    before = len(request_lines(server))
    flood = [socket.create_connection(address(server), timeout=30,  # 50 clients, 10 each
                                      source_address=(f"127.0.1.{n % 50 + 1}", 0))
             for n in range(500)]
    try:
        start = time.monotonic()
        good_request(server)
        assert time.monotonic() - start < 5
        deadline = time.monotonic() + IDLE_S + 30
        while threads(server.pid) > 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert threads(server.pid) <= 2  # the main thread (and one ending)
        for sock in flood:  # each was closed by the server
            assert sock.recv(16) == b""
    finally:
        for sock in flood:
            sock.close()
    idle = [line for line in request_lines(server)[before:]
            if line.endswith(f"no complete request within {IDLE_S} s")]
    assert len(idle) == 500
    assert_log_orderly(server)


def test_a_client_that_stops_a_download_is_one_log_line(tmp_path: Path) -> None:
    root = published_index(tmp_path / "index", tmp_path / "wheels", blob=24 << 20)
    path = next(p for p in (tmp_path / "index" / "files").rglob("*.whl"))
    url_path = "/" + str(path.relative_to(root))
    with serve(root, tmp_path / "serve.log", "--idle-timeout", str(IDLE_S)) as running:
        for stop in ("close", "stall"):
            before = len(request_lines(running))
            with socket.create_connection(address(running), timeout=30) as sock:
                sock.sendall(f"GET {url_path} HTTP/1.1\r\n\r\n".encode())
                assert sock.recv(1 << 16).startswith(b"HTTP/1.0 200 OK")
                if stop == "stall":  # takes nothing more, keeps the connection open
                    time.sleep(IDLE_S + 3)
            deadline = time.monotonic() + 30
            while len(request_lines(running)) == before and time.monotonic() < deadline:
                time.sleep(0.1)
            (line,) = request_lines(running)[before:]
            match = REQUEST_LINE.fullmatch(line)
            assert match, line
            assert match["status"] == "200"
            assert re.fullmatch(
                rf"the client went away \((Broken pipe|Connection reset by peer)\); \d+ of "
                rf"{path.stat().st_size} bytes sent" if stop == "close" else
                rf"the client took nothing for {IDLE_S} s; \d+ of {path.stat().st_size} "
                r"bytes sent", match["note"]), line
        good_request(running)
        assert_log_orderly(running)


def test_connections_beyond_the_limit_are_answered_503_at_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = published_index(tmp_path / "index", tmp_path / "wheels")
    server = listen(root, "127.0.0.1", 0, idle_s=IDLE_S, connections=4, per_client=5)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    running = Server(f"http://127.0.0.1:{server.server_address[1]}", tmp_path / "none")
    caplog.set_level(logging.INFO, logger="wheelsmith")
    try:
        held = [socket.create_connection(address(running), timeout=30) for _ in range(4)]
        time.sleep(0.5)  # each has its thread
        start = time.monotonic()
        assert status(exchange(running, f"GET {PAGE} HTTP/1.1\r\n\r\n".encode())) == 503
        assert time.monotonic() - start < 2
        for sock in held:  # the idle ones end at the idle timeout; then there is room
            assert sock.recv(16) == b""
            sock.close()
        time.sleep(0.5)
        good_request(running)
    finally:
        server.shutdown()
        server.server_close()
    refused = [r.getMessage() for r in caplog.records if '" 503 ' in r.getMessage()]
    assert refused == ['127.0.0.1 "-" 503 accept="-"; 4 connections are open']


HOG = "127.0.0.2"  # another address of this machine's loopback: another client
PIP_ENV = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
PIP_ENV.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")


def _answered_at_once(sock: socket.socket) -> bytes | None:
    """What the server sent on `sock` within a second; None when it sent nothing."""
    sock.settimeout(1)
    try:
        return sock.recv(1 << 10)
    except TimeoutError:
        return None


def test_one_client_holding_idle_connections_beyond_its_share_leaves_room_for_pip(
        tmp_path: Path) -> None:
    """A client that opens more idle connections than all the server takes (30, where it
    takes 24 at once) holds only its share (an eighth: 3); the rest are answered 503 at once,
    and pip, from another address, downloads a wheel meanwhile (its page, its metadata, the
    file: each a 200). Every connection of one client counted against all: 300 idle ones
    from one client filled serve's limit and every other client got 503 until they timed
    out."""
    (tmp_path / "wheels").mkdir()
    wheel = make_wheel(tmp_path / "wheels", "demo-ext", "1.0.0", tags="py3-none-any")
    publish(wheel, tmp_path / "index", channel=CHANNEL)
    with serve(tmp_path / "index", tmp_path / "serve.log", "--idle-timeout", "20",
               "--connections", "24") as running:
        hog = [socket.create_connection(address(running), timeout=30,
                                        source_address=(HOG, 0)) for _ in range(30)]
        try:
            answers = [_answered_at_once(sock) for sock in hog]
            refused = [a for a in answers if a is not None]
            assert len(refused) == 27, answers
            assert all(a.startswith(b"HTTP/1.0 503 Service Unavailable\r\n") for a in refused)
            fetched = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir",
                 "--index-url", f"{running.url}/{CHANNEL}/simple/", "--dest",
                 str(tmp_path / "got"), "demo-ext"], capture_output=True, text=True,
                env=PIP_ENV, timeout=120, check=False)
            assert fetched.returncode == 0, fetched.stdout + fetched.stderr
            assert [p.name for p in (tmp_path / "got").iterdir()] == [wheel.name]
        finally:
            for sock in hog:
                sock.close()
    log = running.log.read_text()
    served = [m.group("status") for m in map(REQUEST_LINE.fullmatch, request_lines(running))
              if m is not None and m.group("line").startswith("GET ")]
    assert served == ["200"] * 3, log  # the project's page, the wheel's metadata, the wheel
    assert log.count(f'{HOG} "-" 503 accept="-"; this client holds 3 connections, its share '
                     "(--connections-per-client)") == 27, log


def test_a_bug_while_answering_is_a_500_and_one_line_and_the_server_goes_on(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
        ) -> None:
    def broken(root: Path, raw_path: str, accept: str | None) -> serve_module.Response:
        if raw_path == "/broken":
            raise RuntimeError("a bug planted by the test")
        return real(root, raw_path, accept)

    real = serve_module.route
    monkeypatch.setattr(serve_module, "route", broken)
    server = listen(published_index(tmp_path / "index", tmp_path / "wheels"), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    running = Server(f"http://127.0.0.1:{server.server_address[1]}", tmp_path / "none")
    caplog.set_level(logging.INFO, logger="wheelsmith")
    try:
        assert status(exchange(running, b"GET /broken HTTP/1.1\r\n\r\n")) == 500
        good_request(running)
    finally:
        server.shutdown()
        server.server_close()
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert lines[0] == ('127.0.0.1 "GET /broken HTTP/1.1" 500 accept="-"; a bug in wheelsmith '
                        "serve (please report it): RuntimeError: a bug planted by the test")
    assert lines[1].startswith(f'127.0.0.1 "GET {PAGE} HTTP/1.1" 200 ')
    assert len(lines) == 2
    assert all(r.exc_info is None for r in caplog.records if r.levelno >= logging.INFO)


def test_serving_on_an_address_in_use_names_it(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        outcome = run_bounded("serve", "--index", str(tmp_path / "index"), "--port", str(port),
                              cwd=tmp_path, seconds=60)
    assert_orderly(outcome)
    assert outcome.returncode == 4
    assert outcome.stderr == (
        f"error: cannot serve on 127.0.0.1:{port}: the address is in use (another server "
        "listens there)\nhint: stop that server, or pass another --port (--port 0 picks a free "
        "one)\n")
    assert not (tmp_path / "index").exists()  # nothing is created when it cannot listen


@pytest.mark.parametrize(("host", "problem"), [
    ("no-such-host.invalid", r"the host name does not resolve \(.+\)"),
    ("192.0.2.1", "it is not an address of this machine"),
])
def test_serving_on_a_host_it_cannot_listen_on_names_it(tmp_path: Path, host: str,
                                                        problem: str) -> None:
    outcome = run_bounded("serve", "--index", str(tmp_path / "index"), "--host", host,
                          "--port", "8080", cwd=tmp_path, seconds=60)
    assert_orderly(outcome)
    assert outcome.returncode == 4
    message, hint = outcome.stderr.splitlines()
    assert re.fullmatch(rf"error: cannot serve on {re.escape(host)}:8080: {problem}", message)
    assert hint == ("hint: pass --host 127.0.0.1 (this machine only), 0.0.0.0 (every "
                    "interface) or one of this machine's addresses")
    assert not (tmp_path / "index").exists()
