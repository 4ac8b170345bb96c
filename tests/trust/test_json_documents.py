"""Every JSON document from outside (index pages, ledger lines, a wheel's provenance, the
probe's answer: untrusted.parse_json) is read one way only: a key twice in one object, NaN
or Infinity (which readers take differently), or a string holding a character a terminal
obeys instead of showing (ESC, CSI, a bidi override) is one error naming the source and the
place; and a field checked against a form (a version, a channel, a sha256) is ASCII, never
`3.\\u0661\\u0661`, which `\\d` matches and int() reads."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from tests import hostile
from tests.hostile import answering_python, assert_orderly, returned_or_raised, run_bounded
from tests.trust.test_wheel_provenance import edited, stamped
from tests.wheels import make_wheel
from wheelsmith.errors import UntrustedDataError
from wheelsmith.index import ledger
from wheelsmith.index.publish import publish
from wheelsmith.toolchain.env import ProbeAnswer
from wheelsmith.untrusted import parse_json
from wheelsmith.untrusted.provenance import Provenance
from wheelsmith.untrusted.text import CONTROLS

OBEYED = ["\x1b", "\x9b", "\x07", "\r", "\x00", "\x7f", "\u202e", "\u2066", "\u2028"]


@dataclass(frozen=True)
class Doc:
    """A JSON text and what is wrong with it (empty: nothing)."""

    text: str
    wrong: frozenset[str]


def _scalar() -> st.SearchStrategy[Doc]:
    plain = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8),
                      st.floats(allow_nan=False, allow_infinity=False))
    controlled = st.tuples(st.text(max_size=4), st.sampled_from(OBEYED)).map("".join)
    return st.one_of(
        plain.map(lambda v: Doc(json.dumps(v), frozenset(
            {"control"} if isinstance(v, str) and CONTROLS.search(v) else ()))),
        controlled.map(lambda v: Doc(json.dumps(v), frozenset({"control"}))),
        st.sampled_from(["NaN", "Infinity", "-Infinity"]).map(
            lambda v: Doc(v, frozenset({"constant"}))))


def _object(pairs: list[tuple[str, Doc]]) -> Doc:
    keys = [k for k, _ in pairs]
    wrong = set().union(*(d.wrong for _, d in pairs))
    wrong |= {"twice"} if len(set(keys)) < len(keys) else set()
    wrong |= {"control"} if any(CONTROLS.search(k) for k in keys) else set()
    return Doc("{" + ",".join(f"{json.dumps(k)}:{d.text}" for k, d in pairs) + "}",
               frozenset(wrong))


def _list(items: list[Doc]) -> Doc:
    return Doc("[" + ",".join(d.text for d in items) + "]",
               frozenset().union(*(d.wrong for d in items)))


KEYS = st.sampled_from(["a", "b", "files", "\x1b[2J", "k\u202e"]) | st.text(max_size=4)
DOCS = st.recursive(_scalar(), lambda inner: st.one_of(
    st.lists(inner, max_size=4).map(_list),
    st.lists(st.tuples(KEYS, inner), max_size=4).map(_object)), max_leaves=12)


def _strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [*value, *(s for v in value.values() for s in _strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


@given(DOCS)
def test_a_document_is_read_one_way_or_refused_naming_its_source(doc: Doc) -> None:
    read = returned_or_raised(lambda: parse_json(doc.text, "SOURCE"), UntrustedDataError)
    if isinstance(read, UntrustedDataError):
        event(f"refused: {sorted(doc.wrong)}")
        assert doc.wrong, read.message
        assert read.message.startswith("SOURCE: "), read.message
        return
    assert not doc.wrong, doc.text
    assert not any(CONTROLS.search(s) for s in _strings(read.value))
    json.dumps(read.value, allow_nan=False)  # no NaN, no Infinity anywhere


def _ledger_line(tmp_path: Path, text: str) -> Path:
    root = tmp_path / "index"
    publish(make_wheel(tmp_path, "demo-ext"), root, channel="cu130-torch2.14")
    (root / ledger.LEDGER).write_text(text + "\n")
    return root


def test_index_check_names_a_ledger_line_with_a_key_twice(tmp_path: Path) -> None:
    line = json.loads(_ledger_line(tmp_path, "{}").joinpath(ledger.LEDGER).read_text() or "{}")
    root = tmp_path / "index"
    record = {"action": "publish", "channel": "cu130-torch2.14", "project": "demo-ext",
              "filename": "demo_ext-1.0.0-cp311-cp311-linux_x86_64.whl"}
    text = json.dumps({**line, **record})[:-1] + ', "filename": "other-1.0-py3-none-any.whl"}'
    (root / ledger.LEDGER).write_text(text + "\n")
    outcome = run_bounded("index", "check", "--index", str(root), cwd=tmp_path, seconds=60)
    assert_orderly(outcome, seconds=30)
    assert outcome.returncode == 14
    assert f"error: {root}/ledger.jsonl:1: holds the key 'filename' twice in one object " \
           "(readers differ on which one counts)" in outcome.stderr.splitlines()


def test_a_provenance_with_its_environment_twice_is_refused_before_anything_runs(
        tmp_path: Path) -> None:
    safe = json.dumps({"DEMO_FORCE_BUILD": "TRUE"})
    text = edited()[:-1].decode() + f', "extra_env": {safe}}}'
    wheel = stamped(tmp_path / "wheels", text.encode())
    outcome = run_bounded("verify", "--rebuild", str(wheel), "--work-dir", str(tmp_path / "w"),
                          cwd=tmp_path, seconds=60)
    assert_orderly(outcome, seconds=30)
    assert outcome.returncode == 21
    assert outcome.stderr.splitlines()[-1] == (
        f"error: the provenance of {wheel.name}: holds the key 'extra_env' twice in one object "
        "(readers differ on which one counts)")
    assert not (tmp_path / "w").exists()


def test_doctor_refuses_an_answer_that_would_command_the_terminal(tmp_path: Path) -> None:
    """A GPU name that sets the terminal's title and clears the screen was printed as it was."""
    answer = {**hostile.PROBE_ANSWER,
              "gpu": {"name": "\x1b]0;owned\x07\x1b[2J", "capability": [12, 0]}}
    python = answering_python(tmp_path / "env" / "python", answer)
    outcome = run_bounded("doctor", "--python", str(python), cwd=tmp_path, seconds=60)
    assert_orderly(outcome, seconds=30)
    assert outcome.returncode == 21
    assert "\x1b" not in outcome.stdout + outcome.stderr
    assert outcome.stderr.splitlines()[0] == (
        f"error: the probe of {python}: gpu.name: holds the control character \\x1b, which a "
        "terminal would obey rather than show")


