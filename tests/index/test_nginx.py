"""The nginx configuration in docs/nginx.conf serves the index (and an `index export` of it whose
files are on another server) to pip and uv, with JSON negotiation, as documented. Needs
Debian's nginx (`.ci/run` installs nginx-light)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, Served
from tests.index.test_index_clients import INSTALLERS, get, installed, venv
from tests.wheels import make_wheel
from wheelsmith.index.export import export
from wheelsmith.index.publish import publish

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
pytestmark = pytest.mark.skipif(not Path(NGINX).is_file(), reason="nginx is not installed "
                                "(apt install nginx-light; .ci/run does this)")
CHANNEL = "cu130-torch2.14"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def nginx(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    root = tmp_path / "index"
    port = free_port()
    server = (REPO / "docs" / "nginx.conf").read_text()
    server = server.replace("/srv/wheelsmith/index", str(root)).replace("127.0.0.1:8080",
                                                                       f"127.0.0.1:{port}")
    conf = tmp_path / "nginx.conf"
    user = "user root;" if os.geteuid() == 0 else ""  # workers must read the tmp directory
    conf.write_text(f"""{user} daemon off; pid {tmp_path}/nginx.pid;
error_log {tmp_path}/error.log;
events {{}}
http {{ access_log {tmp_path}/access.log; client_body_temp_path {tmp_path};
proxy_temp_path {tmp_path}; fastcgi_temp_path {tmp_path}; uwsgi_temp_path {tmp_path};
scgi_temp_path {tmp_path};
{server} }}
""")
    proc = subprocess.Popen([NGINX, "-c", str(conf), "-e", str(tmp_path / "error.log")])
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, (tmp_path / "error.log").read_text()
                assert time.monotonic() < deadline, f"nginx did not listen on {port} in 120 s"
                time.sleep(0.05)
        yield url, root
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_nginx_negotiates_json_and_hides_the_ledger(tmp_path: Path,
                                                    nginx: tuple[str, Path]) -> None:
    url, root = nginx
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    publish(make_wheel(wheels, "demo-ext", "1.0.0+cu.13.0.torch.2.14.sm.120"), root,
            channel=CHANNEL)
    page = f"{url}/{CHANNEL}/simple/demo-ext/"
    status, headers, body = get(page, "application/vnd.pypi.simple.v1+json")
    assert (status, headers["Content-Type"]) == (200, "application/vnd.pypi.simple.v1+json")
    assert body.startswith(b"{")
    status, headers, body = get(page, "text/html")
    assert (status, headers["Content-Type"]) == (200, "text/html; charset=utf-8")
    assert headers["Vary"] == "Accept"
    assert b"%2Bcu.13.0.torch.2.14.sm.120" in body
    for hidden in ("/ledger.jsonl", "/.publish.lock", "/files/", "/", f"/{CHANNEL}/"):
        assert get(f"{url}{hidden}")[0] == 404, hidden


@pytest.mark.parametrize("client", INSTALLERS)
def test_pip_and_uv_install_through_nginx(tmp_path: Path, nginx: tuple[str, Path],
                                          client: str) -> None:
    url, root = nginx
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    publish(make_wheel(wheels, "demo-ext", "1.0.0+cu.13.0.torch.2.14.sm.120",
                       tags="py3-none-any"), root, channel=CHANNEL)
    python = venv(tmp_path / "venv")
    result = INSTALLERS[client](python, f"{url}/{CHANNEL}/simple/", "demo-ext")
    assert result.returncode == 0, result.stderr
    assert installed(python, "demo-ext") == "1.0.0+cu.13.0.torch.2.14.sm.120"


@pytest.mark.parametrize("client", INSTALLERS)
def test_an_export_behind_nginx_with_its_files_on_another_server(
        tmp_path: Path, nginx: tuple[str, Path], http_dir: Served, client: str) -> None:
    """`index export` into nginx's root, links to a second server (the "bucket", a plain
    http.server) that holds the files: pip and uv read the pages (and the PEP 658 metadata)
    and download the wheel from the bucket."""
    url, site = nginx
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    wheel = make_wheel(wheels, "demo-ext", "1.0.0+cu.13.0.torch.2.14.sm.120", tags="py3-none-any")
    publish(wheel, tmp_path / "index-source", channel=CHANNEL)
    export(tmp_path / "index-source", site, base_url=http_dir.url)
    shutil.move(site / "files", http_dir.root / "files")  # the files go to the bucket
    status, _, body = get(f"{url}/{CHANNEL}/simple/demo-ext/",
                          "application/vnd.pypi.simple.v1+json")
    assert status == 200
    assert f'"url": "{http_dir.url}/files/' in body.decode()
    python = venv(tmp_path / "venv")
    result = INSTALLERS[client](python, f"{url}/{CHANNEL}/simple/", "demo-ext")
    assert result.returncode == 0, result.stderr
    assert installed(python, "demo-ext") == "1.0.0+cu.13.0.torch.2.14.sm.120"
    assert any(r.endswith(".whl") for r in http_dir.requests), http_dir.requests
    assert get(f"{url}/files/")[0] == 404
