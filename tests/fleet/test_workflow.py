"""The nightly GitHub workflow, never run on GitHub from here: it only uses commands and options
that exist, its actions are pinned to commits, each build shard gets its Python from
setup-python and builds in the pinned image, the plan's matrix selects exactly the cells each
shard builds, and actionlint and zizmor (the real tools, as `make lint` runs them) pass it and
do catch what they are there for."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from tests.conftest import REPO, add_variant
from wheelsmith.cli import main
from wheelsmith.errors import UsageError

WORKFLOW = REPO / ".github" / "workflows" / "nightly.yml"
GROUPS = {"index", "image", "toolchain"}  # commands with subcommands
BIN = Path(sys.executable).parent
PINNED = re.compile(r"^\s*(- )?uses: [\w.-]+/[\w.-]+(/[\w.-]+)*@[0-9a-f]{40} # v\d+\.\d+\.\d+$")


def jobs() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(WORKFLOW.read_text())["jobs"]
    return loaded


def wheelsmith_calls() -> list[list[str]]:
    scripts = [step["run"] for job in jobs().values() for step in job["steps"] if "run" in step]
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
    assert {c[0] for c in calls} >= {"matrix", "nightly", "publish", "index", "image"}
    runner = CliRunner()
    for words in calls:
        command = words[:2] if words[0] in GROUPS else words[:1]
        help_text = runner.invoke(main, [*command, "--help"]).output
        for option in (w.split("=")[0] for w in words if w.startswith("--")):
            assert option in help_text, f"`wheelsmith {' '.join(command)}` has no {option}"


def test_every_action_is_pinned_to_a_commit_with_its_release_tag() -> None:
    uses = [line for line in WORKFLOW.read_text().splitlines() if "uses:" in line]
    assert len(uses) == 10
    assert [line.strip() for line in uses if not PINNED.match(line)] == []


def test_build_shards_get_their_python_and_build_in_the_image_on_hosted_runners() -> None:
    build = jobs()["build"]
    assert build["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.matrix) }}"
    assert build["runs-on"] == "ubuntu-24.04"  # a hosted runner: third-party builds, no secret
    setup = [s for s in build["steps"] if s.get("uses", "").startswith("actions/setup-python@")]
    assert [s["with"]["python-version"] for s in setup] == ["${{ matrix.python }}"]
    nightly = [c for c in wheelsmith_calls() if c[0] == "nightly"]
    assert len(nightly) == 1
    # in the image unless a run by hand asks for the host (`runner` input; act runs use it)
    assert nightly[0][nightly[0].index("--runner") + 1] == "$RUNNER"
    step = next(s for s in build["steps"] if "wheelsmith nightly" in s.get("run", ""))
    assert step["env"]["RUNNER"] == "${{ inputs.runner || 'podman' }}"
    inputs = yaml.safe_load(WORKFLOW.read_text())[True]["workflow_dispatch"]["inputs"]
    assert (inputs["runner"]["default"], inputs["runner"]["options"]) == ("podman",
                                                                         ["podman", "host"])
    assert nightly[0][nightly[0].index("--python") + 1] == "$PYTHON_VERSION"
    image = next(c for c in wheelsmith_calls() if c[:2] == ["image", "build"])
    assert image[image.index("--engine") + 1] == "podman"
    assert {name: job["runs-on"] for name, job in jobs().items()} == {
        "plan": "ubuntu-24.04", "build": "ubuntu-24.04", "keep-partial": "ubuntu-24.04",
        "publish": "ubuntu-24.04"}


def test_only_the_publish_job_holds_secrets_and_the_plan_reads_only_the_matrix() -> None:
    """Hosted runners alone: the plan job expands the matrix and nothing else, builders read
    what is published over HTTP (no ledger snapshot) and hold no secret; the publish job alone
    sees the upload token (and the bucket's keys), and publishes with `publish --to` or into
    the static host's index and its `index export`."""
    text = {name: yaml.safe_dump(job) for name, job in jobs().items()}
    assert [name for name, job in text.items() if "secrets." in job] == ["publish"]
    assert "WHEELSMITH_INDEX_DIR" not in WORKFLOW.read_text()
    assert [c for c in wheelsmith_calls() if c[0] == "matrix"] == [
        ["matrix", "--format", "github", "--shards", "$SHARDS"]]
    assert [s.get("uses", "").split("@")[0] or s["name"] for s in jobs()["plan"]["steps"]] == [
        "actions/checkout", "Install wheelsmith", "Expand the matrix into shards, per Python "
        "version"]
    build = jobs()["build"]["steps"]
    run = next(s for s in build if "wheelsmith nightly" in s.get("run", ""))
    assert '--published "$SIMPLE_URL"' in run["run"]
    assert '--published "$SITE_URL/{channel}/simple/"' in run["run"]
    calls = [c[:2] for c in wheelsmith_calls()]
    assert ["index", "export"] in calls
    assert ["publish", "--to"] in calls


def step_named(job: str, start: str) -> dict[str, Any]:
    return next(s for s in jobs()[job]["steps"] if s.get("name", "").startswith(start))


def run_step(step: dict[str, Any], cwd: Path, **env: str) -> dict[str, str]:
    """A step's `run:` script with bash, as the runner runs it; its $GITHUB_OUTPUT lines."""
    output = cwd / "github-output"
    output.write_text("")
    subprocess.run(["bash", "-e", "-o", "pipefail", "-c", step["run"]], cwd=cwd, check=True,
                   env={"PATH": os.environ["PATH"], "GITHUB_OUTPUT": str(output), **env})
    return dict(line.split("=", 1) for line in output.read_text().splitlines())


def a_shard(root: Path, name: str, cells: list[tuple[str, str]]) -> Path:
    """A build job's workspace after nightly: the report and the partial cells' trees (as
    orchestrate names them: <recipe>-<version>-<key[:12]>), then the job's partial step."""
    (root / "report").mkdir(parents=True)
    (root / "report" / "nightly.json").write_text(json.dumps({"cells": [
        {"id": tree, "status": status, "key": f"{tree[-1]}" * 64} for tree, status in cells]}))
    for tree, status in cells:
        if status == "partial":
            objects = root / "build" / "wheelsmith" / f"{tree}-{tree[-1] * 12}" / "build"
            objects.mkdir(parents=True)
            (objects / "kernel.o").write_bytes(b"object")
            os.utime(objects / "kernel.o", (1_000_000_000, 1_000_000_000))
    found = run_step(step_named("build", "The partial cells' content keys"), root,
                     SHARD_NAME=name)
    assert found == {"found": "true"}
    return root / "partial"


def test_partial_work_is_cached_by_content_key_whatever_the_shard(tmp_path: Path) -> None:
    """A partial cell resumes in whichever shard builds it next: every builder restores the
    newest entry by a prefix that names no shard, before nightly runs; keep-partial (one job,
    no matrix) saves every shard's partial trees as one entry whose key is their content keys.
    Run for real (bash, tar, the steps' scripts): the same partial cells give the same key
    whether they were built by one shard or split over two, and the trees come back with
    the times ninja compares."""
    build = jobs()["build"]["steps"]
    uses = [s.get("uses", "").split("@")[0] for s in build]
    restore = build[uses.index("actions/cache/restore")]
    run = next(i for i, s in enumerate(build) if "wheelsmith nightly" in s.get("run", ""))
    assert uses.index("actions/cache/restore") < run
    assert "--work-dir build/wheelsmith" in build[run]["run"]
    assert "actions/cache/save" not in uses  # a builder never saves: its shard would be in it
    keep = jobs()["keep-partial"]
    assert "strategy" not in keep
    assert keep["needs"] == "build"
    save = next(s for s in keep["steps"] if s.get("uses", "").startswith("actions/cache/save@"))
    assert restore["with"]["path"] == save["with"]["path"] == "build/wheelsmith"
    prefix = restore["with"]["restore-keys"]
    assert (prefix, restore["with"]["key"]) == ("wheelsmith-partial-",
                                                "wheelsmith-partial-${{ github.run_id }}")
    assert save["with"]["key"] == prefix + "${{ steps.pool.outputs.keys }}-${{ github.run_id }}"
    upload = next(s for s in build if s.get("with", {}).get("name", "").startswith("partial-"))
    download = next(s for s in keep["steps"] if "download-artifact" in s.get("uses", ""))
    assert (download["with"]["pattern"], download["with"]["merge-multiple"]) == ("partial-*",
                                                                                 True)
    assert upload["with"]["path"] == download["with"]["path"] == "partial/"

    def kept(shards: dict[str, list[tuple[str, str]]], where: Path) -> dict[str, str]:
        job = where / "keep-partial"
        (job / "partial").mkdir(parents=True)
        for name, cells in shards.items():
            for artifact in a_shard(where / name, name, cells).iterdir():
                shutil.copy2(artifact, job / "partial" / artifact.name)
        output = run_step(step_named("keep-partial", "The partial cells' work trees"), job)
        trees = sorted(p.name for p in (job / "build" / "wheelsmith").iterdir())
        obj = job / "build" / "wheelsmith" / trees[0] / "build" / "kernel.o"
        assert obj.stat().st_mtime == 1_000_000_000
        return {"keys": output["keys"], "trees": " ".join(trees)}

    cells = [("flash-attn-a", "partial"), ("tiny-b", "built"), ("mamba-c", "partial")]
    one = kept({"shard-py3.11-0-of-1": cells}, tmp_path / "one")
    two = kept({"shard-py3.11-0-of-2": cells[:1], "shard-py3.11-1-of-2": cells[1:]},
               tmp_path / "two")
    assert one == two == {"keys": f"{'a' * 16}-{'c' * 16}",
                          "trees": f"flash-attn-a-{'a' * 12} mamba-c-{'c' * 12}"}


def test_the_static_host_on_a_hosted_runner_is_a_bucket_synced_around_the_publish(
        tmp_path: Path) -> None:
    """WHEELSMITH_SITE_BUCKET: the index comes from the bucket into the workspace, the
    publish and export run there, and the export goes back: files before the pages that list
    them, the index's ledger (its commit point) last, locks and scratch left out. The aws
    calls are recorded by a stand-in here (no bucket is reached from the tests)."""
    publish = jobs()["publish"]["steps"]
    names = [s.get("name", "") for s in publish]
    down = names.index("Bring the static host's index from the bucket")
    here = names.index("Publish to the static host (the index, then its export)")
    up = next(i for i, n in enumerate(names) if n.startswith("Deploy the export to the bucket"))
    assert down < here < up
    for i in (down, up):
        assert publish[i]["if"] == "vars.WHEELSMITH_SITE_BUCKET != ''"
        assert publish[i]["env"]["SITE_DIR"] == publish[here]["env"]["SITE_DIR"] == (
            "${{ vars.WHEELSMITH_SITE_DIR || 'site-storage' }}")
    assert publish[here]["if"] == (
        "vars.WHEELSMITH_SITE_DIR != '' || vars.WHEELSMITH_SITE_BUCKET != ''")
    recorder = tmp_path / "bin" / "aws"
    recorder.parent.mkdir()
    recorder.write_text(f'#!/bin/sh\necho "$*" >> {tmp_path / "calls"}\n')
    recorder.chmod(0o755)
    (tmp_path / "site-storage" / "site").mkdir(parents=True)
    path = f"{recorder.parent}{os.pathsep}{os.environ['PATH']}"
    for step in (publish[down], publish[up]):
        subprocess.run(["bash", "-e", "-c", step["run"]], cwd=tmp_path, check=True, env={
            "PATH": path, "SITE_DIR": "site-storage", "BUCKET": "s3://wheels/nightly"})
    ignore = "--only-show-errors --exclude *.lock --exclude .tmp/*"
    assert (tmp_path / "calls").read_text().splitlines() == [
        "s3 sync --only-show-errors s3://wheels/nightly/index site-storage/index",
        f"s3 sync {ignore} --size-only site-storage/site/files s3://wheels/nightly/site/files",
        f"s3 sync {ignore} --exclude files/* --exclude .* site-storage/site "
        "s3://wheels/nightly/site",
        f"s3 sync {ignore} --size-only site-storage/index/files s3://wheels/nightly/index/files",
        f"s3 sync {ignore} --exclude files/* --exclude ledger.jsonl site-storage/index "
        "s3://wheels/nightly/index",
        "s3 cp --only-show-errors site-storage/index/ledger.jsonl s3://wheels/nightly/index/"]


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
            f"exit {UsageError.exit_code}: --runner docker: the docker engine does "
            "not work here: not installed (hint: use --runner host, or --runner auto to pick "
            "what works)"} if python == this else {
            f"exit {UsageError.exit_code}: python{python} is not installed on this "
            "runner (hint: install it, or exclude the cell on this runner)"}
    unknown = runner.invoke(main, ["nightly", "--python", "3.9", "--runner", "docker"])
    assert (unknown.exit_code, unknown.output.splitlines()[0]) == (
        UsageError.exit_code, "error: --python 3.9: the matrix has no cells for that Python")


