"""Numbers on the command line (the user's own, but typed by hand and by scripts): every numeric
option of every command takes only values its use can take, through one click type
(cli/_common.Number). nan, inf, 1e300, a fraction where a count belongs, text: one line naming
the option (exit 2) before anything runs. A drain is the last part of its time limit: refused
without the limit, and when it is not shorter than the limit."""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import click
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.hostile import (
    BAD_URLS,
    Outcome,
    assert_orderly,
    cli_params,
    returned_or_raised,
    run_bounded,
)
from tests.wheels import make_wheel
from wheelsmith import numbers, untrusted
from wheelsmith.builder import resume
from wheelsmith.cli import main
from wheelsmith.cli._common import Number
from wheelsmith.errors import UsageError
from wheelsmith.index import remote
from wheelsmith.untrusted.text import clip

OPTIONS = cli_params(main, lambda p: isinstance(p.type, Number | click.types._NumberParamTypeBase))


def test_every_numeric_option_refuses_what_its_use_cannot_take() -> None:
    """Number, or a click range closed at both ends (serve's --port): never a bare int or
    float, which take nan, inf and 1e300."""
    assert len(OPTIONS) >= 10
    for path, param in OPTIONS:
        kind = param.type
        bounded = isinstance(kind, Number) or (
            isinstance(kind, click.IntRange) and kind.min is not None and kind.max is not None)
        assert bounded, f"{' '.join(path)} {param.opts[0]}: {kind!r}"


TYPES = sorted({id(p.type): p.type for _, p in OPTIONS if isinstance(p.type, Number)}.values(),
               key=lambda kind: (kind.bounds.minimum, kind.bounds.maximum, kind.bounds.integer))


@pytest.mark.parametrize("kind", TYPES, ids=[f"{k.name}-{k.bounds.minimum:g}-{k.bounds.maximum:g}"
                                             for k in TYPES])
@given(value=st.one_of(st.floats().map(repr), st.floats().map(str), st.text(max_size=12),
                       st.integers(-(10**20), 10**20).map(str),
                       st.sampled_from(["nan", "NaN", "inf", "-inf", "Infinity", "1e300",
                                        "-0", "0x10", "1_000", " 7 ", "²", "٣", "1" * 5000])))
def test_a_value_is_a_finite_number_in_range_or_one_refusal_naming_it(kind: Number,
                                                                     value: str) -> None:
    number = _converted(kind, value)
    if isinstance(number, click.BadParameter):
        assert value in number.message, number.message
        return
    assert math.isfinite(number)
    assert kind.bounds.minimum <= number <= kind.bounds.maximum
    assert isinstance(number, int) == kind.bounds.integer


def _converted(kind: Number, value: str) -> float | click.BadParameter:
    try:
        return kind.convert(value, None, None)
    except click.BadParameter as refused:
        return refused


# --- the real command line -------------------------------------------------------------------

def run(*args: str, cwd: Path) -> Outcome:
    outcome = run_bounded(*args, cwd=cwd, seconds=60)
    assert_orderly(outcome, seconds=60)
    return outcome


def last_line(outcome: Outcome) -> str:
    return outcome.stderr.splitlines()[-1]


CASES = [(path, param.opts[0], param.type.bounds.integer)
         for path, param in OPTIONS if isinstance(param.type, Number)]


@pytest.mark.parametrize(("path", "option", "integer"), CASES,
                         ids=[f"{' '.join(p)} {o}" for p, o, _ in CASES])
@pytest.mark.parametrize("value", ["nan", "1e300"])
def test_the_real_cli_refuses_each_option_in_one_line_before_running(
        tmp_path: Path, path: tuple[str, ...], option: str, integer: bool, value: str) -> None:
    outcome = run(*path, *(("causal-conv1d",) if path[0] in ("build", "install") else ()),
                  option, value, cwd=tmp_path)
    assert outcome.returncode == 2, outcome.describe()
    if integer:
        said = f"'{value}' is not a whole number"
    elif value == "nan":
        said = "'nan' is not a finite number of seconds"
    else:
        low = "0" if "drain" in option else "1"
        said = f"1e300 is not from {low} to 2592000 seconds (30 days)"
    assert last_line(outcome) == f"Error: Invalid value for '{option}': {said}"
    assert list(tmp_path.iterdir()) == []  # nothing ran: no work dir, no report


DRAINS = [("build causal-conv1d", "--time-limit", "--drain"),
          ("nightly", "--cell-time-limit", "--cell-drain")]


@pytest.mark.parametrize(("command", "limit", "drain"), DRAINS)
@given(seconds=st.integers(1, 10**6), over=st.integers(0, 10**6))
def test_a_drain_not_shorter_than_its_limit_is_refused_naming_both(
        command: str, limit: str, drain: str, seconds: int, over: int) -> None:
    """Generated pairs, through the one check both commands use (in-process: the check runs
    before anything else; the real CLI is run for it below)."""
    from wheelsmith.cli._common import check_drain  # noqa: PLC0415 - beside its subject

    with pytest.raises(click.UsageError) as refused:
        check_drain((limit, float(seconds)), (drain, float(seconds + over)))
    assert refused.value.message == (
        f"{drain} {seconds + over} is not shorter than {limit} {seconds}: the drain is the "
        "last part of the limit (0 cuts at the limit)")
    check_drain((limit, float(seconds) + 1), (drain, float(seconds)))  # shorter: taken
    check_drain((limit, None), (drain, None))


