"""PEP 503 HTML pages are not trusted (install, doctor, recipe new, outdated, publish --to): the
one reader of project pages (recipes/simple.py, untrusted/markup.py) reads an HTML page to the
files a PEP 691 page of the same entries gives, under the same rules (a plain name, a URL that
is http(s) joined with the page's, a well-formed sha256; anything else one error naming the
link), and a hostile page within its bounds: more links or tags than a page of the most files
needs, an element left open past 32 KiB, text that is not UTF-8, an attribute given twice, a
parse past the page's deadline: one error naming the page, exit 21. Deep nesting costs
nothing (html.parser keeps no tree); entities resolve as HTML says (control characters spelled
as references are dropped), and what they spell is checked like any other text."""

from __future__ import annotations

import html
import json
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from tests.hostile import (
    BAD_URLS,
    HostileServer,
    Reply,
    answering_python,
    assert_orderly,
    returned_or_raised,
    run_bounded,
    serving,
)
from wheelsmith.errors import UntrustedDataError
from wheelsmith.recipes.simple import (
    NOT_A_PAGE_HINT,
    SIMPLE_JSON,
    Page,
    read_page,
    simple_page,
)
from wheelsmith.untrusted import PAGE_MAX_FILES, name_problem
from wheelsmith.untrusted.addresses import URL_HINT
from wheelsmith.untrusted.text import clip

PAGE = "http://127.0.0.1:9/cu130-torch2.14/simple/causal-conv1d/"
GIB = 1 << 30
SHA = "ab" * 32
WHEEL = "causal_conv1d-1.7.0+cu.13.0.torch.2.14.sm.120-cp311-cp311-manylinux_2_34_x86_64.whl"
HTML_SPACE = " \t\n\f\r"



