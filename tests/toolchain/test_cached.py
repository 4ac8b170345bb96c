"""The toolchain venvs in the cache (`toolchain list`, `remove`, `prune`), through the real CLI
on a cache laid out as venv.py lays it out: each venv with its size, its Python and its
standing; prune removes the venvs of pins no profile has now and unfinished ones, keeps the
current ones and those a current one links to; a venv a running process builds with (it holds
venv.hold's shared lock) is never removed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import REPO
from wheelsmith import locations
from wheelsmith.toolchain import cached
from wheelsmith.toolchain.env import Toolchain
from wheelsmith.toolchain.profile import load_profiles
from wheelsmith.toolchain.venv import MARKER, lock_path

PROFILES = load_profiles(locations.profile_dirs())
DEFAULT = next(p for p in PROFILES if p.name == "cu130-torch2.14")
MB = 1 << 20


def venv(cache: Path, name: str, *, size: int = MB, marker: bool = True) -> Path:
    root = cache / "toolchains" / name
    (root / "lib").mkdir(parents=True)
    (root / "lib" / "payload").write_bytes(os.urandom(size))
    if marker:
        (root / MARKER).write_text("{}")
    (cache / "toolchains" / f"{name}.log").write_text("made\n")
    return root


def current(python: str) -> str:
    return f"{DEFAULT.name}-py{python}-{DEFAULT.key(python)}"


def run(cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wheelsmith", "toolchain", *args],
                          capture_output=True, text=True, cwd=REPO, check=False,
                          env={**os.environ, "WHEELSMITH_CACHE": str(cache)})


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    """The default profile's venvs for 3.11 and 3.12 (current), one of older pins (stale), one
    of a profile that is gone, one never finished, and a link of the current key to an older
    key's venv with the same pins (venv.py links those)."""
    root = tmp_path / "cache"
    venv(root, current("3.11"), size=2 * MB)
    venv(root, current("3.12"))
    venv(root, f"{DEFAULT.name}-py3.11-{'0' * 16}", size=3 * MB)
    venv(root, f"cu129-torch2.8-py3.11-{'1' * 16}")
    venv(root, f"{DEFAULT.name}-py3.13-{'2' * 16}", marker=False)
    venv(root, f"{DEFAULT.name}-py3.14-{'3' * 16}")  # an older key that a current one links to
    (root / "toolchains" / current("3.14")).symlink_to(f"{DEFAULT.name}-py3.14-{'3' * 16}")
    return root


