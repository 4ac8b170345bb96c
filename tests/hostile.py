"""Hostile peers and the checks every untrusted-input case must pass (docs/security.md).

`HostileServer` is an HTTP server on 127.0.0.1 that misbehaves on purpose: it answers 500,
redirects to itself, drips one byte at a time, accepts and never answers, sends a body larger
than any page, or serves whatever bytes a test generated. `run_bounded` runs the real CLI in a
subprocess under an address-space cap and a wall-clock limit, and `assert_orderly` holds its
result to the promise: no traceback, an exit code from the documented set, within the time.
`Sentinel` is a directory outside every root a command may write to; `unchanged()` says whether
anything there was created, changed or removed.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import ipaddress
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import click
from hypothesis import strategies as st

from wheelsmith.untrusted.text import clip

T = TypeVar("T")
E = TypeVar("E", bound=BaseException)

# docs/cli.md#exit-codes: 0, click's 2, WheelsmithError's 3-22, 130 interrupted. 1 is "a bug".
DOCUMENTED_EXIT_CODES = frozenset({0, 2, *range(3, 23), 130})


@dataclass(frozen=True)
class Reply:
    """What the server sends for one request: a status, headers and a body; `drip` seconds
    between single bytes of the body (0: all at once); `size` sends that many bytes of `body`
    repeated (a body too large to hold); `hang` sends nothing at all until the server stops."""

    status: int = 200
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = (("Content-Type", "application/json"),)
    drip: float = 0.0
    size: int | None = None
    hang: bool = False
    raw: bytes | None = None  # sent as it is instead of an HTTP answer (dripped with `drip`)
    again: float | None = None  # `raw` sent again every `again` seconds until the server stops


def reply_500(_: str) -> Reply:
    return Reply(500, b"internal error", (("Content-Type", "text/plain"),))


def redirect_to_itself(path: str) -> Reply:
    return Reply(302, b"", (("Location", path),))


def html_page(_: str) -> Reply:
    return Reply(200, b"<html><body>a login page</body></html>",
                 (("Content-Type", "text/html"),))


def never_answers(_: str) -> Reply:
    return Reply(hang=True)


def drips(seconds: float) -> Callable[[str], Reply]:
    def reply(_: str) -> Reply:
        return Reply(200, b'{"files": []}' * 1000, drip=seconds)
    return reply


def huge(size: int) -> Callable[[str], Reply]:
    def reply(_: str) -> Reply:
        return Reply(200, b"[" + b"1," * 1023 + b"1]", size=size)
    return reply


def serving(body: bytes, content_type: str = "application/vnd.pypi.simple.v1+json"
            ) -> Callable[[str], Reply]:
    def reply(_: str) -> Reply:
        return Reply(200, body, (("Content-Type", content_type),))
    return reply


HOSTILE_MODES: Mapping[str, Callable[[str], Reply]] = {
    "500": reply_500, "redirect loop": redirect_to_itself, "html page": html_page,
    "never answers": never_answers, "drips a byte a second": drips(1.0),
    "huge body": huge(2 << 30),
}


def _bind_any_port(sock: socket.socket, seconds: float = 60) -> None:
    """Port 0 on 127.0.0.1. A soak (`make fuzz` spread over many cores) can leave every
    ephemeral port in TIME_WAIT for a while: wait for one rather than fail the property."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            sock.bind(("127.0.0.1", 0))
            return
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@dataclass
class HostileServer:
    """Answers every request with `answer(path)`; records the paths asked for. A context
    manager: the server and every connection it holds end when the block does."""

    answer: Callable[[str], Reply]  # given the path (with `by_head`: the request's head)
    by_head: bool = False  # an echoing server: its answer is made from what it was sent
    requests: list[str] = field(default_factory=list)
    heads: list[str] = field(default_factory=list)  # each request's head (latin-1), in order
    _stop: threading.Event = field(default_factory=threading.Event)
    _conns: list[socket.socket] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        _bind_any_port(self._sock)
        self._sock.listen(64)
        self._sock.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"

    def __enter__(self) -> HostileServer:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for conn in [*self._conns, self._sock]:
            with contextlib.suppress(OSError):
                conn.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            head = self._read_head(conn)
            if head is None:
                return
            self.heads.append(head.decode("latin-1"))
            request = head.split(b"\r\n", 1)[0]
            path = request.split(b" ")[1].decode("latin-1") if request.count(b" ") >= 2 \
                else "/"
            self.requests.append(path)
            self._send(conn, self.answer(head.decode("latin-1") if self.by_head else path))
        with contextlib.suppress(OSError):
            conn.close()

    def _read_head(self, conn: socket.socket) -> bytes | None:
        """The request's head; its body (by Content-Length, up to 64 MiB) is read and dropped,
        as a server does before it answers: one that closes a connection holding unread bytes
        resets it, and the client may then never see the answer under test."""
        data = b""
        while b"\r\n\r\n" not in data and len(data) < 1 << 16:
            chunk = conn.recv(4096)
            if not chunk:
                return None
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = re.search(rb"(?im)^content-length:[ \t]*(\d{1,8})[ \t]*\r?$", head)
        left = min(int(length[1]), 64 << 20) - len(body) if length else 0
        while left > 0 and not self._stop.is_set():
            chunk = conn.recv(min(left, 1 << 16))
            if not chunk:
                break
            left -= len(chunk)
        return head

    def _send(self, conn: socket.socket, reply: Reply) -> None:
        if reply.hang:
            self._stop.wait()
            return
        if reply.raw is not None:
            self._drip(conn, reply.raw, reply.drip)
            while reply.again is not None and not self._stop.wait(reply.again):
                conn.sendall(reply.raw)
            return
        length = reply.size if reply.size is not None else len(reply.body)
        head = [f"HTTP/1.1 {reply.status} X", f"Content-Length: {length}", "Connection: close",
                *(f"{k}: {v}" for k, v in reply.headers)]
        conn.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        if reply.drip:
            self._drip(conn, reply.body, reply.drip)
            return
        if reply.size is None:
            conn.sendall(reply.body)
            return
        sent = 0
        while sent < reply.size and not self._stop.is_set():
            piece = reply.body[: reply.size - sent]
            conn.sendall(piece)
            sent += len(piece)


    def _drip(self, conn: socket.socket, data: bytes, seconds: float) -> None:
        if not seconds:
            conn.sendall(data)
            return
        for byte in data:
            if self._stop.wait(seconds):
                return
            conn.sendall(bytes([byte]))


