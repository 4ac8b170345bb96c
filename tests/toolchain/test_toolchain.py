"""Toolchain venvs from pinned profiles: created for real, refused clearly when pins are bad."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tests.conftest import DEFAULT_PROFILE, REPO, wheelsmith
from wheelsmith import cmd, locations
from wheelsmith.errors import RecipeError, ToolchainError
from wheelsmith.toolchain.env import Toolchain
from wheelsmith.toolchain.profile import load_profile
from wheelsmith.toolchain.tools import auditwheel_for, ensure_tools
from wheelsmith.toolchain.venv import (
    FILE_TIME,
    MARKER,
    _fix_times_once,
    ensure_profile,
    venv_root,
)

pytestmark = pytest.mark.toolchain


def test_tools_venv_gives_a_working_cuobjdump(tmp_path: Path) -> None:
    tools = ensure_tools(load_profile(DEFAULT_PROFILE), Path(sys.executable), tmp_path)
    version = cmd.run([tools.cuobjdump, "--version"], stream=False).stdout
    assert "cuobjdump" in version
    assert ensure_tools(load_profile(DEFAULT_PROFILE), Path(sys.executable), tmp_path) == tools
    assert tools.auditwheel is not None  # the platform report's tool, from the same venv


def test_unresolvable_pin_fails_clearly_and_leaves_nothing(tmp_path: Path) -> None:
    profile = replace(load_profile(DEFAULT_PROFILE), tools=("nvidia-cuda-cuobjdump==0.0.0",))
    with pytest.raises(ToolchainError) as caught:
        ensure_tools(profile, Path(sys.executable), tmp_path)
    assert caught.value.message.startswith("could not create ")
    assert caught.value.message.endswith(": pip install of the pinned packages failed with "
                                         "exit code 1")
    assert any("nvidia-cuda-cuobjdump==0.0.0" in line for line in caught.value.tail)
    assert [p.name for p in (tmp_path / "tools").iterdir() if p.is_dir()] == []


def test_a_venv_made_under_an_older_key_with_the_same_pins_is_linked_not_made_again(
        toolchain: Toolchain, tmp_path: Path) -> None:
    """A profile key's format changed once (the pins of one Python, issue 20): the venv an
    older key named (5 GB, minutes to make) serves the new key when its pins for that Python
    are the same; one with other pins is not taken."""
    base = load_profile(DEFAULT_PROFILE)
    real = venv_root(base, "3.11", locations.cache_dir()).resolve()  # (perhaps itself linked)
    older = tmp_path / "toolchains" / f"{base.name}-py3.11-{'0' * 16}"
    older.parent.mkdir()
    subprocess.run(["cp", "-al", str(real), str(older)], check=True)  # hard links: no space
    shutil.copy(real.with_name(f"{real.name}.requirements.txt"),
                older.with_name(f"{older.name}.requirements.txt"))

    reused = ensure_profile(base, Path(sys.executable), tmp_path)
    root = venv_root(base, "3.11", tmp_path)
    assert (root.is_symlink(), root.readlink()) == (True, Path(older.name))
    assert (reused.python, reused.torch_version) == (root / "bin" / "python", base.torch)

    other = replace(base, tools=("nvidia-cuda-cuobjdump==0.0.0", *base.tools[1:]))
    with pytest.raises(ToolchainError) as caught:  # other pins: made (and failing), not linked
        ensure_profile(other, Path(sys.executable), tmp_path)
    assert caught.value.message.startswith("could not create ")
    assert not venv_root(other, "3.11", tmp_path).exists()


def test_profile_with_a_loose_pin_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "cu130-torch2.14.yaml"
    text = DEFAULT_PROFILE.read_text()
    line = text[:text.index("ninja==1.13.2")].count("\n") + 1  # where the pin is
    item = load_profile(DEFAULT_PROFILE).requirements.index("ninja==1.13.2")
    bad.write_text(text.replace("ninja==1.13.2", "ninja>=1.11"))
    with pytest.raises(RecipeError) as caught:
        load_profile(bad)
    assert [p.render() for p in caught.value.problems] == [
        f"{bad}:{line}:3: 'requirements[{item}]' must be an exact pin, NAME==VERSION, optionally "
        "'; python_version == \"3.X\"'; got 'ninja>=1.11'"]


def test_toolchain_requirements_lists_every_pin() -> None:
    result = wheelsmith("toolchain", "requirements", "cu130-torch2.14", cwd=REPO, check=True)
    pins = result.stdout.splitlines()
    profile = load_profile(DEFAULT_PROFILE)
    assert pins == list(dict.fromkeys(profile.requirements + profile.tools))
    assert all("==" in pin.split(";")[0] for pin in pins)


def test_platform_check_is_skipped_not_guessed_when_auditwheel_cannot_be_had(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """An offline machine building with its system CUDA (the H200 runs) has no auditwheel on
    PATH and cannot install the tools venv: the build goes on, the platform tag unchecked."""
    monkeypatch.setenv("WHEELSMITH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    for key, value in {"PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": "http://127.0.0.1:9/",
                       "PIP_RETRIES": "0", "PIP_TIMEOUT": "2"}.items():
        monkeypatch.setenv(key, value)
    assert auditwheel_for(None, Path(sys.executable)) is None
    assert "the platform tag is not checked: no auditwheel (could not create" in caplog.text
    assert not list((tmp_path / "cache" / "tools").glob("*/bin"))  # nothing half-made kept


def fake_venv(root: Path, marker: dict[str, object]) -> dict[str, Path]:
    """A venv's shape: a header, a Python source and its bytecode, a link, the marker."""
    files = {"header": root / "site" / "torch" / "include" / "Half.h",
             "source": root / "site" / "torch" / "__init__.py",
             "bytecode": root / "site" / "torch" / "__pycache__" / "__init__.cpython-311.pyc"}
    for path in files.values():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
    (root / "lib64").symlink_to("site")
    (root / MARKER).write_text(json.dumps(marker))
    return files


