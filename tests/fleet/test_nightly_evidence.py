"""Generated sequences of nightly runs and of what happens around them (a compile that fails, a
run killed while it publishes, before or after the ledger line, the output directory removed,
another arch set or another file under a cell's name published by someone else, the recipe
changed without a new version, a yank and its undoing): after every run that wrote a report,

  - every cell the report calls `skipped` has its wheel in the index's ledger: the wheel the
    report names, in the cell's channel, with the cell's content key, not yanked (a report that
    says `skipped` for a cell whose wheel is not in the index fails this test);
  - every cell the ledger held so before the run is `skipped`, and nothing compiled it again;
  - every cell a publishing run reports `built` has its wheel in the ledger;
  - the hint of a cell that the index's rules refuse names no option nightly does not have.

Everything is real but the toolchain and the compile (conftest.py, `stand_in`)."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import add_variant
from tests.fleet.conftest import PLATFORM, StandIn
from tests.wheels import wheel_with_provenance
from wheelsmith.builder import runner
from wheelsmith.cli.nightly import nightly_command
from wheelsmith.errors import FileConflictError, PublishError
from wheelsmith.fleet import matrix, nightly, report
from wheelsmith.index import ledger
from wheelsmith.index import store as index
from wheelsmith.index.publish import publish, yank
from wheelsmith.recipes import repos

CHANNEL = "cu130-torch2.14"
MATRIX = ('packages:\n  - recipe: tiny-ext\n    archs: ["12.0"]\n'
          '  - recipe: tiny-two\n    archs: ["9.0;12.0"]\n')
OPTIONS = {o for p in nightly_command.params for o in getattr(p, "opts", [])} | {
    o for p in nightly_command.params for o in getattr(p, "secondary_opts", [])}


class Crash(BaseException):
    """The process dies here (no handler of wheelsmith's runs)."""


@dataclass
class World:
    project: Path
    root: Path  # this example's index, output, work and report directories
    builds: StandIn
    recipes: dict[str, str]  # each recipe's text as it was made
    runs: int = 0

    def settings(self, *, publish: bool = True) -> nightly.Settings:
        return nightly.Settings(out_dir=self.root / "out", work_dir=self.root / "work",
                                index_dir=self.root / "index", publish=publish)

    def cells(self) -> list[matrix.Cell]:
        return matrix.load(self.project / "matrix.yaml", repos.recipe_file,
                           default_toolchain=CHANNEL, default_python="3.11")


@pytest.fixture
def recipes(project: Path) -> dict[str, str]:
    for name in ("tiny-ext", "tiny-two"):
        add_variant(project, name)
    (project / "matrix.yaml").write_text(MATRIX)
    return {p.stem: p.read_text() for p in (project / "recipes").glob("*.yaml")}


def held_keys(world: World) -> set[tuple[str, str]]:
    """(project, content key) of every file the ledger lists in CHANNEL, not yanked."""
    state = ledger.read(world.root / "index")
    return {(name, record.key or "") for name, files in state.channels.get(CHANNEL, {}).items()
            for record in files.files.values() if record.filename not in files.yanked}


def run_nightly(world: World, *, publish: bool = True) -> None:
    """One run, its report checked against the ledger as the run left it."""
    settings = world.settings(publish=publish)
    cells = world.cells()
    before = held_keys(world)
    plans = {c.id: runner.prepare(nightly.request_for(c, settings)).plan for c in cells}
    compiled = len(world.builds.compiles)
    results = nightly.run(cells, settings)
    world.runs += 1
    where = world.root / f"report-{world.runs}"
    report.write(where, results, shard=None)
    written = json.loads((where / "nightly.json").read_text())["cells"]
    state = ledger.read(world.root / "index")
    for cell, plan in zip(written, plans.values(), strict=True):
        check_cell(cell, state, (ledger.normalize(cell["recipe"]), plan.key) in before,
                   publish=publish)
    held_before = sum((ledger.normalize(c.recipe), plans[c.id].key) in before for c in cells)
    assert len(world.builds.compiles) - compiled <= len(cells) - held_before


def check_cell(cell: dict[str, Any], state: ledger.IndexState, held: bool, *,
               publish: bool) -> None:
    project = state.channels.get(CHANNEL, {}).get(ledger.normalize(cell["recipe"]),
                                                   ledger.ProjectState())
    record = project.files.get(cell["wheel"] or "")
    if cell["status"] == "skipped":
        assert record is not None, f"skipped, and its wheel is not in the ledger: {cell}"
        assert record.filename not in project.yanked, cell
        assert record.key == cell["key"], cell
    assert (cell["status"] == "skipped") == held, cell
    if cell["status"] == "built" and publish:
        assert record is not None, cell
        assert record.key == cell["key"], cell
    if cell["reason"].startswith(("exit 12: ", "exit 13: ")):  # what the index refuses
        hint = cell["reason"].partition("(hint: ")[2]
        assert hint, cell
        assert set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", hint)) <= OPTIONS, cell


@contextlib.contextmanager
def crashing(target: object, name: str, *, before: bool) -> Iterator[None]:
    """The process dies at `target.name` (ledger.append: `before` it, leaving half the line;
    store.write_pages: after the ledger line, no page written)."""

    def dying(root: Path, *args: Any, **_kwargs: Any) -> None:
        if before:  # a writer killed mid-line leaves this
            line = ledger.check_entry(args[0], "a dying writer")
            with (root / ledger.LEDGER).open("ab") as handle:
                handle.write(line[: len(line) // 2])
        raise Crash

    with pytest.MonkeyPatch.context() as patch, contextlib.suppress(Crash):
        patch.setattr(target, name, dying)
        yield


def someone_publishes(world: World, version: str, *, archs: str,
                      tags: str = "py3-none-any") -> None:
    """A wheel of tiny-ext published by hand (another content key); refused when the index's
    rules say so."""
    wheel = wheel_with_provenance(Path(tempfile.mkdtemp(dir=world.root)), "tiny-ext", version,
                                  channel=CHANNEL, key="e" * 64, archs=archs, tags=tags)
    with contextlib.suppress(PublishError, FileConflictError):
        publish(wheel, world.root / "index")


def yank_all(world: World, reason: str | None) -> None:
    state = ledger.read(world.root / "index")
    for record in state.by_filename.values():
        yank(world.root / "index", record.filename, reason)


def toggle_recipe(world: World) -> None:
    path = world.project / "recipes" / "tiny-ext.yaml"
    original = world.recipes["tiny-ext"]
    changed = original + "build:\n  env:\n    TINY_EXT_FAST: '1'\n"
    path.write_text(original if path.read_text() == changed else changed)


def fail_compiles(world: World) -> None:
    world.builds.failing = {"tiny-ext", "tiny-two"}
    try:
        run_nightly(world)
    finally:
        world.builds.failing = set()


EVENTS: dict[str, Callable[[World], None]] = {
    "nightly": run_nightly,
    "nightly --no-publish": lambda w: run_nightly(w, publish=False),
    "compile fails": fail_compiles,
    "killed mid ledger line": lambda w: _crashed(w, ledger, "append", before=True),
    "killed after the ledger line": lambda w: _crashed(w, index, "write_pages", before=False),
    "--out removed": lambda w: shutil.rmtree(w.root / "out", ignore_errors=True),
    "another arch set published": lambda w: someone_publishes(
        w, "0.1.0+cu.13.0.torch.2.14.sm.90", archs="9.0"),
    "the cell's name published with other content": lambda w: someone_publishes(
        w, "0.1.0+cu.13.0.torch.2.14.sm.120", archs="12.0", tags=f"cp311-cp311-{PLATFORM}"),
    "recipe changed, same version": toggle_recipe,
    "yank": lambda w: yank_all(w, "withdrawn"),
    "unyank": lambda w: yank_all(w, None),
}


def _crashed(world: World, target: object, name: str, *, before: bool) -> None:
    with crashing(target, name, before=before):
        nightly.run(world.cells(), world.settings())


@given(events=st.lists(st.sampled_from(sorted(EVENTS)), max_size=7))
def test_every_skipped_cell_in_every_report_has_its_wheel_in_the_ledger(
        project: Path, recipes: dict[str, str], stand_in: StandIn, events: list[str]) -> None:
    for name, text in recipes.items():  # each example starts from the same project
        (project / "recipes" / f"{name}.yaml").write_text(text)
    stand_in.failing = set()
    with tempfile.TemporaryDirectory(dir=project) as scratch:
        world = World(project, Path(scratch), stand_in, recipes)
        for event in [*events, "nightly", "nightly"]:
            EVENTS[event](world)


def test_the_hand_published_name_is_the_one_a_cells_build_gives(
        project: Path, recipes: dict[str, str], stand_in: StandIn) -> None:
    """The generated events meet the cells where they mean to: the file published by hand
    under a cell's name has the name that cell's build gives its wheel."""
    world = World(project, project / "w", stand_in, recipes)
    world.root.mkdir()
    EVENTS["the cell's name published with other content"](world)
    EVENTS["another arch set published"](world)  # refused: one arch set per version
    run_nightly(world)
    state = ledger.read(world.root / "index")
    assert [r.filename for r in state.by_filename.values()] == [
        f"tiny_ext-0.1.0+cu.13.0.torch.2.14.sm.120-cp311-cp311-{PLATFORM}.whl",
        f"tiny_two-0.1.0+cu.13.0.torch.2.14.sm.90.120-cp311-cp311-{PLATFORM}.whl"]
    assert next(iter(state.by_filename.values())).key == "e" * 64
