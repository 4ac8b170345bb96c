"""`NAME[==VERSION]` on the command line (build, install, recipe new): one click type
(cli/_common.Spec) reads every argument that names a package; a name PEP 508 refuses or a
version PEP 440 refuses is one line and exit 4, before anything runs, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click
import pytest
from hypothesis import given
from hypothesis import strategies as st
from packaging.version import InvalidVersion, Version

from tests.conftest import REPO
from tests.hostile import cli_params
from wheelsmith.cli import main
from wheelsmith.cli._common import Spec, parse_spec
from wheelsmith.errors import UsageError
from wheelsmith.untrusted.text import CONTROLS

ARGUMENTS = cli_params(main, lambda p: isinstance(p, click.Argument) and
                       "==VERSION" in (p.metavar or ""))  # the arguments naming a package


def test_every_argument_that_names_a_package_is_read_by_the_one_spec_type() -> None:
    assert {path for path, _ in ARGUMENTS} == {("build",), ("install",), ("recipe", "new")}
    assert all(isinstance(p.type, Spec) for _, p in ARGUMENTS)


VERSIONS = st.one_of(st.text(max_size=20), st.from_regex(r"[0-9]+(\.[0-9]+){0,3}[-+._a-z0-9]*",
                                                         fullmatch=True))
NAMES = st.one_of(st.text(max_size=20), st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,15}",
                                                      fullmatch=True))


def _valid_version(text: str) -> bool:
    try:
        Version(text)
    except InvalidVersion:
        return False
    return True


def _parsed(text: str) -> tuple[str, str | None] | UsageError:
    try:
        return parse_spec(text)
    except UsageError as exc:
        return exc


@given(NAMES, st.none() | VERSIONS)
def test_a_spec_is_a_name_and_a_version_or_one_line_naming_what_is_wrong(
        name: str, version: str | None) -> None:
    text = name if version is None else f"{name}=={version}"
    outcome = _parsed(text)
    if isinstance(outcome, UsageError):
        assert "\n" not in outcome.message
        assert CONTROLS.search(outcome.message) is None
        assert outcome.exit_code == 4
        return
    parsed = outcome
    assert parsed[0]
    assert "==" not in parsed[0]
    assert parsed[1] is None or _valid_version(parsed[1])
    if version is not None and "==" not in name:
        assert parsed == (name, version)


@pytest.mark.parametrize("command", sorted({path for path, _ in ARGUMENTS}),
                         ids=" ".join)
@pytest.mark.parametrize(("spec", "said"), [
    ("causal-conv1d==0.4.7-12.0a", "error: 'causal-conv1d==0.4.7-12.0a': '0.4.7-12.0a' is not "
                                   "a version (PEP 440)"),
    ("causal-conv1d==", "error: 'causal-conv1d==': '' is not a version (PEP 440)"),
    ("causal-conv1d>=1.7", "error: 'causal-conv1d>=1.7' is not a package name (NAME or "
                           "NAME==VERSION)"),
    ("-causal", None),  # an option click does not know: its own usage error, exit 2
])
def test_a_bad_spec_on_the_command_line_is_one_line_and_exit_4(
        command: tuple[str, ...], spec: str, said: str | None, tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "wheelsmith", *command, spec,
                             *(["--python", sys.executable] if command == ("install",) else ())],
                            capture_output=True, text=True, cwd=REPO, check=False)
    assert "Traceback" not in result.stderr
    if said is None:
        assert result.returncode == 2, result.stderr
        return
    assert result.returncode == 4, result.stderr
    assert result.stderr.splitlines()[0] == said
    assert result.stderr.splitlines()[1].startswith("hint: e.g. causal-conv1d")
