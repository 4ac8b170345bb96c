"""Apply a recipe's patches in order, exactly: no fuzz, no offsets, no partial results.

A unified diff is parsed here and applied in memory; every hunk's old lines must sit exactly
at the lines the hunk names. Only when every hunk of a patch fits are the files written, so a
patch that fails leaves the tree as it was. A hunk that changes nothing, a patch that is
already applied and a patch without hunks are errors too: each names the patch and the hunk.

A line ends at "\n" only, as diff and patch count them: a carriage return, a form feed or a
Unicode line separator is part of its line, so the lines no hunk names keep their bytes (a
form feed inside a `//` comment once became a line break, and the comment's rest code).
`file_diff` writes the diffs `recipe new` makes in this same model, so they apply back
exactly.
"""

from __future__ import annotations

import difflib
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from wheelsmith.errors import PatchError
from wheelsmith.recipes.model import PatchRef

log = logging.getLogger(__name__)

_HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
DEV_NULL = "/dev/null"


@dataclass(slots=True)
class Hunk:
    number: int
    header: str
    old_start: int
    old: list[str] = field(default_factory=list)
    new: list[str] = field(default_factory=list)
    old_eof_newline: bool = True
    new_eof_newline: bool = True


@dataclass(slots=True)
class FilePatch:
    old_path: str
    new_path: str
    hunks: list[Hunk] = field(default_factory=list)

    @property
    def path(self) -> str:
        return self.old_path if self.new_path == DEV_NULL else self.new_path


def _strip_prefix(raw: str) -> str:
    path = raw.split("\t", 1)[0].strip()
    if path == DEV_NULL:
        return path
    parts = PurePosixPath(path).parts
    if len(parts) > 1 and parts[0] in ("a", "b"):
        parts = parts[1:]
    clean = PurePosixPath(*parts)
    if clean.is_absolute() or ".." in clean.parts:
        raise PatchError(f"patch names a path outside the source tree: {raw}")
    return str(clean)


NO_NEWLINE = "\\ No newline at end of file"


def lines_of(text: str) -> list[str]:
    """`text`'s lines as diff counts them: cut at "\n" only, without it."""
    lines = text.split("\n")
    return lines[:-1] if lines[-1] == "" else lines


def ends_with_newline(text: str) -> bool:
    return text.endswith("\n") or not text


def read_exactly(path: Path) -> str:
    """A text file's content, every byte kept: line ends as they are, bytes that are not UTF-8
    as surrogates (`write_exactly` writes them back; a Latin-1 comment in a C file)."""
    with path.open(encoding="utf-8", errors="surrogateescape", newline="") as file:
        return file.read()


def write_exactly(path: Path, text: str) -> None:
    with path.open("w", encoding="utf-8", errors="surrogateescape", newline="") as file:
        file.write(text)


def file_diff(path: str, old: str | None, new: str | None) -> str:
    """The unified diff that takes the file at `path` (relative to the tree) from `old` to
    `new` (None: the file does not exist), which `apply_one` applies back to exactly `new`;
    "" when they are the same."""
    if old == new:
        return ""
    a, b = _marked(old or ""), _marked(new or "")
    head = [f"--- {'/dev/null' if old is None else 'a/' + path}",
            f"+++ {'/dev/null' if new is None else 'b/' + path}"]
    body = list(difflib.unified_diff(a, b, lineterm=""))[2:]
    out: list[str] = []
    for line in body:
        # a last line without its newline carries "\n" in the comparison (no line of
        # lines_of can hold one): written as diff writes it, the line and then the marker
        out += [line[:-1], NO_NEWLINE] if line.endswith("\n") else [line]
    return "\n".join(head + out) + "\n"


def _marked(text: str) -> list[str]:
    lines = lines_of(text)
    if lines and not ends_with_newline(text):
        lines[-1] += "\n"
    return lines


def parse(text: str, name: str) -> list[FilePatch]:
    """Parse a unified diff (plain or git style) into file patches. A patch whose every line
    ends in CRLF (saved by a Windows editor) is read as if they ended in LF."""
    files: list[FilePatch] = []
    if "\r\n" in text and text.count("\r\n") == text.count("\n"):
        text = text.replace("\r\n", "\n")
    lines = lines_of(text)
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            files.append(FilePatch(_strip_prefix(line[4:]), _strip_prefix(lines[i + 1][4:])))
            i += 2
            continue
        match = _HUNK_RE.match(line)
        if match:
            if not files:
                raise PatchError(f"{name}: hunk before any '---/+++' file header (line {i + 1})")
            hunk = Hunk(len(files[-1].hunks) + 1, line.split("@@")[1].strip(), int(match[1]))
            i = _read_hunk(lines, i + 1, hunk, int(match[2] or 1), int(match[4] or 1))
            files[-1].hunks.append(hunk)
            continue
        i += 1
    if not any(f.hunks for f in files):
        raise PatchError(f"{name} contains no hunks", hint="is it a unified diff (diff -u)?")
    return files


