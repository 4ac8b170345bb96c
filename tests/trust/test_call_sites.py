"""Each bound of docs/security.md is one mechanism, and every call site in src/ goes through
it: read with `ast`, so a new call site cannot go around one.

- A zip is opened for reading only by `untrusted.local.open_zip` (its layout checked before a
  member is read, its reads held to a budget); a tar only by `recipes/unpack.py`.
- A server is talked to only through `untrusted.web.exchange` (a byte cap and a total
  deadline): no other module opens a connection or imports an HTTP client.
- A command runs only through `cmd.run`, and every one whose answer wheelsmith waits for (its
  result is used: its output, its exit code) passes `bounds=` (a byte cap and a deadline); a
  command whose result is dropped is a build step, under the build's own time limit.
- No deadline is infinite but `cmd.UNBOUNDED`'s (the streamed build steps').
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


SPAWNING = {"subprocess.run", "subprocess.Popen", "subprocess.call", "subprocess.check_call",
            "subprocess.check_output", "subprocess.getoutput", "subprocess.getstatusoutput",
            "os.system", "os.popen", "asyncio.create_subprocess_exec",
            "asyncio.create_subprocess_shell", "pty.spawn"} | {
    f"os.{name}" for name in ("execv", "execve", "execvp", "execvpe", "execl", "execlp",
                              "spawnv", "spawnve", "spawnvp", "posix_spawn", "posix_spawnp")}
# Commands started elsewhere than cmd.run, each for a reason: the supervisor that cmd.run
# starts every command under, and the ninja launcher inside a package's build (standard library
# only: it runs in the build's Python), which runs the real ninja under the build's time limit.
STARTED_ELSEWHERE = {
    ("resources/supervise.py", "os.execvp"): "the supervisor becomes the command it supervises",
    ("builder/prebuild.py", "os.execv"): "the launcher becomes the real ninja",
    ("builder/ninjafile.py", "subprocess.run"): "ninja's dry run (timeout=)",
    ("builder/sample.py", "subprocess.Popen"): "the sample compile: a build step, its output "
                                               "streamed",
}


def test_commands_start_only_through_cmd_run() -> None:
    elsewhere = [str(site) for site in sites() if dotted(site.call.func) in SPAWNING
                 and site.module != "cmd.py"
                 and (site.module, dotted(site.call.func)) not in STARTED_ELSEWHERE]
    assert elsewhere == []


def test_the_dry_run_of_the_launcher_has_a_deadline() -> None:
    dry = [site for site in sites() if site.module == "builder/ninjafile.py"
           and dotted(site.call.func) == "subprocess.run"]
    assert [site.keyword("timeout") is not None for site in dry] == [True]


def test_every_command_whose_answer_is_waited_for_has_bounds() -> None:
    """`cmd.run(...)` as a statement of its own drops its result (a build step, streamed
    under the build's time limit); any other use of it reads the command's answer."""
    unbounded = [str(site) for site in sites() if dotted(site.call.func) == "cmd.run"
                 and not isinstance(site.parent, ast.Expr) and site.keyword("bounds") is None]
    aliased = sorted(f"{path.relative_to(SRC)}: imports {name}" for path in SRC.rglob("*.py")
                     for name in _imports(ast.parse(path.read_text()))
                     if name in ("wheelsmith.cmd.run", "wheelsmith.cmd._run_captured"))
    assert (unbounded, aliased) == ([], [])


def _infinite(node: ast.expr | None) -> bool:
    text = ast.unparse(node) if node is not None else ""
    return "inf" in text


def test_no_deadline_is_infinite_but_the_streamed_build_steps() -> None:
    infinite = [str(site) for site in sites() if dotted(site.call.func).endswith("Bounds")
                and site.module != "cmd.py"
                and (_infinite(site.keyword("seconds"))
                     or any(_infinite(arg) for arg in site.call.args[1:2]))]
    assert infinite == []
