"""Secrets are never printed (untrusted/redaction.py, applied where text leaves wheelsmith): an
upload server that echoes the request it was sent (its head as text, in HTML, as JSON of its
headers, the Basic credentials decoded, the password in base64), in its answer to any of
publish --to's exchanges, with any status, at any place of its answer (across the cut to one
line too), gets its answer shown as one bounded line with no secret in it: not the token
(from the environment, twine's variables or the keyring), not its base64, not the
Authorization header, nor any secret variable's value; on stdout and stderr, -vv included.
Real servers on 127.0.0.1, the real CLI; secrets generated."""

from __future__ import annotations

import base64
import html
import io
import json
import os
import urllib.parse
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import REPO
from tests.hostile import HostileServer, Reply, assert_orderly, run_bounded
from tests.index import file_keyring
from tests.wheels import make_wheel
from wheelsmith import cmd
from wheelsmith.cli.console import InertStream, render_error
from wheelsmith.errors import UntrustedDataError
from wheelsmith.untrusted import Bounds
from wheelsmith.untrusted.redaction import keep, keep_header
from wheelsmith.untrusted.text import clip
from wheelsmith.untrusted.urls import read_url

CHANNEL = "cu130-torch2.14"
SECRETS = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E) |
                  st.sampled_from("\u00e9\u00fc\u00df\u4e2d "), min_size=8, max_size=40).filter(
    lambda text: text.strip() == text)
USERS = st.sampled_from(["__token__", "ci", "uploader-1"])
NO_TOKEN = ("WHEELSMITH_UPLOAD_TOKEN", "WHEELSMITH_UPLOAD_USER", "TWINE_PASSWORD",
            "TWINE_USERNAME")


def _headers(head: str) -> dict[str, str]:
    lines = head.split("\r\n")[1:]
    return {name.strip(): value.strip() for name, _, value in (line.partition(":")
                                                               for line in lines) if name}


def _decoded(head: str) -> str:
    value = next((v for k, v in _headers(head).items() if k.lower() == "authorization"), "")
    pair = base64.b64decode(value.partition(" ")[2]).decode() if value else ":"
    user, _, password = pair.partition(":")
    return f"denied: user {user} with password {password}, base64 " + \
        base64.b64encode(password.encode()).decode()


ECHOES: dict[str, tuple[str, Callable[[str], str]]] = {  # content type, the echo of a head
    "the head": ("text/plain", lambda head: head),
    "an HTML page": ("text/html", lambda head: "<html><body><h1>Forbidden</h1><pre>"
                                               f"{html.escape(head)}</pre></body></html>"),
    "its headers as JSON": ("application/json",
                            lambda head: json.dumps({"error": "denied",
                                                     "headers": _headers(head)})),
    "the credentials decoded": ("text/plain", _decoded),
}


def echoing(step: str, status: int, echo: str, pad: int) -> Callable[[str], Reply]:
    """An index whose `step` ("root", "listing", "upload") answers `status` with the request
    echoed after `pad` characters; the others answer as an index with no such project."""
    content_type, render = ECHOES[echo]

    def reply(head: str) -> Reply:
        method, path = head.split(" ", 2)[:2]
        here = "upload" if method == "POST" else "root" if path.endswith("/simple/") \
            else "listing"
        if here == step:
            return Reply(status, ("." * pad + render(head)).encode(),
                         (("Content-Type", content_type),))
        if here == "root":
            return Reply(200, b'{"meta": {"api-version": "1.0"}, "projects": []}')
        return Reply(404) if here == "listing" else Reply(200, b"ok")
    return reply


def forms(user: str, secret: str) -> list[str]:
    """A secret as output could carry it."""
    raw, pair = secret.encode(), f"{user}:{secret}".encode()
    return [secret, json.dumps(secret)[1:-1], urllib.parse.quote(secret, safe=""),
            base64.b64encode(raw).decode().rstrip("="), base64.b64encode(pair).decode(),
            base64.urlsafe_b64encode(raw).decode().rstrip("=")]


def published(server: HostileServer, tmp_path: Path, env: dict[str, str],
              verbose: bool = False) -> tuple[int, str, str]:
    wheel = make_wheel(tmp_path, "demo-ext", "1.0.0", tags="py3-none-any")
    outcome = run_bounded(*(["-vv"] if verbose else []), "publish", "--to",
                          f"{server.url}/{{channel}}/", "--channel", CHANNEL, str(wheel),
                          cwd=tmp_path, env=env, seconds=60)
    assert_orderly(outcome, seconds=30)
    return outcome.returncode, outcome.stdout, outcome.stderr


def assert_hidden(output: str, user: str, secret: str) -> None:
    shown = [form for form in forms(user, secret) if form in output]
    assert shown == [], output


def _one_bounded_line(stderr: str) -> None:
    error, *rest = [line for line in stderr.splitlines() if line.startswith("error: ")][-1:]
    assert rest == []
    assert len(error) < 600, error


@given(secret=SECRETS, user=USERS, before=st.text(max_size=300), after=st.text(max_size=40),
       form=st.integers(0, 5), limit=st.integers(20, 400))
def test_a_secret_in_play_is_hidden_in_any_form_wherever_a_cut_falls(
        secret: str, user: str, before: str, after: str, form: int, limit: int) -> None:
    """A message clips text from outside (`clip`) after hiding secrets: no cut leaves one,
    and none reaches the console whole."""
    keep_header("Authorization", "Basic " + base64.b64encode(f"{user}:{secret}".encode())
                .decode())
    text = before + forms(user, secret)[form] + after
    shown = clip(text, limit)
    printed = io.StringIO()
    InertStream(printed).write(text)
    escaped = [f.encode("unicode_escape").decode("ascii") for f in forms(user, secret)]
    assert [f for f in escaped if f in shown] == []
    assert [f for f in forms(user, secret) if f in printed.getvalue()] == []


