"""A page within its byte cap cannot cost many times its size (recipes/simple.py,
index/remote.py): a JSON page that could hold more objects than a page of the most files
wheelsmith reads is refused before it is parsed, one that lists more files is refused before
any is read, an HTML page of more links before the HTML parser runs, and the page's one
deadline covers its parse as well as its read. It was: 64 MiB of small entries, 1 GB resident
and 47 s of CPU after the read's deadline had passed."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.hostile import HostileServer, serving
from wheelsmith.errors import UntrustedDataError
from wheelsmith.index import remote
from wheelsmith.recipes.simple import simple_page
from wheelsmith.untrusted import PAGE_MAX_FILES, PAGE_MAX_OBJECTS

ENTRY = b'{"filename":"a-1.0.tar.gz","url":"a-1.0.tar.gz","hashes":{}}'


def listing(count: int, entry: bytes = ENTRY) -> bytes:
    return b'{"meta":{"api-version":"1.1"},"name":"a","files":[' + \
        b",".join([entry] * count) + b"]}"


@settings(max_examples=5, deadline=None)
@given(more=st.integers(1, 1000), per_file=st.integers(2, 4))
def test_a_page_that_could_hold_more_objects_than_the_most_files_is_refused_unparsed(
        more: int, per_file: int) -> None:
    """Counted before parsing: its `{` (a file, its hashes, its metadata's hashes)."""
    entry = b'{"filename":"a","url":"a","hashes":{' + b'"x":{},' * (per_file - 2) + b"}}"
    body = b"[" + b",".join([entry] * ((PAGE_MAX_OBJECTS + more) // per_file + 1)) + b"]"
    with HostileServer(serving(body)) as server, \
            pytest.raises(UntrustedDataError) as caught:
        simple_page("a", server.url)
    braces = body.count(b"{")
    assert caught.value.message == (f"{server.url}/a/: holds {braces:,} JSON objects, more "
                                    f"than the {PAGE_MAX_OBJECTS:,} wheelsmith reads")


def test_a_page_of_more_files_than_wheelsmith_reads_is_refused_before_any_is_read() -> None:
    entry = b'{"filename":"a","url":"a"}'  # one object each: under the objects' bound
    with HostileServer(serving(listing(PAGE_MAX_FILES + 1, entry))) as server, \
            pytest.raises(UntrustedDataError) as caught:
        simple_page("a", server.url)
    assert caught.value.message == (f"{server.url}/a/: files: lists {PAGE_MAX_FILES + 1:,} "
                                    f"entries, more than the {PAGE_MAX_FILES:,} wheelsmith "
                                    "reads")


def test_the_pages_deadline_covers_its_parse() -> None:
    """The most files wheelsmith reads take seconds to parse: a deadline shorter than that
    ends the parse, not only the read."""
    with HostileServer(serving(listing(PAGE_MAX_FILES))) as server, \
            pytest.raises(UntrustedDataError) as caught:
        simple_page("a", server.url, timeout=0.5)
    assert caught.value.message == f"{server.url}/a/: was not read and parsed within 0.5 s"


def test_a_page_within_the_bounds_is_read_whole() -> None:
    with HostileServer(serving(listing(1000))) as server:
        page = simple_page("a", server.url)
    assert len(page.files) == 1000
    assert {f.url for f in page.files} == {f"{server.url}/a/a-1.0.tar.gz"}


@pytest.mark.parametrize("shape", ["json", "html"])
def test_a_servers_page_of_more_files_than_wheelsmith_reads_is_refused(shape: str) -> None:
    """publish --to reads what the server lists: the same bounds."""
    if shape == "json":
        body, kind = listing(PAGE_MAX_FILES + 1, b'{"filename":"a","url":"a"}'), \
            "application/vnd.pypi.simple.v1+json"
        said = (f"files: lists {PAGE_MAX_FILES + 1:,} entries, more than the "
                f"{PAGE_MAX_FILES:,} wheelsmith reads")
    else:
        body, kind = b"<html>" + b'<A href="a.whl">a</a>\n' * (PAGE_MAX_FILES + 1), "text/html"
        said = f"lists {PAGE_MAX_FILES + 1:,} links, more than the {PAGE_MAX_FILES:,} " \
               "wheelsmith reads"
    with HostileServer(serving(body, kind)) as server, \
            pytest.raises(UntrustedDataError) as caught:
        remote.project_files(f"{server.url}/simple/", "a", None)
    assert caught.value.message == f"{server.url}/simple/a/: {said}"
