"""No registry host name is written into the repository: where packages and images come from
is the user's pip configuration, the machine's apt sources and the container engine's registry
configuration, asked at run time (issue 13)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.conftest import REPO

HOSTS = ("pypi.org", "pythonhosted.org", "pypi.python.org", "deb.debian.org",
         "security.debian.org", "ftp.debian.org", "archive.ubuntu.com", "docker.io",
         "docker.com", "ghcr.io", "quay.io", "gcr.io", "nvcr.io", "download.pytorch.org",
         "npmjs.org", "npmjs.com", "anaconda.org", "anaconda.com", "download.nvidia.com")
# Files that may name a host, each with the reason it cannot be avoided.
ALLOWED = {"tests/test_no_registry_hosts.py": "the list of hosts this test looks for"}
# Debian names its Docker engine package like Docker's registry host. These phrases name the
# package, and only they are not counted: .ci/run's list of packages, prose and commands.
PACKAGE_PHRASES = ("docker.io:dockerd", "debian's docker.io", "apt install docker.io")


def hosts_in(root: Path, files: list[str]) -> list[str]:
    """`path:line: host` for every registry host named in `files` (relative to `root`)."""
    found = []
    for name in files:
        try:
            text = (root / name).read_text(encoding="utf-8")
        except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
            continue  # binary files, submodules, files deleted in the work tree
        for number, line in enumerate(text.splitlines(), 1):
            scanned = line.lower()
            for phrase in PACKAGE_PHRASES:
                scanned = scanned.replace(phrase, "")
            found += [f"{name}:{number}: {host}" for host in HOSTS if host in scanned]
    return found


def tracked_files() -> list[str]:
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True,
                            text=True, check=True).stdout
    return [name for name in listed.split("\0") if name and name not in ALLOWED]


def test_no_registry_host_is_named_in_any_tracked_file() -> None:
    assert hosts_in(REPO, tracked_files()) == []


def test_the_scan_finds_a_host_in_a_url_and_in_prose(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text('INDEX = "https://pypi.org/simple"\n')
    (tmp_path / "b.md").write_text("ok\nimages come from Docker.io by default\n")
    (tmp_path / "c.bin").write_bytes(b"\xff\xfe pypi.org")
    assert hosts_in(tmp_path, ["a.py", "b.md", "c.bin"]) == ["a.py:1: pypi.org",
                                                             "b.md:2: docker.io"]


def test_the_debian_package_docker_io_is_no_host_but_the_registry_still_is(
        tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("With Debian's docker.io 20.10 (apt install docker.io)\n"
                                   "for pkg in runc:runc docker.io:dockerd; do\n"
                                   "Debian's docker.io pulls from docker.io by default\n"
                                   "the docker.io package\n")
    assert hosts_in(tmp_path, ["a.md"]) == ["a.md:3: docker.io", "a.md:4: docker.io"]
