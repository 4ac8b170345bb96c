"""Benchmark: a long build cold vs resumed after a kill at half (issue 19 item 8).

  * cold:    the whole build from nothing (`--compile-cache off`, fresh directories)
  * killed:  the same build from nothing, its process group killed with SIGKILL once half of
             its objects are finished (as a crash, an OOM kill or a lost machine would)
  * resumed: the same command again in the killed build's directories: it says
             `resuming: K/N objects already built` and compiles only the rest

Per leg: wall seconds, CPU seconds (the machine's busy time over the leg, from /proc/stat:
it counts every process of the build, also those a kill leaves to be reaped elsewhere; run it
on a quiet machine) and the objects it compiled. Then, side by side: resumed / cold and
(killed + resumed) / cold. The finished builds must give the same content key.

Each leg may run as its own command (`--only LEG`, same --results; the killed leg's
directories stay under build/long-build/ for `--only resumed`), and a leg that reaches --limit
stops there and records how far it got: run `--only resumed` again and its figures add up. A
machine without network takes the sdist from `--sdist FILE`.

Usage: python bench/long_build.py [RECIPE] [--arch 12.0] [--toolchain system] [--only LEG]
                                  [--kill-at 0.5] [--limit SECONDS] [--sdist FILE]
(with PYTHONPATH=src where wheelsmith is not installed). flash-attn 2.8.3 takes about 24 min
per arch on 16 cores and 2.4-3 h on 2 (docs/long-builds.md, "What to expect"); causal-conv1d
about 5 min on 2 cores.
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
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from wheelsmith import locations  # noqa: E402
from wheelsmith.builder import resume  # noqa: E402
from wheelsmith.recipes.fetch import cached_path  # noqa: E402
from wheelsmith.recipes.model import load_recipe  # noqa: E402
from wheelsmith.recipes.sources import PypiSource, UrlSource  # noqa: E402

HERE = REPO / "build" / "long-build"
LEGS = ("cold", "killed", "resumed")
POLL_S = 2.0


def busy_seconds() -> float:
    """The machine's CPU time spent outside idle and iowait, in seconds (all cores)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def seed_cache(recipe: str, sdist: Path) -> None:
    """Put the given sdist where fetch looks first (fetch checks its sha256 again)."""
    source = load_recipe(REPO / "recipes" / f"{recipe}.yaml").latest.source
    assert isinstance(source, PypiSource | UrlSource)
    target = cached_path(locations.cache_dir(), source.sha256)
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(sdist, target)


def progress(work: Path) -> tuple[int, int]:
    """(finished, all) objects of the unfinished builds under --work-dir `work`."""
    found = [resume.progress(key_dir) for key_dir in sorted(work.glob("*")) if key_dir.is_dir()]
    done = sum(p[0] for p in found if p)
    total = sum(p[1] for p in found if p)
    return done, total


def wait_for_tree(work: Path, timeout_s: float = 60) -> None:
    """Until no process names `work` or the build's path view on its command line (the killed
    build's supervisor takes its orphans down), so the next leg starts on an idle machine."""
    names = (str(work), str(locations.cache_dir() / "view"))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not any(name in line for line in command_lines() for name in names):
            return
        time.sleep(1)
    sys.exit(f"processes of the killed build in {work} still run after {timeout_s:.0f} s")


def command_lines() -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            found.append(cmdline.read_bytes().decode(errors="replace"))
        except OSError:
            continue
    return found


def run_leg(leg: str, args: list[str], work: Path, kill_at: float | None,
            limit: float) -> dict[str, Any]:
    """One run of the build: killed at `kill_at` of its objects or after `limit` seconds."""
    before = progress(work)
    cpu0, started = busy_seconds(), time.monotonic()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))}
    result = work.parent / f"{leg}.json"
    result.parent.mkdir(parents=True, exist_ok=True)
    with result.open("wb") as stdout:
        child = subprocess.Popen(args, cwd=REPO, env=env, stdout=stdout, start_new_session=True)
    stopped, total = None, before[1]
    while child.poll() is None:
        time.sleep(POLL_S)
        done, seen = progress(work)
        total = max(total, seen)
        if kill_at is not None and total and done >= kill_at * total:
            stopped = f"killed at {done}/{total}"
        elif time.monotonic() - started > limit:
            stopped = f"--limit {limit:.0f} s reached at {done}/{total}"
        if stopped:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            wait_for_tree(work)
            break
    wall, cpu = time.monotonic() - started, busy_seconds() - cpu0
    if stopped is None and child.returncode != 0:
        sys.exit(f"the {leg} leg failed (exit {child.returncode}); its log is under {work}")
    row: dict[str, Any] = {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
                           "objects_before": before[0],
                           "objects_after": progress(work)[0] if stopped else total,
                           "objects_total": total, "stopped": stopped}
    if stopped is None:
        built = json.loads(result.read_text())
        row["key"] = built["provenance"]["key"]
        row["plan"] = built["run"]["build"].get("plan", [])
    return row


