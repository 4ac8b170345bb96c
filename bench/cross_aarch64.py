"""Benchmark: an aarch64 wheel cross-built here vs. the x86-64 wheel of the same source, in the
same run, one after the other, with no compile cache (`--platform aarch64` vs `x86_64`).

Prints, per platform, the compile stage (from its stage line to verify's, timed as the lines
arrive: verify and the import test excluded) and the whole build, and the aarch64/x86-64
ratios.

The third leg is the other way to get aarch64 wheels: a native build under qemu-user (tiny
only). An arm64 Debian root with python3.11-dev and g++ (debootstrap's first stage, unpacked,
made once: foreign.py) runs the package's own `setup.py bdist_wheel` in a chroot, its torch,
nvcc, setuptools and ninja the profile's aarch64 pins (the cross build's target site, bound at
the same path). nvcc starts cicc, ptxas and g++ as child processes, so the kernel must run
aarch64 programs itself: a binfmt_misc handler for aarch64 with the F flag (Debian:
`update-binfmts --enable qemu-aarch64` with qemu-user-static installed; it changes the
kernel's state until reboot, so this bench never registers one). Where it is missing that is
said instead of a figure. Its figure is the bdist_wheel alone, with no wheelsmith around it;
the compile stage of the other two legs is their PEP 517 build (the same bdist_wheel) plus
wheelsmith's pre-build check.

Usage: python bench/cross_aarch64.py [--recipe tiny|causal-conv1d] [--arch 9.0] [--no-emulated]
(tiny: the test fixture, ~1 min, plus ~N min emulated; causal-conv1d: ~12 min on 2 cores)
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.conftest import DEFAULT_PROFILE, FIXTURES, add_variant  # noqa: E402

from wheelsmith import locations  # noqa: E402
from wheelsmith.inventory import wheel_inventory  # noqa: E402
from wheelsmith.toolchain.foreign import ensure_root  # noqa: E402
from wheelsmith.toolchain.platform import ensure_target_site  # noqa: E402
from wheelsmith.toolchain.profile import load_profile  # noqa: E402
from wheelsmith.toolchain.venv import ensure_profile  # noqa: E402

BINFMT = Path("/proc/sys/fs/binfmt_misc/qemu-aarch64")
STAGE_RE = re.compile(r"==> \[[^]]*\] (\w+):")
ROOT_PACKAGES = ("python3.11-dev", "g++")  # what a native build needs beside python3.11


def project(work: Path) -> Path:
    """A project with the tiny fixture's recipe beside the real toolchains/."""
    home = work / "home"
    (home / "recipes").mkdir(parents=True)
    shutil.copytree(REPO / "toolchains", home / "toolchains")
    add_variant(home, "tiny-ext")
    return home


def build(recipe: str, arch: str, platform: str, work: Path, home: Path | None
          ) -> tuple[float, float]:
    """(the compile stage's seconds: its stage line to verify's, timed as they arrive; the
    whole build's seconds)."""
    env = dict(os.environ, WHEELSMITH_HOME=str(home)) if home else None
    started = time.monotonic()
    stages: dict[str, float] = {}
    with subprocess.Popen(
            [sys.executable, "-m", "wheelsmith", "build", recipe, "--arch", arch, "--platform",
             platform, "--compile-cache", "off", "--rebuild", "--out",
             str(work / f"out-{platform}"), "--work-dir", str(work / "work")],
            cwd=home or REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True) as proc:
        assert proc.stderr is not None
        for line in proc.stderr:
            if (match := STAGE_RE.match(line)) and match[1] not in stages:
                stages[match[1]] = time.monotonic()
    if proc.returncode != 0 or not {"compile", "verify"} <= set(stages):
        raise SystemExit(f"the {platform} build failed (exit {proc.returncode})")
    return stages["verify"] - stages["compile"], time.monotonic() - started


def binfmt_problem() -> str | None:
    """Why nvcc's aarch64 children could not run here, or None."""
    if not BINFMT.exists():
        return ("no binfmt_misc handler for aarch64 here (Debian: `update-binfmts --enable "
                "qemu-aarch64`; it changes the kernel's state until reboot)")
    handler = BINFMT.read_text()
    if "enabled" not in handler.splitlines()[0]:
        return f"the binfmt_misc handler {BINFMT} is disabled"
    flags = next((line.split(":", 1)[1] for line in handler.splitlines()
                  if line.startswith("flags:")), "")
    if "F" not in flags:
        return (f"the handler {BINFMT} lacks the F flag, so its qemu is not found inside a "
                "chroot")
    return None


