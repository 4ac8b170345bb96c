"""A cell's standing in the index, before anything is built: the index's ledger is the evidence
of what was published, and publish's own rules (index/rules.py) say what it would refuse.

`published_wheel` reads the ledger lines of the cell's project and asks those rules about the
wheel the cell's plan makes (its name up to the glibc floor of its platform tag, its content
key, its arch set, its channel):
  - its channel lists it and it is not yanked: that file (the cell is done);
  - its channel lists it yanked: refused (publishing it again leaves it yanked, and its name
    never takes other bytes), with the matrix.yaml keys that give the cell another wheel;
  - a rule refuses it: the rule's error (exit 13 a changed file, 12 another arch set), its
    message naming the rule, its hint the matrix.yaml key to change;
  - else None: the cell is to be built and published.
A wheel in the output directory is no evidence here: what was built but never published is
published by the next run (the build finds it in --out and compiles nothing).
"""

from __future__ import annotations

from pathlib import Path

from wheelsmith.builder.finish import made_by
from wheelsmith.builder.plan import BuildPlan
from wheelsmith.errors import PublishError
from wheelsmith.fleet.matrix import Cell
from wheelsmith.index import ledger, rules
from wheelsmith.index.ledger import FileRecord


def claim_of(plan: BuildPlan) -> rules.Claim:
    """The wheel `plan` makes, as publish will be asked to take it."""
    return rules.Claim(
        channel=plan.toolchain.channel(), project=ledger.normalize(plan.recipe.name),
        version=f"{plan.release.version}+{plan.local_label()}", archs=str(plan.archs),
        key=plan.key, named=lambda filename: made_by(filename, plan))


def published_wheel(cell: Cell, plan: BuildPlan, index_dir: Path) -> FileRecord | None:
    """The cell's wheel as the ledger of the index at `index_dir` holds it, published and not
    yanked; None when it is not there and publish would take it. A refusal is raised."""
    state = ledger.read(index_dir, project=ledger.normalize(plan.recipe.name))
    standing = rules.judge(state, claim_of(plan))
    if standing.refusal is not None:
        raise standing.refusal.error(
            matrix_advice(cell, standing.refusal),
            lead=f"publish would refuse this cell's wheel ({standing.refusal.rule}): ")
    if standing.held is not None and standing.yanked is not None:
        name = standing.held.filename
        raise PublishError(
            f"{name}, this cell's wheel, is published in channel {standing.held.channel} and "
            f"yanked ({standing.yanked}): publishing it again leaves it yanked, and its name "
            "never takes other bytes",
            hint=f"in matrix.yaml, list another version in {cell.key('versions')} or drop the "
                 "cell with an exclude entry")
    return standing.held


def matrix_advice(cell: Cell, refusal: rules.Refusal) -> str:
    """A refusal's hint in nightly's words: the matrix.yaml key that changes the cell's wheel."""
    if refusal.rule == rules.ONE_ARCH_SET:
        return ("pip would pick between them by label, not by your GPU: in matrix.yaml, set "
                f"{cell.key('archs')} to '{refusal.held.archs}' (the arch set the channel "
                f"holds) or list another version in {cell.key('versions')}")
    return ("a published file keeps its bytes for good: in matrix.yaml, list another version "
            f"in {cell.key('versions')} or drop the cell with an exclude entry")
