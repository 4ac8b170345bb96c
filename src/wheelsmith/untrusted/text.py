"""Text from outside as a message shows it: escaped where a terminal would obey it, clipped;
the exception a failed Python's output ends with."""

from __future__ import annotations

import re

from wheelsmith.untrusted.redaction import redacted


def describe_size(count: int) -> str:
    """`16 MiB`, `512 bytes`: a cap as a person reads it."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if count >= 1 << shift and count % (1 << shift) == 0:
            return f"{count >> shift} {unit}"
    return f"{count} bytes"


# What a terminal obeys instead of showing (C0 but tab and newline, DEL, C1: ESC and CSI start
# its commands), and the Unicode controls that reorder or break the text around them (bidi
# marks, embeddings, overrides and isolates; line and paragraph separators).
CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069"
                      "\u2028\u2029]")


def control_in(text: str, *, lines: bool = False) -> str | None:
    """The first character of `text` that a terminal would obey rather than show (with
    `lines`, a tab or a newline too), escaped as a message shows it; None when there is none."""
    found = CONTROLS.search(text) or (re.search("[\t\n]", text) if lines else None)
    return None if found is None else found[0].encode("unicode_escape").decode("ascii")


def inert(text: str) -> str:
    """`text` as a terminal shows it and never obeys it: each control character (ESC, CSI,
    a carriage return, bidi overrides, ...) escaped (`\\x1b`), and each lone surrogate (a
    Python string read from outside may hold one; no stream can encode it) as `\\ud800`; line
    breaks and tabs kept."""
    return _UNSHOWABLE.sub(_escaped, text)


def _escaped(match: re.Match[str]) -> str:
    return match[0].encode("unicode_escape").decode("ascii")


def one_line(text: str) -> str:
    """`text` as one line of a report or a comment: each control character a terminal would
    obey, a tab and a line break escaped (`\\x1b`, `\\n`), secrets hidden (`redacted`);
    everything else as it is."""
    return _LINE_BREAKING.sub(_escaped, redacted(text))


_UNSHOWABLE = re.compile(f"{CONTROLS.pattern}|[\ud800-\udfff]")
_LINE_BREAKING = re.compile(f"[\t\n]|{_UNSHOWABLE.pattern}")


def clip(text: str, limit: int = 60) -> str:
    """`text` shown in a message: at most `limit` characters, control characters escaped,
    secrets hidden before it is cut (`redacted`: no cut leaves half of one)."""
    shown = redacted(text).encode("unicode_escape").decode("ascii")
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


# a traceback, or its end where the head was cut off (the tail of a command's output)
_TRACEBACK_RE = re.compile(r"(?:^Traceback \(most recent call last\):[ \t]*\n|\A)"
                           r"(?P<frames>(?:[ \t]+.*\n)+)(?P<error>[A-Za-z_][\w.]*(?::.*)?)$",
                           re.MULTILINE)
_FRAME_RE = re.compile(r'^[ \t]+File "(?P<file>[^"\n]+)", line (?P<line>\d+)', re.MULTILINE)
_SITE_RE = re.compile(r".*/(?:site-packages|dist-packages|site)/")
_STDLIB_RE = re.compile(r"/lib/python3\.\d+/(?!(?:site|dist)-packages/)")  # Python's own


def python_error(output: str) -> str | None:
    """The exception of the last Python traceback in `output` as `FILE:LINE: Type: message`:
    FILE the innermost frame of code that is not Python's own (`<string>`, what setuptools
    runs setup.py as, is `setup.py`; an installed module's path from its package on); None
    when `output` holds no whole traceback."""
    found = [m for m in _TRACEBACK_RE.finditer(output) if _FRAME_RE.search(m["frames"])]
    if not found:
        return None
    last = found[-1]
    frames = [(m["file"], m["line"]) for m in _FRAME_RE.finditer(last["frames"])
              if not (m["file"].startswith("<frozen ") or _STDLIB_RE.search(m["file"]))]
    error = " ".join(last["error"].split())
    if not frames:
        return error
    file, line = frames[-1]
    shown = "setup.py" if file == "<string>" else _SITE_RE.sub("", file)
    return f"{shown}:{line}: {error}"