def test_a_toolchain_venvs_headers_get_one_fixed_time_and_python_sources_keep_theirs(
        tmp_path: Path) -> None:
    """nvcc -lineinfo records each header's mtime in the device code: two installs of one
    profile must not differ there; a .py keeps its time, which its .pyc names."""
    files = fake_venv(tmp_path / "venv", {"python": "3.11"})
    before = {name: path.stat().st_mtime for name, path in files.items()}
    _fix_times_once(tmp_path / "venv")
    assert files["header"].stat().st_mtime == FILE_TIME
    assert (tmp_path / "venv" / "lib64").lstat().st_mtime == FILE_TIME
    assert [files[n].stat().st_mtime for n in ("source", "bytecode")] == [
        before["source"], before["bytecode"]]
    assert json.loads((tmp_path / "venv" / MARKER).read_text()) == {
        "python": "3.11", "file_time": FILE_TIME}


def test_a_read_only_toolchain_with_install_times_says_how_to_get_fixed_ones(
        tmp_path: Path) -> None:
    """An image built before the times were fixed: its venv cannot be changed in the
    container (here: a read-only bind mount), so the build says its wheels differ and how to
    rebuild the image."""
    files = fake_venv(tmp_path / "venv", {"python": "3.11"})
    code = ("import logging, pathlib; logging.basicConfig(); "
            "from wheelsmith.toolchain.venv import _fix_times_once; "
            f"_fix_times_once(pathlib.Path({str(tmp_path / 'venv')!r}))")
    done = subprocess.run(
        ["unshare", "-rm", "sh", "-c", 'mount --bind "$1" "$1" && mount -o remount,bind,ro '
         '"$1" && exec "$2" -c "$3"', "read-only", str(tmp_path / "venv"), sys.executable,
         code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert files["header"].stat().st_mtime != FILE_TIME
    assert "for an image, rebuild it (wheelsmith image build --rebuild)" in done.stderr
