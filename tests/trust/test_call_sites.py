"""Each bound of docs/security.md is one mechanism, and every call site in src/ goes through
it: read with `ast`, so a new call site cannot go around one.

- A zip is opened for reading only by `untrusted.local.open_zip` (its layout checked before a
  member is read, its reads held to a budget); a tar only by `recipes/unpack.py`.
- A server is talked to only through `untrusted.web.exchange` (a byte cap and a total
  deadline): no other module opens a connection or imports an HTTP client.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import REPO

SRC = REPO / "src" / "wheelsmith"


@dataclass(frozen=True)
class Site:
    """One call in src/: where it is, and the call."""

    path: Path
    call: ast.Call
    parent: ast.AST

    def __str__(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.call.lineno}: {ast.unparse(self.call)[:120]}"

    @property
    def module(self) -> str:
        return str(self.path.relative_to(SRC))

    def keyword(self, name: str) -> ast.expr | None:
        return next((k.value for k in self.call.keywords if k.arg == name), None)


def sites() -> Iterator[Site]:
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for parent in ast.walk(tree):
            for child in ast.iter_child_nodes(parent):
                if isinstance(child, ast.Call):
                    yield Site(path, child, parent)


def dotted(node: ast.expr) -> str:
    """`a.b.c` of a call's function; "" for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr}" if base else ""
    return ""


def _mode(site: Site) -> str:
    given = site.call.args[1] if len(site.call.args) > 1 else site.keyword("mode")
    return given.value if isinstance(given, ast.Constant) and isinstance(given.value, str) \
        else "r"


def test_a_zip_is_read_only_through_open_zip() -> None:
    readers = [str(site) for site in sites()
               if dotted(site.call.func) in ("zipfile.ZipFile", "ZipFile")
               and _mode(site) != "w" and site.module != "untrusted/local.py"]
    assert readers == []


def test_a_tar_is_read_only_where_it_is_checked_whole() -> None:
    readers = [str(site) for site in sites()
               if dotted(site.call.func) in ("tarfile.open", "tarfile.TarFile", "TarFile.open")
               and site.module != "recipes/unpack.py"]
    assert readers == []


CLIENT = {"untrusted/web.py", "untrusted/connections.py"}  # the one HTTP client
CONNECTING = {"urlopen", "urlretrieve", "build_opener", "OpenerDirector", "HTTPConnection",
              "HTTPSConnection", "create_connection", "socket", "wrap_socket", "connect_ex",
              "FTP", "SMTP", "Telnet", "ServerProxy"}
CLIENT_MODULES = {"requests", "urllib3", "httpx", "aiohttp", "ftplib", "smtplib", "telnetlib",
                  "xmlrpc.client", "http.client", "pycurl"}
SERVER = {"index/serve.py"}  # answers clients (its own bounds: docs/index-and-clients.md)


def _imports(tree: ast.AST) -> set[str]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
    return found


def test_no_module_but_the_client_talks_to_a_server() -> None:
    connecting = [str(site) for site in sites() if site.module not in CLIENT
                  and dotted(site.call.func).rsplit(".", 1)[-1] in CONNECTING]
    importing = sorted(
        f"{path.relative_to(SRC)}: imports {name}" for path in SRC.rglob("*.py")
        for name in _imports(ast.parse(path.read_text()))
        if name in CLIENT_MODULES and str(path.relative_to(SRC)) not in CLIENT | SERVER)
    assert (connecting, importing) == ([], [])

