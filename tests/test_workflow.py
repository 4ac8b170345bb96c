"""The nightly GitHub workflow only uses commands and options that exist, and the plan's
matrix selects exactly the cells each shard builds."""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

import yaml
from click.testing import CliRunner

from tests.conftest import REPO
from tests.test_build_tiny import add_variant
from wheelsmith.cli import main
from wheelsmith.errors import UsageError

WORKFLOW = REPO / ".github" / "workflows" / "nightly.yml"


def wheelsmith_calls() -> list[list[str]]:
    jobs = yaml.safe_load(WORKFLOW.read_text())["jobs"]
    scripts = [step["run"] for job in jobs.values() for step in job["steps"] if "run" in step]
    calls = []
    for script in scripts:
        for line in script.replace("\\\n", " ").splitlines():
            match = re.search(r"\.venv/bin/wheelsmith (.+)", line)
            if match:
                words = shlex.split(re.sub(r"\$\{\{.*?\}\}", "X", match[1].split(")")[0]))
                calls.append(words)
    return calls


def test_workflow_calls_existing_commands_and_options() -> None:
    calls = wheelsmith_calls()
    assert {c[0] for c in calls} >= {"matrix", "nightly", "publish", "index"}
    runner = CliRunner()
    for words in calls:
        command = words[:2] if words[0] == "index" else words[:1]
        help_text = runner.invoke(main, [*command, "--help"]).output
        for option in (w.split("=")[0] for w in words if w.startswith("--")):
            assert option in help_text, f"`wheelsmith {' '.join(command)}` has no {option}"


def test_the_plans_matrix_selects_exactly_what_each_shard_builds(project: Path) -> None:
    """`matrix --format github` for Pythons 3.10-3.13, then each entry's `nightly --python P
    --shard S --runner docker` (as the build job runs it) on a PATH with neither a container
    engine nor other Pythons: each entry builds its cells, and nothing silently builds on the
    host: every cell fails, saying why."""
    add_variant(project, "tiny-ext")
    add_variant(project, "tiny-two")
    (project / "matrix.yaml").write_text(
        'pythons: ["3.13", "3.10", "3.11", "3.12"]\npackages:\n  - recipe: tiny-ext\n'
        "  - recipe: tiny-two\n")
    runner = CliRunner(env={"PATH": str(project / "empty-path")})
    planned = runner.invoke(main, ["matrix", "--format", "github", "--shards", "2"])
    assert planned.exit_code == 0, planned.output
    include = json.loads(planned.output)["include"]
    assert [(e["python"], e["shard"]) for e in include] == [
        (p, s) for p in ("3.10", "3.11", "3.12", "3.13") for s in ("0/2", "1/2")]
    this = f"{sys.version_info[0]}.{sys.version_info[1]}"
    for entry in include:
        report = project / f"report-{entry['python']}-{entry['shard'].replace('/', '-')}"
        result = runner.invoke(main, ["nightly", "--python", entry["python"], "--shard",
                                      entry["shard"], "--runner", "docker", "--no-publish",
                                      "--report", str(report)])
        assert result.exit_code == 17, result.output
        cells = json.loads((report / "nightly.json").read_text())["cells"]
        assert [c["id"] for c in cells] == entry["cells"]
        python = entry["python"]
        assert {c["reason"] for c in cells} == {
            f"UsageError (exit {UsageError.exit_code}): --runner docker: the docker engine does "
            "not work here: not installed (hint: use --runner host, or --runner auto to pick "
            "what works)"} if python == this else {
            f"UsageError (exit {UsageError.exit_code}): python{python} is not installed on this "
            "runner (hint: install it, or exclude the cell on this runner)"}
    unknown = runner.invoke(main, ["nightly", "--python", "3.9", "--runner", "docker"])
    assert (unknown.exit_code, unknown.output.splitlines()[0]) == (
        UsageError.exit_code, "error: --python 3.9: the matrix has no cells for that Python")
