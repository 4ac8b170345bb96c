"""Index pages and the servers that answer them are not trusted (install, doctor, recipe new):
a page is read within bounds and parsed into a typed Page whose files have plain names and
http(s) URLs; a hostile server, a page of another shape or an HTML page that links no file (a
login page) is one error saying what was answered, over HTTP and file:// alike. (PEP 503 HTML
pages: test_html_pages.py.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from tests.hostile import (
    BAD_URLS,
    HOSTILE_MODES,
    NOT_HTTP_MODES,
    NOT_HTTP_SAID,
    PROBE_ANSWER,
    QUICK_NOT_HTTP,
    HostileServer,
    answering_python,
    assert_orderly,
    returned_or_raised,
    run_bounded,
    sentinel,
    serving,
)
from wheelsmith.arch import parse_arch
from wheelsmith.errors import UntrustedDataError
from wheelsmith.index.offers import offers
from wheelsmith.recipes.simple import simple_page
from wheelsmith.toolchain.target import Target
from wheelsmith.untrusted import name_problem
from wheelsmith.untrusted.text import clip

CHANNEL = "cu130-torch2.14"
GIB = 1 << 30
ANSWERED = {  # what install and recipe new say each quick hostile mode answered
    "500": ("answered HTTP 500 X", "the server failed or refused the request: check the URL "
                                   "and the server's log"),
    "redirect loop": ("redirects in a loop (HTTP 302 to /{path})",
                      "the server sends the request back where it came from: check the URL "
                      "(its trailing slash) and the server's configuration"),
    "html page": ("answered an HTML page that links no files, not a PEP 503 project page",
                  "give the URL of a simple index (PEP 503 or PEP 691: wheelsmith serve's and "
                  "index export's are both), whose links to files have the file's name as "
                  "their text; an HTML page that links no files can also be a login page or a "
                  "proxy in the way"),
    "huge body": ("answered more than 64 MiB",
                  "nothing wheelsmith reads there is that large: check that the URL is the one "
                  "you mean"),
    **{mode: (said, hint.removeprefix("hint: ")) for mode, (said, hint) in NOT_HTTP_SAID.items()
       if mode in QUICK_NOT_HTTP},
}
MODES = {**HOSTILE_MODES, **NOT_HTTP_MODES}


@pytest.mark.parametrize("mode", sorted(ANSWERED))
def test_install_says_what_a_hostile_index_answered_not_to_start_it(
        tmp_path: Path, mode: str) -> None:
    python = answering_python(tmp_path / "env" / "python")
    path = f"{CHANNEL}/simple/causal-conv1d/"
    with HostileServer(MODES[mode]) as server, sentinel(tmp_path / "outside"):
        outcome = run_bounded("install", "causal-conv1d", "--python", str(python), "--index",
                              server.url, "--arch", "12.0", cwd=tmp_path, seconds=60,
                              address_space=GIB)
    assert_orderly(outcome, seconds=30)
    said, hint = ANSWERED[mode]
    assert outcome.returncode == 21
    assert outcome.stderr.splitlines()[-2:] == [
        f"error: {server.url}/{path}: {said.format(path=path)}", f"hint: {hint}"]
    assert "start it" not in outcome.stderr


def test_install_from_an_index_where_nothing_answers_says_to_start_it(tmp_path: Path) -> None:
    python = answering_python(tmp_path / "env" / "python")
    with HostileServer(HOSTILE_MODES["500"]) as server:
        url = server.url  # closed when the block ends
    outcome = run_bounded("install", "causal-conv1d", "--python", str(python), "--index", url,
                          "--arch", "12.0", cwd=tmp_path, seconds=60)
    assert_orderly(outcome, seconds=30)
    assert outcome.returncode == 4
    assert outcome.stderr.splitlines()[-2:] == [
        f"error: cannot read the index: nothing answers at {url}/{CHANNEL}/simple/"
        "causal-conv1d/: [Errno 111] Connection refused",
        "hint: start it (wheelsmith serve), or point --index at it"]


@pytest.mark.parametrize("mode", sorted(MODES))
def test_doctor_reports_on_the_environment_whatever_the_index_does(
        tmp_path: Path, mode: str) -> None:
    """doctor reads the index only to check its fixes (5 s): an index that cannot be read
    leaves them unchecked and says so."""
    answer = {**PROBE_ANSWER, "fast_path": {"causal_conv1d": {
        "dist": "causal-conv1d", "ok": False, "error": "ModuleNotFoundError: x",
        "missing": "causal_conv1d"}}}
    python = answering_python(tmp_path / "env" / "python", answer)
    with HostileServer(MODES[mode]) as server:
        outcome = run_bounded("doctor", "--python", str(python), "--index", server.url,
                              "--need", "causal_conv1d", cwd=tmp_path, seconds=60,
                              address_space=GIB)
    assert_orderly(outcome, seconds=30)
    assert outcome.returncode == 15
    assert "# not checked: the index could not be read" in outcome.stderr


@pytest.mark.parametrize("mode", sorted(ANSWERED))
def test_recipe_new_says_what_a_hostile_package_index_answered(
        tmp_path: Path, mode: str) -> None:
    with HostileServer(MODES[mode]) as server:
        outcome = run_bounded("recipe", "new", "demo-pkg", "--recipes", str(tmp_path / "r"),
                              cwd=tmp_path, seconds=60, address_space=GIB,
                              env={**_environ(), "WHEELSMITH_INDEX_URL": server.url})
    assert_orderly(outcome, seconds=30)
    said, _ = ANSWERED[mode]
    assert outcome.returncode == 21
    assert f"error: {server.url}/demo-pkg/: {said.format(path='demo-pkg/')}" in outcome.stderr
    assert not (tmp_path / "r").exists()


def test_recipe_new_with_a_file_index_of_another_shape_names_the_page(tmp_path: Path) -> None:
    page = tmp_path / "index" / "demo-pkg"
    page.mkdir(parents=True)
    (page / "index.json").write_text("[1]")
    base = (tmp_path / "index").as_uri()
    outcome = run_bounded("recipe", "new", "demo-pkg", "--recipes", str(tmp_path / "r"),
                          cwd=tmp_path, seconds=60,
                          env={**_environ(), "WHEELSMITH_INDEX_URL": base})
    assert_orderly(outcome, seconds=30)
    assert outcome.returncode == 21
    assert f"error: {base}/demo-pkg/: expected an object, found a list" in outcome.stderr


def _environ() -> dict[str, str]:
    import os  # noqa: PLC0415 - only these tests set an index

    return dict(os.environ)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                               max_size=3),
    max_leaves=10)
WHEELS = ["causal_conv1d-1.7.0+cu.13.0.torch.2.14.sm.120-cp311-cp311-manylinux_2_34_x86_64.whl",
          "causal_conv1d-1.7.0-py3-none-any.whl", "causal_conv1d-1.7.0.tar.gz"]

def mostly(good: list[str], bad: list[str]) -> st.SearchStrategy[str]:
    """One of `good` three times in four, else one of `bad`."""
    return st.one_of(*[st.sampled_from(good)] * 3, st.sampled_from(bad))


FILENAMES = mostly(WHEELS, ["../../x/X.whl", "a/b.whl", "x\0.whl", "..", "not a wheel.whl",
                            "causal_conv1d-1.7.0-cp311-bad.whl", ""])
URLS = mostly(["x.whl", "../../files/x.whl", "http://h/x.whl"],
              ["file:///etc/passwd", "ftp://h/x.whl", "javascript:alert(1)"])
SHA256 = mostly(["ab" * 32, "AB" * 32], ["xyz", ""])
# entries of the right shape with names and values good and bad, and entries of any shape
ENTRIES = st.fixed_dictionaries(
    {"filename": FILENAMES, "url": URLS, "hashes": st.fixed_dictionaries({"sha256": SHA256})},
    optional={"yanked": st.booleans(), "size": st.integers(min_value=0)}) | \
    st.fixed_dictionaries({}, optional={
        "filename": FILENAMES | st.text(max_size=20) | JSON, "url": URLS | JSON,
        "hashes": st.fixed_dictionaries({}, optional={"sha256": SHA256 | JSON}) | JSON,
        "yanked": st.booleans() | st.text(max_size=5) | JSON, "size": st.integers() | JSON})
PAGES = st.fixed_dictionaries({"files": st.lists(ENTRIES, max_size=3)}, optional={
    "meta": JSON}) | st.fixed_dictionaries({}, optional={"files": JSON, "meta": JSON}) | JSON
TARGET = Target.from_probe(Path("/env/bin/python"), PROBE_ANSWER)


def _offered_or_refused(base: str, page_url: str) -> None:
    found = returned_or_raised(
        lambda: offers(base, "causal-conv1d", TARGET, (parse_arch("12.0"),)),
        UntrustedDataError)
    if isinstance(found, UntrustedDataError):
        assert found.message.startswith(f"{page_url}: "), found.message
        return
    event(f"{len(found)} offered")
    for offer in found:
        assert name_problem(offer.filename) is None
        assert offer.url.startswith(("http://", "https://", "file://"))
        assert len(offer.sha256) == 64


@given(PAGES)
def test_any_page_over_http_gives_offers_with_plain_names_or_one_located_error(
        page: Any) -> None:
    with HostileServer(serving(json.dumps(page).encode())) as server:
        base = f"{server.url}/{CHANNEL}/simple"
        _offered_or_refused(base, f"{base}/causal-conv1d/")


@given(PAGES)
def test_any_page_on_disk_gives_offers_with_plain_names_or_one_located_error(
        tmp_path_factory: pytest.TempPathFactory, page: Any) -> None:
    root = tmp_path_factory.mktemp("index")
    folder = root / CHANNEL / "simple" / "causal-conv1d"
    folder.mkdir(parents=True)
    (folder / "index.json").write_text(json.dumps(page))
    base = f"{root.as_uri()}/{CHANNEL}/simple"
    _offered_or_refused(base, f"{base}/causal-conv1d/")


@given(st.binary(max_size=2048))
def test_any_bytes_for_a_page_give_a_page_or_one_error_naming_it(data: bytes) -> None:
    with HostileServer(serving(data)) as server:
        page = returned_or_raised(lambda: simple_page("demo", server.url), UntrustedDataError)
    if isinstance(page, UntrustedDataError):
        assert page.message.startswith(f"{server.url}/demo/: ")


@pytest.mark.parametrize(("entry", "said"), [
    ({"filename": "../../x/X.whl", "url": "X.whl", "hashes": {}},
     "files[0].filename: '../../x/X.whl' is not a plain file name (it holds a path separator)"),
    ({"filename": "x.tar.gz", "url": "file:///etc/passwd", "hashes": {}},
     "files[0].url: 'file:///etc/passwd' is not an http:// or https:// URL"),
    ({"filename": "x.tar.gz", "url": "x.tar.gz"}, "files[0]: 'hashes' is missing"),
], ids=["a name that leaves its directory", "a link to a local file", "no hashes"])
def test_an_entry_of_a_hostile_page_is_refused_naming_its_place(
        entry: dict[str, Any], said: str) -> None:
    with HostileServer(serving(json.dumps({"files": [entry]}).encode())) as server, \
            pytest.raises(UntrustedDataError) as caught:
        simple_page("demo", server.url)
    assert caught.value.message == f"{server.url}/demo/: {said}"


@given(BAD_URLS)
def test_a_file_url_no_connection_can_take_is_refused_naming_its_place(
        bad: tuple[str, str]) -> None:
    url, why = bad
    entry = {"filename": "x.tar.gz", "url": url, "hashes": {}}
    with HostileServer(serving(json.dumps({"files": [entry]}).encode())) as server, \
            pytest.raises(UntrustedDataError) as caught:
        simple_page("demo", server.url)
    assert caught.value.message == (
        f"{server.url}/demo/: files[0].url: '{clip(url)}' is not a valid URL ({why})")


def test_recipe_new_refuses_a_page_whose_file_url_is_no_url(tmp_path: Path) -> None:
    entry = {"filename": "demo_pkg-1.0.tar.gz", "url": "http://[bad/", "hashes": {}}
    with HostileServer(serving(json.dumps({"files": [entry]}).encode())) as server:
        outcome = run_bounded("recipe", "new", "demo-pkg", "--no-configure", "--recipes",
                              str(tmp_path / "r"), cwd=tmp_path, seconds=60,
                              env={**_environ(), "WHEELSMITH_INDEX_URL": server.url})
    assert_orderly(outcome, seconds=30)
    assert outcome.returncode == 21
    assert outcome.stderr.splitlines()[-2:] == [
        f"error: {server.url}/demo-pkg/: files[0].url: 'http://[bad/' is not a valid URL (its "
        "host in brackets is not an IPv6 address)",
        "hint: a server may send a reader only to a valid http(s) URL; nothing was read there: "
        "the page or the server is damaged or hostile, check the URL and the server"]
    assert not (tmp_path / "r").exists()
