"""Nightly's verdicts come from the index's ledger, never from what a run expected: a cell is
skipped only when the ledger lists its wheel in its channel, not yanked; a wheel built but
never published is published by the next run; what publish would refuse fails the cell in its
plan, before anything is compiled, naming the rule and the matrix.yaml key to change, and it
stays failed on the next run. Everything is real but the toolchain and the compile
(conftest.py, `stand_in`): `wheelsmith nightly` runs in this process, into a real index."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from tests.conftest import add_variant
from tests.fleet.conftest import StandIn
from wheelsmith.cli import main
from wheelsmith.index import ledger
from wheelsmith.index.publish import yank

CHANNEL = "cu130-torch2.14"
NAME = "tiny_ext-0.1.0+cu.13.0.torch.2.14.sm.120-cp311-cp311-manylinux_2_34_x86_64.whl"
CELL = "tiny-ext-0.1.0-cu130-torch2.14-12.0-py3.11"


def matrix(project: Path, archs: str = "12.0") -> None:
    (project / "matrix.yaml").write_text(
        f'packages:\n  - recipe: tiny-ext\n    archs: ["{archs}"]\n')


def nightly(project: Path, *args: str) -> tuple[int, str, dict[str, Any]]:
    """Exit code, what it printed to stderr, and the report's one cell."""
    ran = CliRunner().invoke(main, ["nightly", "--report", "report", *args])
    (cell,) = json.loads((project / "report" / "nightly.json").read_text())["cells"]
    return ran.exit_code, ran.stderr, cell


def published(project: Path) -> list[tuple[str, str, str | None]]:
    return [(r.channel, r.filename, r.key)
            for r in ledger.read(project / "index").by_filename.values()]


def test_a_cell_whose_arch_set_publish_would_refuse_fails_in_its_plan_and_stays_failed(
        project: Path, stand_in: StandIn) -> None:
    add_variant(project, "tiny-ext")
    matrix(project, "12.0")
    code, _, cell = nightly(project)
    assert (code, cell["status"]) == (0, "built")
    held = published(project)

    matrix(project, "9.0;12.0")
    reason = (
        "exit 12: publish would refuse this cell's wheel (one arch set per version per "
        f"channel): channel {CHANNEL} already holds tiny-ext 0.1.0 for archs 12.0; this wheel "
        "is for 9.0;12.0 (hint: pip would pick between them by label, not by your GPU: in "
        "matrix.yaml, set packages[0].archs to '12.0' (the arch set the channel holds) or list "
        "another version in packages[0].versions)")
    for _ in range(2):  # the next run says the same: not `skipped`
        code, stderr, cell = nightly(project)
        assert (code, cell["status"], cell["reason"]) == (17, "failed", reason)
        assert stderr.endswith(f"error: 1 of 1 cell(s) failed\n  "
                               f"tiny-ext-0.1.0-cu130-torch2.14-9.0-12.0-py3.11: {reason}\n")
    assert len(stand_in.compiles) == 1  # the first run's: the refused cell compiled nothing
    assert published(project) == held


def test_a_cell_whose_wheel_name_is_published_with_other_content_fails_in_its_plan(
        project: Path, stand_in: StandIn) -> None:
    add_variant(project, "tiny-ext")
    matrix(project)
    assert nightly(project)[2]["status"] == "built"
    ((_, _, old_key),) = published(project)
    record = ledger.read(project / "index").by_filename[NAME]
    recipe = project / "recipes" / "tiny-ext.yaml"  # the build changes, the version does not
    recipe.write_text(recipe.read_text() + "build:\n  env:\n    TINY_EXT_FAST: '1'\n")

    code, _, cell = nightly(project)
    assert len(stand_in.compiles) == 1  # refused in the plan
    assert published(project) == [(CHANNEL, NAME, old_key)]
    elsewhere = nightly(project, "--index", "other", "--out", "other-out")[2]  # it takes it
    assert elsewhere["status"] == "built"
    assert old_key is not None
    assert (code, cell["status"], cell["reason"]) == (17, "failed", (
        "exit 13: publish would refuse this cell's wheel (a published file never changes): "
        f"{NAME} was published on {record.upload_time} from content key {old_key[:12]}; this "
        f"build's content key is {elsewhere['key'][:12]} (hint: a published file keeps its "
        "bytes for good: in matrix.yaml, list another version in packages[0].versions or drop "
        "the cell with an exclude entry)"))


def test_a_wheel_built_but_never_published_is_published_by_the_next_run_not_skipped(
        project: Path, stand_in: StandIn) -> None:
    add_variant(project, "tiny-ext")
    matrix(project)
    code, _, cell = nightly(project, "--no-publish", "--out", "out")
    assert (code, cell["status"], cell["wheel"], cell["published"]) == (0, "built", NAME, None)
    assert (project / "out" / NAME).is_file()
    assert published(project) == []

    code, _, cell = nightly(project, "--out", "out")
    assert (code, cell["status"], cell["reason"], cell["published"]) == (
        0, "built", "its wheel was in out (an earlier run built it), published now",
        "published")
    assert published(project) == [(CHANNEL, NAME, cell["key"])]
    assert len(stand_in.compiles) == 1  # the wheel in out was published as it was

    code, _, cell = nightly(project, "--out", "elsewhere")  # the ledger is the evidence
    assert (code, cell["status"], cell["reason"], cell["wheel"], cell["published"]) == (
        0, "skipped", f"already published: {NAME} in channel {CHANNEL} of index/ledger.jsonl",
        NAME, "already published")
    assert len(stand_in.compiles) == 1


def test_a_wheel_only_in_the_output_directory_with_no_publish_is_built_not_skipped(
        project: Path, stand_in: StandIn) -> None:
    add_variant(project, "tiny-ext")
    matrix(project)
    nightly(project, "--no-publish", "--out", "out")
    code, _, cell = nightly(project, "--no-publish", "--out", "out")
    assert (code, cell["status"], cell["reason"], cell["published"]) == (
        0, "built", "its wheel was in out (an earlier run built it), not published", None)
    assert len(stand_in.compiles) == 1


def test_a_yanked_wheel_fails_its_cell_and_an_unyanked_one_is_skipped(
        project: Path, stand_in: StandIn) -> None:
    add_variant(project, "tiny-ext")
    matrix(project)
    nightly(project)
    yank(project / "index", NAME, "wrong results on sm_120")

    code, _, cell = nightly(project)
    assert (code, cell["status"], cell["reason"]) == (17, "failed", (
        f"exit 12: {NAME}, this cell's wheel, is published in channel {CHANNEL} and yanked "
        "(wrong results on sm_120): publishing it again leaves it yanked, and its name never "
        "takes other bytes (hint: in matrix.yaml, list another version in "
        "packages[0].versions or drop the cell with an exclude entry)"))

    yank(project / "index", NAME, None)
    assert nightly(project)[2]["status"] == "skipped"
    assert len(stand_in.compiles) == 1
