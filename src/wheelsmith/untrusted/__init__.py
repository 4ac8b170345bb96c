"""The boundary for data from outside (docs/security.md): what others wrote reaches wheelsmith's
logic only bounded, parsed into typed models, and with every name in it checked.

- Bounded reads: `urls.read_url`/`urls.copy_url` (http, https, file) stop at `Bounds`, a
  byte cap and a total deadline (as `cmd.run(bounds=...)` does for a command's output).
- Typed parsing: `parse_json` (plain UTF-8 only) and `Node`, the getters every model of
  outside data is built from (pages, ledger lines, provenance, probe answers): a wrong shape
  is one UntrustedDataError naming the source and the place in it (`files[3].hashes`), never
  a KeyError. `parse_python` reads code with `ast` (deep nesting: RecursionError, MemoryError).
- Local files: `local.open_regular` and its bounded readers, for the files data names or
  others wrote (an index's parts, a wheel given to verify or publish).
- Names: `Node.name` (`name_problem`) for a name from data that becomes part of a path (no
  `/`, no `..`, no NUL), `inside` for a joined path that must stay in its root.
- URLs: `server_url` (`Node.url`) for every URL a server gives (a redirect's Location, a
  link's href, a page's `url`): a valid http(s) URL or one located error; `redact` for every
  URL a message shows.
- HTTP: `web.exchange`, the one way wheelsmith talks to a server (pages, downloads, uploads).
"""

from __future__ import annotations

import ast
import codecs
import functools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, TypeVar

from wheelsmith import numbers
from wheelsmith.errors import UntrustedDataError
from wheelsmith.untrusted.addresses import WEB, server_url
from wheelsmith.untrusted.paths import inside as inside  # a path taken from data, checked
from wheelsmith.untrusted.text import CONTROLS
from wheelsmith.untrusted.text import clip as clip  # the text helpers, as they were imported
from wheelsmith.untrusted.text import control_in as control_in
from wheelsmith.untrusted.text import describe_size as describe_size

T = TypeVar("T")
CHUNK = 1 << 16
NOT_FOUND = HTTPStatus.NOT_FOUND.value
MAX_NAME_BYTES = 255
PLAIN_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")  # shown as it is in a path
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)  # a variable's name
MAX_DEPTH = 200  # of a syntax tree: setup.py files nest a few dozen levels at most


CHANNEL_RE = re.compile(r"[a-z0-9][a-z0-9._-]{0,99}")  # an index channel: cu130-torch2.14
# What an index holds at its root beside its channels' directories (index/store.py, pages.py,
# ledger.py, export.py; dot names are no channel's): a channel of such a name would write its
# pages into the index's own files (tests/index/test_publish.py keeps this list whole).
INDEX_ROOT_NAMES = frozenset({"index.html", "index.json", "ledger.jsonl", "files"})


def channel_problem(name: str) -> str | None:
    """Why `name` cannot be a channel (a directory at the index's root, a part of its URLs),
    or None: lowercase letters, digits, '.', '_' and '-', at most 100, not one of the names
    the index keeps for its own files."""
    if not (name.isascii() and CHANNEL_RE.fullmatch(name)):
        return ("a channel is 1-100 lowercase letters, digits, '.', '_' and '-', starting "
                "with a letter or digit")
    if name in INDEX_ROOT_NAMES:
        return f"'{name}' is a name the index keeps for its own files"
    return None


def channel_name(text: str) -> str:
    """`text` when it is a channel's name (`channel_problem`), else ValueError."""
    problem = channel_problem(text)
    if problem is not None:
        raise ValueError(problem)
    return text

def name_problem(name: str) -> str | None:
    """Why `name` is not a plain file name (one path component, nothing that moves or hides
    it), or None when it is one."""
    checks = ((not name, "it is empty"), ("\0" in name, "it holds a NUL byte"),
              ("/" in name or "\\" in name, "it holds a path separator"),
              (name in (".", ".."), f"it is '{name}'"),
              (control_in(name, lines=True) is not None, "it holds control characters"),
              (len(name.encode(errors="surrogatepass")) > MAX_NAME_BYTES,
               f"it is longer than {MAX_NAME_BYTES} bytes"))
    return next((why for wrong, why in checks if wrong), None)


