"""Ctrl-C and SIGTERM, for real, to real commands: exit 130 and one line that says what was
done and what was not, from the record the running command keeps (cli/console.Progress),
which Main.invoke reads: publish names the wheels it published and those it did not, serve only
stopped serving, a build kept its finished objects and put nothing in --out."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.hostile import HostileServer, Reply
from tests.wheels import make_wheel
from wheelsmith.cli.console import NAMES_SHOWN, Progress
from wheelsmith.index.publish import publish as publish_wheel

INTERRUPTED = 130


def start(*args: str, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "wheelsmith", *args], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def stop(proc: subprocess.Popen[str], signum: int) -> tuple[str, str]:
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == INTERRUPTED, err
    assert "Traceback" not in err, err
    return out, err


def test_an_interrupted_publish_says_which_wheels_it_published_and_which_not(
        tmp_path: Path) -> None:
    folder = tmp_path / "wheels"
    folder.mkdir()
    wheels = [make_wheel(folder, f"w{i:03d}") for i in range(200)]
    index = tmp_path / "index"
    proc = start("publish", "--index", str(index), "--channel", "t", *map(str, wheels),
                 cwd=tmp_path)
    assert proc.stdout is not None
    seen = [proc.stdout.readline() for _ in range(3)]
    out, err = stop(proc, signal.SIGINT)
    printed = [re.match(r"published: (\S+) -> ", line)[1]  # type: ignore[index]
               for line in [*seen, *out.splitlines()]]
    line = err.splitlines()[-1]
    said = re.match(r"interrupted: published (\d+) of 200: ", line)
    assert said is not None, line
    done = int(said[1])
    assert printed == [w.name for w in wheels[:len(printed)]]
    assert len(printed) in (done, done - 1)  # the signal may come before its line is printed
    names = [w.name for w in wheels]
    in_ledger = [json.loads(entry)["filename"]
                 for entry in (index / "ledger.jsonl").read_text().splitlines()]
    rest, middle = names[done:], ""
    if f"; {names[done]} was being published" in line:  # the signal came during its publish
        rest = rest[1:]
        assert in_ledger in (names[:done], names[:done + 1])  # committed, or not at all
        middle = (f"; {names[done]} was being published (`wheelsmith index check --index "
                  f"{index}` says whether it was)")
    else:
        assert in_ledger == names[:done]
    assert line == (f"interrupted: published {done} of 200: {shown(names[:done])}{middle}; "
                    f"not published: {shown(rest)}")


def shown(names: list[str]) -> str:
    more = len(names) - NAMES_SHOWN
    return ", ".join(names[:NAMES_SHOWN]) + (f" and {more} more" if more > 0 else "")


@pytest.mark.parametrize("stage", ["reading the index", "uploading"])
def test_an_interrupted_publish_to_a_server_names_its_urls_and_what_it_was_doing(
        tmp_path: Path, stage: str) -> None:
    """Stopped while it reads the channel's index nothing was uploaded; while the upload's
    answer is awaited, the channel's page says whether it went in. The URLs are the channel's,
    not the --to template."""
    wheel = make_wheel(tmp_path, "demo-ext", "1.0.0", tags="py3-none-any")
    index = (b'{"meta": {"api-version": "1.0"}, "projects": []}', 404)

    def answer(path: str) -> Reply:
        if stage == "uploading" and "/simple/" in path:
            body, missing = index
            return Reply(200, body) if path.endswith("/simple/") else Reply(missing)
        return Reply(hang=True)

    with HostileServer(answer) as server:
        proc = start("publish", "--to", f"{server.url}/{{channel}}/", "--channel", "cu130",
                     str(wheel), cwd=tmp_path)
        deadline = time.monotonic() + 60
        awaited = "/cu130/" if stage == "uploading" else "/cu130/simple/"
        while awaited not in server.requests:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, server.requests
            time.sleep(0.1)
        _, err = stop(proc, signal.SIGINT)
    said = (f"{wheel.name} was not uploaded (its index {server.url}/cu130/simple/ was being "
            "read)") if stage == "reading the index" else (
        f"{wheel.name} was being uploaded to {server.url}/cu130/ ({server.url}/cu130/simple/"
        "demo-ext/ says whether it was)")
    assert err.splitlines()[-1] == f"interrupted: published 0 of 1; {said}"


def test_an_interrupted_serve_says_it_only_stopped_serving(tmp_path: Path) -> None:
    index = tmp_path / "index"
    wheel = make_wheel(tmp_path)
    subprocess.run([sys.executable, "-m", "wheelsmith", "publish", "--index", str(index),
                    "--channel", "t", str(wheel)], check=True, capture_output=True)
    proc = start("serve", "--index", str(index), "--port", "0", cwd=tmp_path)
    assert proc.stderr is not None
    assert proc.stderr.readline().startswith(f"serving {index} at http://127.0.0.1:")
    _, err = stop(proc, signal.SIGTERM)
    assert err.splitlines()[-1] == (f"interrupted: stopped serving {index}; serving only "
                                    "reads the index, and has no work directory")


def test_an_interrupted_build_says_nothing_reached_out_and_the_work_dir_keeps_its_objects(
        tmp_path: Path) -> None:
    """Stopped while it asks its --python environment what it is (a Python that never
    answers): before any compile, as at any point before the wheel is written."""
    sleeper = tmp_path / "python-that-sleeps"
    sleeper.write_text("#!/bin/sh\nexec sleep 317\n")
    sleeper.chmod(0o755)
    proc = start("build", "causal-conv1d", "--python", str(sleeper), "--out", "out",
                 "--work-dir", "work", cwd=tmp_path)
    deadline = time.monotonic() + 120
    while not _running(SLEEPING):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the build never asked its --python"
        time.sleep(0.2)
    _, err = stop(proc, signal.SIGINT)
    assert err.splitlines()[-1] == (
        "interrupted: nothing reached --out out; a build keeps the objects it finished in "
        "work, and the same command resumes from them")
    assert not (tmp_path / "out").exists()
    assert not _running(SLEEPING)


SLEEPING = b"sleep\x00317\x00"  # the command line of the Python that never answers


def _running(command: bytes) -> bool:
    for entry in Path("/proc").iterdir():
        try:
            if (entry / "cmdline").read_bytes() == command:
                return True
        except OSError:
            continue
    return False


# --- at any moment of start-up ---------------------------------------------------------------

# Marks, for the test, the moment the interpreter's own start is over (site's last step, just
# before `-m wheelsmith` runs): a byte on the pipe the test gave.
READY = """import os
_fd = os.environ.pop("WHEELSMITH_TEST_READY_FD", None)
if _fd is not None:
    os.write(int(_fd), b"r")
    os.close(int(_fd))