def drips_its_head(seconds: float) -> Callable[[str], Reply]:
    """An HTTP head sent one byte every `seconds` (a per-read timeout never trips)."""
    def reply(_: str) -> Reply:
        return Reply(raw=b"HTTP/1.1 200 OK\r\n" + b"X-Slow: a\r\n" * 10_000 + b"\r\n",
                     drip=seconds)
    return reply


def garbage(data: bytes) -> Callable[[str], Reply]:
    """`data` instead of an HTTP answer."""
    def reply(_: str) -> Reply:
        return Reply(raw=data)
    return reply


def redirect(location: str, status: int = 302) -> Callable[[str], Reply]:
    """A redirect to `location`, whatever it is (latin-1 text: a header carries no more)."""
    def reply(_: str) -> Reply:
        return Reply(status, b"", (("Location", location),))
    return reply


def endless_continue(_: str) -> Reply:
    """`100 Continue` interim answers, one every 10 ms, and never a final one."""
    return Reply(raw=b"HTTP/1.1 100 Continue\r\n\r\n", again=0.01)


# Answers no HTTP reader may take (red team: each was a traceback, or held a command past its
# deadline): what the one client (untrusted/web.py) says of each, after the URL.
NOT_HTTP_MODES: Mapping[str, Callable[[str], Reply]] = {
    "a redirect to a port that is no number": redirect("http://127.0.0.1:abc/x/"),
    "a redirect to a port over 65535": redirect("http://127.0.0.1:99999/x/"),
    "a redirect to an unclosed IPv6 literal": redirect("http://[::1/x/"),
    "a header line over 64 KiB": garbage(b"HTTP/1.1 200 OK\r\nX: " + b"a" * 70_000 +
                                         b"\r\n\r\n"),
    "200 headers": garbage(b"HTTP/1.1 200 OK\r\n" + b"X: a\r\n" * 200 + b"\r\n"),
    "no status line": garbage(b"no status line, no headers"),
    "a chunk size that is no number": garbage(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked"
                                              b"\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"),
    "drips its head": drips_its_head(0.5),
    "endless 100 Continue": endless_continue,
}
NOT_HTTP_HINT = "hint: check that the URL names an HTTP server, and the server"
REDIRECT_HINT = ("hint: a server may send a reader only to another valid http(s) URL; nothing "
                 "was read there: check the URL and the server")
