"""Resumable builds: a build that stopped, however it stopped, goes on from the objects it had
finished when the same build (the same content key) runs again.

The work directory of a content key (`<work-dir>/<slug>/`, the key in the slug) keeps the
patched source tree until the build succeeds, and with it the package's own build tree
(`build/temp.*`: objects, `build.ninja` and ninja's `.ninja_log`). The rerun uses that tree
instead of fetching and patching anew (a marker written after the last patch says it is
complete), and ninja decides what is left to compile. An object counts only once its compiler
exited 0: ninja writes an output's log entry after its command succeeded, and rebuilds an
output with no entry, so a file a killed compiler left half-written is compiled again.

Why this and not a per-key object store or the compile cache: ninja already knows which
objects are complete and which command made them (a changed command line rebuilds), and the
tree is the one the build would use anyway; the compile cache stays optional (off, remote or
shared) and still serves other keys.

`--fresh` removes the kept tree first. Kept trees of other keys that nothing has touched for
`WHEELSMITH_KEEP_PARTIAL_DAYS` days (default 14) are removed at the start of a build in the
same work directory, unless a build holds their lock.
"""

from __future__ import annotations

import glob
import json
import logging
import shutil
import time
from pathlib import Path

from wheelsmith import numbers
from wheelsmith.builder import ninjafile, reproducible
from wheelsmith.files import atomic_write_text, exclusive_lock

log = logging.getLogger(__name__)

MARKER = "wheelsmith-prepared.json"  # written into <work>/src once fetched and patched
KEEP_DAYS_ENV = "WHEELSMITH_KEEP_PARTIAL_DAYS"
KEEP_DAYS = 14.0
KEEP_DAYS_BOUNDS = numbers.Bounds(0, 3650, unit="days", most="10 years")  # 0: keep none
TIMINGS_FILE = "earlier-object-seconds.json"  # an earlier run's seconds per object


class _Busy(Exception):
    pass


def source_dir(work: Path) -> Path:
    return work / "src"


def kept_source(work: Path, key: str) -> Path | None:
    """The prepared source tree an unfinished build of `key` left in `work`, if any."""
    marker = source_dir(work) / MARKER
    try:
        data = json.loads(marker.read_text())
    except (OSError, ValueError):
        return None
    root = source_dir(work) / str(data.get("root", ""))
    if data.get("key") != key or not root.is_dir() or root == source_dir(work):
        return None
    return root


def mark_prepared(work: Path, key: str, root: Path) -> None:
    """Say that `root` is fetched and patched completely for `key` (written last)."""
    atomic_write_text(source_dir(work) / MARKER, json.dumps(
        {"key": key, "root": str(root.relative_to(source_dir(work)))}) + "\n")


def progress(work: Path) -> tuple[int, int] | None:
    """(finished, all) compile steps of the build tree an unfinished build left in `work`;
    None when it has no build.ninja yet (stopped before compiling)."""
    done = total = 0
    for ninja_file in sorted(source_dir(work).glob("*/build/*/build.ninja")):
        outputs = _compiled(ninja_file)
        finished = _logged_outputs(ninja_file.parent / ".ninja_log")
        total += len(outputs)
        done += sum(output in finished for output in outputs)
    return (done, total) if total else None


def progress_text(work: Path) -> str:
    found = progress(work)
    if found is None:
        return "stopped before compiling"
    done, total = found
    if done == total:  # cut in the stages after compiling: a rerun links and checks
        return f"{done}/{total} objects: all compiled, stopped in the checks after them"
    return f"{done}/{total} objects"


def object_seconds(source: Path) -> dict[str, float]:
    """How long each compile step of the source tree `source` took (ninja's log; the last
    entry of an output compiled twice), keyed by the object's path under its build dir: where
    a build's time went, for the run facts (longest first here; run.json sorts its keys). The
    tree, not the work dir: a container build's tree is the host's, mounted outside its work."""
    seconds: dict[str, float] = {}
    for log_file in sorted(source.glob("build/*/.ninja_log")):
        outputs = set(_compiled(log_file.parent / "build.ninja"))
        for line in log_file.read_text(errors="replace").splitlines():
            fields = line.split("\t")
            if len(fields) == 5 and fields[3] in outputs:
                name = fields[3].split(f"/{log_file.parent.name}/", 1)[-1]
                seconds[name] = (int(fields[1]) - int(fields[0])) / 1000
    return dict(sorted(seconds.items(), key=lambda item: -item[1]))


def earlier_object_seconds(work: Path) -> dict[str, float]:
    """The seconds per object of the newest finished run of the same recipe and version in
    this work directory (its run facts; any key: another arch, Python or toolchain costs the
    objects in about the same proportions); empty when there is none."""
    prefix = work.name[:-12]  # `<name>-<version>-` of the slug `<name>-<version>-<key12>`
    runs = [(path.stat().st_mtime, path) for path in
            work.parent.glob(f"{glob.escape(prefix)}*/{reproducible.RUN_FILE}")
            if len(path.parent.name) == len(work.name)]
    for _, path in sorted(runs, reverse=True):
        seconds = reproducible.read_run(path.parent).get("build", {}).get("object_seconds")
        if seconds:
            return {str(name): float(value) for name, value in seconds.items()}
    return {}


def _compiled(ninja_file: Path) -> list[str]:
    """The objects a build.ninja compiles (torch's or CMake's), as ninja's log names them."""
    if not ninja_file.is_file():
        return []
    return [unit.output for unit in ninjafile.units(ninja_file.read_text(errors="replace"))]


def _logged_outputs(log_file: Path) -> set[str]:
    """The outputs ninja logged (their command exited 0)."""
    if not log_file.is_file():
        return set()
    return {fields[3] for line in log_file.read_text(errors="replace").splitlines()
            if len(fields := line.split("\t")) == 5}


def finished(work: Path, *, keep_source: bool) -> None:
    """The build succeeded: nothing is left to resume (`keep_source`: --keep-work keeps the
    tree to look at, but a later build starts from a fresh one)."""
    if keep_source:
        (source_dir(work) / MARKER).unlink(missing_ok=True)
    else:
        forget(work)


def forget(work: Path) -> None:
    """`--fresh`: nothing of an earlier build of this key is used."""
    shutil.rmtree(source_dir(work), ignore_errors=True)


def prune(work_dir: Path, keep: str, *, now: float | None = None) -> list[Path]:
    """Remove the kept trees of other keys in `work_dir` untouched for longer than the limit
    (their lock must be free); returns what was removed."""
    limit = numbers.from_env(KEEP_DAYS_ENV, KEEP_DAYS, KEEP_DAYS_BOUNDS) * 86400
    removed = []
    for marker in sorted(work_dir.glob(f"*/src/{MARKER}")):
        work = marker.parent.parent
        if work.name == keep or (now or time.time()) - marker.stat().st_mtime < limit:
            continue
        try:
            with exclusive_lock(work_dir / f"{work.name}.lock", on_busy=_busy):
                log.info("removing %s: an unfinished build nothing touched for %.0f days",
                         work, limit / 86400)
                forget(work)
                removed.append(work)
        except _Busy:
            continue
    return removed


def _busy() -> None:
    raise _Busy