def mostly(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """`good` five times in six, else `bad`: most pages have files to compare."""
    return st.sampled_from([True] * 5 + [False]).flatmap(lambda ok: good if ok else bad)


# Names: real ones, ones that need escaping in HTML and quoting in a URL, and ones no file may
# have (a separator, a control character, too long). An empty name, `.` and `..` are left
# out: a URL cannot end in them (a link to a directory, which HTML reads as no file's).
NAMES = mostly(st.sampled_from([
    WHEEL, "causal_conv1d-1.7.0-py3-none-any.whl", "causal_conv1d-1.7.0.tar.gz",
    "a&b<c>\"d'e.whl", "café name.whl", "#frag?.whl", "%41.whl"]), st.sampled_from([
        "x\x1b.whl", "a/b.whl", "a\\b.whl", "x\u202e.whl", "x" * 300 + ".whl"]) | st.text(
            min_size=1, max_size=16).filter(
                lambda name: name not in (".", "..") and name == name.strip(HTML_SPACE)))
PREFIXES = mostly(st.sampled_from(["", "../../files/ab/", "/files/",
                                   "http://files.example:8080/f/", "https://[::1]/x/"]),
                  st.sampled_from(["javascript:", "ftp://h/", "file:///etc/", "http://[bad/",
                                   "http://h:99999/"]))
HASHES = mostly(st.sampled_from([None, SHA, SHA.upper()]), st.sampled_from(["xyz", "",
                                                                            "ab" * 31]))
REASONS = st.booleans() | st.text(st.characters(min_codepoint=32, max_codepoint=0x2000,
                                                 blacklist_categories=["Cc", "Cs", "Zl", "Zp"]),
                                  max_size=8)
ENTRIES = st.fixed_dictionaries({
    "name": NAMES, "prefix": PREFIXES, "hash": HASHES, "hash_name": st.sampled_from(
        ["sha256", "md5"]), "metadata": st.none() | st.just(True) | HASHES,
    "metadata_key": st.sampled_from(["core-metadata", "dist-info-metadata"]),
    "yanked": REASONS, "requires": st.sampled_from(["", ">=3.8", "<4,>=3.10", "&<>'\""])})
STYLES = st.fixed_dictionaries({  # how one link is written: the same link to every reader
    "quote": st.sampled_from(['"', "'"]), "upper": st.booleans(), "references": st.booleans(),
    "around": st.sampled_from(["", " ", "\n  ", "\t"]), "extra": st.booleans()})


def url_of(entry: dict[str, Any]) -> str:
    return str(entry["prefix"]) + urllib.parse.quote(entry["name"], safe="")


def as_json(entries: list[dict[str, Any]]) -> bytes:
    files = []
    for entry in entries:
        item: dict[str, Any] = {"filename": entry["name"], "url": url_of(entry), "hashes": {}}
        if entry["hash"] is not None:
            item["hashes"][entry["hash_name"]] = entry["hash"]
        if entry["metadata"] is not None:
            item[entry["metadata_key"]] = True if entry["metadata"] is True else \
                {entry["hash_name"]: entry["metadata"]}
        item["yanked"] = entry["yanked"]
        item["requires-python"] = entry["requires"] or None
        files.append(item)
    return json.dumps({"meta": {"api-version": "1.1"}, "name": "causal-conv1d",
                       "files": files}).encode()


def spelled(text: str, references: bool) -> str:
    """`text` as HTML writes it: escaped, or with every printable character a numeric
    reference (what a reference cannot spell, a control character, is written as it is)."""
    if not references:
        return html.escape(text)
    return "".join(f"&#{ord(c)};" if c.isprintable() else c for c in text)


def as_html(entries: list[dict[str, Any]], style: dict[str, Any]) -> bytes:
    q, refs = style["quote"], style["references"]
    links = []
    for entry in entries:
        href = url_of(entry) + (f"#{entry['hash_name']}={entry['hash']}"
                                if entry["hash"] is not None else "")
        attrs = [("href", href)]
        if entry["metadata"] is not None:
            attrs.append((f"data-{entry['metadata_key']}", "true" if entry["metadata"] is True
                          else f"{entry['hash_name']}={entry['metadata']}"))
        if entry["yanked"] is not False:
            attrs.append(("data-yanked", "" if entry["yanked"] is True else entry["yanked"]))
        if entry["requires"]:
            attrs.append(("data-requires-python", entry["requires"]))
        if style["extra"]:
            attrs = [("rel", "internal"), *reversed(attrs)]
        tag = "A" if style["upper"] else "a"
        written = " ".join(f"{name.upper() if style['upper'] else name}={q}"
                           f"{spelled(value, refs)}{q}" for name, value in attrs)
        links.append(f"<{tag} {written}>{style['around']}{spelled(entry['name'], refs)}"
                     f"{style['around']}</{tag}><br/>")
    return "\n".join(["<!DOCTYPE html>", "<html><head>",
                      '<meta name="pypi:repository-version" content="1.1">',
                      "<!-- <a href='commented.whl'>commented.whl</a> -->",
                      "</head><body><h1>Links for causal-conv1d</h1>", *links,
                      "</body></html>"]).encode()


Files = tuple[tuple[str, str, str | None, bool, str | None], ...]


def outcome(data: bytes, content_type: str) -> Files | None:
    """What the reader makes of a page: its files, or None: refused (one error naming it)."""
    found = returned_or_raised(lambda: read_page(PAGE, data, content_type), UntrustedDataError)
    if isinstance(found, UntrustedDataError):
        assert found.message.startswith(f"{PAGE}: "), found.message
        return None
    return tuple((f.filename, f.url, f.sha256, f.yanked, f.metadata_sha256) for f in found.files)


@given(st.lists(ENTRIES, max_size=3), STYLES)
def test_an_html_page_reads_as_the_json_page_of_the_same_files(
        entries: list[dict[str, Any]], style: dict[str, Any]) -> None:
    """Whatever the names, URLs, hashes and reasons, and however the HTML writes them: the
    same files, or both refused."""
    from_json = outcome(as_json(entries), SIMPLE_JSON)
    from_html = outcome(as_html(entries, style), "text/html; charset=utf-8")
    event("refused" if from_json is None else f"{len(from_json)} file(s)")
    assert from_html == from_json
    for name, url, sha256, _, _ in from_html or ():
        assert name_problem(name) is None
        assert url.startswith(("http://", "https://"))
        assert sha256 is None or sha256 == SHA


MARKUP = st.lists(st.sampled_from([
    '<a href="', "<a ", "<A HREF=", "href=", "data-yanked", 'data-core-metadata="sha256=',
    "=", '"', "'", ">", "</a>", "<a/>", "<br>", "<!--", "-->", "<script>", "</script>",
    "<![CDATA[", "]]>", "<?", '<base href="', '<meta name="pypi:repository-version">',
    "x.whl", "../x.whl", "%2F", "..", "#sha256=" + SHA, "#sha256=xyz", "&amp;", "&#0;",
    "&#x1b;", "&#99999999;", "&#xD800;", "&bogus;", "&", "<", "/", " ", "\n", "\x1b",
    '<a href="x.whl">x.whl</a>', "<a href='../f/y-1.0.tar.gz#sha256=" + SHA + "'>y-1.0.tar.gz",
    "javascript:", "http://h:99999/", "http://[::1/", "https://other.example/", "\u202e"]),
    max_size=40).map("".join)


@given(MARKUP | st.text(max_size=200))
def test_any_markup_reads_as_files_with_plain_names_or_one_error_naming_the_page(
        text: str) -> None:
    found = returned_or_raised(lambda: read_page(PAGE, text.encode(), "text/html"),
                               UntrustedDataError)
    if isinstance(found, UntrustedDataError):
        assert found.message.startswith(f"{PAGE}: "), found.message
        assert "\n" not in found.message
        return
    event(f"{len(found.files)} file(s)")
    for file in found.files:
        assert name_problem(file.filename) is None
        assert file.url.startswith(("http://", "https://"))
        path = urllib.parse.urlsplit(file.url).path
        assert urllib.parse.unquote(path.rpartition("/")[2]) == file.filename


@given(st.binary(max_size=2048))
def test_any_bytes_sent_as_html_give_a_page_or_one_error_naming_it(data: bytes) -> None:
    with HostileServer(serving(data, "text/html")) as server:
        page = returned_or_raised(lambda: simple_page("demo", server.url), UntrustedDataError)
    if isinstance(page, UntrustedDataError):
        assert page.message.startswith(f"{server.url}/demo/: ")
    else:
        assert all(name_problem(f.filename) is None for f in page.files)


@given(BAD_URLS)
def test_a_link_no_connection_can_take_is_refused_naming_it(bad: tuple[str, str]) -> None:
    url, why = bad
    body = f'<a href="{html.escape(url)}">x.tar.gz</a>'.encode()
    with HostileServer(serving(body, "text/html")) as server, \
            pytest.raises(UntrustedDataError) as caught:
        simple_page("demo", server.url)
    assert caught.value.message == (
        f"{server.url}/demo/: its link 1: '{clip(url)}' is not a valid URL ({why})")


def page_of(*links: str, head: str = "") -> bytes:
    return f"<!DOCTYPE html><html><head>{head}</head><body>{''.join(links)}</body></html>" \
        .encode()


def test_relative_absolute_and_base_relative_links_are_joined_as_a_browser_joins_them() -> None:
    page = read_page(PAGE, page_of(
        f'<a href="../../../files/ab/{WHEEL.replace("+", "%2B")}#sha256={SHA}">{WHEEL}</a>',
        '<a href="/f/b-1.0.tar.gz">b-1.0.tar.gz</a>',
        '<a href="https://files.example/c-1.0.tar.gz#md5=00">c-1.0.tar.gz</a>'), "text/html")
    assert [(f.filename, f.url, f.sha256) for f in page.files] == [
        (WHEEL, f"http://127.0.0.1:9/files/ab/{WHEEL.replace('+', '%2B')}", SHA),
        ("b-1.0.tar.gz", "http://127.0.0.1:9/f/b-1.0.tar.gz", None),
        ("c-1.0.tar.gz", "https://files.example/c-1.0.tar.gz", None)]
    based = read_page(PAGE, page_of('<a href="d-1.0.tar.gz">d-1.0.tar.gz</a>',
                                    head='<base href="https://cdn.example/wheels/">'),
                      "text/html")
    assert [f.url for f in based.files] == ["https://cdn.example/wheels/d-1.0.tar.gz"]


def test_links_that_name_no_file_are_not_files_and_entities_resolve_in_attributes() -> None:
    """A parent directory, navigation and an anchor without href are not files (PEP 503: a
    file's link text is its name; links are counted among those with an href); `&amp;`,
    `&#x32;` and `&gt;` in attributes resolve."""
    page = read_page(PAGE, page_of(
        '<a href="../">Parent Directory</a>', '<a name="top">top</a>', "<a href='/'>home</a>",
        '<a href="x%2B1-1.0.tar.gz#sha&#x32;56=' + SHA + '" data-requires-python="&gt;=3.8" '
        f'data-core-metadata="sha256={SHA}" data-yanked="broken &amp; withdrawn">'
        "x+1-1.0.tar.gz</a>"), "text/html")
    assert page == Page(PAGE, (page.files[0],))
    found = page.files[0]
    assert (found.filename, found.url, found.sha256, found.yanked, found.metadata_sha256,
            found.place) == ("x+1-1.0.tar.gz", "http://127.0.0.1:9/cu130-torch2.14/simple/"
                             "causal-conv1d/x%2B1-1.0.tar.gz", SHA, True, SHA, "its link 3")


def test_a_page_that_links_no_file_is_empty_only_when_it_says_it_is_a_simple_page() -> None:
    empty = page_of(head='<meta name="pypi:repository-version" content="1.0">')
    assert read_page(PAGE, empty, "text/html").files == ()
    with pytest.raises(UntrustedDataError) as caught:
        read_page(PAGE, page_of('<form action="/login"><a href="/help">Help</a></form>'),
                  "text/html")
    assert caught.value.message == (f"{PAGE}: answered an HTML page whose 1 link(s) name no "
                                    "file, not a PEP 503 project page")


def test_deep_nesting_costs_nothing() -> None:
    depth = 100_000
    page = read_page(PAGE, b"<div>" * depth + f'<a href="{WHEEL}">{WHEEL}</a>'.encode() +
                     b"</div>" * depth, "text/html")
    assert [f.filename for f in page.files] == [WHEEL]


def test_the_pages_deadline_covers_its_html_parse() -> None:
    link = f'<a href="../../files/{WHEEL}#sha256={SHA}">{WHEEL}</a><br>\n'.encode()
    with HostileServer(serving(link * PAGE_MAX_FILES, "text/html")) as server, \
            pytest.raises(UntrustedDataError) as caught:
        simple_page("a", server.url, timeout=0.5)
    assert caught.value.message == f"{server.url}/a/: was not read and parsed within 0.5 s"


LINK = f'<a href="{WHEEL}">{WHEEL}</a>'
# What install says (after `error: URL: `) of each hostile page, and its hint; exit 21.
HOSTILE: dict[str, tuple[bytes, str, str | None]] = {
    "a javascript: link": (page_of('<a href="javascript:alert(1)">x.whl</a>'),
                           "its link 1: 'javascript:alert(1)' is not an http:// or https:// URL",
                           URL_HINT),
    "a link to a local file": (page_of('<a href="file:///etc/passwd">passwd</a>'),
                               "its link 1: 'file:///etc/passwd' is not an http:// or https:// "
                               "URL", URL_HINT),
    "a name that leaves its directory": (
        page_of('<a href="..%2F..%2Fx.whl">../../x.whl</a>'),
        "its link 1: '../../x.whl' is not a plain file name (it holds a path separator)", None),
    "a control character in a name": (
        page_of("<a href='x%1B.whl'>x\x1b.whl</a>"),
        "its link 1: 'x\\x1b.whl' is not a plain file name (it holds control characters)", None),
    "a control character in a link": (
        page_of("<a href='x\x1b.whl'>x.whl</a>"),
        "its link 1: 'x\\x1b.whl' is not a valid URL (it holds the control character \\x1b)",
        URL_HINT),
    "a sha256 that is none": (page_of(f'<a href="{WHEEL}#sha256=xyz">{WHEEL}</a>'),
                              "its link 1: its URL's fragment: 'sha256=xyz' is not a sha256 "
                              "(64 hex digits)", None),
    "a metadata sha256 that is none": (
        page_of(f'<a href="{WHEEL}" data-core-metadata="sha256=">{WHEEL}</a>'),
        "its link 1: its metadata: 'sha256=' is not a sha256 (64 hex digits)", None),
    "an href given twice": (page_of(f'<a href="{WHEEL}" href="/other.whl">{WHEEL}</a>'),
                            "its link 1: holds the attribute href twice (readers differ on "
                            "which one counts)", None),
    "a base that is no URL": (page_of(LINK, head='<base href="http://h:0/">'),
                              "its <base href>: 'http://h:0/' is not a valid URL (its port '0' "
                              "is not a number from 1 to 65535)", URL_HINT),
    "more links than wheelsmith reads": (
        b"<a href=x>x</a>" * (PAGE_MAX_FILES + 1),
        f"lists {PAGE_MAX_FILES + 1:,} links, more than the {PAGE_MAX_FILES:,} wheelsmith reads",
        None),
    "more tags than such a page needs": (
        b"<" * (8 * PAGE_MAX_FILES + 1),
        f"holds {8 * PAGE_MAX_FILES + 1:,} tags, more than a page of the {PAGE_MAX_FILES:,} "
        "links wheelsmith reads needs", None),
    "a tag left open": (b'<a href="' + b"x" * (1 << 20),
                        "holds a tag, comment, script or character reference left open for more "
                        'than 32 KiB (<a href="' + "x" * 30 + "…)", None),
    "a comment left open": (b"<!--" + b"-" * (60 << 20),
                            "holds a tag, comment, script or character reference left open for "
                            f"more than 32 KiB (<!{'-' * 37}…)", None),
    "end tags without end": (b"</" * (1 << 20),
                             "holds a tag, comment, script or character reference left open for "
                             "more than 32 KiB (</</</</</</</</</</</</</</</</</</</<…)", None),
    "not UTF-8": (page_of(LINK)[:40] + b"\xff" + page_of(LINK)[40:], "not UTF-8 (byte 41)",
                  None),
    "UTF-16": (page_of(LINK).decode().encode("utf-16"),
               "not plain UTF-8 (byte 1: a UTF-16 byte order mark)", None),
    "a login page": (b"<html><body><form action='/login'><a href='/help'>Help</a></form></body>"
                     b"</html>", "answered an HTML page whose 1 link(s) name no file, not a PEP "
                     "503 project page", NOT_A_PAGE_HINT),
    "a page of no links": (b"<html><body>sign in</body></html>", "answered an HTML page that "
                           "links no files, not a PEP 503 project page", NOT_A_PAGE_HINT),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_install_refuses_a_hostile_html_page_in_one_line(tmp_path: Path, case: str) -> None:
    """Through the real CLI, bounded in time and memory (1 GiB of address space)."""
    body, said, hint = HOSTILE[case]
    python = answering_python(tmp_path / "env" / "python")
    with HostileServer(serving(body, "text/html")) as server:
        outcome = run_bounded("install", "causal-conv1d", "--python", str(python), "--index",
                              server.url, "--arch", "12.0", cwd=tmp_path, seconds=60,
                              address_space=GIB)
    assert_orderly(outcome, seconds=30)
    assert outcome.returncode == 21, outcome.describe()
    page = f"{server.url}/cu130-torch2.14/simple/causal-conv1d/"
    errors = [line for line in outcome.stderr.splitlines() if line.startswith("error: ")]
    assert errors == [f"error: {page}: {said}"], outcome.describe()
    assert outcome.stderr.splitlines()[-1] == (f"hint: {hint}" if hint else errors[0])


def test_a_huge_html_page_is_refused_at_the_byte_cap(tmp_path: Path) -> None:
    python = answering_python(tmp_path / "env" / "python")
    huge = Reply(200, LINK.encode() * 100, (("Content-Type", "text/html"),), size=2 << 30)
    with HostileServer(lambda _: huge) as server:
        outcome = run_bounded("install", "causal-conv1d", "--python", str(python), "--index",
                              server.url, "--arch", "12.0", cwd=tmp_path, seconds=60,
                              address_space=GIB)
    assert_orderly(outcome, seconds=30)
    assert outcome.returncode == 21
    assert outcome.stderr.splitlines()[-2] == (
        f"error: {server.url}/cu130-torch2.14/simple/causal-conv1d/: answered more than 64 MiB")
