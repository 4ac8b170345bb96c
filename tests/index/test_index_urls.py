"""`--index` of install and doctor: which values are an index, and one-line errors for the
rest (checked once, in cli/_common.py, for both commands); a file:// index read from disk; a
channel's own URL taken as its index, another channel's refused."""

from __future__ import annotations

import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.wheels import make_wheel
from wheelsmith.arch import parse_arch
from wheelsmith.cli import main
from wheelsmith.cli._common import parse_index_url
from wheelsmith.doctor.examine import examine
from wheelsmith.errors import SourceError, UsageError
from wheelsmith.files import sha256_file
from wheelsmith.index.offers import channel_url, offers
from wheelsmith.index.publish import publish
from wheelsmith.toolchain.target import Target

NOT_AN_INDEX_HINT = ("hint: give the URL `wheelsmith serve` listens on, e.g. --index "
                     "http://127.0.0.1:8080, or an index directory, e.g. --index "
                     "file:///path/to/index")


@pytest.mark.parametrize("command", [
    ["install", "tiny-ext", "--python", "/env/bin/python"],
    ["doctor", "--arch", "12.0"],
])
@pytest.mark.parametrize(("value", "said"), [
    *[(value, "is not an http://, https:// or file:// URL, nor an existing directory")
      for value in ("not-a-url", "", "ftp://127.0.0.1/index", "file://index")],
    ("http://", "is not a valid URL (it names no host)"),  # read as a server's URL is
    ("http://127.0.0.1:80x", "is not a valid URL (its port '80x' is not a number from 1 to "
                             "65535)")])
def test_an_index_that_is_no_url_is_refused_by_name_before_anything_runs(
        command: list[str], value: str, said: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, [*command, "--index", value])
    assert result.exit_code == 4, result.output
    assert result.stderr.splitlines() == [f"error: --index: '{value}' {said}",
                                          NOT_AN_INDEX_HINT]
    assert result.exception is None or isinstance(result.exception, SystemExit)


@pytest.mark.parametrize("value", ["http://127.0.0.1:8080", "https://wheels.example/index/",
                                   "http://127.0.0.1:8080/cu130-torch2.14/simple/",
                                   "file:///srv/wheelsmith/index", "file://localhost/srv/index"])
def test_http_https_and_file_urls_are_taken_as_they_are(value: str) -> None:
    assert parse_index_url(value) == value


