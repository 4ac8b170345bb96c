"""Benchmark: from nothing to an installed wheel in a user's environment whose torch is not the
default profile's, against the same with that toolchain already present. One run, side by side.

The user's environment is Python 3.12 (or this Python) + torch 2.11.0 from the package index,
no CUDA toolkit (made once and reused: it is the user's, not part of what is measured).
  1. cold: `wheelsmith build PACKAGE --arch 12.0 --python ENV --install` with an empty
     wheelsmith cache: the cu130-torch2.11 toolchain venv is created (pip's own download cache
     is left as it is: the network is not what is measured), then the build
  2. warm: the same command in a fresh output and work directory, the toolchain present
Both runs build without a compile cache, so the difference is the toolchain's creation.
Usage: python bench/target_env.py [--package causal-conv1d]   (default: the tiny fixture)
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.conftest import FIXTURES, find_python, torch_env  # noqa: E402


def project_with_tiny(root: Path) -> Path:
    """A project (the shipped toolchains) whose only recipe is the tiny fixture."""
    home = root / "project"
    (home / "recipes").mkdir(parents=True)
    shutil.copytree(REPO / "toolchains", home / "toolchains")
    recipe = (FIXTURES / "tiny-ext.recipe.yaml").read_text()
    (home / "recipes" / "tiny-ext.yaml").write_text(recipe.replace("PATH",
                                                                   str(FIXTURES / "tiny-ext")))
    return home


def timed_build(package: str, user_env: Path, home: Path, scratch: Path, cache: Path) -> float:
    env = dict(os.environ, WHEELSMITH_HOME=str(home), WHEELSMITH_CACHE=str(cache))
    subprocess.run([str(user_env), "-m", "pip", "uninstall", "-q", "-y", package], check=True)
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "wheelsmith", "build", package, "--arch", "12.0",
                    "--python", str(user_env), "--install", "--compile-cache", "off",
                    "--out", str(scratch / "out"), "--work-dir", str(scratch / "work")],
                   cwd=home, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--package", default="tiny-ext")
    package = parser.parse_args().package
    user_env = torch_env(find_python("3.12") or Path(sys.executable), "2.11.0")
    with tempfile.TemporaryDirectory(prefix="bench-target-") as tmp:
        root = Path(tmp)
        home = project_with_tiny(root) if package == "tiny-ext" else REPO
        cache = root / "cache"  # empty: the toolchain venv is created in the cold run
        cold = timed_build(package, user_env, home, root / "cold", cache)
        warm = timed_build(package, user_env, home, root / "warm", cache)
    print(f"{package} for {user_env} (torch 2.11.0), --arch 12.0, no compile cache:")
    print(f"  cold (toolchain created + build + install): {cold:7.1f} s")
    print(f"  warm (toolchain present, build + install):  {warm:7.1f} s")
    print(f"  warm / cold = {warm / cold:.2f}; the toolchain's creation: {cold - warm:.1f} s")


if __name__ == "__main__":
    main()