def test_install_refuses_a_page_whose_file_name_holds_a_c1_control(tmp_path: Path) -> None:
    page = {"files": [{"filename": "causal_conv1d-1.0\u009b2J.tar.gz", "url": "x.tar.gz",
                       "hashes": {"sha256": "ab" * 32}}]}
    python = answering_python(tmp_path / "env" / "python")
    with hostile.HostileServer(hostile.serving(json.dumps(page).encode())) as server:
        outcome = run_bounded("install", "causal-conv1d", "--python", str(python), "--index",
                              server.url, "--arch", "12.0", cwd=tmp_path, seconds=60)
    assert_orderly(outcome, seconds=30)
    assert outcome.returncode == 21
    assert outcome.stderr.splitlines()[-1] == (
        f"error: {server.url}/cu130-torch2.14/simple/causal-conv1d/: files[0].filename: holds "
        "the control character \\x9b, which a terminal would obey rather than show")


OTHER_DIGITS = st.characters(categories=["Nd"]).filter(lambda c: not c.isascii())


def _with_digit(text: str, digit: str, at: int) -> str:
    places = [i for i, c in enumerate(text) if c.isdigit()]
    spot = places[at % len(places)]
    return text[:spot] + digit + text[spot + 1:]


Parse = Callable[[str], object]
FORMS: dict[str, tuple[Parse, str]] = {  # a model, a field checked by its form, a good value
    "the probe's Python": (lambda v: ProbeAnswer.parse(parse_json(json.dumps(
        {**hostile.PROBE_ANSWER, "python": v}), "P")), "3.11"),
    "the probe's torch": (lambda v: ProbeAnswer.parse(parse_json(json.dumps(
        {**hostile.PROBE_ANSWER, "torch": v}), "P")), "2.14.1"),
    "a provenance's Python": (lambda v: Provenance.parse(parse_json(edited(
        toolchain__python=v), "P")), "3.11"),
    "a provenance's channel": (lambda v: Provenance.parse(parse_json(edited(
        toolchain__channel=v), "P")), "cu130-torch2.14"),
    "a ledger line's sha256": (lambda v: ledger.parse_line(json.dumps({
        "action": "publish", "channel": "c", "project": "demo", "version": "1.0",
        "filename": "demo-1.0-py3-none-any.whl", "sha256": v, "size": 1,
        "upload_time": "2026-12-04T10:00:00.000000Z", "metadata_sha256": "0" * 64}).encode(),
        "L:1"), "0" * 64),
}


@pytest.mark.parametrize("form", sorted(FORMS))
@given(digit=OTHER_DIGITS, at=st.integers(0, 10))
def test_a_field_with_a_digit_of_another_script_is_refused(form: str, digit: str,
                                                           at: int) -> None:
    parse, good = FORMS[form]
    parse(good)  # the field as written is read
    with pytest.raises(Exception, match=r"is not ") as caught:
        parse(_with_digit(good, digit, at))
    assert type(caught.value).__name__ in ("UntrustedDataError", "IndexDriftError")


def test_a_rebuild_refuses_an_nvcc_flag_with_a_digit_of_another_script(tmp_path: Path) -> None:
    wheel = stamped(tmp_path / "wheels", edited(
        extra_env={"NVCC_APPEND_FLAGS": "--split-compile=\u0663"}))
    outcome = run_bounded("verify", "--rebuild", str(wheel), "--work-dir", str(tmp_path / "w"),
                          cwd=tmp_path, seconds=60)
    assert_orderly(outcome, seconds=30)
    assert outcome.returncode == 10
    assert [line for line in outcome.stderr.splitlines() if line.startswith("error: ")] == [(
        f'error: {wheel.name}: its provenance sets NVCC_APPEND_FLAGS="--split-compile=\\u0663", '
        'which a rebuild does not apply: "--split-compile=\\u0663" is not an nvcc flag a '
        "rebuild applies by itself")]
