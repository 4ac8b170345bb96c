"""Real index servers on 127.0.0.1 for the upload tests: devpi-server and pypiserver, installed
from PyPI at the versions pinned in pyproject.toml's `index-servers` extra into one venv of
their own (made once under a lock, completed by a marker written last, reused by every test)."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import REPO
from wheelsmith import locations
from wheelsmith.files import exclusive_lock

CHANNEL = "cu130-torch2.14"


def pins() -> list[str]:
    """The `index-servers` extra's pins (read as text: tomllib is not in Python 3.10)."""
    found = re.search(r'^index-servers = \[(.*?)\]$', (REPO / "pyproject.toml").read_text(),
                      re.MULTILINE)
    assert found is not None, "pyproject.toml has no index-servers extra"
    return re.findall(r'"([^"]+)"', found[1])


def servers_venv() -> Path:
    """The venv holding the pinned servers (made on first use)."""
    wanted = pins()
    digest = hashlib.sha256("\n".join(wanted).encode()).hexdigest()[:12]
    root = locations.cache_dir() / "test-servers" / f"py{sys.version_info[0]}." \
        f"{sys.version_info[1]}-{digest}"
    marker = root / ".complete"
    with exclusive_lock(root.parent / f"{root.name}.lock"):
        if not marker.is_file():
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(root)], check=True)
            subprocess.run([str(root / "bin" / "python"), "-m", "pip", "install", "-q",
                            "--disable-pip-version-check", *wanted], check=True)
            marker.write_text("\n".join(wanted) + "\n")
    return root / "bin"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class IndexServer:
    """A running server: where a channel's uploads go and where its simple API is (both
    templates with {channel}), the upload credentials as environment variables, and the
    `--channel` a server with one index needs."""

    name: str
    to: str
    simple: str
    env: dict[str, str]
    log: Path
    one_channel: bool = False
    channels: list[str] = field(default_factory=list)

    def simple_url(self, channel: str = CHANNEL) -> str:
        return self.simple.replace("{channel}", channel)

    def args(self, channel: str = CHANNEL) -> list[str]:
        """The publish options for this server."""
        given = ["--channel", channel] if self.one_channel else []
        return ["--to", self.to, "--simple", self.simple, *given]


def _wait(url: str, proc: subprocess.Popen[bytes], log: Path, seconds: float = 180) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, f"{url} did not answer in {seconds} s"
            time.sleep(0.2)


@contextlib.contextmanager
def _running(argv: list[str], log: Path, ready: str) -> Iterator[None]:
    with log.open("wb") as sink:
        proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        _wait(ready, proc, log)
        yield
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=30)
        proc.kill()  # nothing when it has ended
        proc.wait()


def _json(url: str, method: str, data: dict[str, object], auth: tuple[str, str]) -> None:
    token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
    request = urllib.request.Request(url, data=json.dumps(data).encode(), method=method,
                                     headers={"Content-Type": "application/json",
                                              "Accept": "application/json",
                                              "Authorization": f"Basic {token}"})
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.status in (200, 201), response.read()


@contextlib.contextmanager
def devpi(directory: Path, channels: tuple[str, ...] = (CHANNEL,)) -> Iterator[IndexServer]:
    """devpi-server without a PyPI mirror, a user `ci` and one non-volatile index per
    channel (`ci/<channel>`): files there never change, as in a wheelsmith index."""
    bin_dir = servers_venv()
    data, port = directory / "devpi", free_port()
    subprocess.run([str(bin_dir / "devpi-init"), "--serverdir", str(data), "--no-root-pypi",
                    "--root-passwd", "root-secret"], check=True, capture_output=True)
    url = f"http://127.0.0.1:{port}"
    with _running([str(bin_dir / "devpi-server"), "--serverdir", str(data), "--host",
                   "127.0.0.1", "--port", str(port), "--offline-mode"],
                  directory / "devpi.log", f"{url}/+api"):
        _json(f"{url}/ci", "PUT", {"password": "ci-secret"}, ("root", "root-secret"))
        for channel in channels:
            _json(f"{url}/ci/{channel}", "PUT",
                  {"type": "stage", "volatile": False, "bases": []}, ("ci", "ci-secret"))
        yield IndexServer("devpi", f"{url}/ci/{{channel}}/", f"{url}/ci/{{channel}}/+simple/",
                          {"WHEELSMITH_UPLOAD_USER": "ci", "WHEELSMITH_UPLOAD_TOKEN":
                           "ci-secret"}, directory / "devpi.log", channels=list(channels))


@contextlib.contextmanager
def pypiserver(directory: Path) -> Iterator[IndexServer]:
    """pypiserver over one directory (one channel's index), uploads for the htpasswd user
    `ci`, no redirect to PyPI for names it does not have."""
    bin_dir = servers_venv()
    packages, port = directory / "packages", free_port()
    packages.mkdir(parents=True)
    htpasswd = directory / "htpasswd"
    subprocess.run([str(bin_dir / "python"), "-c", "import sys\n"
                    "from passlib.apache import HtpasswdFile\n"
                    "f = HtpasswdFile(sys.argv[1], new=True)\n"
                    "f.set_password('ci', 'ci-secret')\nf.save()", str(htpasswd)], check=True)
    url = f"http://127.0.0.1:{port}"
    with _running([str(bin_dir / "pypi-server"), "run", "-i", "127.0.0.1", "-p", str(port),
                   "-P", str(htpasswd), "-a", "update", "--disable-fallback", str(packages)],
                  directory / "pypiserver.log", f"{url}/simple/"):
        yield IndexServer("pypiserver", f"{url}/", f"{url}/simple/",
                          {"WHEELSMITH_UPLOAD_USER": "ci", "WHEELSMITH_UPLOAD_TOKEN":
                           "ci-secret"}, directory / "pypiserver.log", one_channel=True,
                          channels=[CHANNEL])


def listed_sha256(simple_url: str, project: str, filename: str) -> str | None:
    """The sha256 a server's HTML project page gives for `filename` (its #sha256= link)."""
    try:
        with urllib.request.urlopen(f"{simple_url}{project}/", timeout=60) as response:
            page = response.read().decode()
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return None
        raise
    match = re.search(rf'href="[^"#]*{re.escape(filename)}#sha256=([0-9a-f]{{64}})"', page)
    return match[1] if match else None