def emulated(arch: str, work: Path) -> float:
    """The tiny fixture's `setup.py bdist_wheel` natively under qemu-user in an arm64 chroot
    (seconds); checks that the wheel holds an aarch64 extension with exactly the asked SASS."""
    cache = locations.cache_dir()
    profile = load_profile(DEFAULT_PROFILE)
    toolchain = ensure_profile(profile, Path(sys.executable), cache)
    site = ensure_target_site(profile, toolchain.python, "3.11", "aarch64", cache)
    root = ensure_root("aarch64", "3.11", cache, extra=ROOT_PACKAGES)
    source = work / "emulated-src"
    shutil.copytree(FIXTURES / "tiny-ext", source)
    env = {"PATH": f"{site}/ninja/data/bin:/usr/bin:/bin", "PYTHONPATH": str(site),
           "CUDA_HOME": f"{site}/nvidia/cu13", "TORCH_CUDA_ARCH_LIST": arch,
           "MAX_JOBS": str(os.cpu_count()), "LDFLAGS": f"-L{site}/wheelsmith-link",
           "HOME": "/tmp", "LANG": "C.UTF-8"}
    # a private mount namespace: the site and the source at their own paths inside the root,
    # and /dev (nvcc writes to /dev/null); /proc stays the root's stand-in (torch's cpuinfo)
    binds = " && ".join(f"mkdir -p {root}{path} && mount --bind {path} {root}{path}"
                        for path in (site, source, Path("/dev")))
    run = shlex.join(["chroot", str(root), "env", "-i", *(f"{k}={v}" for k, v in env.items()),
                      "sh", "-c", f"cd {source} && python3.11 setup.py -q bdist_wheel"])
    started = time.monotonic()
    subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                    f"{binds} && {run}"], check=True, capture_output=True, text=True)
    seconds = time.monotonic() - started
    wheel = next((source / "dist").glob("*.whl"))
    assert wheel.name.endswith("-linux_aarch64.whl"), wheel
    assert toolchain.cuobjdump is not None, "the default profile's venv has a cuobjdump"
    sass = {code.path: sorted(code.sass) for code in wheel_inventory(wheel, toolchain.cuobjdump)}
    assert sass == {"tiny_ext/_C.cpython-311-aarch64-linux-gnu.so": sorted(
        f"sm_{a.replace('.', '')}" for a in arch.split(";"))}, sass
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--recipe", default="tiny", choices=["tiny", "causal-conv1d"])
    parser.add_argument("--arch", default="9.0;12.0")
    parser.add_argument("--no-emulated", action="store_true", help="skip the qemu-user leg")
    args = parser.parse_args()
    problem = binfmt_problem() if args.recipe == "tiny" else "tiny only (hours under qemu)"
    with tempfile.TemporaryDirectory(prefix="wheelsmith-bench-cross-") as scratch:
        work = Path(scratch)
        home = project(work) if args.recipe == "tiny" else None
        recipe = "tiny-ext" if args.recipe == "tiny" else args.recipe
        times = {p: build(recipe, args.arch, p, work, home) for p in ("x86_64", "aarch64")}
        native = None if problem or args.no_emulated else emulated(args.arch, work)
    (x_compile, x_whole), (a_compile, a_whole) = times["x86_64"], times["aarch64"]
    print(f"{recipe} --arch {args.arch}, no compile cache, {os.cpu_count()} cores")
    print(f"  x86-64 (native):  build {x_compile:7.1f} s   whole {x_whole:7.1f} s")
    print(f"  aarch64 (cross):  build {a_compile:7.1f} s   whole {a_whole:7.1f} s   "
          f"ratios {a_compile / x_compile:.2f} / {a_whole / x_whole:.2f}")
    if native is not None:
        print(f"  aarch64 (native under qemu-user, bdist_wheel in an arm64 chroot): build "
              f"{native:7.1f} s   ratio {native / x_compile:.2f} to x86-64, "
              f"{native / a_compile:.2f} to cross")
    else:
        print(f"  aarch64 (native under qemu-user): not measured: "
              f"{'--no-emulated' if args.no_emulated else problem}")


if __name__ == "__main__":
    main()
