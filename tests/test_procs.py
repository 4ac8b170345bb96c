"""Commands die with wheelsmith: a real process tree (one member in a session of its own, as
ninja puts each compiler, one that ignores SIGTERM) under `cmd.run`, and real signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.leftovers import left_after, marked, new_env, supervisors
from wheelsmith import cmd, files, locks, procs
from wheelsmith.errors import CommandError

# a tree like a build's: a process in a session of its own (ninja's compilers), one that
# ignores SIGTERM, and the command itself
TREE = "setsid sleep 600 & (trap '' TERM; sleep 601) & exec sleep 602"
HELPER = """
import signal, sys
from pathlib import Path
from wheelsmith import cmd, locks

def interrupted(*_):
    raise KeyboardInterrupt

signal.signal(signal.SIGTERM, interrupted)  # as the CLI does
try:
    with locks.hold(Path(sys.argv[1]), on_busy=print, on_takeover=print) as held:
        held.stage("compile")
        cmd.run(["sh", "-c", sys.argv[2]])
except KeyboardInterrupt:
    sys.exit(130)
"""


def start_helper(tmp_path: Path, tree: str = TREE) -> tuple[subprocess.Popen[bytes], str]:
    script = tmp_path / "helper.py"
    script.write_text(HELPER)
    mark, env = new_env()
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path / "x.lock"), tree],
                            env=env)
    deadline = time.monotonic() + 120
    while sum(" sleep" in p for p in marked(mark)) < tree.count("sleep"):
        assert proc.poll() is None, marked(mark)
        assert time.monotonic() < deadline, f"the tree did not start in 120 s: {marked(mark)}"
        time.sleep(0.05)
    return proc, mark


def test_sigkill_of_wheelsmith_ends_the_commands_whole_tree(tmp_path: Path) -> None:
    proc, mark = start_helper(tmp_path)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    assert left_after(mark, cmd.STOP_GRACE_S + 30) == []  # the tree would live 600 s


def test_sigterm_stops_the_whole_tree_before_wheelsmith_exits(tmp_path: Path) -> None:
    proc, mark = start_helper(tmp_path)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=cmd.STOP_WAIT_S + 5) == 130
    assert marked(mark) == []  # at once: wheelsmith waited for its tree
    assert not (tmp_path / "x.owner.json").exists()  # a clean end leaves no holder record


def test_a_lock_whose_holder_died_is_taken_over_after_its_leftovers_are_ended(
        tmp_path: Path) -> None:
    proc, mark = start_helper(tmp_path, "setsid sleep 600 & exec sleep 602")
    seen: list[locks.Holder | None] = []

    def refuse(holder: locks.Holder | None) -> None:
        seen.append(holder)
        raise RuntimeError("busy")

    with pytest.raises(RuntimeError, match="busy"), locks.hold(
            tmp_path / "x.lock", on_busy=refuse, on_takeover=print):
        pass
    assert seen[0] is not None
    assert (seen[0].pid, seen[0].stage) == (proc.pid, "compile")
    # wheelsmith and its supervisor die together (the OOM killer, kill -9 of both): the
    # command's tree is left running, for the next holder of the lock to end
    supervising = supervisors(mark)
    assert len(supervising) == 1
    for pid in (proc.pid, *supervising):
        os.kill(pid, signal.SIGKILL)
    proc.wait()
    assert sorted(p.split()[1] for p in left_after(mark, 1)) == ["sleep", "sleep"]
    taken: list[tuple[int, str, int]] = []
    with locks.hold(tmp_path / "x.lock", on_busy=print,
                    on_takeover=lambda h, n: taken.append((h.pid, h.stage, n))) as held:
        assert taken == [(proc.pid, "compile", 2)]
        assert marked(mark) == []
        assert locks.read_holder(tmp_path / "x.owner.json") == held.holder
    assert not (tmp_path / "x.owner.json").exists()



def test_a_command_killed_by_a_signal_is_reported_with_it() -> None:
    with pytest.raises(CommandError) as caught:
        cmd.run(["sh", "-c", "kill -9 $$"])
    assert caught.value.message == "sh -c 'kill -9 $$' failed with exit code -9"
    result = cmd.run(["sh", "-c", "echo out; echo err >&2; exit 3"], stream=False,
                     ok_returncodes=(3,))
    assert (result.stdout, result.stderr, result.returncode) == ("out\n", "err\n", 3)


def test_commands_name_their_owner_in_their_environment() -> None:
    result = cmd.run(["sh", "-c", f"echo ${procs.OWNER_ENV}"], stream=False)
    assert result.stdout.strip() == procs.own_ident()
    assert procs.alive(procs.own_ident())


def test_scratch_of_a_process_that_is_gone_is_removed_and_no_other(tmp_path: Path) -> None:
    gone = subprocess.Popen(["sleep", "60"])
    gone_ident = procs.ident(gone.pid)
    gone.kill()
    gone.wait()
    assert gone_ident is not None
    assert not procs.alive(gone_ident)
    stale = tmp_path / f".tmp-{gone_ident}-abc"
    (stale / "sub").mkdir(parents=True)
    (stale / "sub" / "half.whl").write_bytes(b"PK")
    unknown = tmp_path / ".tmp-abcdef"
    unknown.mkdir()
    with files.scratch_dir(tmp_path) as mine:
        assert files.remove_stale_scratch(tmp_path) == [stale]
        assert mine.is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".tmp-abcdef"]


def test_a_time_limit_stops_the_running_command_and_its_whole_tree() -> None:
    mark, env = new_env()
    started = time.monotonic()
    with pytest.raises(cmd.TimeLimitReached, match=r"^the time limit of 1 s ran out$"), \
            cmd.time_limit(1):
        cmd.run(["sh", "-c", TREE], env=env)
    assert time.monotonic() - started < 1 + cmd.STOP_WAIT_S
    assert left_after(mark, cmd.STOP_GRACE_S + 2) == []


def test_no_time_limit_lets_the_command_finish() -> None:
    with cmd.time_limit(None):
        assert cmd.run(["sh", "-c", "sleep 0.2; echo done"], stream=False).stdout == "done\n"


def signal_a_thread_inside_the_hold(thread: threading.Thread) -> list[int]:
    """SIGTERM sent to `thread` while the main thread is in `cmd._interrupts_held`, which then
    runs bytecode until the handler has run; what the hold recorded."""
    assert thread.ident is not None
    with cmd._interrupts_held() as held:
        signal.pthread_kill(thread.ident, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while not held and time.monotonic() < deadline:
            time.sleep(0.01)  # bytecode runs: the main thread handles the signal here
    return held


def test_an_interrupt_delivered_to_another_thread_waits_until_the_command_is_known() -> None:
    """The console's ticker thread does not block SIGTERM, so the kernel may hand the signal to
    it while the main thread is inside Popen with the interrupts blocked; the main thread then
    ran the handler at its next bytecode, inside Popen after the fork, and the supervisor
    outlived wheelsmith (a kill-anywhere run found one). Now the handler only records it there,
    and cmd raises it once the command is known."""
    def interrupted(*_: object) -> None:
        raise KeyboardInterrupt

    done = threading.Event()
    thread = threading.Thread(target=done.wait, args=(10,), daemon=True)  # a ticker
    thread.start()
    previous = signal.signal(signal.SIGTERM, interrupted)
    try:
        held = signal_a_thread_inside_the_hold(thread)  # a KeyboardInterrupt here: the bug
        assert held == [signal.SIGTERM]
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(held[0])  # as cmd does once Popen returned
    finally:
        signal.signal(signal.SIGTERM, previous)
        done.set()



RAISES = {  # how the package's code fails: raising, or in Python's own code it calls
    "RuntimeError": "raise RuntimeError(message)",
    "ModuleNotFoundError": "import no_such_module_wheelsmith_test",
    "subprocess.CalledProcessError": "subprocess.run(['false', message], check=True)",
}


@given(package=st.from_regex(r"[a-z][a-z_]{0,10}", fullmatch=True), depth=st.integers(0, 3),
       message=st.text(st.characters(codec="utf-8", exclude_categories=["Cc", "Zl", "Zp"]),
                       max_size=40),
       noise=st.text(max_size=60), kind=st.sampled_from(sorted(RAISES)), stream=st.booleans())
@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_python_that_fails_is_named_by_its_exception_and_the_code_that_raised_it(
        tmp_path_factory: pytest.TempPathFactory, package: str, depth: int, message: str,
        noise: str, kind: str, stream: bool) -> None:
    """A real traceback through a package's code, Python's own (json's decoder, subprocess)
    and a setup.py run as setuptools runs it (`<string>`), after any output: the failing
    command's message ends in the last exception and the innermost line of code that is not
    Python's own, read from its whole stderr or from the tail of its output where only that is
    kept (the traceback's head cut off). A setup.py that stopped before compiling, a wheel
    whose import failed in the smoke test, said only 'failed with exit code 1'."""
    site = tmp_path_factory.mktemp("pkgs") / "site-packages"
    (site / package).mkdir(parents=True)
    (site / package / "__init__.py").write_text(
        "import json, subprocess\n"
        "def fail(n, message):\n"
        "    if n:\n"
        "        return json.loads('{}', object_hook=lambda _: fail(n - 1, message))\n"
        f"    {RAISES[kind]}\n")
    setup = f"import {package}\n{package}.fail({depth}, {message!r})\n"
    script = f"print({noise!r})\nexec(compile({setup!r}, '<string>', 'exec'))\n"
    env = {**os.environ, "PYTHONPATH": str(site)}
    last = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, check=False).stderr.splitlines()[-1]
    with pytest.raises(CommandError) as failed:
        cmd.run([sys.executable, "-c", script], env=env, stream=stream, what="the build")
    assert failed.value.message == (
        f"the build failed with exit code 1: {package}/__init__.py:5: {' '.join(last.split())}")
