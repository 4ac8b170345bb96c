"""Every command that README.md and docs/getting-started.md show is run by a test, as written.

A command is a line of a ```sh block (continuations joined, `  # comments` dropped). Each page's
commands are listed below in order, with what running it must give; a page that gains, loses or
changes a command fails `test_every_documented_command_is_run_as_written` until it is listed.
They run here with bash, exactly as written, in a scratch directory and with a scratch home (so
`~/train/.venv` and `~/my-recipes` are the test's own), the caches and configuration of this
machine kept; only the local index's address (`http://127.0.0.1:8080`, what `wheelsmith serve`
listens on) is swapped for the port the test's `wheelsmith serve` got. `~/train/.venv` is a user's
environment: a venv whose torch is the default profile's torch 2.14.1 (no CUDA toolkit).

The commands that build a real package run in the slow suite (`make test-slow`):
`test_the_readme_commands_run_as_written`, `test_the_getting_started_commands_run_as_written`
and `test_make_demo_builds_verifies_installs_and_imports`. Three run elsewhere, and the fast tests
here check that they do: `make test` is what CI runs (`.ci/run`); `make fuzz` is the trust tests
(`make test` runs them on a fixed budget) under the soak's profile; each `pip install` line from
the local index is also run by tests/index/test_doc_commands.py, in `make test`.

The guides under docs/ are run block by block, in page order, by
`test_the_guides_commands_run_as_written`, with the rule of tests/docblocks.py for what cannot
run here (a block marked `<!-- not run by the docs test: REASON -->`; a command that compiles,
needs a user's torch environment, downloads torch or reaches another host), each left out with
its reason; a page whose commands install a server from the package index (publishing.md's
devpi-server and pypiserver) is slow.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests import docblocks
from tests.conftest import REPO, add_variant
from tests.index import test_doc_commands
from wheelsmith import locations
from wheelsmith.toolchain.env import Toolchain

LABEL = "1.7.0+cu.13.0.torch.2.14.sm.120"
WHEEL_STEM = f"causal_conv1d-{LABEL}-cp311-cp311-manylinux_2_34_x86_64"
LOCAL_INDEX = "http://127.0.0.1:8080"


def documented(doc: str) -> list[str]:
    commands = []
    for body in re.findall(r"^```sh\n(.*?)^```", (REPO / doc).read_text(),
                           re.MULTILINE | re.DOTALL):
        for line in body.replace("\\\n", " ").splitlines():
            command = " ".join(line.split("  #")[0].split())
            if command:
                commands.append(command)
    return commands


@dataclass
class Session:
    """Where a page's commands run: a scratch directory, a scratch home, PATH, the server."""

    cwd: Path
    home: Path
    path: list[Path]
    extra: dict[str, str] = field(default_factory=dict)
    url: str = LOCAL_INDEX
    servers: list[subprocess.Popen[str]] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        keep = {k: v for k, v in os.environ.items()
                if k not in ("WHEELSMITH_HOME", "WHEELSMITH_RECIPES", "VIRTUAL_ENV", "PYTHONPATH")}
        return keep | {
            "HOME": str(self.home), "PATH": os.pathsep.join([*map(str, self.path),
                                                              os.environ["PATH"]]),
            # this machine's caches and configuration (pip's index, wheelsmith's toolchains)
            "XDG_CACHE_HOME": str(Path.home() / ".cache"),
            "XDG_CONFIG_HOME": str(Path.home() / ".config"),
            "WHEELSMITH_CACHE": str(locations.cache_dir())} | self.pyenv() | self.extra

    @staticmethod
    def pyenv() -> dict[str, str]:
        """pyenv's shims on PATH find their Pythons under the real home, not the scratch one."""
        root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
        return {"PYENV_ROOT": str(root)} if root.is_dir() else {}

    def line(self, command: str) -> str:
        return command.replace(LOCAL_INDEX, self.url)

    def run(self, command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-c", self.line(command)], cwd=self.cwd, env=self.env(),
                              capture_output=True, text=True, check=False)

    def serve(self, command: str) -> None:
        """`wheelsmith serve` as written, on a free port (its address is then the swap)."""
        log = self.cwd / "serve.log"
        with log.open("w") as sink:
            self.servers.append(subprocess.Popen(
                ["bash", "-c", f"exec {command} --port 0"], cwd=self.cwd, env=self.env(),
                stdout=sink, stderr=sink, text=True))
        deadline = time.monotonic() + 60
        while not (found := re.search(r"at (http://127\.0\.0\.1:\d+)/", log.read_text())):
            assert self.servers[-1].poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        self.url = found[1]

    def stop(self) -> None:
        for server in self.servers:
            server.terminate()
            server.wait(timeout=10)