def command(recipe: str, arch: str, toolchain: str | None, where: Path) -> list[str]:
    args = [sys.executable, "-m", "wheelsmith", "build", recipe, "--arch", arch,
            "--compile-cache", "off", "--json", "--rebuild",
            "--out", str(where / "out"), "--work-dir", str(where / "work")]
    return args + (["--toolchain", toolchain] if toolchain else [])


def leg(name: str, options: argparse.Namespace) -> dict[str, Any]:
    where = HERE / ("work-cold" if name == "cold" else "work-killed")
    if name != "resumed":
        shutil.rmtree(where, ignore_errors=True)
    args = command(options.recipe, options.arch, options.toolchain, where)
    kill_at = options.kill_at if name == "killed" else None
    return run_leg(name, args, where / "work", kill_at, options.limit)


def add(earlier: dict[str, Any] | None, later: dict[str, Any]) -> dict[str, Any]:
    """A leg run in several time-limited commands: its figures add up."""
    if not earlier or not earlier.get("stopped", "").startswith("--limit"):
        return later
    return {**later, "wall_s": earlier["wall_s"] + later["wall_s"],
            "cpu_s": earlier["cpu_s"] + later["cpu_s"],
            "objects_before": earlier["objects_before"], "runs": earlier.get("runs", 1) + 1}


def table(results: dict[str, dict[str, Any]], title: str) -> str:
    rows = [title, f"{'leg':<8} {'wall':>8} {'CPU':>9}  objects"]
    for name in LEGS:
        row = results.get(name)
        if row:
            rows.append(f"{name:<8} {row['wall_s']:>7.0f}s {row['cpu_s']:>8.0f}s  "
                        f"{row['objects_before']} -> {row['objects_after']} of "
                        f"{row['objects_total']}" + (f" ({row['stopped']})" if row["stopped"]
                                                      else ""))
    cold, killed, resumed = (results.get(name) for name in LEGS)
    if killed and resumed and not resumed["stopped"]:
        both = {k: killed[k] + resumed[k] for k in ("wall_s", "cpu_s")}
        rows.append(f"killed + resumed: {both['wall_s']:.0f} s wall, {both['cpu_s']:.0f} s CPU; "
                    f"objects compiled twice: "
                    f"{killed['objects_after'] - resumed['objects_before']}")
        if cold:
            rows.append(f"resumed / cold: wall {resumed['wall_s'] / cold['wall_s']:.2f}, CPU "
                        f"{resumed['cpu_s'] / cold['cpu_s']:.2f};  (killed + resumed) / cold: "
                        f"wall {both['wall_s'] / cold['wall_s']:.2f}, CPU "
                        f"{both['cpu_s'] / cold['cpu_s']:.2f};  same content key: "
                        f"{'yes' if cold.get('key') == resumed.get('key') else 'NO'}")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipe", nargs="?", default="flash-attn")
    parser.add_argument("--arch", default="12.0")
    parser.add_argument("--toolchain", help="a profile, or 'system' (default: the newest)")
    parser.add_argument("--only", choices=LEGS, help="run one leg (the others from --results)")
    parser.add_argument("--kill-at", type=float, default=0.5, help="share of objects")
    parser.add_argument("--limit", type=float, default=float("inf"),
                        help="stop a leg after this many seconds (--only resumed continues it)")
    parser.add_argument("--results", type=Path, default=HERE / "results.json")
    parser.add_argument("--sdist", type=Path,
                        help="the sdist of the recipe's version, for a machine without network")
    options = parser.parse_args()
    if options.sdist:
        seed_cache(options.recipe, options.sdist)
    results: dict[str, dict[str, Any]] = (json.loads(options.results.read_text())
                                          if options.only and options.results.is_file() else {})
    for name in [options.only] if options.only else list(LEGS):
        results[name] = add(results.get(name) if name == "resumed" else None,
                            leg(name, options))
        print(f"{name}: {json.dumps(results[name])}", flush=True)
        options.results.parent.mkdir(parents=True, exist_ok=True)
        options.results.write_text(json.dumps(results, indent=2) + "\n")
    print(table(results, f"{options.recipe} --arch {options.arch}, "
                         f"{len(os.sched_getaffinity(0))} cores, --compile-cache off"))


if __name__ == "__main__":
    main()
