"""GPU proof of the compile farm: a multi-file package built through an sccache-dist scheduler
and build servers on 127.0.0.1 (bubblewrap sandboxes), on the GPU machine.

Usage (root; sccache 0.16 on PATH or beside this Python; wheelsmith from this checkout):

    python3 scripts/gpu-proof-farm.py PACKAGE ARCHS OUT [--servers N] [--toolchain NAME]
                                      [--bwrap PATH] [--sdists DIR] [--limit S] [--resume]
                                      [--jobs N]

`--sdists DIR` holds sdists named by their sha256 (a machine without network: copy them from
~/.cache/wheelsmith/downloads/*/ here). Cold build (`--compile-cache off`, an empty sccache
directory), `--compile-farm-required`: a job the farm cannot run fails the build instead of
compiling here unseen. Writes OUT/result.json (seconds, the farm's counts, provenance) and
OUT/farm.log, and prints the build's stage lines as they come.

A build longer than one command (flash-attn: about 25 minutes on 16 cores) runs as a nightly cell
does: `--limit S` is the build's `--time-limit S` (it drains, then stops, and keeps its
finished objects), and
`--resume` runs it again on the kept work tree with a new farm. Each run appends a line to
OUT/runs.jsonl: seconds, objects before and after (ninja's log), and the jobs the farm completed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "src"), str(REPO)]

from tests.farm import running_farm  # noqa: E402

from wheelsmith import locations  # noqa: E402
from wheelsmith.builder import compilefarm, resume  # noqa: E402
from wheelsmith.recipes.fetch import cached_path  # noqa: E402


def seed(sdists: Path) -> None:
    """Put the given sdists where fetch looks first (it checks each sha256 again)."""
    for sdist in sdists.iterdir():
        target = cached_path(locations.cache_dir(), sdist.name)
        if not target.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(sdist, target)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("package")
    parser.add_argument("archs")
    parser.add_argument("out", type=Path)
    parser.add_argument("--servers", type=int, default=2)
    parser.add_argument("--toolchain", default="system")
    parser.add_argument("--bwrap", help="bubblewrap for the servers (default: on PATH)")
    parser.add_argument("--sdists", type=Path)
    parser.add_argument("--limit", type=float,
                        help="the build's --time-limit SECONDS (its last quarter starts no "
                             "compile: those in flight finish); SIGTERM 60 s after")
    parser.add_argument("--jobs", type=int,
                        help="MAX_JOBS (default: the planner's, which counts the farm's CPUs "
                             "on top of this machine's: with the servers here too, a limit "
                             "then cuts more compiles in flight)")
    parser.add_argument("--resume", action="store_true",
                        help="keep OUT/work: continue the build an earlier --limit stopped")
    options = parser.parse_args()
    if options.sdists:
        seed(options.sdists)
    out: Path = options.out
    out.mkdir(parents=True, exist_ok=True)
    work = out / "work"
    if not options.resume:
        shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(work / "farm", ignore_errors=True)  # a new scheduler and servers each run
    before = objects_done(work / "build")
    with running_farm(work / "farm", servers=options.servers, bwrap=options.bwrap) as farm:
        env = {**os.environ, compilefarm.TOKEN_ENV: farm.token,
               compilefarm.LOCAL_ENV: str(work / "sccache"),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"),
                                                           os.environ.get("PYTHONPATH")]))}
        args = [sys.executable, "-m", "wheelsmith", "build", options.package, "--arch",
                options.archs, "--toolchain", options.toolchain, "--compile-cache", "off",
                "--compile-farm", farm.url, "--compile-farm-required", "--json",
                "--out", str(out / "wheels"), "--work-dir", str(work / "build")]
        if options.jobs:
            args += ["--jobs", str(options.jobs)]
        if options.limit:
            args += ["--time-limit", str(options.limit)]
        started = time.monotonic()
        returncode, stdout = run_limited(args, env, options.limit)
        seconds = round(time.monotonic() - started, 1)
        farm_text = farm.log.read_text(errors="replace")
        with (out / "farm.log").open("a") as sink:
            sink.write(farm_text)
    result = {"package": options.package, "archs": options.archs, "servers": options.servers,
              "cores": len(os.sched_getaffinity(0)), "seconds": seconds,
              "returncode": returncode, "objects_before": before,
              "objects_after": objects_done(work / "build"),
              "farm_jobs_completed": farm_text.count("updated state to Complete")}
    if returncode == 0:
        built = json.loads(stdout)
        result |= {"wheel": built["wheel"], "compile_farm": built["run"]["compile_farm"],
                   "device_code": built["provenance"]["device_code"],
                   "build": built["run"]["build"]}
        (out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    with (out / "runs.jsonl").open("a") as runs:
        runs.write(json.dumps({k: v for k, v in result.items() if k != "device_code"}) + "\n")
    print(json.dumps({k: result.get(k) for k in ("seconds", "returncode", "objects_before",
                                                  "objects_after", "farm_jobs_completed",
                                                  "compile_farm")}))
    sys.exit(returncode)


def run_limited(args: list[str], env: dict[str, str], limit: float | None) -> tuple[int, str]:
    """Run the build (it stops itself at its --time-limit, exit 20); should it still run 60 s
    after `limit`, send it SIGTERM (it stops its compilers and keeps what they finished) and
    wait for it to end."""
    proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
    try:
        stdout, _ = proc.communicate(timeout=None if limit is None else limit + 60)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
        stdout, _ = proc.communicate()
    return proc.returncode, stdout


def objects_done(build_work: Path) -> str:
    """N/M from the kept build tree (wheelsmith's own progress reader), or "none"."""
    for tree in sorted(build_work.glob("*/")) if build_work.is_dir() else []:
        found = resume.progress(tree)
        if found:
            return f"{found[0]}/{found[1]}"
    return "none"


if __name__ == "__main__":
    main()