SLOW_HINT = ("hint: the server is down, overloaded or holds the connection open without "
             "answering: check it, then try again")
NOT_HTTP_SAID: Mapping[str, tuple[str, str]] = {  # the error after `URL: `, and its hint
    "a redirect to a port that is no number": (
        "its redirect (HTTP 302): 'http://127.0.0.1:abc/x/' is not a valid URL (its port "
        "'abc' is not a number from 1 to 65535)", REDIRECT_HINT),
    "a redirect to a port over 65535": (
        "its redirect (HTTP 302): 'http://127.0.0.1:99999/x/' is not a valid URL (its port "
        "'99999' is not a number from 1 to 65535)", REDIRECT_HINT),
    "a redirect to an unclosed IPv6 literal": (
        "its redirect (HTTP 302): 'http://[::1/x/' is not a valid URL (its host in brackets "
        "is not an IPv6 address)", REDIRECT_HINT),
    "a header line over 64 KiB": (
        "did not answer with valid HTTP (a header line longer than 64 KiB)", NOT_HTTP_HINT),
    "200 headers": ("did not answer with valid HTTP (got more than 100 headers)", NOT_HTTP_HINT),
    "no status line": ("did not answer with valid HTTP (its status line 'no status line, no "
                       "headers' is not HTTP/1.x)", NOT_HTTP_HINT),
    "a chunk size that is no number": (
        "did not answer with valid HTTP (its body ended after 0 bytes, short of what it "
        "announced, or its chunked encoding is malformed)", NOT_HTTP_HINT),
    "drips its head": ("did not finish answering within {seconds} s", SLOW_HINT),
    "endless 100 Continue": ("did not finish answering within {seconds} s", SLOW_HINT),
}
QUICK_NOT_HTTP = sorted(mode for mode, (said, _) in NOT_HTTP_SAID.items()
                        if "{seconds}" not in said)


# What a Python 3.11 with torch 2.14.1+cu130 on an sm_120 GPU answers the probe
# (resources/probe.py), with no CUDA-extension package installed.
PROBE_ANSWER: Mapping[str, object] = {
    "python": "3.11", "implementation": "cpython", "executable": "/stand-in/bin/python",
    "purelib": "/stand-in/lib/python3.11/site-packages", "machine": "x86_64",
    "glibc": "2.36", "pip": True, "torch": "2.14.1", "torch_full": "2.14.1+cu130",
    "torch_dist": "2.14.1", "torch_cuda": "13.0",
    "gpu": {"name": "stand-in GPU", "capability": [12, 0]},
    "packages": [], "fast_path": {}, "dists": {}}


def stand_in_python(path: Path, script: str) -> Path:
    """An executable at `path` that runs the shell `script` whatever it is asked: an
    interpreter given as `--python` that is not one, or answers what a test wants."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(0o755)
    return path


def answering_python(path: Path, answer: Mapping[str, object] = PROBE_ANSWER) -> Path:
    """A stand-in interpreter that answers the probe with `answer` and does nothing else."""
    line = "WHEELSMITH-PROBE " + json.dumps(answer)
    return stand_in_python(path, f"echo WHEELSMITH-PROBE-STARTED\ncat <<'EOF'\n{line}\nEOF")


def returned_or_raised(call: Callable[[], T], errors: type[E]) -> T | E:
    """What `call` returns, or the error of type `errors` it raises: a generated input may
    rightly give either, and the test then holds each to its promise."""
    try:
        return call()
    except errors as exc:
        return exc


@dataclass(frozen=True)
class Outcome:
    """A finished (or stopped) CLI run: its exit code, output and how long it took."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool

    def describe(self) -> str:
        return (f"wheelsmith {' '.join(self.args)} -> exit {self.returncode} in "
                f"{self.seconds:.1f} s{' (killed at its time limit)' if self.timed_out else ''}"
                f"\n--- stdout ---\n{self.stdout[-3000:]}\n--- stderr ---\n{self.stderr[-3000:]}")


READ_ONLY_MOUNTS = ('n=$1; shift; while [ "$n" -gt 0 ]; do mount --bind "$1" "$1" && '
                    'mount -o remount,bind,ro "$1" || exit 97; shift; n=$((n - 1)); done; '
                    'exec "$@"')