@pytest.mark.parametrize(("command", "limit", "drain"), DRAINS)
def test_the_real_cli_refuses_a_drain_without_its_limit_or_as_long_as_it(
        tmp_path: Path, command: str, limit: str, drain: str) -> None:
    alone = run(*command.split(), drain, "60", cwd=tmp_path)
    assert (alone.returncode, last_line(alone)) == (
        2, f"Error: {drain} 60 needs {limit}: a drain is the last part of a time limit")
    equal = run(*command.split(), limit, "60", drain, "60", cwd=tmp_path)
    assert (equal.returncode, last_line(equal)) == (
        2, f"Error: {drain} 60 is not shorter than {limit} 60: the drain is the last part of "
           "the limit (0 cuts at the limit)")
    assert list(tmp_path.iterdir()) == []  # nightly: refused before any cell, no report


# --- numbers in the environment: the same bounds, the variable named ------------------------

ENV_NUMBERS = [(remote.TIMEOUT_ENV, remote.TIMEOUT_BOUNDS, remote.timeout),
               (resume.KEEP_DAYS_ENV, resume.KEEP_DAYS_BOUNDS,
                lambda: numbers.from_env(resume.KEEP_DAYS_ENV, resume.KEEP_DAYS,
                                         resume.KEEP_DAYS_BOUNDS)),
               (untrusted.TOOL_TIMEOUT_ENV, untrusted.TOOL_TIMEOUT_BOUNDS,
                lambda: untrusted.tool_bounds().seconds)]


@pytest.mark.parametrize(("name", "bounds", "read"), ENV_NUMBERS,
                         ids=[name for name, _, _ in ENV_NUMBERS])
@given(value=st.one_of(st.floats().map(repr), st.text(  # what an environment can hold
    st.characters(codec="utf-8", exclude_characters="\0"), max_size=12),
    st.sampled_from(["nan", "inf", "-1", "1e300", "abc", "٣", "0", "7"])))
def test_a_number_from_the_environment_is_in_range_or_one_usage_error_naming_it(
        name: str, bounds: numbers.Bounds, read: Callable[[], float], value: str) -> None:
    """$WHEELSMITH_KEEP_PARTIAL_DAYS=abc was a traceback in every build, =nan or -1 removed
    every unfinished build; $WHEELSMITH_UPLOAD_TIMEOUT=nan was taken as 60 without a word."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv(name, value)
        got = returned_or_raised(read, UsageError)
    if isinstance(got, UsageError):
        assert got.message.startswith(f"${name}: "), got.message
        assert got.exit_code == 4
    else:
        assert value.strip() == "" or bounds.minimum <= got <= bounds.maximum


def test_publish_to_with_a_timeout_that_is_no_number_says_so_before_it_connects(
        tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "demo-ext", "1.0.0", tags="py3-none-any")
    outcome = run_bounded("publish", "--to", "http://127.0.0.1:9/{channel}/", "--channel", "c",
                          str(wheel), cwd=tmp_path, seconds=60,
                          env={**os.environ, remote.TIMEOUT_ENV: "nan"})
    assert_orderly(outcome, seconds=30)
    assert outcome.returncode == 4, outcome.describe()
    assert outcome.stderr.splitlines()[0] == (
        "error: $WHEELSMITH_UPLOAD_TIMEOUT: 'nan' is not a finite number of seconds")


# --- URLs on the command line: read as a server's are, refused as the user's ----------------

URL_OPTIONS = {  # a command with a URL option; URL stands where the generated value goes
    "install --index": ("install", "causal-conv1d", "--arch", "12.0", "--index", "URL"),
    "doctor --index": ("doctor", "--arch", "12.0", "--index", "URL"),
    "publish --to": ("publish", "--to", "URL{channel}/", "x.whl"),
    "publish --simple": ("publish", "--to", "http://127.0.0.1:9/{channel}/", "--simple",
                         "URL{channel}/", "x.whl"),
    "index export --base-url": ("index", "export", "site", "--base-url", "URL"),
    "nightly --published": ("nightly", "--published", "URL{channel}/"),
}


@pytest.mark.parametrize("case", sorted(URL_OPTIONS))
@settings(max_examples=8, deadline=None)
@given(bad=BAD_URLS)
def test_a_url_option_no_connection_can_take_is_one_usage_error_naming_it(
        case: str, bad: tuple[str, str]) -> None:
    """An unclosed [IPv6 host was a ValueError traceback from install, doctor, publish --to
    and index export; a port over 65535 was taken by export into every page it wrote."""
    url, why = bad
    args = [arg.replace("URL", url) for arg in URL_OPTIONS[case]]
    with tempfile.TemporaryDirectory() as scratch:
        outcome = run(*args, cwd=Path(scratch))
        assert list(Path(scratch).iterdir()) == []  # nothing ran
    option = case.rsplit(maxsplit=1)[-1]
    given_value = next(arg for arg in args if url in arg)
    assert outcome.returncode == 4, outcome.describe()
    assert outcome.stderr.splitlines()[0] == (
        f"error: {option}: '{clip(given_value, 200)}' is not a valid URL ({why})")
