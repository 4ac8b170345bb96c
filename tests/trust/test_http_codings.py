"""How a body was sent is the server's to say, and wheelsmith reads every valid way or names
what it cannot (untrusted/web.py): a page sent compressed (Content-Encoding gzip, x-gzip,
deflate, chained, gzip in several members) is read as the page, within the byte cap however
far it inflates; a coding it does not read, or a stream that is not valid, is one error naming
the coding; a download keeps the bytes as sent (its sha256 decides, as pip does); interim
answers (`103 Early Hints`, any 1xx but 101) come before the answer and are skipped; no
message names a Python class."""

from __future__ import annotations

import builtins
import gzip
import http.client
import re
import zlib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.hostile import (
    HostileServer,
    answering_python,
    assert_orderly,
    garbage,
    returned_or_raised,
    run_bounded,
)
from wheelsmith.errors import UntrustedDataError, WheelsmithError
from wheelsmith.untrusted import Bounds
from wheelsmith.untrusted.text import clip
from wheelsmith.untrusted.urls import copy_url, read_url

BOUNDS = Bounds(max_bytes=1 << 20, seconds=3.0)
PAGE = st.binary(max_size=4096)
CODINGS = st.lists(st.sampled_from(["gzip", "x-gzip", "deflate", "GZip", "identity"]),
                   min_size=1, max_size=3)
NOT_HTTP_HINT = "check that the URL names an HTTP server, and the server"


def compress(data: bytes, coding: str, members: int = 1) -> bytes:
    """`data` in `coding`; gzip split into `members` members (RFC 1952 allows several)."""
    coding = coding.lower()
    if coding == "identity":
        return data
    if coding == "deflate":
        return zlib.compress(data)
    step = max(1, -(-len(data) // members))
    parts = [data[i:i + step] for i in range(0, len(data), step)] or [b""]
    return b"".join(gzip.compress(part, mtime=0) for part in parts)


def answer(body: bytes, *, encoding: str | None, head: bytes = b"",
           chunked: bool = False) -> bytes:
    headers = "Content-Type: application/octet-stream\r\n"
    if encoding is not None:
        headers += f"Content-Encoding: {encoding}\r\n"
    if chunked:
        framed = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 7]), body[i:i + 7])
                          for i in range(0, len(body), 7)) + b"0\r\n\r\n"
        return head + f"HTTP/1.1 200 OK\r\n{headers}Transfer-Encoding: chunked\r\n\r\n" \
            .encode() + framed
    return head + f"HTTP/1.1 200 OK\r\n{headers}Content-Length: {len(body)}\r\n\r\n" \
        .encode() + body


def read(raw: bytes) -> bytes:
    with HostileServer(garbage(raw)) as server:
        return read_url(f"{server.url}/page/", BOUNDS).data


@given(PAGE, CODINGS, st.integers(1, 4), st.booleans())
def test_a_page_sent_compressed_in_any_chain_of_codings_is_read_as_the_page(
        page: bytes, codings: list[str], members: int, chunked: bool) -> None:
    body = page
    for coding in codings:
        body = compress(body, coding, members)
    assert read(answer(body, encoding=", ".join(codings), chunked=chunked)) == page


def test_a_download_keeps_the_bytes_the_server_sent_whatever_it_says_of_them() -> None:
    sent = gzip.compress(b"an sdist's bytes", mtime=0)
    got = bytearray()
    with HostileServer(garbage(answer(sent, encoding="gzip"))) as server:
        copy_url(f"{server.url}/x.tar.gz", got.extend, BOUNDS)
    assert bytes(got) == sent
    assert "Accept-Encoding: identity" in server.heads[0].splitlines()


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
def test_a_small_body_that_inflates_past_the_cap_is_too_big_not_a_machines_memory(
        coding: str) -> None:
    bomb = compress(b"\0" * (64 << 20), coding)  # 64 MiB from about 64 KiB
    with HostileServer(garbage(answer(bomb, encoding=coding))) as server, \
            pytest.raises(UntrustedDataError) as caught:
        read_url(f"{server.url}/page/", BOUNDS)
    assert caught.value.message == f"{server.url}/page/: inflates to more than 1 MiB"


TOKEN = st.text(st.characters(min_codepoint=33, max_codepoint=126, blacklist_characters=","),
                min_size=1, max_size=12)


@given(TOKEN.filter(lambda t: t.lower() not in {"gzip", "x-gzip", "deflate", "identity"}))
def test_a_coding_wheelsmith_does_not_read_is_named(coding: str) -> None:
    with HostileServer(garbage(answer(b"[]", encoding=f"gzip, {coding}"))) as server, \
            pytest.raises(UntrustedDataError) as caught:
        read_url(f"{server.url}/page/", BOUNDS)
    assert caught.value.message == (
        f"{server.url}/page/: sent its answer compressed in the coding {clip(coding.lower())!r}, "
        "which wheelsmith does not read (Content-Encoding)")
    assert caught.value.hint == ("wheelsmith asks for an uncompressed answer (Accept-Encoding: "
                                 "identity): check the server's configuration")


