"""What a server answers is data, its head included (install, doctor, recipe new, downloads:
untrusted/urls.py): any status, any Content-Length, any redirect gives an answer or one error
naming the URL; a redirect is followed to http(s) only; credentials in a URL go to its host as
basic authentication, never to where it redirects, and never into a message."""

from __future__ import annotations

import base64
import time
import urllib.parse
from pathlib import Path

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from tests.hostile import (
    BAD_URLS,
    HOSTILE_MODES,
    NOT_HTTP_MODES,
    NOT_HTTP_SAID,
    HostileServer,
    Reply,
    answering_python,
    assert_orderly,
    garbage,
    redirect,
    returned_or_raised,
    run_bounded,
)
from wheelsmith.errors import SourceError, UntrustedDataError, WheelsmithError
from wheelsmith.untrusted import Bounds
from wheelsmith.untrusted.text import clip
from wheelsmith.untrusted.urls import read_url

BOUNDS = Bounds(max_bytes=1 << 20, seconds=2.0)
REDIRECT_HINT = ("a server may send a reader only to another valid http(s) URL; nothing was "
                 "read there: check the URL and the server")
SECRET = Path(__file__)  # a local file a redirect to file:// would read

LATIN = st.characters(max_codepoint=255, blacklist_characters="\r\n")
HEADERS = st.sampled_from(["Content-Length", "Location", "Transfer-Encoding",
                           "Content-Encoding", "Content-Type", "X-Other"])
VALUES = st.sampled_from([
    "\xb2", "-5", "99999999999999999999", "0x10", " 3", "1e3", "chunked", "gzip",
    "chunked, gzip", f"file://{SECRET}", "ftp://127.0.0.1/x", "data:,x", "javascript:x",
    "//127.0.0.1:9/x", "/loop", "http://127.0.0.1:9/x", "text/html; charset=\xff", ""]) | \
    st.integers(0, 1 << 40).map(str) | st.text(LATIN, max_size=12)
STATUSES = st.sampled_from([100, 200, 204, 206, 300, 301, 302, 303, 304, 305, 307, 308, 404,
                            500, 999]) | st.integers(0, 1200)
ANSWERS = st.builds(
    lambda status, headers, body: (
        f"HTTP/1.1 {status} X\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers)
    ).encode("latin-1") + b"\r\n" + body,
    STATUSES, st.lists(st.tuples(HEADERS, VALUES), max_size=5), st.binary(max_size=64))


@given(ANSWERS)
def test_any_answer_is_read_or_one_error_naming_the_url_and_no_redirect_leaves_http(
        raw: bytes) -> None:
    with HostileServer(garbage(raw)) as server:
        start = time.monotonic()
        read = returned_or_raised(lambda: read_url(f"{server.url}/page/", BOUNDS),
                                  WheelsmithError)
        took = time.monotonic() - start
    assert took < BOUNDS.seconds + 1.5
    if isinstance(read, UntrustedDataError):
        event("refused")
        assert read.message.startswith(f"{server.url}/page/: ")
    elif isinstance(read, WheelsmithError):
        event("nothing answers")
        assert isinstance(read, SourceError), read
        assert read.message.startswith(f"nothing answers at {server.url}/page/: ")
    else:
        event("read")
        assert SECRET.read_bytes()[:200] not in read.data
    assert all(path.startswith("/") for path in server.requests)


def _answering(raw: bytes) -> HostileServer:
    return HostileServer(garbage(raw))


SAID = {  # an answer, and what install says of it
    "a redirect to a local file": (
        "HTTP/1.1 302 Found\r\nLocation: file:///etc/passwd\r\n\r\n",
        "its redirect (HTTP 302): 'file:///etc/passwd' is not an http:// or https:// URL",
        REDIRECT_HINT),
    "a redirect to ftp": (
        "HTTP/1.1 301 Moved\r\nLocation: ftp://127.0.0.1/x\r\n\r\n",
        "its redirect (HTTP 301): 'ftp://127.0.0.1/x' is not an http:// or https:// URL",
        REDIRECT_HINT),
    "a redirect without a Location": (
        "HTTP/1.1 302 Found\r\nContent-Length: 0\r\n\r\n",
        "answered HTTP 302 without saying where to",
        "the server's redirect is incomplete: check the URL and the server"),
    "304 to a request for nothing cached": (
        "HTTP/1.1 304 Not Modified\r\n\r\n", "answered HTTP 304 Not Modified",
        "the server failed or refused the request: check the URL and the server's log"),
    "a Content-Length of a superscript digit": (
        "HTTP/1.1 200 OK\r\nContent-Length: \xb2\r\n\r\n[]",
        "expected an object, found a list", None),
}


