"""Text from outside reaches the terminal shown, never obeyed: while a command runs, stdout and
stderr pass every write through one filter (console.InertStream) that escapes each control
character a terminal would act on (ESC and CSI sequences, a carriage return, bidi overrides);
wheelsmith's own colour passes only through its own path. Files wheelsmith writes for others
to read (nightly's Markdown and JUnit) and the commands it suggests (doctor's fixes) hold such
text as text too. Inputs are generated over all of Unicode, terminal controls weighted in."""

from __future__ import annotations

import io
import re
import shlex
import sys
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.hostile import run_bounded
from tests.index.test_platform_offers import environment
from wheelsmith.arch import parse_arch
from wheelsmith.cli.console import InertStream, inert_output, render_error
from wheelsmith.doctor.fixes import dependency_lines, fix_lines
from wheelsmith.errors import UsageError
from wheelsmith.fleet import report
from wheelsmith.fleet.matrix import Cell
from wheelsmith.fleet.nightly import CellResult
from wheelsmith.untrusted.text import CONTROLS, inert

ATTACKS = ["\x1b[2J", "\x1b]0;pwned\x07", "\x1b[8m", "\r", "\x9b31m", "\u202e", "\x00", "\x7f",
           "\ud800"]
HOSTILE = st.lists(st.one_of(st.sampled_from(ATTACKS), st.characters()), max_size=30).map(
    "".join)
SHELL = st.text(st.sampled_from(list("abc-_.;|&$()`'\" \\<>*?!#~{}[]\n")), min_size=1,
                max_size=20)


@given(HOSTILE)
def test_inert_text_holds_no_control_yet_keeps_lines_and_everything_else(text: str) -> None:
    shown = inert(text)
    assert CONTROLS.search(shown) is None
    shown.encode()  # raises on a lone surrogate: every stream can take what is left
    assert shown.count("\n") == text.count("\n")
    if CONTROLS.search(text) is None and not re.search("[\ud800-\udfff]", text):
        assert shown == text


@given(HOSTILE, st.lists(HOSTILE, max_size=3), HOSTILE)
def test_an_error_from_anyones_text_renders_with_no_control_character(
        message: str, details: list[str], hint: str) -> None:
    error = UsageError(message, hint=hint or None)
    error.details = lambda: details  # type: ignore[method-assign]
    out = io.StringIO()
    render_error(error, out)
    assert CONTROLS.search(out.getvalue()) is None
    assert out.getvalue().startswith(f"error: {inert(message)}")


def test_while_a_command_runs_every_write_is_inert_and_only_consoles_own_style_passes(
        ) -> None:
    before = sys.stderr
    with inert_output():
        during = sys.stderr
        with inert_output():  # never wrapped twice
            assert sys.stderr is during
    assert isinstance(during, InertStream)
    assert sys.stderr is before
    target = io.StringIO()
    wrapped = InertStream(target)
    wrapped.write("\x1b[31mred\x1b[0m\n")
    wrapped.styled("\x1b[1mbold\x1b[0m\n")
    assert target.getvalue() == "\\x1b[31mred\\x1b[0m\n\x1b[1mbold\x1b[0m\n"


def hostile_wheel(path: Path, name: str) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"demo-1.0{name}.dist-info/RECORD", "")
        zf.writestr("demo/__init__.py", "")
    return path


@settings(max_examples=6)  # a zip name ends at a NUL and holds UTF-8: not what a wheel carries
@given(st.lists(st.sampled_from([a for a in ATTACKS if a not in ("\x00", "\ud800")]),
                min_size=1, max_size=3
                ).map("".join))
def test_a_wheels_names_reach_the_terminal_escaped(
        tmp_path_factory: pytest.TempPathFactory, attack: str) -> None:
    """The CLI as users run it: `verify` of a wheel whose .dist-info name holds terminal
    controls names each of its problems with the controls escaped."""
    root = tmp_path_factory.mktemp("wheel")
    wheel = hostile_wheel(root / "demo-1.0-py3-none-any.whl", attack)
    outcome = run_bounded("verify", "--arch", "12.0", str(wheel), cwd=root)
    assert outcome.returncode == 10
    said = outcome.stdout + outcome.stderr
    assert CONTROLS.search(said) is None
    assert f"demo-1.0{inert(attack)}.dist-info/METADATA is missing" in said


@given(SHELL)
def test_a_suggested_command_takes_anyones_name_as_one_argument(name: str) -> None:
    """doctor's fix lines name a module from an import error, and the user's paths: each is
    one shell word, whatever it holds."""
    (line,) = dependency_lines({name: "fla"})
    assert shlex.split(line, comments=True) == ["pip", "install", name]
    word = "".join(name.split()) or "x"  # fix_lines takes names a space apart
    target = environment("x86_64", python="3.12")
    (build,) = fix_lines([word], "file:///nonexistent/simple/cu130", parse_arch("12.0"),
                         target, f"/venv {name}/bin/python")  # an empty index: a build line
    words = shlex.split(build, comments=True)
    assert words[:3] == ["wheelsmith", "build", word]
    assert words[words.index("--python") + 1] == f"/venv {name}/bin/python"


@given(HOSTILE, HOSTILE)
def test_nightly_reports_hold_anyones_reason_as_text(reason: str, wheel: str) -> None:
    cell = Cell(recipe="demo", version="1.0", toolchain="cu130-torch2.14", archs="12.0",
                python="3.11")
    results = [CellResult(cell, "failed", reason, wheel=wheel or None),
               CellResult(cell, "skipped", reason)]
    junit = report.as_junit(results)
    parsed = ET.fromstring(junit.split("?>", 1)[1])
    assert [e.get("message") for e in parsed.iter() if e.get("message") is not None] == [
        inert(reason)[:500], inert(reason)]
    markdown = report.as_markdown(results, shard=None, where="here")
    assert CONTROLS.search(markdown) is None
    rows = [line for line in markdown.splitlines() if line.startswith("| `demo")]
    assert [len([c for c in row.replace("\\|", "").split("|")]) for row in rows] == [9, 9]
