"""The boundary's bounded reads (wheelsmith/untrusted.py and cmd.run's `bounds`): whatever a
server or a command does, a read ends within its deadline and byte cap in one error naming
its source, and a command's tree is stopped."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.hostile import (
    HOSTILE_MODES,
    HostileServer,
    drips_its_head,
    garbage,
    returned_or_raised,
    serving,
)
from tests.leftovers import left_after, new_env
from wheelsmith import cmd
from wheelsmith.errors import SourceError, UntrustedDataError
from wheelsmith.untrusted import Bounds
from wheelsmith.untrusted.urls import read_url

BOUNDS = Bounds(max_bytes=1 << 20, seconds=2.0)
ANSWERED = {  # what each hostile mode is said to have answered
    "500": "answered HTTP 500 X",
    "redirect loop": "redirects in a loop (HTTP 302 to /page/)",
    "never answers": "did not finish answering within 2 s",
    "drips a byte a second": "did not finish answering within 2 s",
    "huge body": "answered more than 1 MiB",
}


@pytest.mark.parametrize("mode", sorted(ANSWERED))
def test_each_hostile_server_ends_the_read_in_one_error_within_its_deadline(mode: str) -> None:
    with HostileServer(HOSTILE_MODES[mode]) as server:
        start = time.monotonic()
        with pytest.raises(UntrustedDataError) as caught:
            read_url(f"{server.url}/page/", BOUNDS)
        assert time.monotonic() - start < BOUNDS.seconds + 1.5
    assert caught.value.message == f"{server.url}/page/: {ANSWERED[mode]}"


def test_an_html_page_is_an_answer_the_reader_gives_with_its_media_type() -> None:
    with HostileServer(HOSTILE_MODES["html page"]) as server:
        answer = read_url(f"{server.url}/page/", BOUNDS)
    assert (answer.media_type, answer.data) == (
        "text/html", b"<html><body>a login page</body></html>")


def test_a_head_dripped_a_byte_at_a_time_is_cut_at_the_deadline() -> None:
    """http.client reads a head line by line: each byte resets a per-read timeout, so only a
    total deadline ends it."""
    with HostileServer(drips_its_head(0.05)) as server:
        start = time.monotonic()
        with pytest.raises(UntrustedDataError, match="did not finish answering within 2 s"):
            read_url(f"{server.url}/", BOUNDS)
        assert time.monotonic() - start < BOUNDS.seconds + 1.5


def test_a_closed_port_is_nothing_answering_not_untrusted_data() -> None:
    with socket.socket() as closed:  # a port that was bound and never listened: refused
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}"
    with pytest.raises(SourceError) as caught:
        read_url(f"{url}/", BOUNDS)
    assert type(caught.value) is SourceError
    assert caught.value.message == f"nothing answers at {url}/: [Errno 111] Connection refused"


@given(st.binary(max_size=4096))
def test_any_bytes_for_an_answer_give_the_body_or_one_error(data: bytes) -> None:
    with HostileServer(garbage(data)) as server:
        start = time.monotonic()
        read = returned_or_raised(lambda: read_url(f"{server.url}/", BOUNDS), SourceError)
        assert time.monotonic() - start < BOUNDS.seconds + 1.5
    if isinstance(read, SourceError):
        assert read.message.startswith(("nothing answers at", f"{server.url}/: "))


@given(st.binary(max_size=1 << 16), st.sampled_from(["application/json", "text/html", ""]))
def test_a_body_within_the_cap_arrives_whole(body: bytes, media_type: str) -> None:
    with HostileServer(serving(body, media_type)) as server:
        assert read_url(f"{server.url}/", BOUNDS).data == body


def test_a_file_url_is_read_within_the_cap_and_must_be_a_regular_file(tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.write_bytes(b"x" * (BOUNDS.max_bytes + 1))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(UntrustedDataError, match="answered more than 1 MiB"):
        read_url(big.as_uri(), BOUNDS)
    with pytest.raises(UntrustedDataError) as not_regular:  # opening it does not wait
        read_url(fifo.as_uri(), BOUNDS)
    assert not_regular.value.message == f"{fifo.as_uri()}: is not a regular file"
    with pytest.raises(UntrustedDataError) as missing:
        read_url((tmp_path / "none").as_uri(), BOUNDS)
    assert (missing.value.problem, missing.value.status) == ("no such file", 404)


COMMANDS = {  # a command whose output is parsed, and what it is told when it misbehaves
    "prints forever": (["yes"], "printed more than 1 MiB"),
    "prints one huge line": (["sh", "-c", "head -c 5000000 /dev/zero | tr '\\0' a"],
                             "printed more than 1 MiB"),
    "never prints": (["sleep", "600"], "printed nothing within 1 s"),
    "never ends": (["sh", "-c", "echo started; exec sleep 600"], "did not finish within 3 s"),
    "ends its output, not itself": (["sh", "-c", "echo started; exec sleep 600 >&- 2>&-"],
                                    "did not finish within 3 s"),
}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_bounded_command_is_stopped_with_its_tree_and_named(name: str) -> None:
    argv, said = COMMANDS[name]
    mark, env = new_env()
    start = time.monotonic()
    with pytest.raises(UntrustedDataError) as caught:
        cmd.run(argv, stream=False, env=env, what="the stand-in", hint="give another one",
                bounds=Bounds(1 << 20, 3.0, quiet_seconds=1.0))
    assert time.monotonic() - start < 3.0 + cmd.STOP_WAIT_S
    assert (caught.value.message, caught.value.hint) == (f"the stand-in: {said}",
                                                         "give another one")
    assert left_after(mark, 10) == []


def test_a_bounded_command_within_its_bounds_gives_its_output() -> None:
    done = cmd.run(["sh", "-c", "echo out; echo err >&2; exit 3"], stream=False,
                   ok_returncodes=(3,), bounds=Bounds(1 << 20, 10.0, quiet_seconds=5.0))
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err\n")


def test_a_capture_reads_as_a_text_pipe_did() -> None:
    """Bounded or not, a capture reads both pipes in chunks now: its text is what a text-mode
    pipe gave (undecodable bytes replaced, newlines universal), large outputs included."""
    script = "printf 'a\\r\\nb\\rc\\377\\n'; head -c 3000000 /dev/zero | tr '\\0' x >&2"
    for bounds in (None, Bounds(8 << 20, 30.0)):
        done = cmd.run(["sh", "-c", script], stream=False, bounds=bounds)
        assert (done.stdout, len(done.stderr)) == ("a\nb\nc\ufffd\n", 3_000_000)
