"""YAML documents with positions, checked against a small JSON Schema subset.

Recipes, toolchain profiles and (later) matrix files are YAML. Users need every mistake at
once, each located as `file:line:col`, so loading keeps the position of every key and value,
and validation collects problems instead of stopping at the first.

The schema subset understood here: type, properties, required, dependentRequired,
additionalProperties (false), patternProperties, items, enum, pattern, minItems, description,
and `x-message` (the sentence shown when `pattern` fails). The same schema dict is published
for editors.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from wheelsmith.errors import NotRegularFileError, Problem, RecipeError
from wheelsmith.untrusted import local
from wheelsmith.untrusted.text import CONTROLS

KeyPath = tuple[str | int, ...]


def render_path(path: KeyPath) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text or "(top level)"


@dataclass(slots=True)
class SourceMap:
    """Positions (1-based line, column) of keys and values by key path."""

    keys: dict[KeyPath, tuple[int, int]] = field(default_factory=dict)
    values: dict[KeyPath, tuple[int, int]] = field(default_factory=dict)
    scalars: dict[KeyPath, str] = field(default_factory=dict)  # as written, before YAML typing

    def key(self, path: KeyPath) -> tuple[int, int]:
        """Where the key of `path` is written; falls back to the nearest enclosing value."""
        if path in self.keys:
            return self.keys[path]
        return self.value(path)

    def value(self, path: KeyPath) -> tuple[int, int]:
        while path not in self.values and path:
            path = path[:-1]
        return self.values.get(path, (1, 1))


@dataclass(slots=True)
class Document:
    """A loaded YAML file: its data, positions, and the problems found so far."""

    file: str
    data: Any
    smap: SourceMap
    problems: list[Problem] = field(default_factory=list)

    def at_key(self, path: KeyPath, message: str, hint: str | None = None) -> None:
        line, col = self.smap.key(path)
        self.problems.append(Problem(self.file, line, col, message, hint))

    def at_value(self, path: KeyPath, message: str, hint: str | None = None) -> None:
        line, col = self.smap.value(path)
        self.problems.append(Problem(self.file, line, col, message, hint))

    def raise_if_problems(self) -> None:
        if self.problems:
            raise RecipeError(sorted(self.problems, key=lambda p: (p.file, p.line, p.column)))


def yaml_string(text: str) -> str:
    """`text` as a double-quoted YAML scalar that reads back as exactly `text` (a lone
    surrogate, which no file can hold, as U+FFFD): `"` and `\\` escaped, and every character
    outside YAML's printable set or that a terminal would obey (controls, DEL, C1, bidi, line
    separators) as an escape, so a value from outside written into a file stays one value."""
    return '"' + "".join(_yaml_char(c) for c in text) + '"'


def _yaml_char(char: str) -> str:
    code = ord(char)
    if char in '"\\':
        return "\\" + char
    if 0xD800 <= code <= 0xDFFF:
        return "\\ufffd"
    if CONTROLS.match(char) or char in "\t\n\ufeff\ufffe\uffff":
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    return char


MAX_BYTES = 256 << 10  # a YAML file wheelsmith reads: recipes, profiles, matrix, rules, locks
MAX_DEPTH = 64  # nesting of mappings and lists (real files need fewer than 10)
MAX_NODES = 10_000  # keys, values and items (real files have a few hundred)


def load(path: Path, display: str | None = None) -> Document:
    """Parse a YAML file, recording positions. Every way it can be wrong is a located problem,
    never an exception: a file larger than MAX_BYTES, a byte that is not UTF-8, a character
    YAML refuses, invalid syntax, an alias, nesting deeper than MAX_DEPTH, duplicate keys, a
    value its tag cannot be read as."""
    name = display or str(path)
    try:
        data = local.read_at_most(path, MAX_BYTES)  # a FIFO or a device: refused, never read
    except NotRegularFileError as exc:
        raise RecipeError([Problem(name, 1, 1, f"cannot read: {exc.reason}",
                                   "wheelsmith reads its YAML (recipes, profiles, matrix, "
                                   "known-bad rules) only from regular files: name one, or "
                                   "move this one out of the way")]) from exc
    except OSError as exc:
        raise RecipeError([Problem(name, 1, 1, f"cannot read: {exc.strerror}")]) from exc
    if len(data) > MAX_BYTES:
        raise RecipeError([Problem(
            name, 1, 1, f"the file is larger than {MAX_BYTES // 1024} KiB, the most a YAML "
                        "file wheelsmith reads may have",
            "is it the file you meant? recipes, profiles and matrix files are a few KiB")])
    return loads(_decoded(data, name), name)


def _decoded(data: bytes, name: str) -> str:
    """`data` as UTF-8; the first byte that is not is one problem at its line and column."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line_start = data.rfind(b"\n", 0, exc.start) + 1
        line = data.count(b"\n", 0, exc.start) + 1
        column = len(data[line_start:exc.start].decode("utf-8", errors="replace")) + 1
        raise RecipeError([Problem(
            name, line, column, f"byte 0x{data[exc.start]:02x} is not UTF-8",
            "save the file as UTF-8 (comments too): wheelsmith reads YAML as UTF-8 only")]
        ) from None