def test_list_says_each_venv_its_python_size_and_standing(cache: Path) -> None:
    result = run(cache, "list", "--json")
    assert result.returncode == 0, result.stderr
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    standing = {(v["python"], v["key"][:1]): (v["standing"], v["size_bytes"] // MB)
                for v in rows[DEFAULT.name]["venvs"]}
    assert standing == {("3.11", DEFAULT.key("3.11")[:1]): ("current", 2),
                        ("3.12", DEFAULT.key("3.12")[:1]): ("current", 1),
                        ("3.11", "0"): ("stale", 3), ("3.13", "2"): ("unfinished", 1),
                        ("3.14", "3"): ("current", 1), ("3.14", DEFAULT.key("3.14")[:1]):
                        ("current", 0)}
    assert [v["standing"] for v in rows["cu129-torch2.8"]["venvs"]] == ["stale"]
    text = run(cache, "list").stdout
    assert "stale (pins no profile has now)" in text
    sizes = {v["standing"]: 0 for r in rows.values() for v in r["venvs"]}
    for venv in (v for r in rows.values() for v in r["venvs"]):
        sizes[venv["standing"]] += venv["size_bytes"]
    assert text.splitlines()[-1] == (
        f"{cached.human(sum(sizes.values()))} in {cache / 'toolchains'}; "
        f"{cached.human(sizes['stale'] + sizes['unfinished'])} of it `wheelsmith toolchain "
        "prune` removes")


def test_prune_removes_stale_and_unfinished_venvs_and_keeps_what_builds_use(cache: Path) -> None:
    pruned = sum(v.size for v in cached.removable(cached.cached(cache, PROFILES)))
    result = run(cache, "prune")
    assert result.returncode == 0, result.stderr
    left = sorted(p.name for p in (cache / "toolchains").iterdir() if p.is_dir())
    assert left == sorted([current("3.11"), current("3.12"), current("3.14"),
                           f"{DEFAULT.name}-py3.14-{'3' * 16}"])
    assert result.stdout.splitlines()[-1] == f"freed {cached.human(pruned)}"
    assert not list((cache / "toolchains").glob(f"*-py3.13-{'2' * 16}*"))  # its log too
    assert run(cache, "prune").stdout == "nothing to prune: every venv is a profile's current one\n"


def test_a_venv_a_build_uses_is_not_removed_and_is_named(cache: Path) -> None:
    in_use = cache / "toolchains" / current("3.11")
    with subprocess.Popen(
            [sys.executable, "-c", "import sys, time; from pathlib import Path; "
             "from wheelsmith.toolchain.venv import hold; hold(Path(sys.argv[1])); "
             "print('held', flush=True); time.sleep(60)", str(in_use)],
            stdout=subprocess.PIPE, text=True) as holder:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "held\n"
        refused = run(cache, "remove", DEFAULT.name, "--python", "3.11")
        assert refused.returncode == 7, refused.stderr
        assert refused.stderr.splitlines()[0] == (
            f"error: 1 venv(s) kept: {in_use} is in use: a build, or its creation, holds it")
        assert (in_use / MARKER).is_file()
        holder.kill()
    removed = run(cache, "remove", DEFAULT.name, "--python", "3.11")
    assert removed.returncode == 0, removed.stderr
    assert not in_use.exists()
    assert not (cache / "toolchains" / f"{in_use.name}.log").exists()


def test_removing_a_profile_removes_every_python_and_the_links_to_them(cache: Path) -> None:
    result = run(cache, "remove", DEFAULT.name)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (cache / "toolchains").iterdir() if p.is_dir()) == [
        f"cu129-torch2.8-py3.11-{'1' * 16}"]
    unknown = run(cache, "remove", "cu999-torch9.9")
    assert unknown.returncode == 4
    assert unknown.stderr.splitlines()[0] == (
        f"error: no venv of cu999-torch9.9 in {cache / 'toolchains'}")


@given(st.integers(0, 10**13))
def test_sizes_are_said_in_the_largest_unit_under_the_size(size: int) -> None:
    said = cached.human(size)
    number, unit = said.split(" ")
    scale = {"GB": 1e9, "MB": 1e6, "kB": 1e3, "B": 1}[unit]
    assert float(number) * scale == pytest.approx(size, rel=0.06, abs=1)
    assert unit == "B" or float(number) >= 1


@pytest.mark.toolchain
def test_a_process_that_builds_with_a_toolchain_holds_it_against_removal(
        toolchain: Toolchain) -> None:
    """ensure_profile holds the venv's lock shared for the process's life (the `toolchain`
    fixture called it in this process): another process cannot take it to remove the venv."""
    lock = lock_path(toolchain.python.parent.parent)
    probe = subprocess.run(
        [sys.executable, "-c", "import fcntl, sys; f = open(sys.argv[1], 'rb'); "
         "fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)", str(lock)],
        capture_output=True, text=True, check=False)
    assert probe.returncode == 1
    assert "BlockingIOError" in probe.stderr


@pytest.mark.skipif(shutil.which("unshare") is None, reason="no unshare: no mount namespace")
def test_a_venv_on_a_read_only_cache_is_built_with_unheld(tmp_path: Path) -> None:
    """The image's cache is read-only for a build container's user: no lock file can be made
    there, nothing can remove the venv either, and the build goes on."""
    (tmp_path / "venv").mkdir()
    script = (f"mount --bind {tmp_path} {tmp_path} && mount -o remount,ro,bind {tmp_path} && "
              f"{sys.executable} -c 'from pathlib import Path; from wheelsmith.toolchain import "
              f"venv; venv.hold(Path(\"{tmp_path}/venv\")); print(venv._HELD)'")
    result = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True,
                            text=True, cwd=REPO, check=False)
    if "Operation not permitted" in result.stderr:
        pytest.skip(f"no mount namespace here: {result.stderr.strip()}")
    assert (result.returncode, result.stdout) == (0, "[]\n"), result.stderr
