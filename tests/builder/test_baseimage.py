"""The build image's base locked on first use (issue 13 item 5), with real podman on a machine
where no registry answers (an empty registries configuration makes that so on any machine):
the base is made with debootstrap (scripts/make-base-image.sh) and locked by its ID in the
user's images.lock; a pinned local base whose ID changed is refused in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.builder.test_container import PROBLEM, no_registry_env
from tests.conftest import REPO, Docker

pytestmark = pytest.mark.skipif(PROBLEM is not None, reason=f"no podman build: {PROBLEM}")

BASE = "localhost/wheelsmith-base:bookworm"


def image_base(env: dict[str, str], engine: str = "podman") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wheelsmith", "image", "base", "--engine",
                           engine], cwd=REPO, env=env, capture_output=True, text=True,
                          check=False)


def image_id(ref: str) -> str:
    shown = subprocess.run(["podman", "image", "inspect", ref], capture_output=True, text=True,
                           check=True).stdout
    return str(json.loads(shown)[0]["Id"])


def test_without_a_pin_or_a_registry_the_debootstrap_base_is_locked_by_its_id(
        tmp_path: Path) -> None:
    env = no_registry_env(tmp_path / "config")
    first = assert_locked_by_id_then_pinned(lambda: image_base(env), "debian-bookworm", BASE,
                                            tmp_path / "config" / "wheelsmith" / "images.lock")
    assert "no registry answered for debian:bookworm-slim" in first.stderr


def assert_locked_by_id_then_pinned(run: Callable[[], subprocess.CompletedProcess[str]],
                                    key: str, ref: str, lock: Path
                                    ) -> subprocess.CompletedProcess[str]:
    """`run` (an `image base`) locks the local `ref` by its ID as `key`; run again, it reads
    the lock and pulls nothing. Returns the first run."""
    first = run()
    assert first.returncode == 0, first.stderr
    found = image_id(ref)
    described = f"{key}: {ref} (local, id {found}: no registry answered)"
    assert first.stdout == f"locked {described} in {lock}\n"
    assert lock.read_text().splitlines()[-2:] == [f'{key}: "{ref}"', f'{key}-id: "{found}"']
    again = run()
    assert again.stdout == f"pinned {described} in {lock}\n", again.stderr
    assert "no registry answered" not in again.stderr  # the lock is read, nothing is pulled
    return first


def test_a_locked_local_base_whose_id_changed_is_refused_with_what_to_do(
        tmp_path: Path) -> None:
    env = no_registry_env(tmp_path / "config")
    lock = tmp_path / "config" / "wheelsmith" / "images.lock"
    lock.parent.mkdir(parents=True)
    lock.write_text(f'debian-bookworm: "{BASE}"\ndebian-bookworm-id: "{"0" * 64}"\n')
    result = image_base(env)
    assert result.returncode == 7
    assert result.stderr.splitlines() == [
        f"error: the base {BASE} recorded in {lock} (id {'0' * 64}) is now {image_id(BASE)}",
        f"hint: remove the debian-bookworm lines from {lock} to make and lock it again, or "
        "load the recorded image (podman save | docker load)"]


@pytest.mark.container
def test_a_base_locked_by_podman_moves_into_docker_with_its_id(docker: Docker,
                                                                tmp_path: Path) -> None:
    """One lock serves both engines: docker lacks the recorded base, podman holds it with the
    recorded ID, so it is moved across (podman save | docker load) and keeps that ID."""
    env = {**no_registry_env(tmp_path / "config"), "PATH": docker.env["PATH"]}
    lock = tmp_path / "config" / "wheelsmith" / "images.lock"
    assert image_base(env).returncode == 0  # podman locks it
    found = image_id(BASE)
    subprocess.run(["docker", "rmi", BASE], capture_output=True, check=False)  # docker lacks it
    described = f"debian-bookworm: {BASE} (local, id {found}: no registry answered)"
    moved = image_base(env, "docker")
    assert moved.returncode == 0, moved.stderr
    assert moved.stdout == f"pinned {described} in {lock}\n"
    assert moved.stderr.splitlines() == [
        f"moved {BASE} (id {found}) from podman into docker (podman save | docker load)"]
    shown = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", BASE],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert shown == f"sha256:{found}"
    again = image_base(env, "docker")
    assert (again.stdout, again.stderr) == (f"pinned {described} in {lock}\n", "")
