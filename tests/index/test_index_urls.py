"""`--index` of install and doctor: which values are an index, and one-line errors for the
rest (checked once, in cli/_common.py, for both commands)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from wheelsmith.cli import main
from wheelsmith.cli._common import parse_index_url

NOT_AN_INDEX_HINT = ("hint: give the URL `wheelsmith serve` listens on, e.g. --index "
                     "http://127.0.0.1:8080, or an index directory, e.g. --index "
                     "file:///path/to/index")


@pytest.mark.parametrize("command", [
    ["install", "tiny-ext", "--python", "/env/bin/python"],
    ["doctor", "--arch", "12.0"],
])
@pytest.mark.parametrize("value", ["not-a-url", "", "http://", "ftp://127.0.0.1/index",
                                   "file://index", "http://127.0.0.1:80x"])
def test_an_index_that_is_no_url_is_refused_by_name_before_anything_runs(
        command: list[str], value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, [*command, "--index", value])
    assert result.exit_code == 4, result.output
    assert result.stderr.splitlines() == [
        f"error: --index: '{value}' is not an http://, https:// or file:// URL, nor an "
        "existing directory", NOT_AN_INDEX_HINT]
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