def test_an_existing_directory_is_read_as_its_file_url(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my index").mkdir()
    monkeypatch.chdir(tmp_path)
    assert parse_index_url("my index") == f"file://{tmp_path}/my%20index"


CHANNEL = "cu130-torch2.14"
LABEL = "cu.13.0.torch.2.14.sm.120"


def environment(python: str = "3.11") -> Target:
    """A Target as the probe would report a Python with torch 2.14.1+cu130 and an sm_120 GPU."""
    return Target.from_probe(Path("/env/bin/python"), {
        "python": python, "torch_full": "2.14.1+cu130", "torch_dist": "2.14.1",
        "torch_cuda": "13.0", "glibc": "2.36", "machine": "x86_64", "pip": True,
        "gpu": {"name": "RTX PRO 6000", "capability": [12, 0]}})


@pytest.mark.parametrize("pages", ["json and html", "html only"])
def test_a_file_index_is_read_from_disk_and_a_missing_project_is_not_there(
        tmp_path: Path, pages: str) -> None:
    """A tree without JSON pages (one another tool wrote) is read from each project's
    index.html (PEP 503), to the same offers."""
    root = tmp_path / "my index"  # a space: the file:// URL quotes it
    wheel = make_wheel(tmp_path, "demo-ext", f"1.0.0+{LABEL}")
    publish(wheel, root, channel=CHANNEL)
    if pages == "html only":
        for page in root.rglob("index.json"):
            page.unlink()
    base = f"{root.as_uri()}/{CHANNEL}/simple/"
    found = offers(base, "demo-ext", environment(), (parse_arch("12.0"),))
    assert [(o.filename, o.sha256) for o in found] == [(wheel.name, sha256_file(wheel))]
    stored = Path(urllib.request.url2pathname(urllib.parse.urlsplit(found[0].url).path))
    assert stored.read_bytes() == wheel.read_bytes()
    assert offers(base, "not-here", environment(), ()) == []
    assert offers(f"{(tmp_path / 'new').as_uri()}/{CHANNEL}/simple/", "demo-ext",
                  environment(), ()) == []  # an index not created yet holds nothing


def test_a_file_index_json_page_that_is_not_json_is_an_error_naming_it(tmp_path: Path) -> None:
    page = tmp_path / CHANNEL / "simple" / "demo-ext"
    page.mkdir(parents=True)
    (page / "index.json").write_text("<html>")
    (page / "index.html").write_text("<a href='x.whl'>x.whl</a>")  # index.json is read first
    with pytest.raises(SourceError) as caught:
        offers(f"{tmp_path.as_uri()}/{CHANNEL}/simple/", "demo-ext", environment(), ())
    assert caught.value.message == (
        f"{tmp_path.as_uri()}/{CHANNEL}/simple/demo-ext/: not valid JSON (Expecting value: line "
        "1 column 1 (char 0))")


@pytest.mark.parametrize(("index", "channel"), [
    ("http://127.0.0.1:8080", "http://127.0.0.1:8080/cu130-torch2.14/simple/"),
    ("http://127.0.0.1:8080/", "http://127.0.0.1:8080/cu130-torch2.14/simple/"),
    ("https://host/wheels/", "https://host/wheels/cu130-torch2.14/simple/"),
    ("http://127.0.0.1:8080/cu130-torch2.14/simple/",
     "http://127.0.0.1:8080/cu130-torch2.14/simple/"),
    ("http://127.0.0.1:8080/cu130-torch2.14/simple", "http://127.0.0.1:8080/cu130-torch2.14/simple/"),
    ("https://host/wheels/cu130-torch2.14/simple/", "https://host/wheels/cu130-torch2.14/simple/"),
    ("file:///srv/index/cu130-torch2.14/simple/", "file:///srv/index/cu130-torch2.14/simple/"),
    ("file:///srv/index", "file:///srv/index/cu130-torch2.14/simple/"),
])
def test_the_environments_channel_is_read_below_a_base_or_its_own_channel_url(
        index: str, channel: str) -> None:
    assert channel_url(index, environment()) == channel


def test_another_channels_url_is_refused_naming_both_channels() -> None:
    with pytest.raises(UsageError) as caught:
        channel_url("http://127.0.0.1:8080/cu128-torch2.11/simple/", environment())
    assert caught.value.message == (
        "--index http://127.0.0.1:8080/cu128-torch2.11/simple/ is the channel cu128-torch2.11, "
        "but /env/bin/python (torch 2.14.1+cu130) needs the channel cu130-torch2.14")
    assert caught.value.hint == ("give the index's base URL, --index http://127.0.0.1:8080: "
                                 "the channel for the environment is read below it")


def test_doctor_takes_the_channel_url_it_prints_and_refuses_another() -> None:
    info: dict[str, Any] = {
        "python": "3.11", "executable": "/env/bin/python", "torch": "2.14.1",
        "torch_full": "2.14.1+cu130", "torch_cuda": "13.0", "glibc": "2.36", "machine": "x86_64",
        "gpu": None, "packages": [], "fast_path": {}}
    printed = "http://127.0.0.1:8080/cu130-torch2.14/simple/"
    report = examine(info, parse_arch("12.0"), "--arch", Path("/no/cuobjdump"),
                     index_url=printed)
    assert report.channel == printed
    with pytest.raises(UsageError) as caught:
        examine(info, parse_arch("12.0"), "--arch", Path("/no/cuobjdump"),
                index_url="http://127.0.0.1:8080/cu130-torch2.11/simple/")
    assert caught.value.message == (
        "--index http://127.0.0.1:8080/cu130-torch2.11/simple/ is the channel cu130-torch2.11, "
        "but /env/bin/python (torch 2.14.1+cu130) needs the channel cu130-torch2.14")