@settings(max_examples=12)
@given(secret=SECRETS, user=USERS, source=st.sampled_from(["token", "twine"]),
       step=st.sampled_from(["root", "listing", "upload"]),
       status=st.sampled_from([400, 401, 403, 409, 500, 502]), echo=st.sampled_from(
           sorted(ECHOES)), pad=st.integers(0, 400), verbose=st.booleans())
def test_a_server_echoing_the_request_never_gets_a_secret_printed(
        tmp_path_factory: pytest.TempPathFactory, secret: str, user: str, source: str,
        step: str, status: int, echo: str, pad: int, verbose: bool) -> None:
    root = tmp_path_factory.mktemp("echo")
    base = {k: v for k, v in os.environ.items() if k not in NO_TOKEN}
    env = {**base, "WHEELSMITH_UPLOAD_TIMEOUT": "10", **(
        {"WHEELSMITH_UPLOAD_TOKEN": secret, "WHEELSMITH_UPLOAD_USER": user}
        if source == "token" else {"TWINE_PASSWORD": secret, "TWINE_USERNAME": user})}
    with HostileServer(echoing(step, status, echo, pad), by_head=True) as server:
        code, stdout, stderr = published(server, root, env, verbose)
    pair = base64.b64encode(f"{user}:{secret}".encode()).decode()
    assert any(f"Authorization: Basic {pair}" in head for head in server.heads)  # in play
    assert code == 12, stderr
    assert_hidden(stdout + stderr, user, secret)
    _one_bounded_line(stderr)


@pytest.mark.parametrize("with_user", [True, False])
def test_a_password_from_the_keyring_is_never_printed(tmp_path: Path, with_user: bool) -> None:
    """The keyring's password for the upload URL (with a user set: get_password; without:
    the URL's one entry, get_credential)."""
    secret, user = "k3yr1ng-s3cret/+=", "ci"
    store = tmp_path / "keyring.json"
    with HostileServer(echoing("upload", 403, "the head", 0), by_head=True) as server:
        store.write_text(json.dumps({f"{server.url}/{CHANNEL}/": {user: secret}}))
        env = {**{k: v for k, v in os.environ.items() if k not in NO_TOKEN},
               "PYTHONPATH": str(REPO), "PYTHON_KEYRING_BACKEND": file_keyring.BACKEND,
               "KEYRING_PROPERTY_PATH": str(store),
               **({"WHEELSMITH_UPLOAD_USER": user} if with_user else {})}
        code, stdout, stderr = published(server, tmp_path, env, verbose=True)
    pair = base64.b64encode(f"{user}:{secret}".encode()).decode()
    assert any(f"Authorization: Basic {pair}" in head for head in server.heads)
    assert code == 12, stderr
    assert "(sent with credentials from the keyring)" in stderr
    assert_hidden(stdout + stderr, user, secret)


def test_a_secret_variable_a_server_echoes_is_never_printed(tmp_path: Path) -> None:
    """A server that knows another secret of the environment (the compile farm's token, a
    CI token) and sends it back: hidden as a secret variable's value."""
    farm, ci = "f4rm-t0ken-0123456789", "ghp_abcdefghijklmnop0123"

    def reply(_: str) -> Reply:
        return Reply(500, f"tokens: {farm} {ci}".encode(), (("Content-Type", "text/plain"),))
    env = {**os.environ, "WHEELSMITH_UPLOAD_TOKEN": "t0k3n-t0k3n",
           "WHEELSMITH_COMPILE_FARM_TOKEN": farm, "GITHUB_TOKEN": ci}
    with HostileServer(reply) as server:
        code, stdout, stderr = published(server, tmp_path, env)
    assert code == 12, stderr
    assert farm not in stdout + stderr
    assert ci not in stdout + stderr
    assert stderr.startswith(f"error: no simple index at {server.url}/{CHANNEL}/simple/: HTTP "
                             "500: tokens: *** ***"), stderr


def test_credentials_in_a_url_never_reach_a_message(tmp_path: Path) -> None:
    """A URL's user:password@ (as pip takes them) becomes Basic credentials: a server that
    puts them in its status line's reason, which a message shows, gets *** there."""
    secret = "url-p4ssw0rd"
    pair = base64.b64encode(f"me:{secret}".encode()).decode()

    def reply(_: str) -> Reply:
        return Reply(raw=f"HTTP/1.1 500 Basic {pair} {secret}\r\nContent-Length: 0\r\n"
                         "Connection: close\r\n\r\n".encode())
    with HostileServer(reply) as server, pytest.raises(UntrustedDataError) as raised:
        read_url(f"http://me:{secret}@{server.url.removeprefix('http://')}/simple/x/",
                 Bounds(1 << 20, 10))
    shown = io.StringIO()
    render_error(raised.value, InertStream(shown))  # type: ignore[arg-type]
    assert shown.getvalue().splitlines()[0] == (
        f"error: http://***@{server.url.removeprefix('http://')}/simple/x/: answered HTTP 500 "
        "*** ***")


def test_a_command_log_file_never_holds_a_secret(tmp_path: Path) -> None:
    """What a command prints, and its command line, go to its log file as to the console:
    a secret in play hidden."""
    secret = "l0g-s3cret-value"
    keep(secret)
    log = tmp_path / "build.log"
    with log.open("w") as log_file:
        cmd.run(["echo", f"token={secret}"], log_file=log_file)
    assert log.read_text().splitlines() == ["+ echo token=***", "token=***"]
