"""`wheelsmith install` on a miss, without a build: the build is replaced by a small, valid
wheel that is really published where install asks, and read back through a real `wheelsmith
serve` on 127.0.0.1 (or a file:// index, or an `index export` tree on Python's own static
server). The environment is a stand-in torch 2.14.1+cu130 behind a `python` script, so that the
probe, the channel and the CLI's output are real."""

from __future__ import annotations

import hashlib
import json
import sys
import urllib.request
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import quote

import pytest
from click.testing import CliRunner

from tests.conftest import add_variant, serve, stand_in_torch, static_server
from tests.wheels import make_wheel
from wheelsmith import install
from wheelsmith.builder import runner
from wheelsmith.builder.request import BuildRequest, BuildResult, QuietReporter
from wheelsmith.cli import main
from wheelsmith.deliver import Delivered, deliver
from wheelsmith.errors import FileConflictError
from wheelsmith.index import ledger
from wheelsmith.index.export import export
from wheelsmith.index.publish import publish

CHANNEL = "cu130-torch2.14"
PY = f"cp{sys.version_info[0]}{sys.version_info[1]}"
WHEEL = f"tiny_ext-0.1.0+cu.13.0.torch.2.14.sm.120-{PY}-{PY}-linux_x86_64.whl"


@pytest.fixture
def built(project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path | None]:
    """install's build replaced (builds are tested in tests/builder): a tiny-ext wheel in
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
    return stand_in_torch(tmp_path, "2.14.1+cu130")


def chosen_for(python: Path) -> str:
    """The line naming the toolchain chosen for the stand-in torch 2.14.1+cu130 of `python`."""
    return (f"toolchain: {CHANNEL}, chosen for {python} (Python {sys.version_info[0]}."
            f"{sys.version_info[1]}, torch 2.14.1+cu130, CUDA 13.0)")


def install_cli(python: Path, *args: str) -> Any:
    return CliRunner().invoke(main, ["install", "tiny-ext", "--python", str(python), "--arch",
                                     "12.0", *args])


def test_publishing_where_the_index_does_not_read_fails_saying_where_it_went(
        project: Path, tmp_path: Path, python: Path, built: list[Path | None]) -> None:
    elsewhere = tmp_path / "elsewhere"
    with serve(tmp_path / "served", tmp_path / "serve.log") as server:
        result = install_cli(python, "--index", server.url, "--publish", str(elsewhere))
    assert built == [elsewhere]
    assert result.exit_code == 4, result.output
    assert result.stderr.splitlines()[-2:] == [
        f"error: {WHEEL} is installed in {python} and published to {elsewhere}, but --index "
        f"{server.url} does not serve it: the next install will not find it",
        "hint: pass --publish DIR, the DIR that `wheelsmith serve --index DIR` serves (this "
        f"wheel: wheelsmith publish {tmp_path / 'wheelhouse' / WHEEL} --index DIR)"]
    assert WHEEL in ledger.read(elsewhere).by_filename  # it stays published


def test_a_bare_publish_with_an_index_over_http_is_refused_before_anything_is_built(
        project: Path, tmp_path: Path, python: Path, built: list[Path | None]) -> None:
    """Only the server knows the directory it serves: a bare --publish names none, and is
    refused in one line before anything is built (it once published to ./index, then failed)."""
    with serve(tmp_path / "served", tmp_path / "serve.log") as server:
        result = install_cli(python, "--index", server.url, "--publish")
    assert (built, result.exit_code) == ([], 4), result.output
    assert result.stderr.splitlines()[-2:] == [
        f"error: --publish names no directory, and --index {server.url} is read over HTTP: "
        "only its server knows the directory it serves",
        "hint: pass --publish DIR, the DIR that `wheelsmith serve --index DIR` serves (or a "
        "file:// --index, which is published into)"]
    assert not (project / "index").exists()


def test_a_miss_without_publish_says_the_wheel_was_built_and_not_published(
        tmp_path: Path, python: Path, built: list[Path | None]) -> None:
    with serve(tmp_path / "served", tmp_path / "serve.log") as server:
        result = install_cli(python, "--index", server.url)
    assert (result.exit_code, built) == (0, [None]), result.output
    assert (f"installed: {WHEEL} (built; not published: without --publish the next install of "
            "it builds it again); imports tiny_ext") in result.stderr
    assert " (not published: --publish DIR publishes it)" in result.stderr


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


def test_a_wheel_another_build_published_first_is_installed_from_the_index(
        project: Path, tmp_path: Path, python: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two installs missed the same wheel and both built it; builds are not bit-reproducible,
    so the other build's file, published while this one built, differs from this build's under
    the same name. Only the build step is replaced: publish, serve, pip and the import are
    real."""
    add_variant(project, "tiny-ext")
    served = tmp_path / "served"
    version, tags = "0.1.0+cu.13.0.torch.2.14.sm.120", f"{PY}-{PY}-linux_x86_64"
    others = make_wheel(tmp_path, "tiny-ext", version, tags=tags)
    (tmp_path / "wheelhouse").mkdir()
    provenance = json.dumps({"toolchain": {"channel": CHANNEL}}).encode()
    ours = make_wheel(tmp_path / "wheelhouse", "tiny-ext", version, tags=tags, files={
        "tiny_ext/__init__.py": b"x = 2\n",
        f"tiny_ext-{version}.dist-info/wheelsmith.json": provenance})
    assert others.name == ours.name == WHEEL

    def build(*_: object, **__: object) -> BuildResult:
        publish(others, served, channel=CHANNEL)  # the other build got there first
        return BuildResult(wheel=ours, provenance={}, up_to_date=False, log=None)

    monkeypatch.setattr(runner, "build", build)
    site = tmp_path / "site"
    monkeypatch.setenv("PIP_TARGET", str(site))  # pip installs beside the stand-in torch
    with serve(served, tmp_path / "serve.log") as server:
        result = install_cli(python, "--index", server.url, "--publish", str(served))
        read = server.requests()
    record = ledger.read(served).by_filename[WHEEL]
    assert (result.exit_code, result.stdout) == (0, f"{WHEEL}\n"), result.output
    assert [line.split("] ", 1)[1] for line in result.stderr.splitlines()[1:]] == [
        f"index: {server.url}/{CHANNEL}/simple/ has no tiny-ext wheel for Python "
        f"{sys.version_info[0]}.{sys.version_info[1]} with 12.0 kernels: building one, to "
        f"publish to {served}",
        chosen_for(python),
        f"publish: the index already has {WHEEL} (published by another build); installing "
        "its copy",
        f"installed: {WHEEL} (from the index; published by another build); imports tiny_ext"]
    assert record.sha256 == hashlib.sha256(others.read_bytes()).hexdigest()
    assert f"/files/{record.sha256[:2]}/{record.sha256}/{quote(WHEEL)}" in read  # pip's download
    assert (site / "tiny_ext" / "__init__.py").read_bytes() == b"x = 1\n"  # the index's copy
    ledger_lines = (served / "ledger.jsonl").read_text().splitlines()
    assert sum(WHEEL in line for line in ledger_lines) == 1  # ours was not published


