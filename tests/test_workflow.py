"""The nightly GitHub workflow only uses commands and options that exist."""

from __future__ import annotations

import re
import shlex

import yaml
from click.testing import CliRunner

from tests.conftest import REPO
from wheelsmith.cli import main

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