def test_more_codings_than_three_are_refused_before_inflating_any() -> None:
    with HostileServer(garbage(answer(b"[]", encoding="gzip, gzip, gzip, gzip"))) as server, \
            pytest.raises(UntrustedDataError) as caught:
        read_url(f"{server.url}/page/", BOUNDS)
    assert caught.value.message == (
        f"{server.url}/page/: sent its answer compressed in 4 codings, more than 3 "
        "(Content-Encoding)")


@given(PAGE, st.sampled_from(["gzip", "deflate"]), st.data())
def test_a_compressed_stream_cut_short_or_altered_is_one_error_naming_the_coding(
        page: bytes, coding: str, data: st.DataObject) -> None:
    body = bytearray(compress(page, coding))
    if data.draw(st.booleans(), label="cut"):
        del body[data.draw(st.integers(0, len(body) - 1), label="at"):]
    else:
        at = data.draw(st.integers(0, len(body) - 1), label="at")
        body[at] ^= data.draw(st.integers(1, 255), label="xor")
    got = returned_or_raised(lambda: read(answer(bytes(body), encoding=coding)),
                             UntrustedDataError)
    if isinstance(got, bytes):  # a change zlib cannot see (the gzip header's free fields)
        assert got == page
        return
    assert re.fullmatch(rf"http://127\.0\.0\.1:\d+/page/: sent a body that is not valid "
                        rf"{coding} \(Content-Encoding\): .+", got.message), got.message
    assert got.hint == NOT_HTTP_HINT


INTERIM = st.integers(102, 199).filter(lambda status: status != 101) | st.just(100)
HEADER = st.tuples(st.sampled_from(["Link", "X-Hint", "Content-Length"]),
                   st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=20))


@given(st.lists(st.tuples(INTERIM, st.lists(HEADER, max_size=3)), max_size=5), PAGE)
def test_interim_answers_before_the_answer_are_skipped(
        interims: list[tuple[int, list[tuple[str, str]]]], page: bytes) -> None:
    head = b"".join(
        f"HTTP/1.1 {status} Interim\r\n{''.join(f'{k}: {v}' + chr(13) + chr(10) for k, v in hs)}"
        "\r\n".encode() for status, hs in interims)
    assert read(answer(page, encoding=None, head=head)) == page


PYTHON_CLASSES = sorted(
    {name for module in (builtins, http.client) for name, value in vars(module).items()
     if isinstance(value, type) and issubclass(value, BaseException) and len(name) > 7})


@given(st.binary(max_size=200))
def test_no_message_of_an_answer_names_a_python_class(tail: bytes) -> None:
    raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + tail
    got = returned_or_raised(lambda: read(raw), WheelsmithError)
    if isinstance(got, WheelsmithError):
        named = [name for name in PYTHON_CLASSES if name in got.message]
        assert not named, got.message


def test_recipe_new_reads_a_page_sent_gzip_and_after_early_hints(tmp_path: Path) -> None:
    """The red team's two answers: both are valid, and `recipe new` reads both pages."""
    page = (b'{"meta": {"api-version": "1.1"}, "name": "demo-pkg", "files": []}')
    head = b"HTTP/1.1 103 Early Hints\r\nLink: </x>; rel=preload\r\n\r\n"
    for raw in (answer(gzip.compress(page), encoding="gzip"),
                answer(page, encoding=None, head=head)):
        with HostileServer(garbage(raw)) as server:
            outcome = run_bounded("recipe", "new", "demo-pkg", "--recipes", str(tmp_path / "r"),
                                  "--no-configure", cwd=tmp_path, seconds=60,
                                  env={"WHEELSMITH_INDEX_URL": server.url})
        assert_orderly(outcome, seconds=30)
        assert outcome.stderr.splitlines()[-2:] == [
            f"error: {server.url}/demo-pkg/ has no sdist of demo-pkg",
            "hint: wheelsmith builds from sources: give a git source in the recipe instead"]


def test_install_names_what_was_wrong_with_a_chunked_body(tmp_path: Path) -> None:
    python = answering_python(tmp_path / "env" / "python")
    raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"
    with HostileServer(garbage(raw)) as server:
        outcome = run_bounded("install", "causal-conv1d", "--python", str(python), "--index",
                              server.url, "--arch", "12.0", cwd=tmp_path, seconds=60)
    assert_orderly(outcome, seconds=30)
    assert outcome.returncode == 21
    assert outcome.stderr.splitlines()[-2:] == [
        f"error: {server.url}/cu130-torch2.14/simple/causal-conv1d/: did not answer with valid "
        "HTTP (its body ended after 0 bytes, short of what it announced, or its chunked "
        "encoding is malformed)", f"hint: {NOT_HTTP_HINT}"]
