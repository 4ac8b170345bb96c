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
import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
E = TypeVar("E", bound=BaseException)

# docs/cli.md#exit-codes: 0, click's 2, WheelsmithError's 3-21, 130 interrupted. 1 is "a bug".
DOCUMENTED_EXIT_CODES = frozenset({0, 2, *range(3, 22), 130})


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


@dataclass
class HostileServer:
    """Answers every request with `answer(path)`; records the paths asked for. A context
    manager: the server and every connection it holds end when the block does."""

    answer: Callable[[str], Reply]
    requests: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _conns: list[socket.socket] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
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
            request = self._read_head(conn)
            if request is None:
                return
            path = request.split(b" ")[1].decode("latin-1") if request.count(b" ") >= 2 \
                else "/"
            self.requests.append(path)
            self._send(conn, self.answer(path))
        with contextlib.suppress(OSError):
            conn.close()

    def _read_head(self, conn: socket.socket) -> bytes | None:
        data = b""
        while b"\r\n\r\n" not in data and len(data) < 1 << 16:
            chunk = conn.recv(4096)
            if not chunk:
                return None
            data += chunk
        return data.split(b"\r\n", 1)[0]

    def _send(self, conn: socket.socket, reply: Reply) -> None:
        if reply.hang:
            self._stop.wait()
            return
        if reply.raw is not None:
            self._drip(conn, reply.raw, reply.drip)
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


def run_bounded(*args: str, cwd: Path, env: Mapping[str, str] | None = None,
                seconds: float = 60, address_space: int = 2 << 30) -> Outcome:
    """The real CLI in a subprocess under RLIMIT_AS=`address_space` bytes (util-linux
    prlimit), killed with its session after `seconds`."""
    start = time.monotonic()
    proc = subprocess.Popen(["prlimit", f"--as={address_space}", "--", sys.executable, "-m",
                             "wheelsmith", *args], cwd=cwd,
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
