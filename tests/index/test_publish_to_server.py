"""`wheelsmith publish --to URL` against real devpi-server and pypiserver on 127.0.0.1 (from
PyPI, pinned: tests/index/servers.py): the upload API twine speaks, the token from the
environment or the keyring (keyring's own package, pointed at a file backend of the tests'
through its own configuration), one index per channel, the local index's rules (the same bytes
again: a no-op; other bytes under a published name: refused, with what the server holds), the
wheel's bytes (and so its provenance) kept; then pip and uv install the published wheel from
each server."""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import keyring
import pytest

from tests.conftest import REPO
from tests.index import file_keyring
from tests.index.servers import CHANNEL, IndexServer, devpi, listed_sha256, pypiserver
from tests.index.test_index_clients import CLEAN_ENV, INSTALLERS, installed, venv
from tests.wheels import make_wheel
from tests.wheels import wheel_with_provenance as provenance_wheel
from wheelsmith.index import upload
from wheelsmith.untrusted.provenance import PROVENANCE_FILE

VERSION = "1.0.0+cu.13.0.torch.2.14.sm.120"
NO_TOKEN = ("WHEELSMITH_UPLOAD_TOKEN", "WHEELSMITH_UPLOAD_USER", "TWINE_PASSWORD",
            "TWINE_USERNAME")
SERVERS = {"devpi": devpi, "pypiserver": pypiserver}


def wheel_with_provenance(directory: Path, name: str, version: str = VERSION,
                          body: bytes = b"x = 1\n", key: str = "k" * 64) -> Path:
    return provenance_wheel(directory, name, version, channel=CHANNEL, body=body, key=key)


