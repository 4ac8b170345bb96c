"""Shared fixtures: a scratch wheelsmith project, a local HTTP server, the real toolchain."""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from wheelsmith import locations
from wheelsmith.builder import container
from wheelsmith.toolchain.env import Toolchain
from wheelsmith.toolchain.profile import load_profile
from wheelsmith.toolchain.tools import auditwheel_for
from wheelsmith.toolchain.venv import ensure_profile
from wheelsmith.untrusted import redaction

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
DEFAULT_PROFILE = REPO / "toolchains" / "cu130-torch2.14.yaml"

# Generated inputs (tests/trust/): `make test` runs a fixed, derandomized budget per property;
# `make fuzz` (HYPOTHESIS_PROFILE=fuzz) runs many more, random each time, for the soak.
_GENERATED = settings(deadline=None, print_blob=True,
                      suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                             HealthCheck.function_scoped_fixture])
settings.register_profile("make-test", _GENERATED, max_examples=40, derandomize=True)
settings.register_profile("fuzz", _GENERATED,
                          max_examples=int(os.environ.get("FUZZ_EXAMPLES", "2000")))
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "make-test"))

# The tests never read the keyring of the machine they run on (publish --to's last resort for a
# token): keyring's empty backend for this process and every one it starts, unless a test
# points keyring elsewhere (tests/index/file_keyring.py).
os.environ["PYTHON_KEYRING_BACKEND"] = "keyring.backends.null.Keyring"


