"""The shared caches under concurrency and kills, for real: two processes downloading the same
sdist at once, a download killed half-way, two processes creating the same tools venv at once
(a real pip install of the profile's small pinned tools from the package index), and a venv
creation killed half-way. Each ends in one good copy."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import DEFAULT_PROFILE, SlowServer
from tests.leftovers import left_after, marked, new_env
from wheelsmith import cmd
from wheelsmith.recipes.fetch import cached_path, download
from wheelsmith.recipes.sources import UrlSource
from wheelsmith.toolchain.venv import MARKER

DATA = os.urandom(3 << 20)
SHA = hashlib.sha256(DATA).hexdigest()
DOWNLOAD = """
import sys
from pathlib import Path
from wheelsmith.recipes.fetch import download
from wheelsmith.recipes.sources import UrlSource
print(download(UrlSource(url=sys.argv[1], sha256=sys.argv[2]), Path(sys.argv[3])))
"""
TOOLS = """
import logging, sys
from pathlib import Path
from wheelsmith.toolchain.profile import load_profile
from wheelsmith.toolchain.tools import ensure_tools
logging.basicConfig(level=logging.INFO, format="%(message)s")
tools = ensure_tools(load_profile(Path(sys.argv[1])), Path(sys.executable), Path(sys.argv[2]))
print(tools.cuobjdump)
"""


@pytest.fixture
def slow_server() -> Iterator[SlowServer]:
    with SlowServer(DATA, "demo-1.0.tar.gz", delay=0.02) as server:  # about a second
        yield server


def start(script: str, *args: str) -> tuple[subprocess.Popen[str], str]:
    mark, env = new_env()
    return subprocess.Popen([sys.executable, "-c", script, *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE), mark


def cache_files(cache: Path) -> list[str]:
    return sorted(p.name for p in cached_path(cache, SHA).parent.iterdir())


def test_two_downloads_of_the_same_sdist_at_once_fetch_it_once(slow_server: SlowServer,
                                                               tmp_path: Path) -> None:
    procs = [start(DOWNLOAD, slow_server.url, SHA, str(tmp_path))[0] for _ in range(2)]
    outputs = [proc.communicate(timeout=60) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    target = cached_path(tmp_path, SHA)
    assert [out for out, _ in outputs] == [f"{target}\n"] * 2
    assert slow_server.requests == 1  # the second waited for the first, then used its file
    assert target.read_bytes() == DATA
    assert cache_files(tmp_path) == [SHA, f"{SHA}.lock", f"{SHA}.name"]


def test_a_killed_download_is_redone_into_one_good_copy(slow_server: SlowServer,
                                                        tmp_path: Path) -> None:
    proc, _ = start(DOWNLOAD, slow_server.url, SHA, str(tmp_path))
    directory = cached_path(tmp_path, SHA).parent
    deadline = time.monotonic() + 30
    while not [p for p in directory.glob(".tmp-*") if p.stat().st_size > 0]:
        assert time.monotonic() < deadline, proc.stderr
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    assert len(list(directory.glob(f".tmp-*.{SHA}.part"))) == 1  # the half-written file
    target = download(UrlSource(url=slow_server.url, sha256=SHA), tmp_path)
    assert target.read_bytes() == DATA
    assert cache_files(tmp_path) == [SHA, f"{SHA}.lock", f"{SHA}.name"]


def tools_venv(cache: Path) -> Path:
    (root,) = (p for p in (cache / "tools").iterdir() if p.is_dir())
    return root


def assert_good_tools_venv(root: Path) -> None:
    assert (root / MARKER).is_file()
    cmd.run([root / "bin" / "python", "-m", "pip", "check"], stream=False)
    version = cmd.run([next(root.glob("**/bin/cuobjdump")), "--version"], stream=False)
    assert "cuobjdump" in version.stdout


@pytest.mark.toolchain
def test_two_tools_venvs_created_at_once_end_in_one_good_copy(tmp_path: Path) -> None:
    procs = [start(TOOLS, str(DEFAULT_PROFILE), str(tmp_path))[0] for _ in range(2)]
    outputs = [proc.communicate(timeout=600) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    assert outputs[0][0] == outputs[1][0]
    installs = [line for _, err in outputs for line in err.splitlines()
                if line.startswith("installing ")]
    assert len(installs) == 1, outputs  # one created it, the other waited and used it
    assert_good_tools_venv(tools_venv(tmp_path))


@pytest.mark.toolchain
def test_a_killed_tools_venv_creation_is_redone_into_one_good_copy(tmp_path: Path) -> None:
    proc, mark = start(TOOLS, str(DEFAULT_PROFILE), str(tmp_path))
    deadline = time.monotonic() + 300
    while not (tmp_path / "tools").is_dir() or not any(
            (p / "lib").is_dir() for p in (tmp_path / "tools").iterdir()):
        assert time.monotonic() < deadline, proc.stderr
        time.sleep(0.05)
    time.sleep(1.0)  # into the pip install
    assert marked(mark), "nothing was running to kill"
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    assert left_after(mark, cmd.STOP_GRACE_S + 2) == []  # pip does not write on regardless
    assert not (tools_venv(tmp_path) / MARKER).exists()
    again, _ = start(TOOLS, str(DEFAULT_PROFILE), str(tmp_path))
    out, err = again.communicate(timeout=600)
    assert again.returncode == 0, err
    assert_good_tools_venv(tools_venv(tmp_path))
    assert Path(out.strip()).is_file()
