"""`wheelsmith nightly --published URL`: what is published is read over HTTP (a real
devpi-server, a static export served by a plain HTTP server), not from a ledger on this
machine. A cell whose wheel every such index lists is skipped, saying where; an index that
cannot be read fails the cell with the server's answer, and the others go on. Nothing is
compiled here: the published wheel is a stand-in with the name the cell's build would give."""

from __future__ import annotations

import functools
import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import add_variant
from tests.hostile import HostileServer, reply_500
from tests.index.servers import CHANNEL, devpi
from tests.wheels import make_wheel
from wheelsmith.index.export import export
from wheelsmith.index.publish import publish
from wheelsmith.toolchain.env import Toolchain

pytestmark = pytest.mark.toolchain

NAME = "tiny_ext-0.1.0+cu.13.0.torch.2.14.sm.120-cp311-cp311-manylinux_2_34_x86_64.whl"


@pytest.fixture
def one_cell(project: Path) -> Path:
    add_variant(project, "tiny-ext")
    (project / "matrix.yaml").write_text('packages:\n  - recipe: tiny-ext\n    archs: ["12.0"]\n')
    return project


@pytest.fixture
def stand_in(tmp_path: Path) -> Path:
    """A wheel named as the cell's build names its wheel."""
    (tmp_path / "w").mkdir()
    made = make_wheel(tmp_path / "w", "tiny-ext", "0.1.0+cu.13.0.torch.2.14.sm.120",
                      tags="cp311-cp311-manylinux_2_34_x86_64")
    assert made.name == NAME
    return made


@pytest.fixture
def static_site(tmp_path: Path, stand_in: Path) -> Iterator[str]:
    """The stand-in published into an index, exported, and the export served over HTTP."""
    publish(stand_in, tmp_path / "index", channel=CHANNEL)
    export(tmp_path / "index", tmp_path / "site")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler,
                                directory=str(tmp_path / "site"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/{{channel}}/simple/"
    server.shutdown()
    server.server_close()


def nightly(project: Path, *published: str) -> dict[str, object]:
    args = [a for url in published for a in ("--published", url)]
    result = subprocess.run([sys.executable, "-m", "wheelsmith", "nightly", "--no-publish",
                             "--report", "report", *args], cwd=project, capture_output=True,
                            text=True, check=False, env={**os.environ,
                                                         "WHEELSMITH_UPLOAD_TIMEOUT": "5"})
    cell = json.loads((project / "report" / "nightly.json").read_text())["cells"][0]
    return {"exit": result.returncode, "status": cell["status"], "reason": cell["reason"]}


def test_a_cell_published_on_devpi_and_on_a_static_host_is_skipped(
        tmp_path: Path, one_cell: Path, stand_in: Path, static_site: str,
        toolchain: Toolchain) -> None:
    with devpi(tmp_path / "devpi") as server:
        upload = subprocess.run([sys.executable, "-m", "wheelsmith", "publish", *server.args(),
                                 "--channel", CHANNEL, str(stand_in)], capture_output=True,
                                text=True, check=False, env={**os.environ, **server.env})
        assert upload.returncode == 0, upload.stderr
        outcome = nightly(one_cell, server.simple, static_site)
    site = static_site.replace("{channel}", CHANNEL)
    assert outcome == {"exit": 0, "status": "skipped", "reason": (
        f"already published: {NAME} at {server.simple_url()}; {NAME} at {site}")}


def test_an_index_that_cannot_be_read_fails_the_cell_with_its_answer(
        one_cell: Path, toolchain: Toolchain) -> None:
    with HostileServer(reply_500) as broken:
        outcome = nightly(one_cell, f"{broken.url}/{{channel}}/simple/")
    assert outcome["exit"] == 17
    assert outcome["status"] == "failed"
    assert outcome["reason"] == (
        f"exit 12: cannot read {broken.url}/{CHANNEL}/simple/tiny-ext/: HTTP 500: "
        "internal error (hint: the simple API URL (--simple, else the upload URL + simple/) "
        "must be the channel's index, e.g. http://HOST/USER/{channel}/+simple/ for devpi)")


def test_a_published_url_without_a_channel_is_refused(one_cell: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "wheelsmith", "nightly", "--published",
                             "http://127.0.0.1:9/simple/"], cwd=one_cell, capture_output=True,
                            text=True, check=False)
    assert result.returncode == 4
    assert result.stderr.startswith("error: --published http://127.0.0.1:9/simple/ names no "
                                    "channel\n")

