"""The only subprocess wrapper.

It echoes `+ command` to the log, streams every output line to the log (and to an optional
log file and line callback), and on failure raises with the tail of the output attached.
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import subprocess
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from wheelsmith.errors import CommandError, WheelsmithError

log = logging.getLogger(__name__)
output_log = logging.getLogger("wheelsmith.output")

TAIL_LINES = 40


@dataclass(frozen=True, slots=True)
class Completed:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


def render(argv: Sequence[str | Path]) -> str:
    return shlex.join(str(a) for a in argv)


def _resolve(argv: Sequence[str | Path], env: Mapping[str, str] | None) -> list[str]:
    args = [str(a) for a in argv]
    path = (env or os.environ).get("PATH")
    found = shutil.which(args[0], path=path)
    if found is None:
        raise CommandError(
            f"command not found: {args[0]}",
            tail=[],
            returncode=127,
            hint=f"install {args[0]} or put it on PATH",
        )
    return args


def run(
    argv: Sequence[str | Path],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    log_file: IO[str] | None = None,
    log_path: Path | None = None,
    on_line: Callable[[str], None] | None = None,
    ok_returncodes: Sequence[int] = (0,),
    error: type[WheelsmithError] = CommandError,
    what: str | None = None,
    stream: bool = True,
) -> Completed:
    """Run a command, streaming its merged output; raise `error` unless its exit code is ok.

    With `stream=False` stdout and stderr are kept apart (for tools whose stdout is data, such
    as cuobjdump) and the output is logged after the command ends.
    """
    args = _resolve(argv, env)
    line = f"+ {render(args)}"
    log.info(line)
    if log_file is not None:
        log_file.write(line + "\n")
        log_file.flush()
    try:
        if stream:
            returncode, stdout, stderr, tail = _run_streaming(args, cwd, env, log_file, on_line)
        else:
            returncode, stdout, stderr, tail = _run_captured(args, cwd, env, log_file)
    except OSError as exc:  # not a program (exec format error), not permitted, ...
        raise error(f"{what or args[0]} could not start: {exc.strerror or exc}", tail=[],
                    returncode=127, log_file=log_path) from exc
    if returncode not in ok_returncodes:
        subject = what or render(args)
        raise error(
            f"{subject} failed with exit code {returncode}",
            tail=tail,
            returncode=returncode,
            log_file=log_path,
        )
    return Completed(tuple(args), returncode, stdout, stderr)


def _emit(text: str, log_file: IO[str] | None, on_line: Callable[[str], None] | None) -> None:
    output_log.debug(text)
    if log_file is not None:
        log_file.write(text + "\n")
    if on_line is not None:
        on_line(text)


def _run_streaming(
    args: list[str],
    cwd: Path | None,
    env: Mapping[str, str] | None,
    log_file: IO[str] | None,
    on_line: Callable[[str], None] | None,
) -> tuple[int, str, str, list[str]]:
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    collected: list[str] = []
    with subprocess.Popen(
        args,
        cwd=cwd,
        env=dict(env) if env is not None else None,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        bufsize=1,
    ) as proc:
        assert proc.stdout is not None
        for raw in proc.stdout:
            text = raw.rstrip("\n")
            tail.append(text)
            collected.append(text)
            _emit(text, log_file, on_line)
        returncode = proc.wait()
    if log_file is not None:
        log_file.flush()
    return returncode, "\n".join(collected), "", list(tail)


def _run_captured(
    args: list[str],
    cwd: Path | None,
    env: Mapping[str, str] | None,
    log_file: IO[str] | None,
) -> tuple[int, str, str, list[str]]:
    proc = subprocess.run(
        args,
        cwd=cwd,
        env=dict(env) if env is not None else None,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        errors="replace",
        check=False,
    )
    lines = (proc.stdout + proc.stderr).splitlines()
    for text in lines:
        _emit(text, log_file, None)
    return proc.returncode, proc.stdout, proc.stderr, lines[-TAIL_LINES:]