def plain(text: str) -> str:
    """`text` without terminal colours (zizmor colours its output when CI is set)."""
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def lint(root: Path) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    """actionlint and zizmor on the repository at `root`, exactly as `make lint` runs them."""
    makefile = (REPO / "Makefile").read_text()
    lines = [line.strip().replace("$(BIN)", str(BIN)) for line in makefile.splitlines()
             if line.startswith(("\t$(BIN)/actionlint", "\t$(BIN)/zizmor"))]
    assert len(lines) == 2
    return tuple(subprocess.run(shlex.split(line), cwd=root, capture_output=True, text=True,
                                check=False) for line in lines)  # type: ignore[return-value]


def test_actionlint_and_zizmor_pass_the_workflow_and_catch_what_they_are_for(
        tmp_path: Path) -> None:
    actionlint, zizmor = lint(REPO)
    assert actionlint.returncode == 0, actionlint.stdout
    assert (zizmor.returncode, plain(zizmor.stdout).strip()) == (
        0, "No findings to report. Good job!")

    copy = tmp_path / "repo"
    shutil.copytree(REPO / ".github", copy / ".github")
    (copy / ".git").mkdir()  # actionlint finds the project by its .git
    broken = copy / ".github" / "workflows" / "nightly.yml"
    text = broken.read_text()
    text = re.sub(r"actions/setup-python@\w+ # v[\d.]+", "actions/setup-python@v7", text)
    text = text.replace('--shard "$SHARD"', "--shard $SHARD")
    broken.write_text(text)
    actionlint, zizmor = lint(copy)
    assert actionlint.returncode == 1
    assert re.search(r"nightly\.yml:\d+:\d+: shellcheck reported issue in this script: "
                     r"SC2086:info:\d+:\d+: Double quote to prevent globbing and word "
                     r"splitting", plain(actionlint.stdout))
    assert zizmor.returncode != 0
    assert "error[unpinned-uses]: unpinned action reference" in plain(zizmor.stdout)
    assert "actions/setup-python@v7" in plain(zizmor.stdout)