Check = Callable[[Session, subprocess.CompletedProcess[str]], None]


@dataclass(frozen=True)
class Step:
    command: str
    check: Check | None  # None: run elsewhere (ELSEWHERE says where), or a step of its own


def ok(*needles: str, code: int = 0) -> Check:
    def check(_: Session, result: subprocess.CompletedProcess[str]) -> None:
        shown = result.stdout + result.stderr
        assert result.returncode == code, shown[-3000:]
        for needle in needles:
            assert needle in shown, (needle, shown[-3000:])
    return check


def served(session: Session, _: subprocess.CompletedProcess[str]) -> None:
    assert session.url != LOCAL_INDEX


def pip_installed(session: Session, result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, result.stderr
    shown = subprocess.run([str(session.path[0] / "python"), "-c", "import importlib.metadata "
                            "as m; print(m.version('causal-conv1d'))"],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert shown == LABEL


def in_the_users_env(session: Session, result: subprocess.CompletedProcess[str]) -> None:
    python = session.home / "train" / ".venv" / "bin" / "python"
    ok(f"toolchain: cu130-torch2.14, chosen for {python} (Python 3.11, torch 2.14.1+cu130, "
       "CUDA 13.0)")(session, result)
    imported = subprocess.run([str(python), "-c", "import torch, causal_conv1d_cuda, "
                               "causal_conv1d; print(causal_conv1d.__file__)"],
                              capture_output=True, text=True, check=False)
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.startswith(str(session.home / "train" / ".venv")), imported.stdout


def nightly_built(session: Session, result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((session.cwd / "build" / "nightly" / "nightly.json").read_text())
    assert [(c["recipe"], c["status"]) for c in report["cells"]] == [("tiny-ext", "built")]


def recipe_written(session: Session, result: subprocess.CompletedProcess[str]) -> None:
    written = session.home / "my-recipes" / "recipes" / "torch-scatter.yaml"
    ok(f"wrote {written}")(session, result)
    assert 'pypi: "torch-scatter"' in written.read_text()


DOCTOR = ok(f"causal-conv1d     {LABEL}           SASS (native)",
            "fast path: fla not installed, causal_conv1d ok")  # judged: what is installed
VERIFIED = ok(f"ok: {WHEEL_STEM}.whl carries exactly 12.0")

README = [
    Step("make demo", None),  # test_make_demo_builds_verifies_installs_and_imports
    Step("make test", None),
    Step("wheelsmith build causal-conv1d --arch 12.0 --python ~/train/.venv/bin/python --install",
         in_the_users_env),
    Step("wheelsmith build causal-conv1d --arch 12.0 --publish",
         ok(f"{WHEEL_STEM}.whl", "publish")),
    Step("wheelsmith serve", served),
    Step(f"pip install --index-url {LOCAL_INDEX}/cu130-torch2.14/simple/ --no-deps causal-conv1d",
         pip_installed),
    Step(f"wheelsmith install causal-conv1d --python ~/train/.venv/bin/python --arch 12.0 "
         f"--index {LOCAL_INDEX}",
         ok("(from the index); imports causal_conv1d, causal_conv1d_cuda")),
    Step("wheelsmith doctor --python ~/train/.venv/bin/python --arch 12.0", DOCTOR),
    Step("wheelsmith nightly", nightly_built),
    Step("wheelsmith recipe new torch-scatter==2.1.2 --recipes ~/my-recipes", recipe_written),
    Step("make fuzz", None),
]

GETTING_STARTED = [
    Step("uv tool install .", ok()),  # in the checkout
    Step("wheelsmith --version", ok("wheelsmith, version ")),
    Step("wheelsmith build causal-conv1d --arch 12.0", ok(f"wheelhouse/{WHEEL_STEM}.whl")),
    Step("wheelsmith verify wheelhouse/causal_conv1d-*.whl", VERIFIED),
    Step("wheelsmith publish wheelhouse/causal_conv1d-*.whl",
         ok(f"published: {WHEEL_STEM}.whl -> index/cu130-torch2.14/simple/causal-conv1d/")),
    Step("wheelsmith serve", served),
    Step(f"pip install --index-url {LOCAL_INDEX}/cu130-torch2.14/simple/ --no-deps causal-conv1d",
         pip_installed),
    Step("wheelsmith build causal-conv1d --arch 12.0 --python ~/train/.venv/bin/python --install",
         in_the_users_env),
    Step("wheelsmith doctor --python ~/train/.venv/bin/python --arch 12.0", DOCTOR),
]

PAGES = {"README.md": README, "docs/getting-started.md": GETTING_STARTED}


def test_every_documented_command_is_run_as_written() -> None:
    for doc, steps in PAGES.items():
        assert documented(doc) == [step.command for step in steps], doc


def test_make_test_is_what_ci_runs() -> None:
    lines = [line for line in (REPO / ".ci" / "run").read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    assert lines[-1] == "make test"


def test_make_fuzz_runs_the_trust_tests_under_the_soak_profile() -> None:
    target = (REPO / "Makefile").read_text().split("\nfuzz:", 1)[1].split("\n\n", 1)[0]
    assert "HYPOTHESIS_PROFILE=fuzz" in target
    assert "pytest tests/trust" in target


def test_each_install_line_from_the_local_index_is_run_by_the_index_test() -> None:
    ran = {(doc, command) for doc, command in test_doc_commands.documented_commands()}
    for doc, steps in PAGES.items():
        for step in steps:
            if step.command.startswith("pip install"):
                assert (doc, step.command) in ran, step.command


def test_uv_tool_install_from_the_checkout_gives_the_wheelsmith_command(tmp_path: Path) -> None:
    session = tool_session(tmp_path, pip=False)
    for step in GETTING_STARTED[:2]:
        assert step.check is not None
        step.check(session, (session.run(step.command) if step.command != "uv tool install ."
                             else install_tool(session)))


def tool_session(tmp_path: Path, *, pip: bool = True) -> Session:
    """Getting started's session: `wheelsmith` from `uv tool install .`, and (`pip`) the `pip`
    of a fresh venv first on PATH."""
    (tmp_path / "home").mkdir()
    (tmp_path / "work").mkdir()
    client = client_venv(tmp_path / "client") if pip else tmp_path / "no-client"
    return Session(tmp_path / "work", tmp_path / "home", [client, tmp_path / "tools" / "bin"])


def install_tool(session: Session) -> subprocess.CompletedProcess[str]:
    """`uv tool install .`, run in the checkout, into the session's own tool directories."""
    tools = session.path[1].parent
    env = session.env() | {"UV_TOOL_DIR": str(tools / "venvs"),
                           "UV_TOOL_BIN_DIR": str(tools / "bin")}
    uv = Path(sys.executable).with_name("uv")
    return subprocess.run(["bash", "-c", f"PATH={uv.parent}:$PATH; uv tool install ."],
                          cwd=REPO, env=env, capture_output=True, text=True, check=False)


def client_venv(root: Path) -> Path:
    """A fresh venv whose pip is the `pip` of the page's `pip install` line; its bin dir."""
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True)
    return root / "bin"


def users_env(home: Path, toolchain: Toolchain) -> None:
    """~/train/.venv: a venv whose torch is the default profile's (a .pth names its
    site-packages: nothing is installed into the shared toolchain); no CUDA toolkit."""
    venv = home / "train" / ".venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    assert toolchain.site is not None
    (next((venv / "lib").glob("python3.*")) / "site-packages" / "torch-env.pth").write_text(
        f"{toolchain.site}\n")


def run_steps(session: Session, steps: list[Step]) -> None:
    try:
        for step in steps:
            if step.check is None:
                continue
            if step.command == "wheelsmith serve":
                session.serve(step.command)
                result = subprocess.CompletedProcess[str]([], 0, "", "")
            elif step.command == "uv tool install .":
                result = install_tool(session)
            else:
                result = session.run(step.command)
            step.check(session, result)
    finally:
        session.stop()


@pytest.fixture
def readme_session(tmp_path: Path, project: Path, toolchain: Toolchain) -> Iterator[Session]:
    """A wheelsmith project with causal-conv1d's recipe and the tiny fixture, whose matrix.yaml
    is one tiny cell (what `wheelsmith nightly` builds)."""
    home = tmp_path / "home"
    users_env(home, toolchain)
    for part in ("recipes/causal-conv1d.yaml", "known-bad.yaml"):
        (project / part).write_bytes((REPO / part).read_bytes())
    subprocess.run(["cp", "-r", str(REPO / "patches" / "causal-conv1d"),
                    str(project / "patches")], check=True)
    add_variant(project, "tiny-ext")
    (project / "matrix.yaml").write_text('packages:\n  - recipe: tiny-ext\n    archs: ["12.0"]\n')
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "wheelsmith").symlink_to(Path(sys.executable).with_name("wheelsmith"))
    session = Session(project, home, [client_venv(tmp_path / "client"), bin_dir],
                      extra={"WHEELSMITH_HOME": str(project)})
    yield session
    session.stop()


@pytest.mark.slow
@pytest.mark.toolchain
def test_the_readme_commands_run_as_written(readme_session: Session) -> None:
    run_steps(readme_session, README)


@pytest.mark.slow
@pytest.mark.toolchain
def test_the_getting_started_commands_run_as_written(tmp_path: Path,
                                                     toolchain: Toolchain) -> None:
    session = tool_session(tmp_path)
    users_env(session.home, toolchain)
    run_steps(session, GETTING_STARTED)


@pytest.mark.slow
@pytest.mark.toolchain
def test_make_demo_builds_verifies_installs_and_imports() -> None:
    """`make demo` as written, in this checkout (its build/ and wheelhouse/, both ignored)."""
    result = subprocess.run(["make", "demo"], cwd=REPO, capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"ok: {WHEEL_STEM}.whl carries exactly 12.0" in result.stdout
    assert "imported causal_conv1d 1.7.0 with torch 2.14.1" in result.stdout



def from_the_package_index(doc: str) -> bool:
    """A page whose commands that run here install from the package index (a server's own
    packages): slow."""
    return any(command.startswith("pip install") and "--index-url" not in command
               and not docblocks.skip_reason(command)
               for block in docblocks.blocks(doc) if not block.skip for command in block.commands)


@pytest.mark.parametrize("doc", [
    pytest.param(doc, marks=[pytest.mark.slow] if from_the_package_index(doc) else [])
    for doc in docblocks.guides()])
def test_the_guides_commands_run_as_written(tmp_path: Path, doc: str) -> None:
    """Each guide's shell blocks, in page order, with what the rule in tests/docblocks.py leaves
    out; a page none of whose commands can run here is skipped, naming why."""
    blocks = docblocks.blocks(doc)
    left_out = [f"{block.name}: {block.skip}" for block in blocks if block.skip]
    running = [block for block in blocks if not block.skip]
    if not any(not docblocks.skip_reason(c) for block in running for c in block.commands):
        pytest.skip("; ".join(left_out + [f"{b.name}: `{c}`: {docblocks.skip_reason(c)}"
                                          for b in running for c in b.commands]))
    page = docblocks.Page(tmp_path, doc)
    try:
        for block in running:
            left_out += page.run(block)
    finally:
        page.stop()
    print("\n".join(left_out))


def test_a_guide_block_that_is_not_run_says_why() -> None:
    for doc in docblocks.guides():
        text = (REPO / doc).read_text()
        for marked in re.findall(r"^<!-- not run by the docs test:.*$\n(.*)$", text, re.MULTILINE):
            assert re.fullmatch(r"```(sh|console)", marked), (doc, marked)
        for block in docblocks.blocks(doc):
            assert block.skip.strip() == block.skip
            assert not block.skip or len(block.skip) > 10, block.name
