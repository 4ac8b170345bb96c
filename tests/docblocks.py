"""The commands of the guides' shell blocks under docs/, and the rule that says which run here.

A command is one shell command of a ```sh block (continuation lines joined, a quoted newline
kept, comments dropped) or a `$ ` line of a ```console block. A block runs unless the line
before its fence is `<!-- not run by the docs test: REASON -->`; in a block that runs, a
command is left out, with its reason, when `skip_reason` names one: it compiles (a real CUDA
build), it needs a user's environment with torch, it downloads torch, or it reaches a host that
is not this machine.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import REPO
from tests.wheels import wheel_with_provenance

MARKER = re.compile(r"<!-- not run by the docs test: (.+?) -->")
BUILDS = {name: "compiles a CUDA extension: a real build (the slow tests build)" for name in
          ("wheelsmith build", "wheelsmith nightly", "wheelsmith install", "wheelsmith recipe new",
           "make demo")} | {"wheelsmith image build": "builds an image with podman or docker"}
URL_HOST = re.compile(r"\b(?:https?|s3)://([^/:'\"\s]+)")
LOCAL_HOSTS = {"127.0.0.1", "localhost"}
VERSION = "1.7.0+cu.13.0.torch.2.14.sm.120"
# README.md and getting-started.md: every command, checked one by one (test_docs_commands.py)
OWN_TESTS = {"docs/getting-started.md"}


@dataclass(frozen=True)
class Block:
    doc: str
    line: int  # the fence's line number
    commands: tuple[str, ...]
    skip: str  # the marker's reason; empty: the block runs

    @property
    def name(self) -> str:
        return f"{self.doc}:{self.line}"


def skip_reason(command: str) -> str:
    """Why this command of a block that runs is not run here; empty when it is."""
    for build, why in BUILDS.items():
        if command.startswith(build) or f" {build} " in f" {command} ":
            return f"`{build}` {why}"
    if "~/train/.venv" in command:
        return "~/train/.venv is a user's environment with torch and a GPU's driver"
    if command.startswith("pip install") and re.search(r"\storch([=<>!~ ]|$)", command):
        return "downloads torch (GBs) from the package index"
    hosts = sorted({h for h in URL_HOST.findall(command) if h not in LOCAL_HOSTS})
    if hosts or "http://…" in command:
        return f"reaches {', '.join(hosts) or 'a placeholder host'}, not this machine"
    return ""


def commands_of(body: str, console: bool) -> list[str]:
    """The commands of a block's body, each as bash would read it."""
    if console:
        return [line[2:].split("  #")[0].strip() for line in body.splitlines()
                if line.startswith("$ ")]
    commands, pending = [], ""
    for line in body.replace("\\\n", " ").splitlines(keepends=True):
        pending += line
        try:
            words = shlex.split(pending, comments=True)
        except ValueError:  # a quote still open: its newline is part of the command
            continue
        if words:
            commands.append(_uncommented(pending))
        pending = ""
    return commands


def _uncommented(text: str) -> str:
    """`text` without a trailing `#` comment outside quotes, its lines kept."""
    cut = len(text)
    for match in re.finditer(r"(?<=\s)#", text):
        if _balanced(text[:match.start()]):
            cut = match.start()
            break
    return re.sub(r"[ \t]+", " ", text[:cut].strip())


def _balanced(prefix: str) -> bool:
    try:
        shlex.split(prefix)
    except ValueError:
        return False
    return True


def blocks(doc: str) -> list[Block]:
    lines = (REPO / doc).read_text().splitlines()
    found, index = [], 0
    while index < len(lines):
        fence = re.fullmatch(r"```(sh|console)", lines[index])
        if not fence:
            index += 1
            continue
        end = lines.index("```", index + 1)
        marker = MARKER.fullmatch(lines[index - 1]) if index else None
        body = "\n".join(lines[index + 1:end]) + "\n"
        commands = tuple(commands_of(body, fence[1] == "console"))
        if commands:
            found.append(Block(doc, index + 1, commands, marker[1] if marker else ""))
        index = end + 1
    return found


def guides() -> list[str]:
    return [str(p.relative_to(REPO)) for p in sorted((REPO / "docs").glob("*.md"))
            if str(p.relative_to(REPO)) not in OWN_TESTS]


def all_blocks() -> list[Block]:
    return [block for doc in guides() for block in blocks(doc)]