def test_the_same_bytes_published_by_another_build_are_already_published_and_installed(
        project: Path, tmp_path: Path, python: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    add_variant(project, "tiny-ext")
    served = tmp_path / "served"
    (tmp_path / "wheelhouse").mkdir()
    provenance = json.dumps({"toolchain": {"channel": CHANNEL}}).encode()
    version = "0.1.0+cu.13.0.torch.2.14.sm.120"
    ours = make_wheel(tmp_path / "wheelhouse", "tiny-ext", version,
                      tags=f"{PY}-{PY}-linux_x86_64", files={
                          "tiny_ext/__init__.py": b"x = 2\n",
                          f"tiny_ext-{version}.dist-info/wheelsmith.json": provenance})

    def build(*_: object, **__: object) -> BuildResult:
        publish(ours, served)  # a bit-identical build got there first
        return BuildResult(wheel=ours, provenance={}, up_to_date=False, log=None)

    monkeypatch.setattr(runner, "build", build)
    monkeypatch.setenv("PIP_TARGET", str(tmp_path / "site"))
    with serve(served, tmp_path / "serve.log") as server:
        result = install_cli(python, "--index", server.url, "--publish", str(served))
    assert (result.exit_code, result.stdout) == (0, f"{WHEEL}\n"), result.output
    assert [line.split("] ", 1)[1] for line in result.stderr.splitlines()[2:]] == [
        chosen_for(python),
        f"publish: already published: {served}/{CHANNEL}/simple/tiny-ext/",
        f"install: {WHEEL} into {python}",
        f"installed: {WHEEL} (built; already published to {served}); imports tiny_ext"]
    assert (tmp_path / "site" / "tiny_ext" / "__init__.py").read_bytes() == b"x = 2\n"


def test_a_build_that_publishes_still_refuses_other_bytes_under_a_published_name(
        project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only install takes the index's copy: `wheelsmith build --publish` (deliver without
    keep_index_copy) fails as `wheelsmith publish` does, exit code 13."""
    add_variant(project, "tiny-ext")
    version = "0.1.0+cu.13.0.torch.2.14.sm.120"
    publish(make_wheel(tmp_path, "tiny-ext", version), tmp_path / "index", channel=CHANNEL)
    (tmp_path / "out").mkdir()
    ours = make_wheel(tmp_path / "out", "tiny-ext", version, files={
        "tiny_ext/__init__.py": b"x = 2\n",
        f"tiny_ext-{version}.dist-info/wheelsmith.json":
            json.dumps({"toolchain": {"channel": CHANNEL}}).encode()})
    monkeypatch.setattr(runner, "build", lambda *_, **__: BuildResult(
        wheel=ours, provenance={}, up_to_date=False, log=None))
    with pytest.raises(FileConflictError) as caught:
        deliver(BuildRequest(recipe="tiny-ext"), QuietReporter(), publish_to=tmp_path / "index")
    assert caught.value.exit_code == 13


def test_another_builds_copy_where_the_index_does_not_read_fails_saying_so(
        project: Path, tmp_path: Path, python: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    add_variant(project, "tiny-ext")
    elsewhere = tmp_path / "elsewhere"
    version, tags = "0.1.0+cu.13.0.torch.2.14.sm.120", f"{PY}-{PY}-linux_x86_64"
    others = make_wheel(tmp_path, "tiny-ext", version, tags=tags)
    (tmp_path / "wheelhouse").mkdir()
    ours = make_wheel(tmp_path / "wheelhouse", "tiny-ext", version, tags=tags, files={
        "tiny_ext/__init__.py": b"x = 2\n",
        f"tiny_ext-{version}.dist-info/wheelsmith.json":
            json.dumps({"toolchain": {"channel": CHANNEL}}).encode()})

    def build(*_: object, **__: object) -> BuildResult:
        publish(others, elsewhere, channel=CHANNEL)
        return BuildResult(wheel=ours, provenance={}, up_to_date=False, log=None)

    monkeypatch.setattr(runner, "build", build)
    with serve(tmp_path / "served", tmp_path / "serve.log") as server:
        result = install_cli(python, "--index", server.url, "--publish", str(elsewhere))
    assert result.exit_code == 4, result.output
    assert result.stderr.splitlines()[-2:] == [
        f"error: the index in {elsewhere} already has {WHEEL} (published by another build, "
        f"other bytes than this build's), but --index {server.url} does not serve it, so "
        "neither can be installed",
        "hint: pass --publish DIR, the DIR that `wheelsmith serve --index DIR` serves"]


def test_an_index_exported_to_a_plain_static_server_is_installed_from(
        project: Path, tmp_path: Path, python: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`wheelsmith index export` served by `python3 -m http.server`, which answers each page's
    index.html (PEP 503 HTML) whatever Accept asks for: install reads it, finds the wheel and
    pip installs that file, sha256 pinned, from the same server. Nothing is built."""
    add_variant(project, "tiny-ext")
    wheel = make_wheel(tmp_path, "tiny-ext", "0.1.0+cu.13.0.torch.2.14.sm.120",
                       tags=f"{PY}-{PY}-linux_x86_64")
    publish(wheel, tmp_path / "index", channel=CHANNEL)
    export(tmp_path / "index", tmp_path / "public")
    sha256 = hashlib.sha256(wheel.read_bytes()).hexdigest()

    def no_build(*_: object, **__: object) -> NoReturn:
        raise AssertionError("install built a wheel the index serves")

    monkeypatch.setattr(install, "deliver", no_build)
    monkeypatch.setenv("PIP_TARGET", str(tmp_path / "site"))  # beside the stand-in torch
    with static_server(tmp_path / "public", tmp_path / "http.log") as server:
        asked = urllib.request.Request(f"{server.url}/{CHANNEL}/simple/tiny-ext/",
                                       headers={"Accept": "application/vnd.pypi.simple.v1+json"})
        with urllib.request.urlopen(asked, timeout=30) as answer:
            assert answer.headers["Content-Type"] == "text/html"  # HTML, whatever was asked
        result = install_cli(python, "--index", server.url)
        read = server.requests()
    assert (result.exit_code, result.stdout) == (0, f"{WHEEL}\n"), result.output
    assert [line.split("] ", 1)[1] for line in result.stderr.splitlines()[1:]] == [
        f"index: {WHEEL} (sha256 {sha256[:12]}…)",
        f"installed: {WHEEL} (from the index); imports tiny_ext"]
    assert read.count(f"/{CHANNEL}/simple/tiny-ext/") == 3  # ours above, install's, pip's
    assert f"/files/{sha256[:2]}/{sha256}/{quote(WHEEL)}" in read
    assert (tmp_path / "site" / "tiny_ext" / "__init__.py").read_bytes() == b"x = 1\n"
