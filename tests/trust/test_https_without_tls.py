"""An https:// URL whose server speaks plain HTTP (untrusted/connections.py, `PlainProbe`):
named as such within a few seconds, whether the server answers the TLS ClientHello with an
HTTP error at once or waits for the end of a request head that never comes, never "nothing
answers" (which downloads ask again, for half a minute) nor a wait for the deadline. A TLS
handshake that fails otherwise is named as a TLS failure; a real TLS server still answers.
Real servers on 127.0.0.1."""

from __future__ import annotations

import http.server
import os
import shutil
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.hostile import HostileServer, Reply, assert_orderly, run_bounded
from tests.wheels import make_wheel
from wheelsmith.errors import SourceError, UntrustedDataError
from wheelsmith.untrusted import Bounds
from wheelsmith.untrusted.connections import PROBE_AFTER_S
from wheelsmith.untrusted.urls import read_url

BOUNDS = Bounds(max_bytes=1 << 20, seconds=60.0)
PATHS = st.lists(st.text(st.characters(min_codepoint=ord("a"), max_codepoint=ord("z")),
                         min_size=1, max_size=8), max_size=3).map(lambda p: "/" + "/".join(p))


def _said(url: str) -> list[str]:
    plain = "http://" + url.removeprefix("https://")
    return [f"error: {url}: the TLS handshake failed: the server there answers plain HTTP, "
            "not HTTPS", f"hint: speaks plain HTTP? use {plain}"]


class _Quiet(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()

    do_HEAD = do_GET

    def log_message(self, *_: object) -> None:
        pass


@contextmanager
def _serving(context: ssl.SSLContext | None = None) -> Iterator[str]:
    """Python's http.server on 127.0.0.1 (with `context`: over TLS); its host:port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Quiet)
    if context is not None:
        server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _answers_at_once() -> AbstractContextManager[str]:
    """Python's http.server: the ClientHello is a bad request line, answered with HTTP 400."""
    return _serving()


@contextmanager
def _waits_for_a_head() -> Iterator[str]:
    """A server that reads until the end of a request head before it answers: the ClientHello
    never ends one, so a TLS client waits."""
    with HostileServer(lambda _: Reply(200, b"ok")) as server:
        yield server.url.removeprefix("http://")


SERVERS: dict[str, Callable[[], AbstractContextManager[str]]] = {
    "answers at once": _answers_at_once, "waits for a request head": _waits_for_a_head}


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(SERVERS)), PATHS)
def test_an_https_url_at_a_plain_http_server_is_named_as_such_within_seconds(
        kind: str, path: str) -> None:
    with SERVERS[kind]() as place:
        url = f"https://{place}{path}"
        start = time.monotonic()
        with pytest.raises(UntrustedDataError) as caught:
            read_url(url, BOUNDS)
        took = time.monotonic() - start
    assert [f"error: {caught.value.message}", f"hint: {caught.value.hint}"] == _said(url)
    assert caught.value.status is None  # final: a download does not ask it again
    assert took < PROBE_AFTER_S + 3


def test_publish_to_an_https_url_at_a_plain_http_server_says_so_in_two_lines(
        tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "demo-ext", "1.0.0", tags="py3-none-any")
    for kind in sorted(SERVERS):
        with SERVERS[kind]() as place:
            outcome = run_bounded("publish", "--to", f"https://{place}/{{channel}}/",
                                  "--channel", "main", str(wheel), cwd=tmp_path, seconds=60)
        assert_orderly(outcome, seconds=PROBE_AFTER_S + 10)
        assert (outcome.returncode, outcome.stderr.splitlines()) == (
            21, _said(f"https://{place}/main/simple/")), outcome.describe()


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key (openssl)."""
    if shutil.which("openssl") is None:
        pytest.skip("no openssl on this machine to make a test certificate")
    root = tmp_path_factory.mktemp("tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(root / "key.pem"), "-out", str(root / "cert.pem")],
                   check=True, capture_output=True)
    return root / "cert.pem", root / "key.pem"


@contextmanager
def _tls_server(cert: Path, key: Path) -> Iterator[str]:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    with _serving(context) as place:
        yield f"https://{place}/"


READ = ("import sys; from wheelsmith.untrusted import Bounds; "
        "from wheelsmith.untrusted.urls import read_url; "
        "print(read_url(sys.argv[1], Bounds(1 << 20, 20.0)).data)")


def test_a_tls_server_trusted_still_answers_and_one_untrusted_is_a_tls_failure(
        tls_files: tuple[Path, Path]) -> None:
    """The handshake is held by the exchange's watchdog from its start (the TLS socket, not
    the plain one it wraps): a trusted server answers as before; an untrusted certificate is
    the handshake's failure, not "nothing answers" and not "plain HTTP"."""
    cert, key = tls_files
    with _tls_server(cert, key) as url:
        trusted = subprocess.run([sys.executable, "-c", READ, url], capture_output=True,
                                 text=True, env={**os.environ, "SSL_CERT_FILE": str(cert)},
                                 timeout=60, check=False)
        with pytest.raises(SourceError) as caught:
            read_url(url, Bounds(1 << 20, 20.0))
    assert (trusted.returncode, trusted.stdout, trusted.stderr) == (0, "b''\n", "")
    assert not isinstance(caught.value, UntrustedDataError)
    assert caught.value.message.startswith(
        f"the TLS handshake with {url} failed: [SSL: CERTIFICATE_VERIFY_FAILED] certificate "
        "verify failed: self"), caught.value.message
    assert caught.value.hint == ("check that the server speaks HTTPS at that port, and its "
                                 "certificate")