@pytest.mark.parametrize("case", sorted(SAID))
def test_install_says_what_the_index_answered_in_one_line(tmp_path: Path, case: str) -> None:
    raw, said, hint = SAID[case]
    python = answering_python(tmp_path / "env" / "python")
    with _answering(raw.encode("latin-1")) as server:
        outcome = run_bounded("install", "causal-conv1d", "--python", str(python), "--index",
                              server.url, "--arch", "12.0", cwd=tmp_path, seconds=60)
    assert_orderly(outcome, seconds=30)
    assert outcome.returncode == 21
    page = f"{server.url}/cu130-torch2.14/simple/causal-conv1d/"
    expected = [f"error: {page}: {said}", *([f"hint: {hint}"] if hint else [])]
    assert outcome.stderr.splitlines()[-len(expected):] == expected


def _redirect_to(target: str) -> HostileServer:
    return HostileServer(lambda _: Reply(302, b"", (("Location", target),)))


CREDENTIAL = st.text(st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=16)


@given(CREDENTIAL, CREDENTIAL)
def test_credentials_go_to_their_host_only_and_no_message_shows_them(
        user: str, password: str) -> None:
    with HostileServer(HOSTILE_MODES["500"]) as elsewhere, \
            _redirect_to(f"{elsewhere.url}/moved/") as server:
        port = server.url.rsplit(":", 1)[1]
        url = f"http://{urllib.parse.quote(user, safe='')}:" \
              f"{urllib.parse.quote(password, safe='')}@127.0.0.1:{port}/page/"
        with pytest.raises(UntrustedDataError) as caught:
            read_url(url, BOUNDS)
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    assert f"\r\nAuthorization: Basic {token}" in server.heads[0]
    assert "authorization" not in elsewhere.heads[0].lower()
    assert caught.value.message == f"http://***@127.0.0.1:{port}/page/: answered HTTP 500 X"


def test_install_with_credentials_in_its_index_never_prints_them(tmp_path: Path) -> None:
    python = answering_python(tmp_path / "env" / "python")
    with HostileServer(HOSTILE_MODES["html page"]) as server:
        url = server.url.replace("http://", "http://alice:s3cr3t-t0ken@")
        outcome = run_bounded("install", "causal-conv1d", "--python", str(python), "--index",
                              url, "--arch", "12.0", cwd=tmp_path, seconds=60)
    assert_orderly(outcome, seconds=30)
    assert outcome.returncode == 21
    assert "s3cr3t" not in outcome.stdout + outcome.stderr
    shown = server.url.replace("http://", "http://***@")
    assert outcome.stderr.splitlines()[-2] == (
        f"error: {shown}/cu130-torch2.14/simple/causal-conv1d/: answered an HTML page that "
        "links no files, not a PEP 503 project page")
    assert "Authorization: Basic YWxpY2U6czNjcjN0LXQwa2Vu" in server.heads[0]


@given(BAD_URLS)
def test_a_redirect_no_connection_can_take_is_one_error_naming_the_url(
        bad: tuple[str, str]) -> None:
    location, why = bad
    with HostileServer(redirect(location)) as server, \
            pytest.raises(UntrustedDataError) as caught:
        read_url(f"{server.url}/page/", BOUNDS)
    assert caught.value.message == (
        f"{server.url}/page/: its redirect (HTTP 302): '{clip(location)}' is not a valid URL "
        f"({why})")
    assert server.requests == ["/page/"]


@pytest.mark.parametrize("mode", sorted(NOT_HTTP_MODES))
def test_what_is_no_http_answer_is_one_error_within_the_deadline(mode: str) -> None:
    """A dripped head and endless `100 Continue` end at the deadline (a timeout for each read
    never trips on them); a head too long, too many headers or none at all is refused."""
    start = time.monotonic()
    with HostileServer(NOT_HTTP_MODES[mode]) as server, \
            pytest.raises(UntrustedDataError) as caught:
        read_url(f"{server.url}/page/", BOUNDS)
    assert time.monotonic() - start < BOUNDS.seconds + 1
    said, hint = NOT_HTTP_SAID[mode]
    assert caught.value.message == f"{server.url}/page/: {said.format(seconds=2)}"
    assert f"hint: {caught.value.hint}" == hint
