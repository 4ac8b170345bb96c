"""Watching a real build's ninja from outside: when its first object is finished, what its
log holds, how many steps its last ninja run had."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.leftovers import left_after
from wheelsmith.builder.pathview import ROOT, PathView

# causal-conv1d's first object takes minutes on 2 idle cores, several times that beside a load
FIRST_OBJECT_WITHIN_S = 3600


def kill_after_first_object(args: Sequence[str], cwd: Path, env: Mapping[str, str], mark: str,
                            work: Path) -> Path:
    """Start the build `args`, SIGKILL it once ninja logs its first finished object, check that
    nothing it started lives on; the build's .ninja_log."""
    first = subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    log = wait_for_first_object(work, first)
    first.send_signal(signal.SIGKILL)
    first.communicate()
    assert left_after(mark, 10) == []
    return log


def wait_for_first_object(work: Path, proc: subprocess.Popen[str]) -> Path:
    """The build's .ninja_log once it records a finished object."""
    deadline = time.monotonic() + FIRST_OBJECT_WITHIN_S
    while time.monotonic() < deadline and proc.poll() is None:
        for log in work.glob("*/src/*/build/temp*/.ninja_log"):
            if log_entries(log):
                return log
        time.sleep(0.05)
    ended = proc.poll() is not None
    proc.kill()
    _, stderr = proc.communicate()
    when = "before the build ended" if ended else f"in {FIRST_OBJECT_WITHIN_S} s"
    raise AssertionError(f"no object finished {when}:\n{stderr}")


def log_entries(log: Path) -> dict[str, str]:
    """Output path -> its .ninja_log line (`start end mtime output hash`)."""
    entries = {}
    for line in log.read_text().splitlines()[1:]:
        fields = line.split("\t")
        if len(fields) == 5:
            entries[fields[3]] = line
    return entries


def ninja_steps(build_log: Path) -> int:
    """How many steps the last ninja run in a wheelsmith build.log had (`[k/N]` lines)."""
    steps = re.findall(r"^\s*\[\d+/(\d+)\]", build_log.read_text(), re.MULTILINE)
    return int(steps[-1])


def real_path(seen: str, log: Path) -> Path:
    """A path the build's ninja names (maybe as seen through the path view) where it is: in the
    source tree whose `<source>/build/temp.*/.ninja_log` is `log`."""
    view = PathView(ROOT, Path("/nonexistent"), log.parents[2])
    return view.outside(Path(seen))