def _kind(value: object) -> str:
    if isinstance(value, (dict, list, bool)) or value is None:
        return {dict: "an object", list: "a list", bool: "true/false"}.get(type(value), "null")
    shown = json.dumps(value) if isinstance(value, str) else repr(value)
    return f"{'a string' if isinstance(value, str) else 'a number'} ({clip(shown)})"


def key_path(path: str, key: str | int) -> str:
    """`path` and one step into it: `files[3]`, `recipe.package`; a key that is not a plain
    name is data too, shown quoted and escaped (`extra_env["A B"]`)."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    if not (len(key) <= 64 and _plain_key(key)):
        return f"{path}[{clip(json.dumps(key), 40)}]"
    return f"{path}.{key}" if path else key


@functools.lru_cache(maxsize=256)  # the keys of a document's objects repeat
def _plain_key(key: str) -> bool:
    return PLAIN_KEY_RE.fullmatch(key) is not None


@dataclass(frozen=True, slots=True)
class Node:
    """A value from outside and where it is: `source` (a URL, `file:line`, "the probe of X")
    and `path` inside it (`files[3].hashes`). Every getter checks a shape or fails naming
    both."""

    value: object
    source: str
    path: str = ""

    def fail(self, problem: str, *, hint: str | None = None) -> UntrustedDataError:
        return UntrustedDataError(self.source, f"{self.path}: {problem}" if self.path
                                  else problem, hint=hint)

    def _child(self, key: str | int, value: object) -> Node:
        return Node(value, self.source, key_path(self.path, key))

    def _as(self, kind: type[T], what: str) -> T:
        if not isinstance(self.value, kind) or (kind is int and isinstance(self.value, bool)):
            raise self.fail(f"expected {what}, found {_kind(self.value)}")
        return self.value

    def __getitem__(self, key: str) -> Node:
        found: dict[str, object] = self._as(dict, "an object")
        if key not in found:
            raise self.fail(f"'{key}' is missing")
        return self._child(key, found[key])

    def get(self, key: str) -> Node | None:
        """The value at `key`; None when it is absent or null."""
        value = self._as(dict, "an object").get(key)
        return None if value is None else self._child(key, value)

    def optional(self, key: str, read: Callable[[Node], T]) -> T | None:
        """`read` of the value at `key`; None when it is absent or null."""
        found = self.get(key)
        return None if found is None else read(found)

    def items(self, at_most: int | None = None) -> list[Node]:
        """A list's items; with `at_most`, a longer list is refused before any is read."""
        value = self._as(list, "a list")
        if at_most is not None and len(value) > at_most:
            raise self.fail(f"lists {len(value):,} entries, more than the {at_most:,} "
                            "wheelsmith reads")
        return [self._child(i, v) for i, v in enumerate(value)]

    def entries(self) -> dict[str, Node]:
        return {k: self._child(k, v) for k, v in self._as(dict, "an object").items()}

    def text(self, pattern: re.Pattern[str] | None = None, what: str = "") -> str:
        """A string; with `pattern`, one that matches it whole (`what` names the form): every
        form is ASCII, whatever `\\d` or `\\w` in it would match elsewhere (`٣` is a digit)."""
        value = self._as(str, "a string")
        if pattern is not None and not (value.isascii() and pattern.fullmatch(value)):
            raise self.fail(f"'{clip(value)}' is not {what or 'in the expected form'}")
        return value

    def parsed(self, convert: Callable[[str], T], what: str) -> T:
        """`convert` of a string; a ValueError from it: the string is not `what`."""
        value = self.text()
        try:
            return convert(value)
        except ValueError:
            raise self.fail(f"'{clip(value)}' is not {what}") from None

    def integer(self, minimum: int = 0) -> int:
        value = self._as(int, "a whole number")
        if value < minimum:
            raise self.fail(f"{value} is less than {minimum}")
        return value

    def flag(self) -> bool:
        return self._as(bool, "true or false")

    def name(self) -> str:
        """A plain file name: a name from data that becomes part of a path (`name_problem`)."""
        text = self.text()
        problem = name_problem(text)
        if problem is not None:
            raise self.fail(f"'{clip(text)}' is not a plain file name ({problem})")
        return text

    def url(self, base: str, schemes: tuple[str, ...] = WEB) -> str:
        """A URL a server gave, joined with `base` (the page it is on): `server_url`."""
        return server_url(self.text(), base, source=self.source, where=self.path or None,
                          schemes=schemes)

    def text_map(self) -> dict[str, str]:
        return {key: node.text() for key, node in self.entries().items()}


