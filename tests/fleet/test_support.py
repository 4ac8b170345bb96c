"""The support table: nightly reports (written by report.write, as nightly writes them) and
evidence reports of the same shape rendered as recipes x profiles; the README's block rewritten
between its markers and nowhere else; the committed table is the one its reports give."""

from __future__ import annotations

import html
import json
import re
import urllib.parse
from pathlib import Path

import markdown
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import REPO
from wheelsmith.cli import main
from wheelsmith.errors import UntrustedDataError, UsageError
from wheelsmith.fleet import report, support
from wheelsmith.fleet.matrix import Cell
from wheelsmith.fleet.nightly import CellResult
from wheelsmith.recipes import knownbad
from wheelsmith.toolchain.profile import load_profiles

PROFILES = {p.name: p for p in load_profiles((REPO / "toolchains",))}
HEADER = ("| recipe | version | archs | Python | cu130-torch2.11 | cu130-torch2.14 |\n"
          "|---|---|---|---|---|---|\n")
RULES = """- package: tiny-ext
  versions: ">=0.1"
  nvcc: ">=13.0"
  archs: ["10.3"]
  action: refuse
  reason: >-
    nvcc 13.x miscompiles tiny-ext for sm_103. Build 10.0 instead.
  link: https://example.org/tiny-ext/issues/1
- package: tiny-ext
  archs: ["12.0"]
  action: warn
  reason: a warning is no refusal.
  link: https://example.org/tiny-ext/issues/2
"""


def cell(recipe: str = "tiny-ext", *, toolchain: str = "cu130-torch2.14", archs: str = "12.0",
         python: str = "3.11", platform: str = "x86_64") -> Cell:
    return Cell(recipe=recipe, version="0.1.0", toolchain=toolchain, archs=archs,
                python=python, platform=platform)


def nightly_report(directory: Path, results: list[CellResult], *, where: str | None,
                   finished: str) -> Path:
    """A nightly's reports as nightly writes them, finished at `finished`."""
    report.write(directory, results, shard=None, where=where)
    path = directory / "nightly.json"
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "finished": finished}))
    return path


def render(*paths: Path, rules: str = "[]\n") -> str:
    (paths[0].parent / "known-bad.yaml").write_text(rules)
    return support.render([support.read(p) for p in support.report_files(paths)],
                          profiles=PROFILES,
                          rules=knownbad.load(paths[0].parent / "known-bad.yaml"))


def test_reports_of_two_machines_render_recipes_by_profiles_with_date_and_where(
        tmp_path: Path) -> None:
    first = nightly_report(tmp_path / "a", [
        CellResult(cell(), "built", wheel="w.whl"),
        CellResult(cell("pure-one", archs=""), "built"),
        CellResult(cell(archs="9.0;12.0"), "skipped", "already built"),
    ], where="2-core x86-64, no GPU", finished="2026-12-02T03:04:05+00:00")
    second = nightly_report(tmp_path / "b", [
        CellResult(cell(toolchain="cu130-torch2.11", archs="9.0"), "built"),
        CellResult(cell(archs="9.0", platform="aarch64"), "partial", "partial (3/9 objects)"),
    ], where="an H200, 16 cores", finished="2026-12-01T23:00:00+00:00")
    assert render(first, second.parent) == HEADER + (
        "| pure-one | 0.1.0 | pure Python | any | not run | ✅ 2026-12-02, 2-core x86-64, no "
        "GPU |\n"
        "| tiny-ext | 0.1.0 | 9.0 | 3.11 | ✅ 2026-12-01, an H200, 16 cores | not run |\n"
        "| tiny-ext | 0.1.0 | 12.0 | 3.11 | not run | ✅ 2026-12-02, 2-core x86-64, no GPU |\n")


def test_a_failed_cell_shows_its_first_line_without_the_hint_and_the_newest_result_wins(
        tmp_path: Path) -> None:
    built = nightly_report(tmp_path / "old", [CellResult(cell(), "built")], where="box A",
                           finished="2026-11-30T10:00:00+00:00")
    failed = nightly_report(tmp_path / "new", [CellResult(
        cell(), "failed", "exit 9: the build of tiny-ext 0.1.0 failed | at add.cu:3\nthe log "
        "follows (hint: read the full log)")], where="box B",
        finished="2026-12-01T10:00:00+00:00")
    assert render(built, failed) == (
        "| recipe | version | archs | Python | cu130-torch2.14 |\n|---|---|---|---|---|\n"
        "| tiny-ext | 0.1.0 | 12.0 | 3.11 | ❌ exit 9: the build of tiny-ext 0.1.0 failed \\| "
        "at add.cu:3 (2026-12-01, box B) |\n")
    assert render(failed, built).endswith("❌ exit 9: the build of tiny-ext 0.1.0 failed \\| "
                                          "at add.cu:3 (2026-12-01, box B) |\n")


