"""Real clients against `wheelsmith serve` on 127.0.0.1: pip and uv install from the index,
resolve from `.metadata` alone, refuse tampered bytes, skip yanked files, pick the channel's
build. The wheels are small pure-Python stand-ins so that resolution, not compilation, is what
is tested (`torch` here is a stand-in named like the real one, as in research/index.md)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import serve
from tests.wheels import make_wheel
from wheelsmith.builder.stamp import stamp
from wheelsmith.index import ledger
from wheelsmith.index.publish import publish, yank

CHANNEL = "cu130-torch2.14"
UV = Path(sys.executable).with_name("uv")
CLEAN_ENV = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
CLEAN_ENV.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1",
                 UV_NO_CONFIG="1", PIP_NO_INPUT="1")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "index"


@pytest.fixture
def wheels(tmp_path: Path) -> Path:
    directory = tmp_path / "wheels"
    directory.mkdir()
    return directory


def venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    return path / "bin" / "python"


Result = subprocess.CompletedProcess[str]


def pip_install(python: Path, index_url: str, *requirements: str) -> Result:
    return subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                           "--no-cache-dir", "--index-url", index_url, *requirements],
                          capture_output=True, text=True, env=CLEAN_ENV, check=False)


def uv_install(python: Path, index_url: str, *requirements: str) -> Result:
    return subprocess.run([str(UV), "pip", "install", "--python", str(python), "--no-cache",
                           "--index-url", index_url, *requirements],
                          capture_output=True, text=True, env=CLEAN_ENV, check=False)


INSTALLERS = {"pip": pip_install, "uv": uv_install}


def installed(python: Path, name: str) -> str:
    return subprocess.run([str(python), "-c", "import importlib.metadata as m, sys; "
                           "print(m.version(sys.argv[1]))", name], capture_output=True,
                          text=True, check=True).stdout.strip()


def get(url: str, accept: str | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:  # a loaded machine is slow
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def test_server_negotiates_and_refuses_everything_else(tmp_path: Path, wheels: Path,
                                                        root: Path) -> None:
    wheel = make_wheel(wheels, "demo-ext", "1.0.0+cu.13.0.torch.2.14.sm.120")
    publish(wheel, root, channel=CHANNEL)
    record = ledger.read(root).by_filename[wheel.name]
    with serve(root, tmp_path / "server.log") as server:
        page = f"{server.url}/{CHANNEL}/simple/demo-ext/"
        status, headers, body = get(page, "application/vnd.pypi.simple.v1+json")
        assert (status, headers["Content-Type"]) == (200, "application/vnd.pypi.simple.v1+json")
        assert headers["Vary"] == "Accept"
        assert headers["Cache-Control"] == "max-age=60, must-revalidate"
        assert b'"api-version": "1.1"' in body
        status, headers, body = get(page, "text/html")
        assert (status, headers["Content-Type"]) == (200, "text/html; charset=utf-8")
        assert b"%2Bcu.13.0.torch.2.14.sm.120" in body
        assert get(page, "image/png")[0] == 406
        assert get(f"{server.url}/{CHANNEL}/simple/not-here/")[0] == 404
        assert get(f"{server.url}/{CHANNEL}/simple/demo-ext")[0] == 200  # via 301 to .../
        for encoded in (record.path.replace("+", "%2B"), record.path):
            status, headers, body = get(f"{server.url}/{encoded}")
            assert (status, body) == (200, wheel.read_bytes())
            assert headers["Cache-Control"] == "public, max-age=31536000, immutable"
        status, _, body = get(f"{server.url}/{record.path}.metadata")
        assert (status, body[:16]) == (200, b"Metadata-Version")
        for hostile in ("/ledger.jsonl", "/.publish.lock", "/files/", f"/{CHANNEL}/",
                        "/../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd",
                        f"/{CHANNEL}/simple/../../ledger.jsonl", "//etc/passwd",
                        f"/files/{record.sha256[:2]}/{record.sha256}/..%2F..%2F..%2Fledger.jsonl",
                        "/files/xx/../../ledger.jsonl", "/pypi/simple/torch/"):
            assert get(f"{server.url}{hostile}")[0] == 404, hostile
    assert f'"GET /{CHANNEL}/simple/demo-ext/ HTTP/1.1" 200' in server.log.read_text()


@pytest.mark.parametrize("client", INSTALLERS)
def test_resolution_reads_metadata_and_downloads_only_the_chosen_wheel(
    tmp_path: Path, wheels: Path, root: Path, client: str
) -> None:
    old = make_wheel(wheels, "demo-ext", "1.0.0", tags="py3-none-any")
    new = make_wheel(wheels, "demo-ext", "2.0.0", tags="py3-none-any",
                     requires=("no-such-dependency==1.0",))
    for wheel in (old, new):
        publish(wheel, root, channel=CHANNEL)
    python = venv(tmp_path / "venv")
    with serve(root, tmp_path / "server.log") as server:
        result = INSTALLERS[client](python, f"{server.url}/{CHANNEL}/simple/", "demo-ext")
    assert result.returncode == 0, result.stderr
    assert installed(python, "demo-ext") == "1.0.0"
    files = [p.rsplit("/", 1)[1] for p in server.requests() if p.startswith("/files/")]
    assert f"{new.name}.metadata" in files
    assert new.name not in files  # the rejected candidate was never downloaded
    assert files.index(old.name) > files.index(f"{new.name}.metadata")


@pytest.mark.parametrize("client", INSTALLERS)
def test_tampered_file_is_refused_by_the_hash_check(tmp_path: Path, wheels: Path, root: Path,
                                                   client: str) -> None:
    wheel = make_wheel(wheels, "demo-ext", "1.0.0", tags="py3-none-any")
    publish(wheel, root, channel=CHANNEL)
    stored = root / ledger.read(root).by_filename[wheel.name].path
    evil = make_wheel(tmp_path, "demo-ext", "1.0.0", tags="py3-none-any",
                      files={"demo_ext/__init__.py": b"print('evil')\n"})
    stored.write_bytes(evil.read_bytes())
    python = venv(tmp_path / "venv")
    with serve(root, tmp_path / "server.log") as server:
        result = INSTALLERS[client](python, f"{server.url}/{CHANNEL}/simple/", "demo-ext")
    assert result.returncode != 0
    expected = "THESE PACKAGES DO NOT MATCH THE HASHES" if client == "pip" else "Hash mismatch"
    assert expected in result.stdout + result.stderr


@pytest.mark.parametrize("client", INSTALLERS)
def test_yanked_file_is_skipped_unless_pinned(tmp_path: Path, wheels: Path, root: Path,
                                              client: str) -> None:
    good = make_wheel(wheels, "demo-ext", "1.0.0", tags="py3-none-any")
    bad = make_wheel(wheels, "demo-ext", "1.1.0", tags="py3-none-any")
    for wheel in (good, bad):
        publish(wheel, root, channel=CHANNEL)
    yank(root, bad.name, "wrong results on sm_103")
    with serve(root, tmp_path / "server.log") as server:
        index_url = f"{server.url}/{CHANNEL}/simple/"
        unpinned = venv(tmp_path / "a")
        assert INSTALLERS[client](unpinned, index_url, "demo-ext").returncode == 0
        pinned = venv(tmp_path / "b")
        result = INSTALLERS[client](pinned, index_url, "demo-ext==1.1.0")
    assert installed(unpinned, "demo-ext") == "1.0.0"
    assert result.returncode == 0, result.stderr
    assert installed(pinned, "demo-ext") == "1.1.0"


@pytest.mark.parametrize("client", INSTALLERS)
def test_each_channel_installs_its_own_torch_build(tmp_path: Path, wheels: Path, root: Path,
                                                   client: str) -> None:
    channels = {"cu128-torch2.9": ("12.8", "2.9"), "cu130-torch2.13": ("13.0", "2.13"),
                "cu130-torch2.14": ("13.0", "2.14")}
    for channel, (cuda, torch) in channels.items():
        directory = wheels / channel
        directory.mkdir()
        label = f"cu.{cuda}.torch.{torch}.sm.120"
        publish(make_wheel(directory, "demo-ext", f"1.0.0+{label}",
                           requires=(f"torch=={torch}.*",)), root, channel=channel)
        publish(make_wheel(directory, "torch", f"{torch}.0", tags="py3-none-any"), root,
                channel=channel)
    python = venv(tmp_path / "venv")
    with serve(root, tmp_path / "server.log") as server:
        result = INSTALLERS[client](python, f"{server.url}/cu130-torch2.13/simple/", "demo-ext")
    assert result.returncode == 0, result.stderr
    assert installed(python, "demo-ext") == "1.0.0+cu.13.0.torch.2.13.sm.120"
    assert installed(python, "torch") == "2.13.0"


def test_pip_installs_from_a_file_url(tmp_path: Path, wheels: Path, root: Path) -> None:
    wheel = make_wheel(wheels, "demo-ext", "1.0.0", tags="py3-none-any")
    publish(wheel, root, channel=CHANNEL)
    python = venv(tmp_path / "venv")
    result = pip_install(python, (root / CHANNEL / "simple").as_uri() + "/", "demo-ext")
    assert result.returncode == 0, result.stderr
    assert installed(python, "demo-ext") == "1.0.0"


def test_uv_binary_is_installed() -> None:
    assert shutil.which(str(UV)) is not None, "uv comes from the dev extra (pip install -e .[dev])"


def test_a_new_index_is_served_empty_and_fills_while_served(tmp_path: Path, wheels: Path,
                                                            root: Path) -> None:
    wheel = make_wheel(wheels, "demo-ext", "1.0+cu.13.0.torch.2.14.sm.120")
    with serve(root, tmp_path / "serve.log") as server:
        status, _, _ = get(f"{server.url}/")
        assert status == 200
        publish(wheel, root, channel=CHANNEL)
        status, _, body = get(f"{server.url}/{CHANNEL}/simple/demo-ext/")
    assert status == 200
    assert wheel.name.encode() in body
    assert "a new, empty index in " in (tmp_path / "serve.log").read_text()


def banner(server_log: Path) -> list[str]:
    """The install commands `wheelsmith serve` printed (it prints them after its address)."""
    deadline = time.monotonic() + 30
    while not (lines := [line.strip() for line in server_log.read_text().splitlines()
                         if "install --index-url" in line]):
        assert time.monotonic() < deadline, server_log.read_text()
        time.sleep(0.05)
    return lines


@pytest.mark.parametrize("client", ["pip", "uv"])
def test_the_banner_commands_install_a_published_wheel_as_printed(
        tmp_path: Path, wheels: Path, root: Path, client: str) -> None:
    publish(make_wheel(wheels, "demo-ext", "1.0+cu.13.0.torch.2.14.sm.120"), root,
            channel=CHANNEL)
    target = tmp_path / "venv"  # with its own pip: the `pip` the command names
    subprocess.run([sys.executable, "-m", "venv", str(target)], check=True)
    tool = {"pip": "pip install", "uv": "uv pip install"}[client]
    with serve(root, tmp_path / "server.log") as server:
        (command,) = [line for line in banner(server.log) if line.startswith(f"{tool} ")]
        assert command == f"{tool} --index-url {server.url}/{CHANNEL}/simple/ --no-deps PACKAGE"
        path = os.pathsep.join([str(target / "bin"), str(UV.parent), os.environ["PATH"]])
        result = subprocess.run(shlex.split(command.replace("PACKAGE", "demo-ext")),
                                env={**CLEAN_ENV, "PATH": path, "VIRTUAL_ENV": str(target)},
                                capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert installed(target / "bin" / "python", "demo-ext") == "1.0+cu.13.0.torch.2.14.sm.120"


def test_an_empty_index_says_how_to_install_once_a_channel_is_published(
        tmp_path: Path, root: Path) -> None:
    with serve(root, tmp_path / "server.log") as server:
        assert banner(server.log) == [
            f"no channel yet; once one is published: pip install --index-url {server.url}/"
            "CHANNEL/simple/ --no-deps PACKAGE"]


def test_serving_a_directory_that_is_not_an_index_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "photos"
    other.mkdir()
    (other / "cat.jpg").write_bytes(b"...")
    result = subprocess.run([sys.executable, "-m", "wheelsmith", "serve", "--index", str(other),
                             "--port", "0"], capture_output=True, text=True, check=False)
    assert result.returncode == 14
    assert result.stderr == (f"error: {other} is not a wheelsmith index (no ledger.jsonl)\n"
                             "hint: point --index at an index, an empty directory or a new "
                             "path\n")
    assert sorted(p.name for p in other.iterdir()) == ["cat.jpg"]


@pytest.mark.parametrize("client", INSTALLERS)
def test_a_manylinux_tagged_wheel_is_published_served_and_installed(
        tmp_path: Path, wheels: Path, root: Path, client: str) -> None:
    """The name the stamp gives (manylinux.py) passes publish's checks and both installers."""
    raw = make_wheel(tmp_path, "demo-ext", "1.0.0")
    wheel = stamp(raw, wheels, label="cu.13.0.torch.2.14.sm.120", torch_requirement=None,
                  provenance={}, epoch=0, platform="manylinux_2_17_x86_64.manylinux2014_x86_64")
    assert publish(wheel, root, channel=CHANNEL).filename == (
        "demo_ext-1.0.0+cu.13.0.torch.2.14.sm.120-cp311-cp311-"
        "manylinux_2_17_x86_64.manylinux2014_x86_64.whl")
    python = venv(tmp_path / "venv")
    with serve(root, tmp_path / "server.log") as server:
        result = INSTALLERS[client](python, f"{server.url}/{CHANNEL}/simple/", "demo-ext")
    assert result.returncode == 0, result.stderr
    assert installed(python, "demo-ext") == "1.0.0+cu.13.0.torch.2.14.sm.120"