"""
HOLD_WAIT_S = 0.2  # from the interpreter's ready, at most, for wheelsmith to hold the interrupts
DELAYS = 8  # per command: the start-up's length cut in as many strata, a delay drawn in each


def _holds_interrupts(pid: int) -> bool:
    """Whether the process blocks SIGINT and SIGTERM (/proc/PID/status SigBlk)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    blocked = int(next(line.split()[1] for line in status.splitlines()
                       if line.startswith("SigBlk:")), 16)
    wanted = (1 << (signal.SIGINT - 1)) | (1 << (signal.SIGTERM - 1))
    return blocked & wanted == wanted


LAUNCHERS = {"python -m wheelsmith": [sys.executable, "-m", "wheelsmith"],
             "the console script": [str(Path(sys.executable).parent / "wheelsmith")]}


def _started(args: list[str], cwd: Path, ready_dir: Path,
             launcher: str = "python -m wheelsmith") -> subprocess.Popen[str]:
    """`wheelsmith ARGS`, returned once wheelsmith holds the interrupts (its first line), or
    HOLD_WAIT_S after the interpreter's own start: what comes before that no program catches."""
    read, write = os.pipe()
    env = dict(os.environ, PYTHONPATH=str(ready_dir), WHEELSMITH_TEST_READY_FD=str(write))
    proc = subprocess.Popen([*LAUNCHERS[launcher], *args], cwd=cwd, env=env,
                            pass_fds=(write,), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    os.close(write)
    with os.fdopen(read, "rb") as ready:
        assert ready.read(1) == b"r", proc.communicate()
    deadline = time.monotonic() + HOLD_WAIT_S
    while not _holds_interrupts(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.001)
    return proc


@pytest.fixture(scope="module")
def ready_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("ready")
    (folder / "sitecustomize.py").write_text(READY)
    return folder


@pytest.fixture(scope="module")
def start_up_s(ready_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> float:
    """How long wheelsmith takes from holding the interrupts to its command (its imports and
    its options: `--version` is answered as the options are parsed), the longest of 3."""
    lengths = []
    for _ in range(3):
        proc = _started(["--version"], tmp_path_factory.mktemp("start"), ready_dir)
        began = time.monotonic()
        proc.communicate(timeout=120)
        lengths.append(time.monotonic() - began)
    return max(lengths)


def _commands(tmp_path: Path) -> dict[str, list[str]]:
    """Commands that are at work past their start-up (serve and build until stopped), and
    their arguments."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    batch = [str(make_wheel(wheels, f"w{n:03d}")) for n in range(200)]
    checked = tmp_path / "checked"
    for wheel in batch:
        publish_wheel(Path(wheel), checked, channel="t")
    sleeper = tmp_path / "python-that-sleeps"
    sleeper.write_text("#!/bin/sh\nexec sleep 318\n")
    sleeper.chmod(0o755)
    return {"publish": ["publish", "--index", "index{n}", "--channel", "t", *batch],
            "index check": ["index", "check", "--index", str(checked)],
            "serve": ["serve", "--index", str(checked), "--port", "0"],
            "build": ["build", "causal-conv1d", "--python", str(sleeper), "--out", "out{n}",
                      "--work-dir", "work{n}"]}


FINISHED = {"publish": "published: w199-", "index check": "ok: 200 file(s)"}  # last lines


@pytest.mark.parametrize(("command", "launcher"), [
    *((command, "python -m wheelsmith") for command in ("publish", "index check", "serve",
                                                        "build")),
    ("publish", "the console script"), ("serve", "the console script")])
def test_an_interrupt_at_any_moment_of_start_up_is_one_line_and_exit_130(
        tmp_path: Path, ready_dir: Path, start_up_s: float, command: str,
        launcher: str) -> None:
    """SIGTERM and SIGINT in turn, at delays drawn across the whole start-up (the imports, the
    options, the command's first steps), from the moment wheelsmith holds the interrupts: a
    SIGTERM during the imports killed publish (-15, nothing said), a SIGINT printed the
    import's traceback."""
    args = _commands(tmp_path)[command]
    rng = random.Random(f"{command}-start-up")
    outcomes = []
    for n in range(DELAYS):
        signum = (signal.SIGTERM, signal.SIGINT)[n % 2]
        delay = start_up_s * 1.2 * (n + rng.random()) / DELAYS
        proc = _started([a.format(n=n) for a in args], tmp_path, ready_dir, launcher)
        time.sleep(delay)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=120)
        said = [line for line in err.splitlines() if line.startswith("interrupted: ")]
        outcomes.append((f"{signum.name} at {delay:.3f} s", proc.returncode, said, err))
        if proc.returncode == 0:  # its work was done, its last line printed, as it came
            assert not said, outcomes[-1]
            assert out.splitlines()[-1].startswith(FINISHED[command]), outcomes[-1]
            continue
        assert (proc.returncode, len(said)) == (INTERRUPTED, 1), outcomes[-1]
        assert "Traceback" not in err, outcomes[-1]
        assert "Aborted!" not in err, outcomes[-1]
    assert sum(rc == INTERRUPTED for _, rc, _, _ in outcomes) >= DELAYS // 2, outcomes


# an object whose constructor the signal cut short (as zipfile.ZipFile's, mid-publish) fails in
# its __del__ when it is freed: at the handler's end, by the cycle collector, or at shutdown
HALF_MADE = """
import click, sys
from wheelsmith.cli._common import Main

class HalfMade:
    def __init__(self, cycle):
        self.me = self if cycle else None
        raise KeyboardInterrupt  # the signal, inside the constructor
    def __del__(self):
        self.never_set

@click.group(cls=Main)
def main():
    pass

@main.command()
def work():
    HalfMade({cycle})

main(["work"])
"""


@pytest.mark.parametrize("cycle", [False, True], ids=["freed", "in-a-cycle"])
def test_an_interrupt_inside_a_constructor_prints_no_traceback_from_its_del(
        cycle: bool) -> None:
    run = subprocess.run([sys.executable, "-c", HALF_MADE.format(cycle=cycle)],
                         capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == INTERRUPTED, run.stderr
    assert run.stderr == f"\ninterrupted: {Progress().said()}\n"


# the signal comes as the command ends, past its own handlers: here, while the objects it left
# are collected (a build killed at its last line once printed click's "Aborted!" and exit 1)
AT_THE_END = """
import click, gc
from wheelsmith.cli._common import Main

def interrupted():
    raise KeyboardInterrupt

@click.group(cls=Main)
def main():
    pass

@main.command()
def work():
    gc.collect = interrupted

main(["work"])
"""


def test_an_interrupt_as_a_command_ends_is_still_one_line_and_exit_130() -> None:
    run = subprocess.run([sys.executable, "-c", AT_THE_END], capture_output=True, text=True,
                         timeout=60, check=False)
    assert run.returncode == INTERRUPTED, run.stderr
    assert run.stderr == f"\ninterrupted: {Progress().said()}\n"


# --- the record, over generated runs -----------------------------------------------------------

@given(names=st.lists(st.from_regex(r"[a-z]{1,6}\.whl", fullmatch=True), min_size=1,
                      max_size=30, unique=True),
       finished=st.integers(0, 30), under_way=st.booleans())
def test_the_record_says_every_item_once_as_done_under_way_or_not_begun(
        names: list[str], finished: int, under_way: bool) -> None:
    finished = min(finished, len(names) - 1)
    record = Progress()
    record.items(names, "published", "not published")
    for name in names[:finished]:
        record.begin(name)
        record.stopping = f"{name} was being published"
        record.finish()
    if under_way:
        record.begin(names[finished])
        record.stopping = f"{names[finished]} was being published"
    said = record.said()
    assert said.startswith(f"published {finished} of {len(names)}")
    parts = said.split("; ")
    assert (f"{names[finished]} was being published" in parts) == under_way
    begun = finished + under_way
    if begun < len(names):
        assert parts[-1].startswith(f"not published: {names[begun]}")
        assert parts[-1].endswith(
            f" and {len(names) - begun - NAMES_SHOWN} more" if len(names) - begun > NAMES_SHOWN
            else names[min(len(names), begun + NAMES_SHOWN) - 1])


def test_stages_move_a_builds_record_to_what_stopping_then_leaves() -> None:
    record = Progress(stopping="nothing reached --out", fresh="nothing reached --out",
                      after={"stamp": "being written", "publish": "in --out and published"})
    record.items(["cell-a", "cell-b", "cell-c"], "finished", "not started", stage="cell")
    record.note = "no report was written"
    for stage, detail in [("cell", "cell-a"), ("fetch", "x"), ("stamp", "label"),
                          ("publish", "published"), ("cell", "cell-b"), ("compile", "x")]:
        record.stage(stage, detail)
    assert record.said() == ("finished 1 of 3: cell-a; cell-b: nothing reached --out; not "
                             "started: cell-c; no report was written")
    record.stage("stamp", "label")
    assert record.said() == ("finished 1 of 3: cell-a; cell-b: being written; not started: "
                             "cell-c; no report was written")


def pure_package(project: Path, name: str) -> None:
    """A pure Python package in a `path:` source and its recipe."""
    source = project.parent / "sources" / name
    (source / name.replace("-", "_")).mkdir(parents=True)
    (source / name.replace("-", "_") / "__init__.py").write_text("")
    (source / "setup.py").write_text(
        f'from setuptools import setup\nsetup(name="{name}", version="0.1.0", '
        f'packages=["{name.replace("-", "_")}"])\n')
    (project / "recipes" / f"{name}.yaml").write_text(
        f"package: {name}\nkind: pure\nsmoke:\n  import: []\nversions:\n  - version: \"0.1.0\"\n"
        f"    source:\n      path: {source}\n")


@pytest.mark.toolchain
def test_an_interrupted_nightly_says_which_cells_finished_and_which_not(
        project: Path, toolchain: object) -> None:
    names = ["pure-a", "pure-b", "pure-c"]
    for name in names:
        pure_package(project, name)
    (project / "matrix.yaml").write_text(
        "pythons: ['3.11']\npackages:\n" + "".join(f"  - recipe: {n}\n" for n in names))
    proc = start("nightly", "--no-publish", "--out", "out", "--work-dir", "work", "--report",
                 "report", cwd=project)
    assert proc.stderr is not None
    cells = [f"{name}-0.1.0-cu130-torch2.14-pure-py3.11" for name in names]
    for line in iter(proc.stderr.readline, ""):
        if line.startswith("==> [") and f"cell: {cells[1]}" in line:
            break
    _, err = stop(proc, signal.SIGINT)
    assert err.splitlines()[-1] == (
        f"interrupted: finished 1 of 3: {cells[0]}; {cells[1]}: nothing reached --out out; a "
        f"build keeps the objects it finished in work, and the same command resumes from them; "
        f"not started: {cells[2]}; no report was written to report")
    assert [p.name for p in (project / "out").iterdir()] == [
        "pure_a-0.1.0+cu.13.0.torch.2.14.pure-py3-none-any.whl"]
    assert not (project / "report").exists()