class _Ambiguous(Exception):
    """JSON that readers take differently: a key twice in one object, NaN or Infinity."""


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise _Ambiguous(f"holds the key '{clip(key)}' twice in one object (readers differ "
                             "on which one counts)")
        seen.add(key)
    return dict(pairs)


def _no_constant(name: str) -> float:
    raise _Ambiguous(f"holds {name}, which is not JSON")


def _controlled(value: Any, source: str) -> UntrustedDataError | None:
    """The error for the first string (a key or a value) in `value` that holds a character a
    terminal would obey (`control_in`); None when there is none."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, dict):  # its keys first (a value's place names its key)
            stack += [(v, key_path(path, k)) for k, v in item.items()]
            stack += [(k, path) for k in item]
        elif isinstance(item, list):
            stack += [(v, key_path(path, i)) for i, v in enumerate(item)]
        elif isinstance(item, str) and (char := control_in(item)) is not None:
            return Node(item, source, path).fail(f"holds the control character {char}, which "
                                                 "a terminal would obey rather than show")
        elif isinstance(item, str) and (lone := SURROGATE.search(item)) is not None:
            return Node(item, source, path).fail(
                f"holds {lone[0].encode('unicode_escape').decode()}, half of a UTF-16 pair, "
                "which is no character (JSON's \\u escapes allow it; text cannot hold it)")
    return None


SURROGATE = re.compile("[\ud800-\udfff]")  # a lone half of a UTF-16 pair (from a \\u escape)

_BOMS = ((codecs.BOM_UTF8, "UTF-8"), (codecs.BOM_UTF32_LE, "UTF-32"),
         (codecs.BOM_UTF32_BE, "UTF-32"), (codecs.BOM_UTF16_LE, "UTF-16"),
         (codecs.BOM_UTF16_BE, "UTF-16"))


def plain_utf8(data: bytes | str, source: str) -> str:
    """`data` as text when it is plain UTF-8: no byte order mark, no NUL byte (UTF-16 or
    UTF-32 without a mark), every byte decoded; else one UntrustedDataError saying which.
    (json.loads takes bytes in any of those and a UTF-8 BOM too; other readers do not.)"""
    if isinstance(data, str):
        text = data
    else:
        bom = next((name for mark, name in _BOMS if data.startswith(mark)), None)
        if bom is not None:
            raise UntrustedDataError(source, f"not plain UTF-8 (byte 1: a {bom} byte order "
                                             "mark)")
        if (nul := data.find(b"\0")) != -1:
            raise UntrustedDataError(source, f"not UTF-8 (byte {nul + 1} is NUL: UTF-16 or "
                                             "UTF-32?)")
        try:
            text = data.decode()
        except UnicodeDecodeError as exc:
            raise UntrustedDataError(source, f"not UTF-8 (byte {exc.start + 1})") from None
    if text.startswith("\ufeff"):
        raise UntrustedDataError(source, "not plain UTF-8 (character 1: a byte order mark)")
    return text


# The most files a project page may list (PyPI's longest lists hold some tens of thousands),
# and JSON objects around them (a file, its hashes, its metadata's hashes): a page within
# its byte cap then costs at most a few seconds and some hundred MiB to read.
PAGE_MAX_FILES = 200_000
PAGE_MAX_OBJECTS = 4 * PAGE_MAX_FILES + 16


def parse_json(data: bytes | str, source: str, *, max_objects: int | None = None) -> Node:
    """The JSON document `data` from `source` as a Node; not plain UTF-8 (`plain_utf8`), not
    JSON, JSON that readers take differently (a key twice, NaN) or a string holding a
    terminal's control character: one UntrustedDataError. `max_objects`: a document that
    could hold more objects (its count of `{`) is refused before it is parsed, so that a
    body within the byte cap cannot cost many times its size in memory and time."""
    if max_objects is not None:
        braces = data.count(b"{") if isinstance(data, bytes) else data.count("{")
        if braces > max_objects:
            raise UntrustedDataError(source, f"holds {braces:,} JSON objects, more than the "
                                             f"{max_objects:,} wheelsmith reads")
    text = plain_utf8(data, source)
    try:
        value: Any = json.loads(text, object_pairs_hook=_unique, parse_constant=_no_constant)
    except _Ambiguous as exc:
        raise UntrustedDataError(source, str(exc)) from None
    except RecursionError:
        raise UntrustedDataError(source, "its JSON nests too deeply") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, a number too long
        raise UntrustedDataError(source, f"not valid JSON ({clip(str(exc), 100)})") from None
    controlled = _controlled(value, source) if _may_hold_controls(text) else None
    if controlled is not None:
        raise controlled
    return Node(value, source)


def _may_hold_controls(text: str) -> bool:
    """Whether a string in the JSON document `text` may hold a control character or a lone
    surrogate: without an escape (a backslash), each string's characters are the document's
    own, so a document with none of them has none in any string (and the walk that names the
    first one is skipped)."""
    return "\\" in text or CONTROLS.search(text) is not None or \
        SURROGATE.search(text) is not None


def parse_python(text: str, source: str) -> ast.Module:
    """`text` (the Python source at `source`) as a syntax tree no deeper than MAX_DEPTH (so
    that code walking it recursively cannot run out of stack); one UntrustedDataError when
    Python cannot read it (a syntax error, a NUL byte, nesting too deep for its parser)."""
    try:
        module = ast.parse(text)
    except (SyntaxError, ValueError) as exc:  # ValueError: a NUL byte, before Python 3.12
        line = getattr(exc, "lineno", None)
        raise UntrustedDataError(f"{source}:{line}" if line else source,
                                 f"not valid Python ({getattr(exc, 'msg', exc)})") from None
    except (RecursionError, MemoryError):
        raise UntrustedDataError(source, "nests too deeply for Python's parser") from None
    stack: list[tuple[ast.AST, int, int]] = [(module, 0, 1)]  # a node, its depth and line
    while stack:
        node, depth, line = stack.pop()
        if depth > MAX_DEPTH:
            raise UntrustedDataError(f"{source}:{line}", f"nests deeper than {MAX_DEPTH} levels")
        stack.extend((child, depth + 1, getattr(child, "lineno", line))
                     for child in ast.iter_child_nodes(node))
    return module


@dataclass(frozen=True, slots=True)
class Bounds:
    """The most a read may take: `max_bytes` in all, within `seconds` (a total deadline);
    with `quiet_seconds`, a command must print its first byte within that (cmd.run)."""

    max_bytes: int
    seconds: float
    quiet_seconds: float | None = None


def too_big(source: str, bounds: Bounds, *, verb: str = "answered",
            hint: str | None = None) -> UntrustedDataError:
    return UntrustedDataError(source, f"{verb} more than {describe_size(bounds.max_bytes)}",
                              hint=hint or "nothing wheelsmith reads there is that large: "
                                           "check that the URL is the one you mean")


SLOW_HINT = ("the server is down, overloaded or holds the connection open without answering: "
             "check it, then try again")


def too_slow(source: str, seconds: float, *, verb: str = "did not finish answering",
             hint: str | None = None) -> UntrustedDataError:
    return UntrustedDataError(source, f"{verb} within {seconds:g} s", hint=hint or SLOW_HINT)


TOOL_TIMEOUT_ENV = "WHEELSMITH_TOOL_TIMEOUT"
TOOL_TIMEOUT_S = 300.0  # cuobjdump of a 2 GB extension, auditwheel of a large wheel: seconds
TOOL_MAX_BYTES = 64 << 20
LONG = 12  # times a tool's time: a pip resolution, an image pull, a Python importing torch
TOOL_HINT = ("the command hung or the machine is too busy for it: check the command (one named "
             f"by a variable, such as $WHEELSMITH_CUOBJDUMP, too); ${TOOL_TIMEOUT_ENV} gives "
             "such commands longer")
TOOL_TIMEOUT_BOUNDS = numbers.Bounds(1, 86400, unit="seconds", most="a day")


def tool_bounds(times: float = 1) -> Bounds:
    """What a command whose answer wheelsmith waits for may take (`cmd.run(bounds=...)`):
    64 MiB of output, within `times` x $WHEELSMITH_TOOL_TIMEOUT seconds (default 300; LONG
    times that for what takes minutes)."""
    seconds = numbers.from_env(TOOL_TIMEOUT_ENV, TOOL_TIMEOUT_S, TOOL_TIMEOUT_BOUNDS)
    return Bounds(TOOL_MAX_BYTES, times * seconds)
