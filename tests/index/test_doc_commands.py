"""The install commands the docs show, run as written against a served index: every `pip
install` / `uv pip install` line in a shell block of README.md, docs/getting-started.md and
docs/index-and-clients.md that installs from the local index (http://127.0.0.1:8080, or
file:///srv/wheelsmith/index), with only the address swapped for the test's server or
directory."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO, serve
from tests.index.test_index_clients import CLEAN_ENV, UV, installed, venv
from tests.wheels import make_wheel
from wheelsmith.index.publish import publish

DOCS = ("README.md", "docs/getting-started.md", "docs/index-and-clients.md")
VERSION = "1.7.0+cu.13.0.torch.2.14.sm.120"
OURS = re.compile(r"http://127\.0\.0\.1:8080|file:///srv/wheelsmith/index")


def documented_commands() -> list[tuple[str, str]]:
    """(file, command) for each install line from the local index in a ```sh block
    (continuation lines joined, comments dropped)."""
    found = []
    for name in DOCS:
        for block in re.findall(r"^```sh\n(.*?)^```", (REPO / name).read_text(),
                                re.MULTILINE | re.DOTALL):
            for line in block.replace("\\\n", " ").splitlines():
                command = line.split("  #")[0].strip()
                if re.match(r"(uv )?pip install ", command) and OURS.search(command):
                    found.append((name, command))
    return found


def test_the_documented_install_commands_install_from_a_served_index(tmp_path: Path) -> None:
    commands = documented_commands()
    assert len(commands) == 5, commands  # a doc edit that drops or adds one shows up here
    root = tmp_path / "index"
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    publish(make_wheel(wheels, "causal-conv1d", VERSION,
                       requires=("torch==2.14.*", "packaging", "ninja")),
            root, channel="cu130-torch2.14")
    with serve(root, tmp_path / "server.log") as server:
        for number, (doc, command) in enumerate(commands):
            python = venv(tmp_path / f"venv{number}")
            line = command.replace("http://127.0.0.1:8080", server.url).replace(
                "file:///srv/wheelsmith/index", root.as_uri())
            words = shlex.split(line)
            client = ([str(UV), "pip", "install", "--python", str(python)] if words[0] == "uv"
                      else [sys.executable, "-m", "pip", "--python", str(python), "install"])
            result = subprocess.run([*client, *words[2 if words[0] == "pip" else 3:]],
                                    capture_output=True, text=True, env=CLEAN_ENV, check=False)
            assert result.returncode == 0, f"{doc}: {command}\n{result.stderr}"
            assert installed(python, "causal-conv1d") == VERSION, f"{doc}: {command}"
