"""`wheelsmith install` on a miss, without a build: the build is replaced by a small, valid
wheel that is really published where install asks, and read back through a real `wheelsmith
serve` on 127.0.0.1 (or a file:// index). The environment is a stand-in torch 2.14.1+cu130
behind a `python` script, so that the probe, the channel and the CLI's output are real."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.conftest import add_variant, serve
from tests.wheels import make_wheel
from wheelsmith import install
from wheelsmith.build.request import BuildResult
from wheelsmith.cli import main
from wheelsmith.deliver import Delivered
from wheelsmith.index import ledger
from wheelsmith.index.publish import publish

CHANNEL = "cu130-torch2.14"
PY = f"cp{sys.version_info[0]}{sys.version_info[1]}"
WHEEL = f"tiny_ext-0.1.0+cu.13.0.torch.2.14.sm.120-{PY}-{PY}-linux_x86_64.whl"


@pytest.fixture
def built(project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path | None]:
    """install's build replaced (builds are tested in tests/build): a tiny-ext wheel in
    --out, published for real where install asks; returns where it was asked to publish."""
    add_variant(project, "tiny-ext")
    asked: list[Path | None] = []

    def deliver(_: object, __: object, *, publish_to: Path | None = None,
                **___: Any) -> Delivered:
        asked.append(publish_to)
        out = tmp_path / "wheelhouse"
        out.mkdir(exist_ok=True)
        wheel = make_wheel(out, "tiny-ext", "0.1.0+cu.13.0.torch.2.14.sm.120",
                           tags=f"{PY}-{PY}-linux_x86_64")
        published = publish(wheel, publish_to, channel=CHANNEL) if publish_to else None
        return Delivered(BuildResult(wheel=wheel, provenance={}, up_to_date=False, log=None),
                         published, ("tiny_ext",))

    monkeypatch.setattr(install, "deliver", deliver)
    return asked


@pytest.fixture
def python(tmp_path: Path) -> Path:
    """This Python with a stand-in torch 2.14.1+cu130 (no GPU) first on its path."""
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text(
        '__version__ = "2.14.1+cu130"\n\n\nclass version:\n    cuda = "13.0"\n\n\n'
        "class cuda:\n    @staticmethod\n    def is_available():\n        return False\n")
    script = tmp_path / "env" / "python"
    script.parent.mkdir()
    script.write_text(f'#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} "$@"\n')
    script.chmod(0o755)
    return script


def install_cli(python: Path, *args: str) -> Any:
    return CliRunner().invoke(main, ["install", "tiny-ext", "--python", str(python), "--arch",
                                     "12.0", *args])


def test_publishing_where_the_index_does_not_read_fails_saying_where_it_went(
        project: Path, tmp_path: Path, python: Path, built: list[Path | None]) -> None:
    with serve(tmp_path / "served", tmp_path / "serve.log") as server:
        result = install_cli(python, "--index", server.url, "--publish")
    assert built == [Path("index")]  # ./index: not what the server serves
    assert result.exit_code == 4, result.output
    assert result.stderr.splitlines()[-2:] == [
        f"error: {WHEEL} is installed in {python} and published to index "
        f"({(project / 'index').resolve()}), but --index {server.url} does not serve it: the "
        "next install will not find it",
        "hint: pass --publish DIR, the DIR that `wheelsmith serve --index DIR` serves (this "
        f"wheel: wheelsmith publish {tmp_path / 'wheelhouse' / WHEEL} --index DIR)"]
    assert WHEEL in ledger.read(project / "index").by_filename  # it stays published


def test_publishing_into_the_served_directory_is_read_back_and_passes(
        tmp_path: Path, python: Path, built: list[Path | None]) -> None:
    served = tmp_path / "served"
    with serve(served, tmp_path / "serve.log") as server:
        result = install_cli(python, "--index", server.url, "--publish", str(served))
        read = server.requests()
    assert (result.exit_code, result.stdout) == (0, f"{WHEEL}\n"), result.output
    assert built == [served]
    assert read.count("/cu130-torch2.14/simple/tiny-ext/") == 2  # the miss, the check


def test_a_file_index_is_published_into_when_publish_names_no_directory(
        tmp_path: Path, python: Path, built: list[Path | None]) -> None:
    index = tmp_path / "file index"
    result = install_cli(python, "--index", index.as_uri(), "--publish")
    assert (result.exit_code, result.stdout) == (0, f"{WHEEL}\n"), result.output
    assert built == [index]
    assert WHEEL in ledger.read(index).by_filename


def test_another_channels_url_as_index_is_refused_before_a_build(
        python: Path, built: list[Path | None]) -> None:
    result = install_cli(python, "--index", "http://127.0.0.1:9/cu128-torch2.11/simple/")
    assert result.exit_code == 4, result.output
    assert result.stderr.splitlines()[-2:] == [
        "error: --index http://127.0.0.1:9/cu128-torch2.11/simple/ is the channel "
        f"cu128-torch2.11, but {python} (torch 2.14.1+cu130) needs the channel cu130-torch2.14",
        "hint: give the index's base URL, --index http://127.0.0.1:9: the channel for the "
        "environment is read below it"]
    assert built == []