def loads(text: str, name: str) -> Document:
    doc = Document(name, None, SourceMap())
    try:
        loader = _Loader(text)
    except yaml.reader.ReaderError as exc:  # a character YAML never allows, anywhere
        line, column = _position(text, exc.position)
        raise RecipeError([Problem(name, line, column, f"character U+{exc.character:04X} is "
                                   "not allowed in YAML", "remove it, or write it as an escape "
                                   "(\\uXXXX) in a double-quoted string")]) from None
    try:
        node = loader.get_single_node()
        doc.data = _walk(loader, node, (), doc) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        problem = exc.problem or "cannot be read"
        said = problem if isinstance(exc, _Refused) else f"invalid YAML: {problem}"
        doc.problems.append(Problem(name, line, col, said))
        doc.raise_if_problems()
    finally:
        loader.dispose()
    return doc


def _position(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column of the character at `offset`."""
    return text.count("\n", 0, offset) + 1, offset - (text.rfind("\n", 0, offset) + 1) + 1


class _Refused(yaml.composer.ComposerError):
    """Valid YAML that wheelsmith does not read (an alias, too deep, too many nodes)."""


class _Loader(yaml.SafeLoader):
    """SafeLoader whose composer refuses aliases, nesting deeper than MAX_DEPTH and more than
    MAX_NODES nodes (it stops there: a large file costs no more than that to refuse).

    An alias makes a node shared: whatever walks the data (positions, validation, a JSON dump)
    walks it once per path to it, so a few nested anchors make a small file exponential ("a
    billion laughs"). wheelsmith's files have no use for them: the first alias is a problem at
    its position."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self._depth = self._nodes = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        mark = event.start_mark
        if isinstance(event, yaml.AliasEvent):
            raise _Refused(None, None, f"an alias (*{event.anchor}) is not allowed here: write "
                           "the value out (aliases can make a small file expand without bound)",
                           mark)
        if self._depth >= MAX_DEPTH:
            raise _Refused(None, None, f"nested more than {MAX_DEPTH} levels deep", mark)
        self._nodes += 1
        if self._nodes > MAX_NODES:
            raise _Refused(None, None, f"more than {MAX_NODES} keys and values: is it the file "
                           "you meant?", mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _walk(loader: yaml.SafeLoader, node: yaml.Node, path: KeyPath, doc: Document) -> Any:
    doc.smap.values[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
    if isinstance(node, yaml.MappingNode):
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = _construct(loader, key_node, path, doc)
            key_text = str(key)
            child = (*path, key_text)
            doc.smap.keys[child] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            if key_text in result:
                doc.at_key(child, f"duplicate key '{key_text}' in '{render_path(path)}'",
                           "remove one of them; YAML keeps only the last")
            result[key_text] = _walk(loader, value_node, child, doc)
        return result
    if isinstance(node, yaml.SequenceNode):
        return [_walk(loader, item, (*path, i), doc) for i, item in enumerate(node.value)]
    doc.smap.scalars[path] = str(node.value)
    return _construct(loader, node, path, doc)


def _construct(loader: yaml.SafeLoader, node: yaml.Node, path: KeyPath, doc: Document) -> Any:
    """The value of a key or scalar node. One its tag cannot read (`!!float abc`, a date that
    does not exist, an integer of 5,000 digits), or a string with a lone surrogate (an escape
    like "\\ud800", which no file or terminal can take), is a problem at the node, and reads
    as None."""
    try:
        value = loader.construct_object(node, deep=True)
        if isinstance(value, str):
            value.encode("utf-8")
    except yaml.MarkedYAMLError:
        raise
    except Exception as exc:  # PyYAML's constructors raise KeyError, ValueError, ...
        line, column = node.start_mark.line + 1, node.start_mark.column + 1
        said = f"{_tag(node)} cannot read '{str(node.value)[:40]}': {exc}"
        doc.problems.append(Problem(doc.file, line, column, f"'{render_path(path)}': " + said
                                    .encode("utf-8", errors="backslashreplace").decode()))
        return None
    return value


def _tag(node: yaml.Node) -> str:
    return str(node.tag).replace("tag:yaml.org,2002:", "!!")


# --- schema subset -------------------------------------------------------------------------

_TYPE_NAMES = {
    "object": "a mapping",
    "array": "a list",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
}


def _type_ok(value: Any, expected: str) -> bool:
    checks: dict[str, Any] = {
        "object": lambda v: isinstance(v, dict),
        "array": lambda v: isinstance(v, list),
        "string": lambda v: isinstance(v, str),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        "boolean": lambda v: isinstance(v, bool),
    }
    return bool(checks[expected](value))


def _describe(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"number {value}"
    if isinstance(value, str):
        return f"string '{value}'"
    if isinstance(value, list | dict):
        return "a list" if isinstance(value, list) else "a mapping"
    return f"{type(value).__name__} {value}"  # a date, or !!binary's bytes


def validate(doc: Document, schema: Mapping[str, Any]) -> Any:
    """Check `doc.data` against `schema`, adding every problem to `doc.problems`.

    Returns the data with every invalid part removed (mapping keys dropped, list items
    replaced by None; None when the whole document is invalid), so that later checks can keep
    going and report their problems too.
    """
    checked = _check(doc, doc.data, schema, ())
    return None if checked is INVALID else checked


def _check(doc: Document, value: Any, schema: Mapping[str, Any], path: KeyPath) -> Any:
    expected = schema.get("type")
    if expected is not None and not _type_ok(value, expected):
        hint = None
        if expected == "string" and isinstance(value, int | float) and not isinstance(value, bool):
            written = doc.smap.scalars.get(path, str(value))
            hint = f"quote it: \"{written}\" (YAML reads {written} as the number {value})"
        doc.at_value(path, f"'{render_path(path)}' must be {_TYPE_NAMES[expected]}, "
                           f"got {_describe(value)}", hint)
        return INVALID
    if isinstance(value, dict):
        return _check_mapping(doc, value, schema, path)
    if isinstance(value, list):
        return _check_list(doc, value, schema, path)
    if isinstance(value, str):
        return _check_string(doc, value, schema, path)
    return value


class _Invalid:
    """Marks a value that failed validation (already reported)."""


INVALID: Any = _Invalid()


def _check_mapping(doc: Document, value: dict[str, Any], schema: Mapping[str, Any],
                   path: KeyPath) -> dict[str, Any]:
    props: Mapping[str, Any] = schema.get("properties", {})
    patterns: Mapping[str, Any] = schema.get("patternProperties", {})
    _check_required(doc, value, schema, path)
    valid: dict[str, Any] = {}
    for key, item in value.items():
        child = (*path, key)
        if key in props:
            checked = _check(doc, item, props[key], child)
        elif matched := [s for p, s in patterns.items() if re.search(p, key)]:
            checked = _check(doc, item, matched[0], child)
        elif schema.get("additionalProperties", True) is False:
            _unknown_key(doc, key, list(props), child)
            checked = INVALID
        else:
            checked = item
        if checked is not INVALID:
            valid[key] = checked
    return valid


def _check_required(doc: Document, value: dict[str, Any], schema: Mapping[str, Any],
                    path: KeyPath) -> None:
    where = render_path(path)
    for key in schema.get("required", []):
        if key not in value:
            description = schema.get("properties", {}).get(key, {}).get("description")
            doc.at_key(path, f"missing required key '{key}' in '{where}'", description)
    for trigger, needed in schema.get("dependentRequired", {}).items():
        for key in needed:
            if trigger in value and key not in value:
                doc.at_key(path, f"missing required key '{key}' in '{where}'",
                           f"a {trigger} source is pinned by its {key}")


def _unknown_key(doc: Document, key: str, allowed: Sequence[str], path: KeyPath) -> None:
    close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    hint = f"did you mean '{close[0]}'?" if close else "allowed keys: " + ", ".join(allowed)
    doc.at_key(path, f"unknown key '{key}' in '{render_path(path[:-1])}'", hint)


def _check_list(doc: Document, value: list[Any], schema: Mapping[str, Any],
                path: KeyPath) -> list[Any]:
    minimum = schema.get("minItems")
    if minimum is not None and len(value) < minimum:
        doc.at_value(path, f"'{render_path(path)}' needs at least {minimum} item(s)")
    items = schema.get("items")
    if items is None:
        return value
    checked = [_check(doc, item, items, (*path, index)) for index, item in enumerate(value)]
    return [None if item is INVALID else item for item in checked]


def _check_string(doc: Document, value: str, schema: Mapping[str, Any], path: KeyPath) -> Any:
    enum = schema.get("enum")
    ok = True
    if enum is not None and value not in enum:
        close = difflib.get_close_matches(value, enum, n=1)
        hint = f"did you mean '{close[0]}'?" if close else None
        doc.at_value(path, f"'{render_path(path)}' must be one of {', '.join(enum)}; "
                           f"got '{value}'", hint)
        ok = False
    pattern = schema.get("pattern")
    if pattern is not None and not re.search(pattern, value):
        message = schema.get("x-message", f"must match {pattern}")
        doc.at_value(path, f"'{render_path(path)}' {message}; got '{value}'")
        ok = False
    return value if ok else INVALID