def test_reports_with_nothing_built_or_failed_give_the_header_alone(tmp_path: Path) -> None:
    path = nightly_report(tmp_path, [CellResult(cell(), "skipped", "already built")],
                          where="box", finished="2026-12-01")
    assert render(path) == "| recipe | version | archs | Python |\n|---|---|---|---|\n"


def test_a_long_reason_is_cut_to_one_line_of_160_characters() -> None:
    assert support.one_line("exit 9: " + "x" * 200) == "exit 9: " + "x" * 151 + "…"
    assert len(support.one_line("exit 9: " + "x" * 200)) == 160


def test_a_cell_a_known_bad_rule_refuses_shows_the_rule_run_or_not(tmp_path: Path) -> None:
    path = nightly_report(tmp_path / "r", [
        CellResult(cell(archs="10.3"), "failed", "exit 16: refusing to build tiny-ext 0.1.0"),
        CellResult(cell(toolchain="cu130-torch2.11", archs="10.0;10.3"), "built"),
        CellResult(cell(archs="12.0"), "built"),
    ], where="box", finished="2026-12-01")
    rule = ("⛔ known bad: nvcc 13.x miscompiles tiny-ext for sm_103. "
            "([report](https://example.org/tiny-ext/issues/1))")
    assert render(path, rules=RULES) == HEADER + (
        f"| tiny-ext | 0.1.0 | 10.0;10.3 | 3.11 | {rule} | {rule} |\n"
        f"| tiny-ext | 0.1.0 | 10.3 | 3.11 | {rule} | {rule} |\n"
        "| tiny-ext | 0.1.0 | 12.0 | 3.11 | not run | ✅ 2026-12-01, box |\n")


def test_evidence_reports_link_their_page_and_say_what_ran_on_another_cpu(
        tmp_path: Path) -> None:
    path = tmp_path / "2026-11-30-h200.json"
    path.write_text(json.dumps({"schema": 2, "finished": "2026-11-30", "where": "an H200",
                                "cells": [{**cell(platform="aarch64").as_dict(),
                                           "status": "built", "reason": "",
                                           "tested": "upstream's tests: 9 | 9 passed",
                                           "evidence": "docs/evidence/x/README.md#results"}]}))
    assert render(path) == (
        "| recipe | version | archs | Python | cu130-torch2.14 |\n|---|---|---|---|---|\n"
        "| tiny-ext | 0.1.0 | 12.0 (aarch64) | 3.11 | ✅ [2026-11-30, an H200](docs/evidence/x/"
        "README.md#results); upstream's tests: 9 \\| 9 passed |\n")


def test_a_schema_1_report_names_no_machine_and_an_unknown_schema_is_refused(
        tmp_path: Path) -> None:
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"schema": 1, "finished": "2026-11-01T00:00:00+00:00",
                               "cells": [{**cell().as_dict(), "status": "built",
                                          "reason": ""}]}))
    assert render(old).endswith("| ✅ 2026-11-01, where not recorded |\n")
    new = tmp_path / "new.json"
    new.write_text(json.dumps({"schema": 3, "finished": "2026-11-01", "cells": []}))
    with pytest.raises(UntrustedDataError) as raised:
        support.read(new)
    assert raised.value.message == (f"{new}: schema: schema 3 is not one this wheelsmith reads "
                                    "(1, 2)")


def test_a_link_that_is_not_a_page_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"schema": 2, "finished": "2026-11-01", "where": "box",
                                "cells": [{**cell().as_dict(), "status": "built", "reason": "",
                                           "evidence": "javascript:alert(1)"}]}))
    with pytest.raises(UntrustedDataError) as raised:
        support.read(path)
    assert raised.value.message == (f"{path}: cells[0].evidence: 'javascript:alert(1)' is not "
                                    "a link")


README = """# x

before
<!-- support-table:begin -->
| old | table |
<!-- support-table:end -->

after <!-- support-table:begin --> in a line is text
"""