@pytest.fixture(autouse=True)
def no_secrets_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with no secret kept: one command is one process, and a secret it
    keeps (a URL's password of "0") hides text for the rest of it, not for the next test."""
    monkeypatch.setattr(redaction, "_kept", set())
    monkeypatch.setattr(redaction, "_known", None)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty wheelsmith project (recipes/, patches/, the real toolchains/), used as
    WHEELSMITH_HOME; downloads go to a scratch cache, toolchain venvs to the shared one."""
    root = tmp_path / "project"
    (root / "recipes").mkdir(parents=True)
    (root / "patches").mkdir()
    shutil.copytree(REPO / "toolchains", root / "toolchains")
    monkeypatch.setenv("WHEELSMITH_HOME", str(root))
    monkeypatch.chdir(root)
    return root


@dataclass
class Served:
    """A directory served over HTTP on 127.0.0.1, with the paths that were requested."""

    root: Path
    url: str
    requests: list[str] = field(default_factory=list)


@pytest.fixture
def http_dir(tmp_path: Path) -> Iterator[Served]:
    root = tmp_path / "www"
    root.mkdir()
    served = Served(root, "")

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, directory=str(root), **kwargs)  # type: ignore[arg-type]

        def log_message(self, format: str, *args: object) -> None:  # noqa: ARG002
            served.requests.append(self.path)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    served.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield served
    server.shutdown()
    server.server_close()


class SlowServer:
    """One file over HTTP on 127.0.0.1, sent in 64 KiB pieces `delay` seconds apart (a
    download that takes long enough to be overlapped or killed); counts the requests."""

    def __init__(self, data: bytes, name: str, delay: float) -> None:
        self.requests = 0
        served = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                served.requests += 1
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # killed
                    for start in range(0, len(data), 1 << 16):
                        self.wfile.write(data[start:start + (1 << 16)])
                        time.sleep(delay)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/{name}"

    def __enter__(self) -> SlowServer:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="session")
def toolchain() -> Toolchain:
    """The real pinned toolchain (torch 2.14.1 + nvcc 13.0 from PyPI), created once per
    machine in the user cache and reused (about 80 s the first time)."""
    profile = load_profile(DEFAULT_PROFILE)
    return ensure_profile(profile, Path(sys.executable), locations.cache_dir())


def sdist_index(root: Path, tree: Path, project: str) -> str:
    """`tree` (a package's source, its top directory named NAME-VERSION) as an sdist on a
    file:// PEP 691 index under `root`: the index's URL (for WHEELSMITH_INDEX_URL)."""
    sdist = root / "dist" / f"{tree.name}.tar.gz"
    sdist.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(sdist, "w:gz") as tar:
        tar.add(tree, arcname=tree.name)
    page = root / "index" / project
    page.mkdir(parents=True)
    page.joinpath("index.json").write_text(json.dumps({
        "meta": {"api-version": "1.0"}, "name": project,
        "files": [{"filename": sdist.name, "url": sdist.as_uri(),
                   "hashes": {"sha256": hashlib.sha256(sdist.read_bytes()).hexdigest()}}]}))
    return (root / "index").as_uri()


def header_source(top: Path, name: str, value: int) -> Path:
    """`top`, a source of one header, include/NAME.h, defining NAME_ANSWER as `value` (a
    dependency a CMake build downloads)."""
    (top / "include").mkdir(parents=True)
    (top / "include" / f"{name}.h").write_text(f"#define {name.upper()}_ANSWER {value}\n")
    return top


def header_tarball(folder: Path, name: str, value: int) -> Path:
    """`folder`/NAME-2.0.tar.gz of a `header_source` in NAME-2.0/."""
    top = header_source(folder / f"{name}-2.0", name, value)
    tarball = folder / f"{name}-2.0.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(top, arcname=top.name)
    return tarball


def add_variant(project: Path, name: str, edit: tuple[str, str] | None = None,
                sources: Path | None = None) -> Path:
    """A copy of the tiny extension (in `sources`, default beside the project), optionally with
    its setup.py edited, plus its recipe."""
    source = (sources or project.parent / "sources") / name
    shutil.copytree(FIXTURES / "tiny-ext", source)
    setup = source / "setup.py"
    text = setup.read_text().replace('name="tiny-ext"', f'name="{name}"')
    if edit is not None:
        assert edit[0] in text
        text = text.replace(*edit)
    setup.write_text(text)
    recipe = (FIXTURES / "tiny-ext.recipe.yaml").read_text()
    recipe = recipe.replace("package: tiny-ext", f"package: {name}").replace("PATH", str(source))
    (project / "recipes" / f"{name}.yaml").write_text(recipe)
    return source


@pytest.fixture(scope="session")
def auditwheel(toolchain: Toolchain) -> Path:
    """The profile's pinned auditwheel, from the toolchain venv (what builds use)."""
    found = auditwheel_for(toolchain, Path(sys.executable))
    assert found is not None, "the default profile's tools include auditwheel"
    return found


def wheelsmith(*args: str, cwd: Path, check: bool = False) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a subprocess (real exit codes, real output)."""
    result = subprocess.run([sys.executable, "-m", "wheelsmith", *args], cwd=cwd,
                            capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"wheelsmith {' '.join(args)} failed ({result.returncode}):\n"
                             f"{result.stdout}\n{result.stderr}")
    return result


def _small_fs_mounts() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=4k tmpfs /mnt"],
                           capture_output=True, check=False)
    return probe.returncode == 0


SMALL_FS = pytest.mark.skipif(not _small_fs_mounts(), reason=(
    "cannot mount a small tmpfs here (needs util-linux unshare and user namespaces) to run "
    "out of space for real"))


def wheelsmith_on_small_fs(mount: Path, size: str, *args: str, cwd: Path,
                           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The real CLI in a mount namespace where `mount` is a tmpfs of `size` (e.g. 400m): a
    disk that fills up, for this process tree only. What the run left there is listed, one
    path a line, in `mount` + ".left" (the tmpfs goes with the namespace)."""
    mount.mkdir(parents=True, exist_ok=True)
    argv = " ".join(f"'{a}'" for a in (sys.executable, "-m", "wheelsmith", *args))
    script = (f"mount -t tmpfs -o size={size} tmpfs '{mount}' && {{ {argv}; rc=$?; "
              f"cd '{mount}' && find . -mindepth 1 > '{mount}.left'; exit $rc; }}")
    return subprocess.run(["unshare", "-rm", "sh", "-c", script], cwd=cwd, capture_output=True,
                          text=True, check=False, env=env)


def assert_platform_tagged(wheel: Path, provenance: dict[str, Any], stem: str) -> None:
    """The wheel carries the manylinux tag of its glibc floor (host-dependent: 2.34 on Debian
    12), in its name and in the provenance."""
    platform = provenance["platform"]
    assert platform["policy"] == f"manylinux_{platform['glibc_floor'].replace('.', '_')}_x86_64"
    assert wheel.name == f"{stem}-cp311-cp311-{platform['tag']}.whl"
    assert platform["tag"].startswith(platform["policy"])


@dataclass
class Server:
    url: str
    log: Path
    pid: int = 0  # the server's process

    def requests(self) -> list[str]:
        """Request paths in order, from the server's own log (one line per request)."""
        return re.findall(r'"GET (\S+) HTTP', self.log.read_text())


@contextlib.contextmanager
def serve(root: Path, log: Path, *options: str) -> Iterator[Server]:
    """The real `wheelsmith serve` of `root` on a free port (with `options`), its stdout and
    stderr in `log`."""
    with _listening([sys.executable, "-m", "wheelsmith", "serve", "--index", str(root),
                     "--port", "0", *options], log, r"at (http://127\.0\.0\.1:\d+)/") as server:
        yield server


@contextlib.contextmanager
def static_server(root: Path, log: Path) -> Iterator[Server]:
    """A plain static server of `root` on a free port: Python's own `http.server` in a process
    of its own, which answers a directory's URL with its index.html as text/html whatever the
    Accept header asks for (as most static hosts do); its output in `log`."""
    with _listening([sys.executable, "-u", "-m", "http.server", "0", "--bind", "127.0.0.1",
                     "--directory", str(root)], log,
                    r"Serving HTTP on \S+ port \d+ \((http://127\.0\.0\.1:\d+)/\)") as server:
        yield server


@contextlib.contextmanager
def _listening(argv: list[str], log: Path, address: str) -> Iterator[Server]:
    """The server `argv` starts, once its output in `log` says the URL it listens at (the
    first group of the pattern `address`); ended when the block ends."""
    with log.open("w") as sink:
        proc = subprocess.Popen(argv, stderr=sink, stdout=sink)
    try:
        deadline = time.monotonic() + 120
        while not (match := re.search(address, log.read_text())):
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"{argv} said no address in 120 s"
            time.sleep(0.05)
        yield Server(match[1], log, proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def find_python(version: str) -> Path | None:
    """A working python`version`: on PATH, else one pyenv installed (this machine's image has
    3.10-3.13 there); None when there is none."""
    candidates = [shutil.which(f"python{version}"),
                  *sorted(str(p) for p in Path.home().glob(
                      f".pyenv/versions/{version}.*/bin/python{version}"))]
    for candidate in filter(None, candidates):
        probe = subprocess.run([candidate, "-c", "import sys, venv, ensurepip; "
                                "print('%d.%d' % sys.version_info[:2])"],
                               capture_output=True, text=True, check=False)
        if probe.returncode == 0 and probe.stdout.strip() == version:
            return Path(candidate)
    return None


def torch_env(python: Path, torch: str, extra: tuple[str, ...] = ()) -> Path:
    """A user's environment: `python` with torch==`torch` from the package index (its CUDA
    libraries included, no CUDA toolkit) and the `extra` requirements, made once per machine
    in the wheelsmith cache (it is several GB) and reused. Returns its interpreter."""
    version = subprocess.run([str(python), "-c", "import sys; print('%d.%d' % "
                              "sys.version_info[:2])"], capture_output=True, text=True,
                             check=True).stdout.strip()
    name = "-".join([f"py{version}-torch{torch}", *(e.replace("==", "") for e in extra)])
    root = locations.cache_dir() / "test-envs" / name
    marker = root / "wheelsmith-test-env"
    if not marker.is_file():
        shutil.rmtree(root, ignore_errors=True)
        subprocess.run([str(python), "-m", "venv", str(root)], check=True)
        subprocess.run([str(root / "bin" / "python"), "-m", "pip", "install", "-q",
                        f"torch=={torch}", *extra], check=True)
        marker.write_text(torch + "\n")
    return root / "bin" / "python"


@dataclass(frozen=True)
class Docker:
    """A Docker engine that answers, and an environment whose PATH finds `cli` first: a docker
    CLI that builds with BuildKit (None where no docker CLI here has it)."""

    env: dict[str, str]
    cli: str | None


def docker_clis() -> list[str]:
    """Every docker CLI on PATH, in PATH order. This machine's image has a client-only docker 28
    without the buildx component in /usr/local/bin, ahead of Debian's docker.io (20.10, BuildKit
    built in) in /usr/bin."""
    found: list[str] = []
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        cli = Path(directory or ".") / "docker"
        if os.access(cli, os.X_OK) and str(cli.resolve()) not in {
                str(Path(f).resolve()) for f in found}:
            found.append(str(cli))
    return found


def _docker_info(cli: str) -> str | None:
    """Why `docker info` fails, or None when an engine answers."""
    answer = subprocess.run([cli, "info"], capture_output=True, text=True, check=False)
    if answer.returncode == 0:
        return None
    return (answer.stderr.strip().splitlines() or ["no answer"])[-1]


def _start_dockerd(dockerd: str, log: Path, cli: str) -> subprocess.Popen[bytes]:
    """dockerd as a user's would run (its default data root, socket and bridge network), until
    `docker info` answers; skipped, with dockerd's last words, when it cannot run here."""
    with log.open("wb") as sink:
        proc = subprocess.Popen([dockerd], stdin=subprocess.DEVNULL, stdout=sink,
                                stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 300  # a loaded machine starts it slowly; it answers or ends
    while _docker_info(cli) is not None:
        if (ended := proc.poll() is not None) or time.monotonic() > deadline:
            _stop_dockerd(proc)
            last = (log.read_text(errors="replace").strip().splitlines() or ["no output"])[-1]
            how = "did not start here" if ended else "did not answer in 300 s"
            pytest.skip(f"no docker engine: dockerd {how}: {last}")
        time.sleep(0.25)
    return proc


def _stop_dockerd(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="session")
def docker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Docker]:
    """The Docker engine for the docker runner's tests: the one that answers, else dockerd
    (Debian's docker.io, which .ci/run installs) started here as root and stopped when the
    tests end; skipped, saying why, where none can run."""
    clis = docker_clis()
    if not clis:
        pytest.skip("no docker engine: the docker CLI is not installed (apt install docker.io)")
    since = time.monotonic()
    started = None
    problem = _docker_info(clis[0])
    if problem is not None:
        dockerd = shutil.which("dockerd")
        if dockerd is None or os.geteuid() != 0:
            pytest.skip(f"no docker engine: `docker info` failed: {problem} (and dockerd "
                        f"{'needs root' if dockerd else 'is not installed'})")
        started = _start_dockerd(dockerd, tmp_path_factory.mktemp("dockerd") / "dockerd.log",
                                 clis[0])
    try:
        cli = next((c for c in clis
                    if container.buildkit_problem(container.Engine("docker", c)) is None), None)
        env = dict(os.environ)
        if cli is not None and cli != clis[0]:  # put the CLI that has BuildKit first
            first = tmp_path_factory.mktemp("docker-cli")
            (first / "docker").symlink_to(cli)
            env["PATH"] = f"{first}{os.pathsep}{env['PATH']}"
        yield Docker(env, cli)
    finally:
        if started is not None:
            # The engine is the tests' own: drop the build cache these tests did not use (the
            # layers of images a code change replaced; BuildKit in docker 20.10 collects none by
            # default), keeping what the next run's image build will find cached.
            unused = f"until={int(time.monotonic() - since) + 60}s"
            subprocess.run([clis[0], "builder", "prune", "--force", "--filter", unused],
                           capture_output=True, check=False)
            _stop_dockerd(started)


def stand_in_torch(tmp_path: Path, version: str, cuda: str = "13.0") -> Path:
    """A `python` script: this Python with a stand-in torch `version` (no GPU) in
    `tmp_path/site`, first on its path (where tests point PIP_TARGET, to install beside it)."""
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text(
        f'__version__ = "{version}"\n\n\nclass version:\n    cuda = "{cuda}"\n\n\n'
        "class cuda:\n    @staticmethod\n    def is_available():\n        return False\n")
    script = tmp_path / "env" / "python"
    script.parent.mkdir()
    script.write_text(f'#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} "$@"\n')
    script.chmod(0o755)
    return script
