"""Nightly with real builds of the tiny extension: a failing cell does not stop the others and
publishes nothing; a second run builds nothing; two shards in separate processes and
directories, published afterwards, give the same index as one process."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, add_variant
from wheelsmith.index import ledger
from wheelsmith.toolchain.env import Toolchain

pytestmark = pytest.mark.toolchain

MATRIX = """packages:
  - recipe: tiny-ext
    archs: ["12.0"]
  - recipe: tiny-two
    archs: ["9.0;12.0"]
  - recipe: broken-ext
"""


@pytest.fixture
def nightly_project(project: Path) -> Path:
    add_variant(project, "tiny-ext")
    add_variant(project, "tiny-two")
    broken = add_variant(project, "broken-ext")
    kernel = broken / "csrc" / "add_kernel.cu"
    kernel.write_text(kernel.read_text().replace("y[i] = x[i] + 1.0f;", "y[i] = x[i] +;"))
    (project / "matrix.yaml").write_text(MATRIX)
    assert (FIXTURES / "tiny-ext").is_dir()
    return project


def nightly(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wheelsmith", "nightly", *args], cwd=project,
                          capture_output=True, text=True, check=False)


def index_view(root: Path) -> set[tuple[str, str, str | None]]:
    return {(r.channel, r.filename, r.key) for r in ledger.read(root).by_filename.values()}


def test_failing_cell_does_not_stop_the_others_and_the_rerun_builds_nothing(
    nightly_project: Path, toolchain: Toolchain
) -> None:
    first = nightly(nightly_project, "--report", "r1")
    assert first.returncode == 17, first.stderr
    data = json.loads((nightly_project / "r1" / "nightly.json").read_text())
    assert data["summary"] == {"built": 2, "skipped": 0, "partial": 0, "failed": 1,
                               "total": 3}
    failed = next(c for c in data["cells"] if c["status"] == "failed")
    assert failed["recipe"] == "broken-ext"
    assert failed["reason"].startswith("exit 9: the build of broken-ext 0.1.0 "
                                       "failed with exit code 1")
    built = {c["recipe"]: c["archs_found"] for c in data["cells"] if c["status"] == "built"}
    assert built == {"tiny-ext": ["sm_120"], "tiny-two": ["sm_120", "sm_90"]}
    published = {f for _, f, _ in index_view(nightly_project / "index")}
    assert {f.rsplit("-", 1)[0] for f in published} == {
        "tiny_ext-0.1.0+cu.13.0.torch.2.14.sm.120-cp311-cp311",
        "tiny_two-0.1.0+cu.13.0.torch.2.14.sm.90.120-cp311-cp311"}
    assert all(f.rsplit("-", 1)[1].startswith("manylinux_2_") for f in published)
    junit = ET.parse(nightly_project / "r1" / "junit.xml").getroot()
    assert (junit.get("tests"), junit.get("failures")) == ("3", "1")
    assert "| `broken-ext-0.1.0-cu130-torch2.14-12.0-py3.11` | ❌ failed |" in (
        nightly_project / "r1" / "nightly.md").read_text()

    second = nightly(nightly_project, "--report", "r2")
    again = json.loads((nightly_project / "r2" / "nightly.json").read_text())["summary"]
    assert (second.returncode, again) == (17, {"built": 0, "skipped": 2, "partial": 0,
                                               "failed": 1, "total": 3})


def test_two_shards_then_one_publish_equal_a_single_run(nightly_project: Path,
                                                        toolchain: Toolchain) -> None:
    (nightly_project / "matrix.yaml").write_text(MATRIX.rsplit("  - recipe: broken-ext", 1)[0])
    shards = [subprocess.Popen(
        [sys.executable, "-m", "wheelsmith", "nightly", "--shard", f"{i}/2", "--no-publish",
         "--out", f"out-{i}", "--work-dir", f"work-{i}", "--report", f"report-{i}"],
        cwd=nightly_project, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for i in range(2)]
    outputs = [p.communicate(timeout=600) for p in shards]
    assert [p.returncode for p in shards] == [0, 0], outputs
    wheels = sorted(str(w) for i in range(2) for w in (nightly_project / f"out-{i}").glob("*"))
    assert len(wheels) == 2
    fan_in = subprocess.run([sys.executable, "-m", "wheelsmith", "publish", "--index",
                             "index-fanout", *wheels], cwd=nightly_project, capture_output=True,
                            text=True, check=False)
    assert fan_in.returncode == 0, fan_in.stderr

    single = nightly(nightly_project, "--index", "index-single", "--out", "out-single",
                     "--work-dir", "work-single", "--report", "report-single")
    assert single.returncode == 0, single.stderr
    assert index_view(nightly_project / "index-fanout") == index_view(
        nightly_project / "index-single")


def test_a_cell_out_of_time_is_partial_and_the_next_run_resumes_it(
    nightly_project: Path, toolchain: Toolchain
) -> None:
    (nightly_project / "matrix.yaml").write_text(
        'packages:\n  - recipe: tiny-ext\n    archs: ["12.0"]\n')
    first = nightly(nightly_project, "--report", "r1", "--no-publish", "--jobs", "1",
                    "--compile-cache", "off", "--cell-time-limit", "6")
    assert first.returncode == 0, first.stderr  # partial is not failed
    assert first.stdout.startswith("0 built, 0 skipped, 1 partial, 0 failed; reports: ")
    (cell,) = json.loads((nightly_project / "r1" / "nightly.json").read_text())["cells"]
    assert cell["status"] == "partial"
    assert re.fullmatch(r"partial \((\d/2 objects|stopped before compiling)\), resumes next run",
                        cell["reason"]), cell["reason"]
    junit = ET.parse(nightly_project / "r1" / "junit.xml").getroot()
    assert (junit.get("failures"), junit.get("skipped")) == ("0", "1")

    second = nightly(nightly_project, "--report", "r2", "--no-publish", "--compile-cache", "off")
    assert second.returncode == 0, second.stderr
    assert "resuming: tiny-ext 0.1.0: the patched source and build tree an unfinished build " \
           "left in" in second.stderr
    assert json.loads((nightly_project / "r2" / "nightly.json").read_text())["summary"] == {
        "built": 1, "skipped": 0, "partial": 0, "failed": 0, "total": 1}