def test_the_block_is_rewritten_between_its_markers_only_and_again_changes_nothing(
        tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(README)
    assert support.rewrite_file(readme, "| new |\n") is True
    assert readme.read_text() == README.replace("| old | table |\n", "| new |\n")
    assert support.rewrite_file(readme, "| new |\n") is False
    assert readme.read_text() == README.replace("| old | table |\n", "| new |\n")


@pytest.mark.parametrize("text", ["no markers\n", "<!-- support-table:end -->\n"
                                  "<!-- support-table:begin -->\n",
                                  README + "<!-- support-table:begin -->\n"])
def test_a_readme_without_one_block_is_refused_and_left_alone(text: str) -> None:
    with pytest.raises(UsageError) as raised:
        support.rewrite(text, "| new |\n", source="README.md")
    assert raised.value.message == ("README.md: not one <!-- support-table:begin --> line "
                                    "followed by one <!-- support-table:end --> line")


def test_the_command_prints_the_table_or_rewrites_the_readme(tmp_path: Path) -> None:
    path = nightly_report(tmp_path / "r", [CellResult(cell(), "built")], where="box",
                          finished="2026-12-01T00:00:00+00:00")
    printed = CliRunner().invoke(main, ["support-table", str(path.parent)])
    assert (printed.exit_code, printed.output) == (0, support.render_files([path]))
    readme = tmp_path / "README.md"
    readme.write_text(README)
    for message in ("the support table rewritten", "the support table was already this"):
        done = CliRunner().invoke(main, ["support-table", str(path), "--readme", str(readme)])
        assert (done.exit_code, done.output) == (0, f"{readme}: {message}\n")
    missing = CliRunner().invoke(main, ["support-table", str(tmp_path / "none")])
    assert missing.exit_code == UsageError.exit_code, missing.output


def test_nightly_names_this_machine_when_where_is_not_given(tmp_path: Path) -> None:
    path = nightly_report(tmp_path, [], where=None, finished="2026-12-01")
    assert json.loads(path.read_text())["where"] == report.this_machine()
    assert report.this_machine().split("-core ")[0].isdigit()


def test_the_readme_table_is_the_one_its_reports_give() -> None:
    text = (REPO / "README.md").read_text()
    table = support.render_files([REPO / "docs" / "evidence" / "reports"])
    assert support.rewrite(text, table, source="README.md") == text, "run make support-table"


ANY_TEXT = st.text(st.characters(blacklist_categories=["Cc", "Cs"]), min_size=1, max_size=40)
LINK = st.text(st.characters(min_codepoint=33, max_codepoint=126, blacklist_characters="()<>[]"),
               min_size=1, max_size=30).map(lambda tail: f"https://x.example/{tail}")
ESCAPED_OR_PIPE = re.compile(r"\\.|\|")


def cells_of(line: str) -> list[str]:
    """A table row's cells as GFM splits them: at each `|` no backslash escapes."""
    cells, start = [], 0
    for token in ESCAPED_OR_PIPE.finditer(line):
        if token[0] == "|":
            cells.append(line[start:token.start()])
            start = token.end()
    return [*cells, line[start:]][1:-1]


@given(where=ANY_TEXT, tested=ANY_TEXT, reason=ANY_TEXT, rule_reason=ANY_TEXT,
       evidence=LINK, rule_link=LINK)
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_text_or_link_in_a_report_stays_in_its_cell_and_makes_no_markup(
        tmp_path_factory: pytest.TempPathFactory, where: str, tested: str, reason: str,
        rule_reason: str, evidence: str, rule_link: str) -> None:
    """A report is anyone's: whatever its texts and links hold, each row keeps its cells
    (in GFM's reading and in the docs site's), no tag or link appears that the table did not
    make, and each link is the one the report gave."""
    directory = tmp_path_factory.mktemp("reports")
    path = directory / "r.json"
    path.write_text(json.dumps({"schema": 2, "finished": "2026-11-01", "where": where, "cells": [
        {**cell().as_dict(), "status": "built", "reason": "", "tested": tested,
         "evidence": evidence},
        {**cell("other-ext").as_dict(), "status": "failed", "reason": reason}]}))
    rules = (f"- package: tiny-ext\n  archs: ['10.3']\n  action: refuse\n"
             f"  reason: {json.dumps(rule_reason, ensure_ascii=False)}\n"
             f"  link: {json.dumps(rule_link, ensure_ascii=False)}\n")
    (directory / "tiny.json").write_text(json.dumps({"schema": 2, "finished": "2026-11-01",
                                                     "where": "box", "cells": [
        {**cell(archs="10.3").as_dict(), "status": "built", "reason": ""}]}))
    table = render(path, directory / "tiny.json", rules=rules)
    lines = table.splitlines()
    assert {len(cells_of(line)) for line in lines} == {len(cells_of(lines[0]))}, table
    page = markdown.markdown(table, extensions=["tables"])
    rows = re.findall(r"<tr>(.*?)</tr>", page, flags=re.S)
    assert [row.count("<td") for row in rows[1:]] == [len(cells_of(lines[0]))] * 3, page
    tags = set(re.findall(r"</?([a-zA-Z][a-zA-Z0-9]*)", page))
    assert tags <= {"table", "thead", "tbody", "tr", "th", "td", "a", "code", "em", "strong"}, \
        page
    assert sorted(urllib.parse.unquote(html.unescape(href)) for href in
                  re.findall(r'<a href="([^"]*)"', page)) == \
        sorted(urllib.parse.unquote(link) for link in (evidence, rule_link)), page