def publish_to(server: IndexServer, *wheels: Path, cwd: Path, env: dict[str, str] | None = None,
               args: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """The real CLI, with the server's credentials in the environment (only there)."""
    environment = {**os.environ, **(server.env if env is None else env)}
    return subprocess.run([sys.executable, "-m", "wheelsmith", "publish", *server.args(),
                           *args, *map(str, wheels)], cwd=cwd, capture_output=True,
                          text=True, env=environment, check=False, timeout=600)


OTHER = "cu128-torch2.11"


@pytest.fixture(scope="module", params=sorted(SERVERS))
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[IndexServer]:
    """One server of each kind for the module (devpi with a second channel's index); each test
    publishes a project of its own name."""
    start = SERVERS[request.param]
    where = tmp_path_factory.mktemp(request.param)
    with start(where) if start is pypiserver else devpi(where, (CHANNEL, OTHER)) as running:
        yield running


@pytest.fixture
def project(request: pytest.FixtureRequest) -> str:
    """A project name of this test's own (the module's servers are shared)."""
    return "p-" + hashlib.sha256(request.node.name.encode()).hexdigest()[:10]


def test_publish_to_a_server_then_again_then_other_bytes(tmp_path: Path, server: IndexServer,
                                                        project: str) -> None:
    wheel = wheel_with_provenance(tmp_path / "a", project)
    page = f"{server.simple_url()}{project}/"

    first = publish_to(server, wheel, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert first.stdout == f"published: {wheel.name} -> {page}\n"
    sha256 = hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert listed_sha256(server.simple_url(), project, wheel.name) == sha256

    again = publish_to(server, wheel, cwd=tmp_path)
    assert (again.returncode, again.stdout) == (0, f"already published: {wheel.name} -> {page}\n")

    other = wheel_with_provenance(tmp_path / "b", project, body=b"x = 2\n")
    assert other.name == wheel.name
    refused = publish_to(server, other, cwd=tmp_path)
    other_sha = hashlib.sha256(other.read_bytes()).hexdigest()
    assert refused.returncode == 13, refused.stderr
    assert (f"error: {server.simple_url()} already holds {wheel.name} (sha256 {sha256}); this "
            f"file has {other_sha}") in refused.stderr
    assert listed_sha256(server.simple_url(), project, wheel.name) == sha256
    served = download(server, project, wheel.name)  # the bytes (and the provenance in them)
    assert hashlib.sha256(served).hexdigest() == sha256


def download(server: IndexServer, project: str, filename: str) -> bytes:
    page_url = f"{server.simple_url()}{project}/"
    with urllib.request.urlopen(page_url, timeout=60) as response:
        page = response.read().decode()
    href = page.split(f">{filename}</a>")[0].rsplit('href="', 1)[1].split("#")[0]
    with urllib.request.urlopen(urllib.parse.urljoin(page_url, href), timeout=60) as response:
        return bytes(response.read())


@pytest.mark.parametrize("client", sorted(INSTALLERS))
def test_pip_and_uv_install_what_was_published(tmp_path: Path, server: IndexServer,
                                               project: str, client: str) -> None:
    wheel = wheel_with_provenance(tmp_path / "w", project)
    assert publish_to(server, wheel, cwd=tmp_path).returncode == 0
    python = venv(tmp_path / "venv")
    result = INSTALLERS[client](python, server.simple_url(), project)
    assert result.returncode == 0, result.stderr
    assert installed(python, project) == VERSION
    record = subprocess.run([str(python), "-c", "import importlib.metadata as m, sys; print(m."
                             "distribution(sys.argv[1]).read_text(sys.argv[2]))", project,
                             PROVENANCE_FILE], capture_output=True, text=True, check=True,
                            env=CLEAN_ENV).stdout
    assert json.loads(record)["toolchain"]["channel"] == CHANNEL


def test_the_token_comes_from_the_environment_and_a_wrong_one_is_refused(
        tmp_path: Path, server: IndexServer, project: str) -> None:
    wheel = wheel_with_provenance(tmp_path / "w", project)
    wrong = {**server.env, "WHEELSMITH_UPLOAD_TOKEN": "not-the-token"}
    refused = publish_to(server, wheel, cwd=tmp_path, env=wrong)
    assert refused.returncode == 12, refused.stderr
    assert f"error: the server refused {wheel.name}: HTTP" in refused.stderr
    assert "(sent with credentials from WHEELSMITH_UPLOAD_TOKEN)" in refused.stderr
    assert "not-the-token" not in refused.stderr + refused.stdout
    assert listed_sha256(server.simple_url(), project, wheel.name) is None

    twine_style = {"TWINE_USERNAME": "ci", "TWINE_PASSWORD": "ci-secret"}
    accepted = publish_to(server, wheel, cwd=tmp_path, env=twine_style)
    assert accepted.returncode == 0, accepted.stderr


@pytest.mark.parametrize(("url", "expected"), [
    ("http://ci:ci-secret@127.0.0.1:9/{channel}/",
     "error: --to: '127.0.0.1' is given with credentials in the URL, where every process on the "
     "machine can read them\nhint: set WHEELSMITH_UPLOAD_TOKEN"),
    ("http://127.0.0.1:9/", "error: --to http://127.0.0.1:9/ names no channel: every channel "
     "would share one index, where pip picks among the builds by label, not by your torch\n"),
    ("ftp://127.0.0.1/{channel}/", "error: --to: 'ftp://127.0.0.1/{channel}/' is not an "
     "http:// or https:// URL\n"),
    ("http://127.0.0.1:9/{channel}/{user}/", "error: --to: 'http://127.0.0.1:9/{channel}/{user}/'"
     " has a placeholder other than {channel}\n"),
])
def test_a_url_that_is_no_channel_index_is_refused_before_anything_is_sent(
        tmp_path: Path, url: str, expected: str) -> None:
    wheel = wheel_with_provenance(tmp_path / "w", "demo-ext")
    result = subprocess.run([sys.executable, "-m", "wheelsmith", "publish", "--to", url,
                             str(wheel)], capture_output=True, text=True, check=False)
    assert result.returncode == 4
    assert result.stderr.startswith(expected), result.stderr
    assert "ci-secret" not in result.stderr


@pytest.mark.parametrize("server", ["devpi"], indirect=True)
def test_one_index_per_channel_on_devpi(tmp_path: Path, server: IndexServer,
                                        project: str) -> None:
    mine = wheel_with_provenance(tmp_path / "w", project)
    assert publish_to(server, mine, cwd=tmp_path).returncode == 0
    theirs = publish_to(server, mine, cwd=tmp_path, args=("--channel", OTHER))
    assert theirs.returncode == 0, theirs.stderr
    assert theirs.stdout == f"published: {mine.name} -> {server.simple_url(OTHER)}{project}/\n"
    for channel in (CHANNEL, OTHER):
        assert listed_sha256(server.simple_url(channel), project, mine.name)


def test_another_arch_set_of_a_published_version_is_refused(tmp_path: Path, server: IndexServer,
                                                            project: str) -> None:
    first = wheel_with_provenance(tmp_path / "a", project)
    assert publish_to(server, first, cwd=tmp_path).returncode == 0
    sm90 = wheel_with_provenance(tmp_path / "b", project,
                                 version="1.0.0+cu.13.0.torch.2.14.sm.90")
    refused = publish_to(server, sm90, cwd=tmp_path)
    assert refused.returncode == 12, refused.stderr
    assert (f"error: {server.simple_url()} already holds {project} 1.0.0 for another arch set "
            f"({first.name}); this wheel is {sm90.name}") in refused.stderr


def test_concurrent_publishers_of_one_name_the_server_arbitrates(
        tmp_path: Path, server: IndexServer, project: str) -> None:
    """Six publishers at once, each with its own bytes under one filename: exactly one is
    published, every other is refused naming the bytes the server kept; the server lists
    those bytes and serves them."""
    wheels = [wheel_with_provenance(tmp_path / f"w{i}", project, body=f"x = {i}\n".encode())
              for i in range(6)]
    with concurrent.futures.ThreadPoolExecutor(len(wheels)) as pool:
        results = list(pool.map(lambda w: publish_to(server, w, cwd=tmp_path), wheels))
    kept = listed_sha256(server.simple_url(), project, wheels[0].name)
    winners = [w for w, r in zip(wheels, results, strict=True) if r.returncode == 0]
    assert len(winners) == 1, [(r.returncode, r.stdout, r.stderr[-300:]) for r in results]
    assert kept == hashlib.sha256(winners[0].read_bytes()).hexdigest()
    assert hashlib.sha256(download(server, project, wheels[0].name)).hexdigest() == kept
    for result in results:
        if result.returncode != 0:
            assert result.returncode == 13, result.stderr
            assert f"already holds {wheels[0].name} (sha256 {kept})" in result.stderr


@pytest.mark.parametrize("server", ["devpi"], indirect=True)
def test_metadata_fields_reach_the_server(tmp_path: Path, server: IndexServer,
                                          project: str) -> None:
    wheel = make_wheel(tmp_path, project, VERSION, tags="py3-none-any",
                       requires=("torch==2.14.*", "packaging>=24"))
    assert publish_to(server, wheel, cwd=tmp_path, args=("--channel", CHANNEL)).returncode == 0
    url = server.to.replace("{channel}", CHANNEL) + project
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        data = json.load(response)["result"][VERSION]
    assert data["requires_dist"] == ["torch==2.14.*", "packaging>=24"]
    assert (data["name"], data["metadata_version"]) == (project, "2.1")
    assert data["description"] == "A description.\n"


@pytest.mark.parametrize(("env", "expected"), [
    ({"WHEELSMITH_UPLOAD_TOKEN": "tok-1", "TWINE_PASSWORD": "tok-2", "TWINE_USERNAME": "t"},
     ("__token__", "tok-1", "WHEELSMITH_UPLOAD_TOKEN")),
    ({"WHEELSMITH_UPLOAD_TOKEN": "tok-1", "WHEELSMITH_UPLOAD_USER": "ci"},
     ("ci", "tok-1", "WHEELSMITH_UPLOAD_TOKEN")),
    ({"TWINE_PASSWORD": "tok-2", "TWINE_USERNAME": "t"}, ("t", "tok-2", "TWINE_PASSWORD")),
    ({"TWINE_PASSWORD": "tok-2"}, ("__token__", "tok-2", "TWINE_PASSWORD")),
    ({"WHEELSMITH_UPLOAD_TOKEN": ""}, None),
])
def test_where_the_token_comes_from(env: dict[str, str], expected: tuple[str, str, str] | None,
                                    empty_keyring: Path) -> None:
    """wheelsmith's own variables first, then twine's; none (and nothing in the keyring): no
    credentials. The password never shows in the object's repr."""
    found = upload.credentials("http://127.0.0.1:9/ci/cu130-torch2.14/", env)
    assert (None if found is None else (found.username, found.password, found.origin)
            ) == expected
    if found is not None:
        assert found.password not in repr(found)


@pytest.fixture
def empty_keyring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """This process's keyring: the tests' file backend over a file of this test's own, loaded
    as keyring loads a configured one (keyring keeps one backend a process: the previous one is
    put back after)."""
    path = tmp_path / "keyring.json"
    monkeypatch.setenv("KEYRING_PROPERTY_PATH", str(path))
    previous = keyring.get_keyring()
    keyring.set_keyring(keyring.core.load_keyring(file_keyring.BACKEND))
    yield path
    keyring.set_keyring(previous)


URL = "http://127.0.0.1:9/ci/cu130-torch2.14/"


def test_the_keyring_entry_under_the_upload_url_is_the_last_resort(empty_keyring: Path) -> None:
    """With a user named, the keyring's password for it under the upload URL; with none, the
    URL's one entry and its user; an entry under another URL is never sent."""
    keyring.set_password(URL, "ci", "from-keyring")
    keyring.set_password("http://127.0.0.1:9/ci/other/", "ci", "other-url")
    found = upload.credentials(URL, {"WHEELSMITH_UPLOAD_USER": "ci"})
    assert found is not None
    assert (found.username, found.password, found.origin) == ("ci", "from-keyring",
                                                               "the keyring")
    assert "from-keyring" not in repr(found)
    found = upload.credentials(URL, {})
    assert found is not None
    assert (found.username, found.password) == ("ci", "from-keyring")
    assert upload.credentials(URL, {"TWINE_USERNAME": "someone-else"}) is None
    assert upload.credentials("http://127.0.0.1:9/ci/third/", {}) is None
    env_first = upload.credentials(URL, {"WHEELSMITH_UPLOAD_TOKEN": "tok-1"})
    assert env_first is not None
    assert env_first.origin == "WHEELSMITH_UPLOAD_TOKEN"


def test_a_keyring_that_cannot_be_read_is_said_and_nothing_is_sent(
        empty_keyring: Path, caplog: pytest.LogCaptureFixture) -> None:
    empty_keyring.write_text("not json")
    assert upload.credentials(URL, {"WHEELSMITH_UPLOAD_USER": "ci"}) is None
    assert [r.getMessage() for r in caplog.records] == [
        f"the keyring could not be read ({empty_keyring} is not a keyring file: Expecting "
        "value: line 1 column 1 (char 0)); uploading without credentials"]


def test_without_the_keyring_package_there_is_no_keyring(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "keyring", None)  # what `import keyring` is without it
    assert upload.credentials(URL, {"WHEELSMITH_UPLOAD_USER": "ci"}) is None


def keyring_env(path: Path, **more: str) -> dict[str, str]:
    """A process whose keyring is the tests' file backend over `path`, configured as keyring
    is (PYTHON_KEYRING_BACKEND, KEYRING_PROPERTY_PATH), and no token in its environment."""
    env = {k: v for k, v in os.environ.items() if k not in NO_TOKEN}
    return {**env, "PYTHONPATH": str(REPO), "PYTHON_KEYRING_BACKEND": file_keyring.BACKEND,
            "KEYRING_PROPERTY_PATH": str(path), **more}


def keyring_set(env: dict[str, str], service: str, username: str, password: str) -> None:
    """keyring's own command line stores the entry (the password on its standard input)."""
    subprocess.run([sys.executable, "-m", "keyring", "set", service, username],
                   input=password + "\n", text=True, env=env, check=True, timeout=60)


def publish_alone(server: IndexServer, wheel: Path, env: dict[str, str], cwd: Path,
                  *flags: str) -> subprocess.CompletedProcess[str]:
    """The real CLI with exactly `env` (publish_to adds this process's environment)."""
    return subprocess.run([sys.executable, "-m", "wheelsmith", *flags, "publish", *server.args(),
                           str(wheel)], cwd=cwd, capture_output=True, text=True, env=env,
                          check=False, timeout=600)


def test_publish_to_takes_the_token_from_the_keyring_and_never_prints_it(
        tmp_path: Path, server: IndexServer, project: str) -> None:
    """`publish --to` with no token in the environment: the keyring's entry under the channel's
    upload URL is what the server receives; a wrong one is refused naming the keyring as its
    origin; the token shows in no output, -vv included."""
    wheel = wheel_with_provenance(tmp_path / "w", project)
    upload_url = server.to.replace("{channel}", CHANNEL)
    env = keyring_env(tmp_path / "keyring.json")
    keyring_set(env, upload_url, "ci", "wrong-keyring-token")
    refused = publish_alone(server, wheel, {**env, "WHEELSMITH_UPLOAD_USER": "ci"}, tmp_path)
    assert refused.returncode == 12, refused.stderr
    assert f"error: the server refused {wheel.name}: HTTP" in refused.stderr
    assert "(sent with credentials from the keyring)" in refused.stderr
    assert "wrong-keyring-token" not in refused.stdout + refused.stderr
    assert listed_sha256(server.simple_url(), project, wheel.name) is None

    keyring_set(env, upload_url, "ci", "ci-secret")
    accepted = publish_alone(server, wheel, env, tmp_path)  # no user named: the entry's
    assert (accepted.returncode, accepted.stdout) == (
        0, f"published: {wheel.name} -> {server.simple_url()}{project}/\n"), accepted.stderr
    assert listed_sha256(server.simple_url(), project, wheel.name) == hashlib.sha256(
        wheel.read_bytes()).hexdigest()
    loud = publish_alone(server, wheel, env, tmp_path, "-vv")
    assert loud.returncode == 0, loud.stderr
    assert loud.stdout == f"already published: {wheel.name} -> {server.simple_url()}{project}/\n"
    for result in (accepted, loud):
        assert "ci-secret" not in result.stdout + result.stderr
