"""What a CMake build would download while it configures (`FetchContent_Declare(NAME URL ...)`,
`FetchContent_Declare(NAME GIT_REPOSITORY ... GIT_TAG ...)`), pinned by `recipe new` as a
`carry` entry of the new version: builds are offline, so the build gets the source in its tree
and CMake's FETCHCONTENT_SOURCE_DIR_<NAME> names it (fast-rnnt's pybind11, a package's
cutlass).

The pin is evidence, never a guess: the sha256 the declaration states (URL_HASH SHA256=...), else
that of the archive downloaded once from the URL into the download cache; the commit the
declaration states (a 40-digit GIT_TAG), else the one the repository answers for the tag
(`git ls-remote`). A declaration whose location is computed (`${...}`), or that cannot be
reached from this machine, stays a `carry needed` finding that says why."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from wheelsmith import cmd
from wheelsmith.errors import WheelsmithError
from wheelsmith.recipes import fetch
from wheelsmith.recipes.sources import CarriedSource, GitSource, Source, UrlSource
from wheelsmith.untrusted import Bounds
from wheelsmith.untrusted.text import clip

DECLARE_RE = re.compile(r"\bFetchContent_Declare\s*\(", re.IGNORECASE)
SET_RE = re.compile(r"^[ \t]*set\s*\(", re.IGNORECASE | re.MULTILINE)
VARIABLE_RE = re.compile(r"\$\{(\w+)\}")
# a location on another machine: a URL of the web, git's or ssh's, or scp's user@host:path
REMOTE_RE = re.compile(r"^(?:(?:https?|git|ssh)://|[\w.-]+@[\w.-]+:)", re.IGNORECASE)
TOKEN_RE = re.compile(r'"(?:[^"\\]|\\.)*"|[^\s()"]+')
QUOTED_RE = re.compile(r'"(?:[^"\\]|\\.)*"')
SHA256_RE = re.compile(r"^SHA256=([0-9a-fA-F]{64})$")
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
KEYS = ("URL", "URL_HASH", "GIT_REPOSITORY", "GIT_TAG")
GIT_SECONDS = 120


@dataclass(frozen=True, slots=True)
class Declared:
    """One FetchContent_Declare: its name and where it says the source is."""
    name: str
    values: dict[str, str]  # of KEYS, as written (quotes taken off)


@dataclass(frozen=True, slots=True)
class Pin:
    """What `recipe new` made of one download: the carried source, or why there is none."""
    at: str  # file:line
    carried: CarriedSource | None
    why: str = ""


def declared(text: str) -> list[tuple[int, Declared]]:
    """Each FetchContent_Declare of a CMake file's text, with its offset; `${NAME}` in its
    values replaced where the file sets NAME once, to one literal word (fast-rnnt's
    `set(pybind11_URL "https://...")`)."""
    literal = _literals(text)
    found = []
    for match in DECLARE_RE.finditer(text):
        words = _words(_arguments(text, match.end()))
        if not words:
            continue
        values = {key: VARIABLE_RE.sub(lambda m: literal.get(m[1], m[0]), words[i + 1])
                  for i, key in enumerate(words[:-1]) if key in KEYS}
        found.append((match.start(), Declared(words[0], values)))
    return found


def _words(body: str) -> list[str]:
    return [w[1:-1] if w.startswith('"') else w for w in TOKEN_RE.findall(body)]


def _literals(text: str) -> dict[str, str]:
    """The variables the file sets exactly once, each to one word with no variable in it."""
    values: dict[str, list[str]] = {}
    for match in SET_RE.finditer(text):
        words = _words(_arguments(text, match.end()))
        if words:
            values.setdefault(words[0], []).append(
                words[1] if len(words) == 2 and "$" not in words[1] else "")
    return {name: said[0] for name, said in values.items() if len(said) == 1 and said[0]}


def _arguments(text: str, start: int) -> str:
    """The arguments of the call whose "(" ends at `start`, to its ")" (or the text's end):
    comments left out, quoted arguments kept whole, nested parentheses inside."""
    out, depth, i = [], 0, start
    while i < len(text):
        char = text[i]
        if char == "#":
            newline = text.find("\n", i)
            i = len(text) if newline == -1 else newline
            continue
        if char == '"':
            quoted = QUOTED_RE.match(text, i)
            end = quoted.end() if quoted else len(text)
            out.append(text[i:end])
            i = end
            continue
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth < 0:
            break
        out.append(char)
        i += 1
    return "".join(out)


def pin(at: str, declaration: Declared, cache: Path) -> Pin:
    """The declaration's source pinned as a carried one (into third_party/NAME, named to CMake
    by FETCHCONTENT_SOURCE_DIR_<NAME>), or why not."""
    values = declaration.values
    where = values.get("URL") or values.get("GIT_REPOSITORY")
    if where is None:
        return Pin(at, None)  # a SOURCE_DIR of its own, or another download method
    computed = [v for v in values.values() if "${" in v or "$ENV{" in v]
    if computed:
        return Pin(at, None, f"its location is computed ({clip(computed[0], 80)}): pin it by "
                             "hand")
    if not REMOTE_RE.match(where):
        return Pin(at, None, f"it names a location on this machine ({clip(where, 80)}), which "
                             "recipe new does not read on an sdist's word: carry it by hand")
    try:
        source = _url_source(values, cache) if "URL" in values else _git_source(values)
    except WheelsmithError as exc:
        return Pin(at, None, f"recipe new could not reach it: {clip(exc.message, 200)}")
    return Pin(at, CarriedSource(into=PurePosixPath("third_party") / declaration.name,
                                 source=source, cmake="FETCHCONTENT_SOURCE_DIR_"
                                 + declaration.name.upper()))


def _url_source(values: dict[str, str], cache: Path) -> Source:
    stated = SHA256_RE.match(values.get("URL_HASH", ""))
    url = values["URL"]
    return UrlSource(url=url, sha256=stated[1].lower() if stated else
                     fetch.download_unpinned(url, cache))


def _git_source(values: dict[str, str]) -> Source:
    url, tag = values["GIT_REPOSITORY"], values.get("GIT_TAG")
    if tag is not None and COMMIT_RE.match(tag):
        return GitSource(url=url, commit=tag)
    refs = [f"refs/tags/{tag}", f"refs/tags/{tag}^{{}}", f"refs/heads/{tag}"] if tag else \
        ["HEAD"]
    answer = cmd.run(["git", "ls-remote", url, *refs], stream=False, what="git ls-remote",
                     env={**os.environ, "GIT_TERMINAL_PROMPT": "0"},
                     bounds=Bounds(1 << 20, GIT_SECONDS)).stdout
    commits: dict[str, str] = {}
    for line in answer.splitlines():
        commit, _, ref = line.partition("\t")
        commits[ref.strip()] = commit.strip()
    for ref in (f"refs/tags/{tag}^{{}}", f"refs/tags/{tag}", f"refs/heads/{tag}", "HEAD"):
        if ref in commits and COMMIT_RE.match(commits[ref]):
            return GitSource(url=url, commit=commits[ref],
                             tag=tag if ref.startswith("refs/tags/") else None)
    raise WheelsmithError(f"{url} has no tag or branch {tag}")



def pins(tree: Path, downloads: tuple[tuple[str, str, str], ...], reaches: bool,
         cache: Path) -> tuple[Pin, ...]:
    """A pin for each FetchContent download (`read_cmake`'s (file:line, call, origin)) of the
    tree; none where CMAKE_ARGS does not reach CMake (`reaches`), which names the directory."""
    if not reaches:
        return ()
    made = []
    for at, call, _ in downloads:
        if not call.lower().startswith("fetchcontent_declare"):
            continue
        file, _, line = at.rpartition(":")
        try:
            text = (tree / file).read_text(errors="replace")
        except OSError:
            continue
        for offset, declaration in declared(text):
            if text.count("\n", 0, offset) + 1 == int(line):
                made.append(pin(at, declaration, cache))
                break
    return tuple(made)
