"""Benchmark: causal-conv1d `9.0;12.0` built with the old parallelism vs the planner.

  * old:     MAX_JOBS and NVCC_THREADS from cores and memory, no split-compile
             (`--split-compile off`: exactly what wheelsmith did before the planner)
  * planner: the same, plus ptxas's split-compile chosen from cores, memory and build.ninja's
             CUDA files (`--split-compile auto`, the default: reproducible)
  * fast:    nvcc's own split instead (`--split-compile fast`: cicc too; its bytes vary, and
             the wheel says so); only with `--variants`, e.g. `--variants planner,fast`

Each is a cold build (`--compile-cache off`) in a fresh directory, one after the other on this
machine; all must give the same content key and the same device code. Prints the times side by
side, relative to the first variant, with each wheel's sha256, and writes them to --results
(JSON).

Each variant may run as its own command (`--only old`, then `--only planner`, same
--results); the table is printed once both are in. A machine without network takes the sdist
from build/many-cores/downloads, filled by `--prefetch` on one with network.

Usage: python bench/many_cores.py [--toolchain system] [--archs '9.0;12.0'] [--only VARIANT]
                                  [--variants old,planner,fast] [--results FILE] [--prefetch]
(with PYTHONPATH=src where wheelsmith is not installed). ~2 x 10 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from wheelsmith import locations  # noqa: E402
from wheelsmith.recipes.fetch import cached_path, download  # noqa: E402
from wheelsmith.recipes.model import load_recipe  # noqa: E402
from wheelsmith.recipes.sources import PypiSource, UrlSource  # noqa: E402

HERE = REPO / "build" / "many-cores"
OFFLINE = HERE / "downloads"  # sdists for a machine without network
VARIANTS = {"old": "off", "planner": "auto", "fast": "fast"}  # --split-compile of each
DEFAULT_VARIANTS = "old,planner"


def source() -> PypiSource | UrlSource:
    found = load_recipe(REPO / "recipes" / "causal-conv1d.yaml").latest.source
    assert isinstance(found, PypiSource | UrlSource)
    return found


def prefetch() -> None:
    """Download the sdist (network) and keep a copy for a machine without network."""
    sdist = download(source(), locations.cache_dir())
    OFFLINE.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(sdist, OFFLINE / source().sha256)
    print(f"kept {OFFLINE / source().sha256}: copy build/many-cores/downloads to that machine")


def seed_cache() -> None:
    """Put a prefetched sdist where fetch looks first (it checks the sha256 again)."""
    kept = OFFLINE / source().sha256
    target = cached_path(locations.cache_dir(), source().sha256)
    if kept.is_file() and not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(kept, target)


def build(variant: str, archs: str, toolchain: str | None) -> dict[str, Any]:
    where = HERE / f"work-{variant}"
    shutil.rmtree(where, ignore_errors=True)
    args = [sys.executable, "-m", "wheelsmith", "build", "causal-conv1d", "--arch", archs,
            "--compile-cache", "off", "--split-compile", VARIANTS[variant], "--json",
            "--out", str(where / "out"), "--work-dir", str(where / "work")]
    if toolchain:
        args += ["--toolchain", toolchain]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))}
    started = time.monotonic()
    done = subprocess.run(args, cwd=REPO, env=env, stdout=subprocess.PIPE, check=False)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"the {variant} build failed (exit {done.returncode}); its log is under {where}")
    provenance = json.loads(done.stdout)["provenance"]
    wheel = hashlib.sha256(Path(json.loads(done.stdout)["wheel"]).read_bytes()).hexdigest()
    shutil.rmtree(where, ignore_errors=True)
    built = json.loads(done.stdout)["run"]["build"]
    return {"seconds": round(seconds, 1), "build_seconds": built["seconds"], "sha256": wheel,
            "bytes_not_promised": provenance.get("bytes_not_promised"),
            "max_jobs": built["max_jobs"], "nvcc_threads": built["nvcc_threads"],
            "split_compile": built["split_compile"], "plan": built.get("plan", []),
            "key": provenance["key"], "device_code": provenance["device_code"],
            "cores": len(os.sched_getaffinity(0)), "archs": archs}


def table(results: dict[str, dict[str, Any]], variants: list[str]) -> str:
    first = results[variants[0]]
    rows = [f"causal-conv1d {first['archs']}, {first['cores']} cores, cold builds",
            f"{'variant':<10} {'wall':>7}  {'vs ' + variants[0]:>10}  {'wheel sha256':<16}  "
            "parallelism"]
    for name in variants:
        row = results[name]
        plan = "; ".join(row["plan"]) or (f"MAX_JOBS={row['max_jobs']} NVCC_THREADS="
                                          f"{row['nvcc_threads']}")
        rows.append(f"{name:<10} {row['seconds']:>6.0f}s  "
                    f"{row['seconds'] / first['seconds']:>10.2f}  {row['sha256'][:16]}  {plan}")
    same = all((results[n]["key"], results[n]["device_code"]) ==
               (first["key"], first["device_code"]) for n in variants)
    rows.append(f"same content key and device code: {'yes' if same else 'NO'}")
    rows.extend(f"{n}: bytes not promised ({results[n]['bytes_not_promised']})"
                for n in variants if results[n].get("bytes_not_promised"))
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--toolchain", help="a profile, or 'system' (default: the newest)")
    parser.add_argument("--archs", default="9.0;12.0")
    parser.add_argument("--only", choices=sorted(VARIANTS), help="run one variant")
    parser.add_argument("--variants", default=DEFAULT_VARIANTS,
                        help=f"the variants of the table, in order (default {DEFAULT_VARIANTS})")
    parser.add_argument("--results", type=Path, default=HERE / "results.json")
    parser.add_argument("--prefetch", action="store_true",
                        help="download the sdist into build/many-cores/downloads and stop")
    options = parser.parse_args()
    if options.prefetch:
        prefetch()
        return
    seed_cache()
    results: dict[str, dict[str, Any]] = (json.loads(options.results.read_text())
                                          if options.only and options.results.is_file() else {})
    variants = options.variants.split(",")
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        parser.error(f"--variants: unknown {', '.join(sorted(unknown))} "
                     f"(known: {', '.join(VARIANTS)})")
    for variant in [options.only] if options.only else variants:
        results[variant] = build(variant, options.archs, options.toolchain)
        print(f"{variant}: {results[variant]['seconds']:.0f} s", flush=True)
        options.results.parent.mkdir(parents=True, exist_ok=True)
        options.results.write_text(json.dumps(results, indent=2) + "\n")
    if set(variants) <= set(results):
        print(table(results, variants))


if __name__ == "__main__":
    main()