def ports(commands: list[str]) -> set[str]:
    """The fixed ports a page's servers listen on (wheelsmith serve's 8080 aside)."""
    found = set()
    for command in commands:
        found |= set(re.findall(r"127\.0\.0\.1:(\d+)", command))
        found |= set(re.findall(r"(?:--port|-p) (\d+)\b", command))
    return found - {"8080"}



def free_port() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return str(probe.getsockname()[1])


class Page:
    """Where a guide's commands run, in page order: a scratch directory holding `wheelhouse/` (a
    causal-conv1d wheel stamped for cu130-torch2.14, what a build would leave), a scratch home,
    a fresh venv's `pip` and `python` first on PATH, then this checkout's `wheelsmith`. The
    page's fixed addresses are swapped: `/srv/` for the scratch directory's `srv/` (its
    `wheelsmith/index` is the page's `./index`), each fixed port for a free one, and
    `http://127.0.0.1:8080` for the port `wheelsmith serve` got."""

    def __init__(self, root: Path, doc: str) -> None:
        self.cwd, self.home, bin_dir = root / "work", root / "home", root / "bin"
        for made in (self.cwd / "srv" / "wheelsmith", self.home, bin_dir):
            made.mkdir(parents=True)
        (self.cwd / "srv" / "wheelsmith" / "index").symlink_to(self.cwd / "index")
        wheel_with_provenance(self.cwd / "wheelhouse", "causal-conv1d", VERSION,
                              channel="cu130-torch2.14")
        (bin_dir / "wheelsmith").write_text(
            f'#!/bin/sh\nPYTHONPATH={REPO / "src"} exec {sys.executable} -m wheelsmith "$@"\n')
        (bin_dir / "wheelsmith").chmod(0o755)
        subprocess.run([sys.executable, "-m", "venv", str(root / "client")], check=True)
        self.path = os.pathsep.join([str(root / "client" / "bin"), str(bin_dir),
                                     os.environ["PATH"]])
        self.subs = {"/srv/": f"{self.cwd}/srv/"}
        for port in ports([c for block in blocks(doc) for c in block.commands]):
            new = free_port()
            self.subs |= {f"127.0.0.1:{port}": f"127.0.0.1:{new}",
                          f"--port {port}": f"--port {new}", f"-p {port}": f"-p {new}"}
        self.groups: list[subprocess.Popen[bytes]] = []

    def env(self) -> dict[str, str]:
        keep = {k: v for k, v in os.environ.items() if k not in (
            "WHEELSMITH_HOME", "WHEELSMITH_RECIPES", "VIRTUAL_ENV", "PYTHONPATH")}
        return keep | {"HOME": str(self.home), "PATH": self.path,
                       "XDG_CACHE_HOME": str(Path.home() / ".cache"),
                       "XDG_CONFIG_HOME": str(Path.home() / ".config")}

    def line(self, command: str) -> str:
        for old, new in self.subs.items():
            command = command.replace(old, new)
        return command

    def start(self, script: str, log: Path) -> subprocess.Popen[bytes]:
        with log.open("ab") as sink:
            process = subprocess.Popen(["bash", "-ec", script], cwd=self.cwd, env=self.env(),
                                       stdin=subprocess.DEVNULL, stdout=sink,
                                       stderr=subprocess.STDOUT, start_new_session=True)
        self.groups.append(process)
        return process

    def run(self, block: Block) -> list[str]:
        """Run the block's commands (in one bash, `-e`); what it left out, with why."""
        script: list[str] = []
        left_out: list[str] = []
        log = self.cwd / f"block-{block.line}.log"
        for command in block.commands:
            if why := skip_reason(command):
                left_out.append(f"{block.name}: `{command}`: {why}")
            elif command == "wheelsmith serve":
                self.finish(block, script, log)
                script = []
                self.serve()
            else:
                script.append(self.line(command))
        self.finish(block, script, log)
        return left_out

    def finish(self, block: Block, script: list[str], log: Path) -> None:
        if script:
            code = self.start("\n".join(script), log).wait(timeout=600)
            assert code == 0, f"{block.name}: exit {code}\n" + log.read_text()[-4000:]

    def serve(self) -> None:
        log = self.cwd / "serve.log"
        server = self.start("exec wheelsmith serve --port 0", log)
        deadline = time.monotonic() + 60
        while not (found := re.search(r"at (http://127\.0\.0\.1:\d+)/", log.read_text())):
            assert server.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        self.subs["http://127.0.0.1:8080"] = found[1]

    def stop(self) -> None:
        """End the process groups this page started (its servers left running with `&`)."""
        for process in self.groups:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