def run_bounded(*args: str, cwd: Path, env: Mapping[str, str] | None = None,
                seconds: float = 60, address_space: int = 2 << 30,
                read_only: Sequence[Path] = ()) -> Outcome:
    """The real CLI in a subprocess under RLIMIT_AS=`address_space` bytes (util-linux
    prlimit), killed with its session after `seconds`. `read_only`: directories it sees
    mounted read-only (a user and mount namespace of its own: root cannot write there
    either; tests.conftest.SMALL_FS skips where the machine allows no such namespace)."""
    start = time.monotonic()
    wrap = ["unshare", "-rm", "sh", "-c", READ_ONLY_MOUNTS, "sh", str(len(read_only)),
            *map(str, read_only)] if read_only else []
    proc = subprocess.Popen([*wrap, "prlimit", f"--as={address_space}", "--", sys.executable,
                             "-m", "wheelsmith", *args], cwd=cwd,
                            env=dict(env if env is not None else os.environ),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            errors="replace", start_new_session=True)
    timed_out = False
    try:
        stdout, stderr = proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        timed_out = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
        stdout, stderr = proc.communicate()
    return Outcome(args, proc.returncode, stdout, stderr, time.monotonic() - start, timed_out)


def assert_orderly(outcome: Outcome, *, seconds: float | None = None) -> None:
    """No traceback, an exit code from the documented set, and (when given) within
    `seconds`."""
    assert "Traceback (most recent call last)" not in outcome.stderr + outcome.stdout, \
        outcome.describe()
    assert not outcome.timed_out, outcome.describe()
    assert outcome.returncode in DOCUMENTED_EXIT_CODES, outcome.describe()
    if seconds is not None:
        assert outcome.seconds <= seconds, outcome.describe()


class Sentinel:
    """A directory of files that no command may touch: `unchanged()` compares its listing and
    every file's sha256 with what they were when it was made."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        (root / "precious.txt").write_text("do not touch\n")
        (root / "nested").mkdir(exist_ok=True)
        (root / "nested" / "X.whl").write_bytes(b"not yours\n")
        self._before = self._snapshot()

    def _snapshot(self) -> dict[str, str]:
        found: dict[str, str] = {}
        for path in sorted(self.root.rglob("*")):
            rel = str(path.relative_to(self.root))
            found[rel] = hashlib.sha256(path.read_bytes()).hexdigest() \
                if path.is_file() and not path.is_symlink() else "dir-or-link"
        return found

    def changes(self) -> list[str]:
        after = self._snapshot()
        return sorted(name for name in self._before.keys() | after.keys()
                      if self._before.get(name) != after.get(name))


@contextlib.contextmanager
def sentinel(root: Path) -> Iterator[Sentinel]:
    """A Sentinel that fails the test when anything in it changed by the end of the block."""
    guard = Sentinel(root)
    yield guard
    assert guard.changes() == [], f"written outside the roots: {guard.changes()}"


# Hosts and ports no connection can take, as a server may write them into a Location, a
# link's href or a file's url (latin-1: what a header carries), and why each is refused.
PORTS = st.sampled_from(["abc", "99999", "65536", "0", "-1", "+80", "\xb2", "8 0", "1e3"]) | \
    st.integers(65536, 10**30).map(str) | \
    st.text(st.characters(max_codepoint=255, blacklist_categories=["Cc"],
                          blacklist_characters="/?#@[]"),
            min_size=1, max_size=6).filter(lambda port: not (port.isascii() and port.isdigit()))
BRACKETED = st.sampled_from(["[::1", "[bad", "[zz]", "[:::]", "[1.2.3.4]", "[]",
                             "[::g]", "[v1.x]"]) | \
    st.text("0123456789abcdefg:.", max_size=12).filter(
        lambda text: ":" not in text or not _ipv6(text)).map(lambda text: f"[{text}]")
BAD_URLS = st.one_of(
    PORTS.map(lambda port: (f"http://127.0.0.1:{port}/x/",
                            f"its port '{clip(port, 20)}' is not a number from 1 to 65535")),
    BRACKETED.map(lambda host: (f"http://{host}/x/",
                                "its host in brackets is not an IPv6 address")))


def _ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def cli_params(command: click.Command, keep: Callable[[click.Parameter], bool],
               path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Parameter]]:
    """Every parameter `keep` takes of every command of the CLI, with the command's path."""
    if isinstance(command, click.Group):
        return [found for name, sub in sorted(command.commands.items())
                for found in cli_params(sub, keep, (*path, name))]
    return [(path, p) for p in command.params if keep(p)]
