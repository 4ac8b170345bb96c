"""The shared compile cache, for real: ccache with a redis-server started on 127.0.0.1.

A second build in a fresh directory, with an empty local cache (another runner), takes its
objects from redis; a different arch or toolchain must not reuse them."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES
from wheelsmith.files import sha256_file
from wheelsmith.toolchain.env import Toolchain

pytestmark = [pytest.mark.toolchain,
              pytest.mark.skipif(shutil.which("redis-server") is None or shutil.which("ccache")
                                 is None, reason="needs Debian's redis-server and ccache "
                                 "(.ci/run installs both)")]


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                             "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True,
                         text=True, check=False).stdout.strip() != "PONG":
        assert proc.poll() is None, "redis-server exited"
        assert time.monotonic() < deadline, "redis-server did not answer PING in 120 s"
        time.sleep(0.1)
    yield f"redis://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(timeout=10)


def runner(tmp_path: Path, name: str, remote: str, *args: str) -> dict[str, Any]:
    """A build as on a fresh CI runner: its own project dir and an empty local cache. The
    cache's outcome, with the wheel's sha256 as `sha256`."""
    home = tmp_path / name
    (home / "recipes").mkdir(parents=True)
    shutil.copytree(FIXTURES.parents[1] / "toolchains", home / "toolchains")
    recipe = (FIXTURES / "tiny-ext.recipe.yaml").read_text()
    (home / "recipes" / "tiny-ext.yaml").write_text(recipe.replace("PATH", str(FIXTURES /
                                                                              "tiny-ext")))
    env = {**os.environ, "WHEELSMITH_HOME": str(home),
           "WHEELSMITH_CCACHE_DIR": str(home / "ccache")}
    result = subprocess.run([sys.executable, "-m", "wheelsmith", "build",
                             "tiny-ext", "--compile-cache", remote, "--json", *args], cwd=home,
                            env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    stats: dict[str, Any] = data["run"]["compile_cache"]
    return {**stats, "sha256": sha256_file(Path(data["wheel"]))}


def test_second_runner_reuses_objects_from_redis(tmp_path: Path, redis: str,
                                                 toolchain: Toolchain) -> None:
    first = runner(tmp_path, "runner-1", redis, "--arch", "12.0")
    assert (first["hits"], first["misses"]) == (0, 2)  # add.cpp and add_kernel.cu
    second = runner(tmp_path, "runner-2", redis, "--arch", "12.0")
    assert (second["hits"], second["remote_hits"], second["misses"]) == (2, 2, 0)
    assert second["sha256"] == first["sha256"]  # the objects from redis: the same wheel


def test_other_arch_or_toolchain_does_not_reuse_objects(tmp_path: Path, redis: str,
                                                        toolchain: Toolchain) -> None:
    runner(tmp_path, "runner-1", redis, "--arch", "12.0")
    other_arch = runner(tmp_path, "runner-2", redis, "--arch", "9.0")
    assert other_arch["misses"] >= 1  # the .cu object is per arch (the host .cpp may hit)
    assert other_arch["hits"] <= 1
    cuda_home = Path("/usr/local/cuda")
    if not (cuda_home / "bin" / "nvcc").is_file():
        pytest.skip("no installed CUDA toolkit for a second toolchain")
    other_toolchain = runner(tmp_path, "runner-3", redis, "--arch", "12.0", "--toolchain",
                             "system", "--python", str(toolchain.python))
    assert (other_toolchain["hits"], other_toolchain["misses"]) == (0, 2)


@pytest.mark.slow  # 30 s; the arch and toolchain parts of the key are checked in make test
def test_another_split_count_does_not_reuse_the_cuda_object(tmp_path: Path, redis: str,
                                                            toolchain: Toolchain) -> None:
    """ptxas writes its command line, split count included, into each cubin; the count
    reaches nvcc through NVCC_APPEND_FLAGS, which ccache does not hash by itself."""
    runner(tmp_path, "runner-1", redis, "--arch", "12.0", "--split-compile", "2")
    other_split = runner(tmp_path, "runner-2", redis, "--arch", "12.0", "--split-compile", "3")
    # add.cpp misses too: ccache hashes the flags' file for every compile
    assert (other_split["hits"], other_split["misses"]) == (0, 2)
    same_split = runner(tmp_path, "runner-3", redis, "--arch", "12.0", "--split-compile", "2")
    assert (same_split["hits"], same_split["misses"]) == (2, 0)
