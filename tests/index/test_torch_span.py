"""A wheel's torch span (toolchain/torchspan.py): what a proven torch range gives its label and
torch requirement, the channels publishing lists it in, and `wheelsmith install` offering it to
an environment with another torch of the span. Publish, `wheelsmith serve`, pip and the import
are real; the environment is a stand-in torch behind a `python` script (as tests/test_install.py
has it)."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import NoReturn

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from packaging.specifiers import SpecifierSet

from tests.conftest import add_variant, serve, stand_in_torch, wheelsmith
from tests.wheels import wheel_with_provenance
from wheelsmith import install
from wheelsmith.cli import main
from wheelsmith.index import ledger
from wheelsmith.index.publish import publish
from wheelsmith.toolchain.torchspan import Span, label_span, span_channels, span_of, without_span

PY = f"cp{sys.version_info[0]}{sys.version_info[1]}"
TAGS = f"{PY}-{PY}-linux_x86_64"
RANGED = "0.1.0+cu.13.0.torch.2.14.range.2.12.2.14.sm.120"
WHEEL = f"tiny_ext-{RANGED}-{TAGS}.whl"


@given(proven=st.sets(st.integers(0, 30), max_size=12), built=st.integers(0, 30),
       patch=st.sampled_from(["", ".0", ".1+cpu", ".2+cu130"]))
def test_the_span_is_the_consecutive_proven_minors_around_the_built_one(
        proven: set[int], built: int, patch: str) -> None:
    span = span_of([f"2.{m}{patch}" for m in proven], (2, built))
    if built not in proven:
        assert span is None  # nothing is claimed around a torch it was not proven under
        return
    low, high = built, built
    while low - 1 in proven:
        low -= 1
    while high + 1 in proven:
        high += 1
    if low == high:
        assert span is None
        return
    assert span == Span((2, low), (2, high))
    admitted = {m for m in range(40) for p in ("0", "7")
                if SpecifierSet(span.requirement().removeprefix("torch")).contains(f"2.{m}.{p}")}
    assert admitted == set(range(low, high + 1))  # the requirement admits the span, no more
    label = f"cu.13.0.torch.2.{built}.{span.label()}.sm.120"
    assert label_span(label) == span
    assert without_span(label) == f"cu.13.0.torch.2.{built}.sm.120"
    assert span_channels(f"cu130-torch2.{built}", span) == [
        f"cu130-torch2.{m}" for m in range(low, high + 1) if m != built]


@pytest.mark.parametrize("label", [
    "cu.13.0.torch.2.14.sm.120", "cu.13.0.torch.2.14.range.2.14.2.12.sm.120",
    "cu.13.0.torch.2.14.range.2.12.3.1.sm.120", "cu.13.0.torch.2.14.range.2.12.sm.120",
    "cu.13.0.torch.2.14.xrange.2.12.2.14.sm.120"])
def test_a_label_that_states_no_span_claims_none(label: str) -> None:
    assert label_span(label) is None
    assert without_span(label) == label


def test_a_ranged_wheel_is_listed_in_each_channel_of_its_span(tmp_path: Path) -> None:
    wheel = wheel_with_provenance(tmp_path, "tiny-ext", RANGED, channel="cu130-torch2.14",
                                  tags=TAGS)
    said = wheelsmith("publish", str(wheel), "--index", str(tmp_path / "index"),
                      cwd=tmp_path)
    assert said.returncode == 0, said.stderr
    assert said.stdout.splitlines() == [
        f"published: {WHEEL} -> {tmp_path / 'index'}/cu130-torch2.14/simple/tiny-ext/",
        "  also listed in cu130-torch2.12, cu130-torch2.13 (its torch span)"]
    state = ledger.read(tmp_path / "index")
    assert state.channels_of(WHEEL) == ["cu130-torch2.13", "cu130-torch2.14", "cu130-torch2.12"]
    for minor in (12, 13, 14):
        page = tmp_path / "index" / f"cu130-torch2.{minor}" / "simple" / "tiny-ext" / "index.html"
        assert WHEEL in page.read_text()
    assert not (tmp_path / "index" / "cu130-torch2.15").exists()
    again = publish(wheel, tmp_path / "index")
    assert (again.status, again.also) == ("already published",
                                          ("cu130-torch2.12", "cu130-torch2.13"))


def test_a_span_channel_whose_rules_refuse_it_is_named_and_the_others_list_it(
        tmp_path: Path) -> None:
    """cu130-torch2.13 holds tiny-ext 0.1.0 for 9.0 already: one arch set per version per
    channel, so the 12.0 wheel is not listed there; it is in its own channel and in 2.12."""
    index = tmp_path / "index"
    (tmp_path / "other").mkdir()
    held = wheel_with_provenance(tmp_path / "other", "tiny-ext",
                                 "0.1.0+cu.13.0.torch.2.13.sm.90", channel="cu130-torch2.13",
                                 archs="9.0", tags=TAGS, key="h" * 64)
    publish(held, index)
    wheel = wheel_with_provenance(tmp_path, "tiny-ext", RANGED, channel="cu130-torch2.14",
                                  tags=TAGS)
    published = publish(wheel, index)
    assert (published.channel, published.also) == ("cu130-torch2.14", ("cu130-torch2.12",))
    assert published.spread() == (
        "also listed in cu130-torch2.12 (its torch span); not listed in cu130-torch2.13: "
        "channel cu130-torch2.13 already holds tiny-ext 0.1.0 for archs 9.0; this wheel is for "
        "12.0")


@pytest.fixture
def python_2_13(tmp_path: Path) -> Path:
    """This Python with a stand-in torch 2.13.1+cu130 (no GPU) first on its path."""
    return stand_in_torch(tmp_path, "2.13.1+cu130")


def test_install_offers_a_wheel_built_for_another_torch_of_its_span(
        project: Path, tmp_path: Path, python_2_13: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A wheel built with torch 2.14 whose range proved 2.12 to 2.14 is what `wheelsmith
    install` finds for an environment with torch 2.13, served over HTTP; nothing is built."""
    add_variant(project, "tiny-ext")
    wheel = wheel_with_provenance(tmp_path, "tiny-ext", RANGED, channel="cu130-torch2.14",
                                  tags=TAGS, body=b"x = 13\n")
    publish(wheel, tmp_path / "index")
    sha256 = hashlib.sha256(wheel.read_bytes()).hexdigest()

    def no_build(*_: object, **__: object) -> NoReturn:
        raise AssertionError("install built a wheel the index serves")

    monkeypatch.setattr(install, "deliver", no_build)
    monkeypatch.setenv("PIP_TARGET", str(tmp_path / "site"))  # beside the stand-in torch
    with serve(tmp_path / "index", tmp_path / "serve.log") as server:
        result = CliRunner().invoke(main, ["install", "tiny-ext", "--python", str(python_2_13),
                                           "--arch", "12.0", "--index", server.url])
        read = server.requests()
    assert (result.exit_code, result.stdout) == (0, f"{WHEEL}\n"), result.output
    assert [line.split("] ", 1)[1] for line in result.stderr.splitlines()[1:]] == [
        f"index: {WHEEL} (sha256 {sha256[:12]}…)",
        f"installed: {WHEEL} (from the index); imports tiny_ext"]
    assert "/cu130-torch2.13/simple/tiny-ext/" in read
    assert (tmp_path / "site" / "tiny_ext" / "__init__.py").read_bytes() == b"x = 13\n"
