"""The examined interpreter (`--python`) is not trusted: any program can sit at that path. Its
probe (toolchain/env.py: build, install, doctor) reads a bounded answer and parses it into a
typed ProbeAnswer; whatever the program does, the command ends in one line, in time."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.hostile import (
    PROBE_ANSWER,
    answering_python,
    assert_orderly,
    returned_or_raised,
    run_bounded,
    stand_in_python,
)
from wheelsmith.errors import ToolchainError, UntrustedDataError
from wheelsmith.toolchain.env import probe_python
from wheelsmith.toolchain.target import Target

GIB = 1 << 30


def hint(python: str) -> str:
    return f"hint: is {python} a Python interpreter (3.8 or newer)? give the path of one"


def test_build_with_yes_for_its_python_under_a_1_gib_cap_ends_in_one_line_in_time(
        tmp_path: Path) -> None:
    """The issue's case: `yes` answers the probe with an endless stream (23 GB resident, then
    the OOM kill, before the probe was bounded)."""
    outcome = run_bounded("build", "causal-conv1d", "--python", "/usr/bin/yes", cwd=tmp_path,
                          seconds=60, address_space=GIB)
    assert_orderly(outcome, seconds=30)
    assert outcome.returncode == 21
    assert outcome.stderr.splitlines() == [
        "error: the probe of /usr/bin/yes: printed more than 32 MiB", hint("/usr/bin/yes")]


STAND_INS = {  # a --python that misbehaves, and the line its probe ends with
    "prints forever": ("while :; do echo 'not a probe answer'; done",
                       "printed more than 32 MiB"),
    "prints one huge line": ("head -c 100000000 /dev/zero | tr '\\0' a",
                             "printed more than 32 MiB"),
    "prints the marker with bad JSON": ("echo 'WHEELSMITH-PROBE {\"python\": '",
                                        "not valid JSON (Expecting value: line 1 column 12 "
                                        "(char 11))"),
    "answers another shape": ("echo 'WHEELSMITH-PROBE {\"python\": [3, 11]}'",
                              "python: expected a string, found a list"),
    "sleeps forever": ("exec sleep 600", "printed nothing within 20 s"),
}


@pytest.mark.parametrize("name", sorted(STAND_INS))
def test_a_python_that_misbehaves_ends_the_build_in_one_line_in_time(
        tmp_path: Path, name: str) -> None:
    script, said = STAND_INS[name]
    python = stand_in_python(tmp_path / "env" / "python", script)
    outcome = run_bounded("build", "causal-conv1d", "--python", str(python), cwd=tmp_path,
                          seconds=60, address_space=GIB)
    assert_orderly(outcome, seconds=30)
    assert outcome.returncode == 21
    assert outcome.stderr.splitlines() == [f"error: the probe of {python}: {said}",
                                           hint(str(python))]


@pytest.mark.parametrize("command", [
    ("install", "causal-conv1d", "--index", "http://127.0.0.1:9/"),
    ("doctor",),
])
def test_install_and_doctor_probe_within_the_same_bounds(
        tmp_path: Path, command: tuple[str, ...]) -> None:
    outcome = run_bounded(*command, "--python", "/usr/bin/yes", cwd=tmp_path, seconds=60,
                          address_space=GIB)
    assert_orderly(outcome, seconds=30)
    assert outcome.returncode == 21
    assert outcome.stderr.splitlines()[-2:] == [
        "error: the probe of /usr/bin/yes: printed more than 32 MiB", hint("/usr/bin/yes")]


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                               max_size=3),
    max_leaves=12)
# each field of a real answer, kept or replaced by any JSON value; or no answer's shape at all
ANSWERS = st.fixed_dictionaries(
    {}, optional={key: st.just(value) | JSON for key, value in PROBE_ANSWER.items()}) | JSON


@given(ANSWERS)
def test_any_answer_is_a_typed_probe_answer_or_one_error_naming_the_probe(
        tmp_path_factory: pytest.TempPathFactory, answer: Any) -> None:
    python = answering_python(tmp_path_factory.mktemp("env") / "python", answer)
    probed = returned_or_raised(lambda: probe_python(python), UntrustedDataError)
    if isinstance(probed, UntrustedDataError):
        assert probed.message.startswith(f"the probe of {python}: ")
        return
    assert probed.raw == json.loads(json.dumps(answer))
    Target.from_probe(python, probed)  # every field it reads was checked


def test_a_program_that_is_no_interpreter_at_all_is_a_toolchain_error(tmp_path: Path) -> None:
    python = tmp_path / "python"
    python.write_bytes(b"\x7fELF garbage")
    python.chmod(0o755)
    with pytest.raises(ToolchainError, match=f"^{python} is not a Python interpreter: "):
        probe_python(python)
