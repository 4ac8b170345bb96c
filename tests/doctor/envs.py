"""The examined environments of doctor's end-to-end tests: a user's CPU torch venv, and
directories of packages put in front of it on PYTHONPATH (transformers of any release with what
pip resolves beside it), each made once per machine in the wheelsmith cache."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from packaging.version import Version

from tests.conftest import FIXTURES, REPO, torch_env
from wheelsmith import locations

USER_TORCH = "2.13.0"  # the CPU build pip takes from this machine's wheel folder
USER_TRANSFORMERS = "transformers==5.24.0"
STAND_INS = FIXTURES / "fastpath-cpu"  # causal_conv1d, mamba_ssm and flash_attn on the CPU
RESOURCES = Path(locations.RESOURCES)
DRIVER = Path(__file__).with_name("dispatch_driver.py")
# The oldest transformers whose model view doctor supports (docs/doctor.md): 4.57 brought
# qwen3_next, the first GatedDeltaNet hybrid.
OLDEST_TRANSFORMERS = "4.57"


def user_env() -> Path:
    """CPU torch + transformers 5.24, without fla or causal-conv1d."""
    return torch_env(Path(sys.executable), USER_TORCH, (USER_TRANSFORMERS,))


def site(name: str, *requirements: str) -> Path:
    """A directory of packages installed with pip --target (cached per machine), to put on
    PYTHONPATH: the environment with them installed, without changing the cached one."""
    root = locations.cache_dir() / "test-envs" / f"site-{name}"
    if not (root / "wheelsmith-test-site").is_file():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                        str(root / "lib"), *requirements], check=True)
        (root / "wheelsmith-test-site").write_text(" ".join(requirements) + "\n")
    return root / "lib"


def stand_in_site(module: str, dist: str, version: str) -> Path:
    """One of the CPU stand-ins (tests/fixtures/fastpath-cpu) installed as its distribution is:
    the module with a dist-info, as transformers' availability checks read it."""
    root = locations.cache_dir() / "test-envs" / f"stand-in-{dist}-{version}"
    if not (root / "wheelsmith-test-site").is_file():
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(STAND_INS / module, root / "lib" / module)
        shutil.copy(STAND_INS / "_behaviour.py", root / "lib")
        info = root / "lib" / f"{module}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        (info / "RECORD").write_text("")
        (root / "wheelsmith-test-site").write_text(f"{dist}=={version}\n")
    return root / "lib"


def resolved_site(python: Path, *requirements: str) -> tuple[Path, dict[str, str]]:
    """What the environment's pip installs for `requirements` beside what it has (its torch),
    as a site directory: pip resolves, then exactly those pins are installed --no-deps.
    Returns the directory and the pins (name -> version)."""
    report = subprocess.run(
        [str(python), "-m", "pip", "install", "--dry-run", "--quiet", "--report", "-",
         "--only-binary", ":all:", *requirements],
        capture_output=True, text=True, check=True).stdout
    pins = {item["metadata"]["name"]: item["metadata"]["version"]
            for item in json.loads(report)["install"]}
    key = hashlib.sha256(json.dumps(sorted(pins.items())).encode()).hexdigest()[:16]
    return site(f"resolved-{key}", *(f"{n}=={v}" for n, v in sorted(pins.items()))), pins


def transformers_releases(python: Path) -> list[Version]:
    """Every final release of transformers the package index has, as the environment's pip
    sees it."""
    listed = subprocess.run([str(python), "-m", "pip", "index", "versions", "transformers"],
                            capture_output=True, text=True, check=True).stdout
    found = re.search(r"Available versions: (.+)", listed)
    assert found, listed
    return sorted(v for v in map(Version, found[1].split(", ")) if not v.is_prerelease)


def newest_of_each_minor(releases: list[Version], oldest: str = OLDEST_TRANSFORMERS
                         ) -> list[Version]:
    floor = Version(oldest)
    newest: dict[tuple[int, int], Version] = {}
    for release in releases:
        if release >= floor:
            newest[(release.major, release.minor)] = release
    return sorted(newest.values())


def examined(python: Path, *args: str, path: tuple[Path, ...] = ()) -> list[dict[str, Any]]:
    """doctor's model check run by `python` (dispatch_driver.py), one answer per line."""
    environ = {**os.environ,
               "PYTHONPATH": os.pathsep.join(str(p) for p in (*path, RESOURCES))}
    result = subprocess.run([str(python), str(DRIVER), *args], capture_output=True, text=True,
                            env=environ, cwd=REPO, check=False, timeout=1800)
    assert result.returncode == 0, result.stderr[-3000:]
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
