"""The harness itself: a hostile server that does what its mode says, and checks that fail
when the promise is broken (a check that cannot fail is no check)."""

from __future__ import annotations

import http.client
import socket
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.hostile import (
    HostileServer,
    Outcome,
    assert_orderly,
    huge,
    never_answers,
    redirect_to_itself,
    reply_500,
    run_bounded,
    sentinel,
)


def test_the_hostile_server_answers_500_and_redirects_to_itself() -> None:
    with HostileServer(reply_500) as server, pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(f"{server.url}/simple/x/", timeout=5)
    error.value.close()
    assert error.value.code == 500
    with HostileServer(redirect_to_itself) as server, \
            pytest.raises(urllib.error.HTTPError, match="redirect") as loop:
        urllib.request.urlopen(f"{server.url}/loop", timeout=5)
    loop.value.close()


def test_a_server_that_never_answers_holds_the_connection_open() -> None:
    with HostileServer(never_answers) as server, pytest.raises((TimeoutError, socket.timeout)):
        urllib.request.urlopen(f"{server.url}/", timeout=0.5)


def test_a_huge_body_is_announced_and_streamed_without_end() -> None:
    with HostileServer(huge(2 << 30)) as server:
        connection = http.client.HTTPConnection(server.url.removeprefix("http://"), timeout=5)
        try:
            connection.request("GET", "/")
            response = connection.getresponse()
            assert response.headers["Content-Length"] == str(2 << 30)
            assert len(response.read(1 << 20)) == 1 << 20
        finally:
            connection.close()


def test_a_traceback_or_an_undocumented_exit_code_is_not_orderly() -> None:
    crashed = Outcome(("x",), 1, "", "Traceback (most recent call last):\n  boom", 0.1, False)
    with pytest.raises(AssertionError, match="exit 1"):
        assert_orderly(crashed)
    with pytest.raises(AssertionError):
        assert_orderly(Outcome(("x",), 1, "", "error: something", 0.1, False))


def test_the_real_cli_runs_bounded_and_orderly(tmp_path: Path) -> None:
    outcome = run_bounded("--version", cwd=tmp_path, seconds=60)
    assert_orderly(outcome, seconds=60)
    assert "wheelsmith, version" in outcome.stdout


def test_a_sentinel_notices_a_file_written_inside_it(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match="written outside the roots"), \
            sentinel(tmp_path / "outside") as guard:
        (guard.root / "nested" / "X.whl").write_bytes(b"changed")