def _read_hunk(lines: list[str], i: int, hunk: Hunk, old_len: int, new_len: int) -> int:
    while i < len(lines) and (len(hunk.old) < old_len or len(hunk.new) < new_len):
        line = lines[i]
        tag, body = (line[:1], line[1:]) if line else (" ", "")
        if tag in (" ", "-"):
            hunk.old.append(body)
        if tag in (" ", "+"):
            hunk.new.append(body)
        if tag not in (" ", "-", "+"):
            break
        i += 1
        if i < len(lines) and lines[i].startswith("\\"):
            if tag in (" ", "-"):
                hunk.old_eof_newline = False
            if tag in (" ", "+"):
                hunk.new_eof_newline = False
            i += 1
    return i


def apply_all(patches: tuple[PatchRef, ...], root: Path) -> None:
    """Apply each patch in order; the first that does not fit stops the build."""
    for ref in patches:
        apply_one(ref.path, root)


def apply_one(patch: Path, root: Path) -> None:
    name = _display(patch)
    file_patches = parse(read_exactly(patch), name)
    results: dict[Path, str | None] = {}
    for fp in file_patches:
        target = root / fp.path
        results[target] = _apply_file(fp, target, name)
    for target, content in results.items():
        if content is None:
            target.unlink()
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            write_exactly(target, content)
    log.info("applied %s (%d file(s))", name, len(results))


def _apply_file(fp: FilePatch, target: Path, name: str) -> str | None:
    creating = fp.old_path == DEV_NULL
    if creating and target.exists():
        raise PatchError(f"{name}: creates {fp.path}, which already exists",
                         hint="the patch is already applied, or the source changed")
    if not creating and not target.is_file():
        raise PatchError(f"{name}: {fp.path} does not exist in the source tree",
                         hint="the source changed; regenerate the patch against this version")
    original = "" if creating else read_exactly(target)
    lines = lines_of(original)
    eof_newline = ends_with_newline(original)
    offset = 0
    for hunk in fp.hunks:
        _check_hunk(hunk, lines, offset, fp.path, name)
        start = max(hunk.old_start - 1, 0) + offset if hunk.old else hunk.old_start + offset
        eof_newline = place(lines, start, hunk, eof_newline)
        offset += len(hunk.new) - len(hunk.old)
    if fp.new_path == DEV_NULL:
        return None
    content = "\n".join(lines) + ("\n" if lines and eof_newline else "")
    if content == original:
        raise PatchError(f"{name} changes nothing in {fp.path}")
    return content


def place(lines: list[str], start: int, hunk: Hunk, eof_newline: bool) -> bool:
    """`hunk`'s new lines in place of its old ones at `start`; whether the file then ends
    with a newline (the hunk's say where it reaches the end)."""
    lines[start:start + len(hunk.old)] = hunk.new
    return hunk.new_eof_newline if start + len(hunk.new) == len(lines) else eof_newline


def _check_hunk(hunk: Hunk, lines: list[str], offset: int, path: str, name: str) -> None:
    where = f"{name}: hunk #{hunk.number} (@@ {hunk.header} @@) on {path}"
    if hunk.old == hunk.new and hunk.old_eof_newline == hunk.new_eof_newline:
        raise PatchError(f"{where} changes nothing", hint="remove the hunk or the patch")
    start = max(hunk.old_start - 1, 0) + offset if hunk.old else hunk.old_start + offset
    actual = lines[start:start + len(hunk.old)]
    if actual == hunk.old:
        return
    if hunk.new and lines[start:start + len(hunk.new)] == hunk.new:
        reason = "is already applied"
    else:
        reason = _first_difference(actual, hunk.old, start)
    raise PatchError(f"{where} does not apply: {reason}",
                     hint="the source changed; regenerate the patch against this version")


def _first_difference(actual: list[str], expected: list[str], start: int) -> str:
    for index, want in enumerate(expected):
        have = actual[index] if index < len(actual) else None
        if have != want:
            shown = "past the end of the file" if have is None else f"'{have.strip()}'"
            return f"line {start + index + 1} is {shown}, the patch expects '{want.strip()}'"
    return "the file is shorter than the hunk"


def _display(path: Path) -> str:
    parts = path.parts
    if "patches" in parts:
        return str(Path(*parts[len(parts) - 1 - parts[::-1].index("patches"):]))
    return path.name
