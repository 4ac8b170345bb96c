"""The support table: recipes x toolchain profiles, rendered from nightly reports.

A report is a `nightly.json` (report.py) or an evidence report of the same shape committed
under docs/evidence/reports/ (a GPU proof, a run by hand): each says when it finished, where it
ran, and every cell's outcome. A row of the table is a recipe's version, arch set, Python and
CPU; a column is a toolchain profile. Each place shows the newest outcome that says whether it
builds:

- `⛔ known bad: ...`: the known-bad rule (known-bad.yaml) that refuses it today, whatever a
  report says and whether or not one ran;
- `✅ DATE, WHERE`: a verified wheel (built: the build's gate checked its device code), with
  what ran with it where an evidence report says so (`tested`) and its page (`evidence`);
- `❌ REASON (DATE, WHERE)`: the failed cell's reason, its first line;
- `not run`.

A skipped or partial cell says nothing either way and is not shown. The table names only what
the reports name: the rows and profiles of their cells.
"""

from __future__ import annotations

import html
import re
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from packaging.version import InvalidVersion, Version

from wheelsmith import locations
from wheelsmith.arch import ArchParseError, ArchSet
from wheelsmith.builder.plan import NO_TORCH
from wheelsmith.errors import UsageError
from wheelsmith.files import atomic_write_text
from wheelsmith.recipes import knownbad
from wheelsmith.recipes.knownbad import Rule
from wheelsmith.toolchain.profile import Profile, load_profiles
from wheelsmith.untrusted import Node, describe_size, local, parse_json
from wheelsmith.untrusted.text import inert

SCHEMAS = (1, 2)  # nightly.json's versions this reads (1 names no machine)
MAX_BYTES = 16 << 20
STATUSES = ("built", "skipped", "partial", "failed")
SHOWN = ("built", "failed")  # what says whether a cell builds
MAX_REASON = 160
BEGIN, END = "<!-- support-table:begin -->", "<!-- support-table:end -->"
NOT_RUN = "not run"
_FIELD = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+;_-]*")
_ARCHS = re.compile(r"(?:[0-9][0-9A-Za-z.+;]*)?")
_LINK = re.compile(r"https://[^\s()<>\[\]]+|[A-Za-z0-9_][A-Za-z0-9._/-]*(?:#[a-z0-9-]+)?")


@dataclass(frozen=True, kw_only=True, slots=True)
class Outcome:
    """One cell of one report."""

    recipe: str
    version: str
    toolchain: str
    archs: str  # "" for a pure recipe
    python: str
    platform: str
    status: str
    reason: str
    tested: str = ""  # what ran with the wheel beyond the build's checks (evidence reports)
    evidence: str = ""  # its page, relative to the repository root, or an https:// link

    @property
    def row(self) -> tuple[str, str, str, str, str]:
        """Recipe, version, archs, Python, CPU; a pure wheel is one for every Python and CPU."""
        if not self.archs:
            return (self.recipe, self.version, "", "", "")
        return (self.recipe, self.version, self.archs, self.python, self.platform)


@dataclass(frozen=True, kw_only=True, slots=True)
class Report:
    source: str
    finished: datetime
    where: str  # "" when the report does not say (schema 1)
    outcomes: tuple[Outcome, ...]

    @property
    def date(self) -> str:
        return self.finished.date().isoformat()


def parse(node: Node) -> Report:
    """A nightly.json (or an evidence report of its shape) as a Report."""
    schema = node["schema"].integer(minimum=1)
    if schema not in SCHEMAS:
        raise node["schema"].fail(f"schema {schema} is not one this wheelsmith reads "
                                  f"({', '.join(map(str, SCHEMAS))})",
                                  hint="render it with the wheelsmith that wrote it")
    where = node["where"].text() if schema >= 2 else ""
    finished = node["finished"].parsed(datetime.fromisoformat, "an ISO date")
    if finished.tzinfo is None:  # a date alone (an evidence report): that day in UTC
        finished = finished.replace(tzinfo=timezone.utc)
    return Report(source=node.source, where=where, finished=finished,
                  outcomes=tuple(_outcome(cell) for cell in node["cells"].items()))


def _outcome(cell: Node) -> Outcome:
    status = cell["status"].text()
    if status not in STATUSES:
        raise cell["status"].fail(f"'{status}' is not one of {', '.join(STATUSES)}")
    return Outcome(
        recipe=cell["recipe"].text(_FIELD, "a recipe name"),
        version=cell["version"].text(_FIELD, "a version"),
        toolchain=cell["toolchain"].text(_FIELD, "a profile name"),
        archs=cell["archs"].text(_ARCHS, "an arch set"),
        python=cell["python"].text(_FIELD, "a Python version"),
        platform=cell["platform"].text(_FIELD, "a CPU"),
        status=status, reason=cell["reason"].text(),
        tested=cell.optional("tested", Node.text) or "",
        evidence=cell.optional("evidence", lambda n: n.text(_LINK, "a link")) or "")


def read(path: Path) -> Report:
    """A report, read as a regular file within MAX_BYTES (a FIFO, a device or a link to
    /dev/zero among the reports: refused, never read)."""
    data = local.read_at_most(path, MAX_BYTES)
    if len(data) > MAX_BYTES:
        raise UsageError(f"{path}: a report larger than {describe_size(MAX_BYTES)}",
                         hint="a nightly.json of a whole matrix is a few hundred KiB")
    return parse(parse_json(data, str(path)))


def report_files(paths: Iterable[Path]) -> list[Path]:
    """Each path a report, or a directory: its nightly.json, else every *.json in it."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found += ([path / "nightly.json"] if (path / "nightly.json").is_file()
                      else sorted(path.glob("*.json")))
        elif path.exists():  # a FIFO too: read() names what it is
            found.append(path)
        else:
            raise UsageError(f"{path}: no such report",
                             hint="name a nightly.json, or the --report directory of a nightly")
    return found


def newest(reports: Iterable[Report]) -> dict[tuple[tuple[str, ...], str], tuple[Report,
                                                                                  Outcome]]:
    """For each (row, profile): the newest outcome that is built or failed (a later report
    wins a tie)."""
    found: dict[tuple[tuple[str, ...], str], tuple[Report, Outcome]] = {}
    for report in reports:
        for outcome in report.outcomes:
            if outcome.status not in SHOWN:
                continue
            place = (outcome.row, outcome.toolchain)
            if place not in found or found[place][0].finished <= report.finished:
                found[place] = (report, outcome)
    return found


def render(reports: Sequence[Report], *, profiles: Mapping[str, Profile],
           rules: Sequence[Rule]) -> str:
    """The Markdown table, rows and profiles in a stable order."""
    places = newest(reports)
    rows = sorted({row for row, _ in places}, key=_row_order)
    columns = sorted({column for _, column in places}, key=lambda c: _column_order(c, profiles))
    lines = ["| " + " | ".join(["recipe", "version", "archs", "Python", *columns]) + " |",
             "|---" * (4 + len(columns)) + "|"]
    for row in rows:
        recipe, version, archs, python, platform = row
        shown_archs = (f"{archs} ({platform})" if platform not in ("", "x86_64") else archs)
        texts = [_place(row, places.get((row, column)), profiles.get(column), rules)
                 for column in columns]
        lines.append(f"| {recipe} | {version} | {shown_archs or 'pure Python'} | "
                     f"{python or 'any'} | " + " | ".join(texts) + " |")
    return "\n".join(lines) + "\n"


def _place(row: tuple[str, ...], found: tuple[Report, Outcome] | None,
           profile: Profile | None, rules: Sequence[Rule]) -> str:
    """A refusing rule first (a build today would be refused, whatever a report says), then
    the newest outcome."""
    rule = refusing(row, profile, rules)
    if rule is not None:
        return (f"⛔ known bad: {table_cell(_first_sentence(rule.reason))} "
                f"([report]({_href(rule.link)}))")
    if found is None:
        return NOT_RUN
    report, outcome = found
    when = table_cell(f"{report.date}, {report.where or 'where not recorded'}")
    if outcome.status == "failed":
        return f"❌ {table_cell(one_line(outcome.reason))} ({when})"
    when = f"[{when}]({_href(outcome.evidence)})" if outcome.evidence else when
    return f"✅ {when}" + (f"; {table_cell(outcome.tested)}" if outcome.tested else "")


def refusing(row: tuple[str, ...], profile: Profile | None, rules: Sequence[Rule]
             ) -> Rule | None:
    """The first known-bad rule that refuses the row's build with `profile`, if any."""
    recipe, version, archs = row[0], row[1], row[2]
    if profile is None:
        return None
    try:
        arch_set = ArchSet.parse([archs]) if archs else ArchSet(())
        wanted = Version(version)
    except (ArchParseError, InvalidVersion):
        return None
    torch = profile.torch_pin or NO_TORCH
    return next((r for r in rules if r.action == "refuse"
                 and r.matches(recipe, wanted, profile.cuda, torch, arch_set)), None)


def one_line(reason: str) -> str:
    """A failure's reason in a table: its first line, without the hint, at most 160
    characters."""
    line = (reason.strip().splitlines() or [""])[0].split(" (hint: ")[0].strip()
    return line if len(line) <= MAX_REASON else line[: MAX_REASON - 1].rstrip() + "…"


def _first_sentence(text: str) -> str:
    return text.split(". ", maxsplit=1)[0].rstrip(".") + "."


_CODE = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)")  # a code span: literal, as written
_MARKUP = re.compile(r"([\\`\[\]|])")  # outside one: what could make a link, a span, a cell


def table_cell(text: str) -> str:
    """`text` (a report's, so anyone's) as one table cell that renders as written: one line,
    its control characters escaped (`inert`);
    its code spans kept (but one with a backslash); outside them HTML's characters as
    entities and what could open a link or a code span escaped; `|` escaped everywhere (a
    table splits a cell at one, in a code span too)."""
    line, parts, at = " ".join(inert(text).split()), [], 0
    for span in _CODE.finditer(line):
        if "\\" in span[0]:  # a backslash before a `|` in a span would undo its escape
            continue
        parts += [_text(line[at:span.start()]), span[0].replace("|", "\\|")]
        at = span.end()
    return "".join([*parts, _text(line[at:])])


def _text(text: str) -> str:
    return _MARKUP.sub(r"\\\1", html.escape(text, quote=False))


def _href(link: str) -> str:
    """A link as a Markdown link's target: what could end it or the cell (a space, `|`,
    brackets, parentheses, a quote) percent-encoded."""
    return urllib.parse.quote(link, safe="/:#?=&%-._~+,;@!$*")


def _versions(text: str) -> tuple[Version, ...]:
    try:
        return tuple(Version(part) for part in re.findall(r"[0-9]+(?:\.[0-9]+)*", text))
    except InvalidVersion:
        return ()


def _row_order(row: tuple[str, ...]) -> tuple[object, ...]:
    recipe, version, archs, python, platform = row
    return (recipe, _versions(version), version, _versions(archs), archs, _versions(python),
            platform)


def _column_order(name: str, profiles: Mapping[str, Profile]) -> tuple[object, ...]:
    profile = profiles.get(name)
    if profile is None:  # a profile this wheelsmith does not ship: after the others
        return (1, Version("0"), Version("0"), name)
    return (0, profile.cuda, profile.torch_pin or NO_TORCH, name)


def render_files(paths: Sequence[Path]) -> str:
    """The table from the reports at `paths` (report_files), with the profiles and known-bad
    rules of this wheelsmith."""
    profiles = {p.name: p for p in load_profiles(locations.profile_dirs())}
    rules = knownbad.load(locations.project_root() / knownbad.FILE)
    return render([read(p) for p in report_files(paths)], profiles=profiles, rules=rules)


def rewrite(text: str, table: str, *, source: str) -> str:
    """`text` with the lines between its support-table markers replaced by `table`."""
    lines = text.splitlines(keepends=True)
    begins = [i for i, line in enumerate(lines) if line.strip() == BEGIN]
    ends = [i for i, line in enumerate(lines) if line.strip() == END]
    if len(begins) != 1 or len(ends) != 1 or begins[0] > ends[0]:
        raise UsageError(f"{source}: not one {BEGIN} line followed by one {END} line",
                         hint="put the two markers on lines of their own where the table goes")
    return "".join([*lines[: begins[0] + 1], table, *lines[ends[0]:]])


def rewrite_file(path: Path, table: str) -> bool:
    """Rewrite the table in `path` in place; False when it already holds this table."""
    data = local.read_at_most(path, MAX_BYTES)
    if len(data) > MAX_BYTES:
        raise UsageError(f"{path}: larger than {describe_size(MAX_BYTES)}",
                         hint="name the README whose table is rewritten")
    try:
        before = data.decode()
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not UTF-8 (byte {exc.start + 1})",
                         hint="name the README whose table is rewritten") from None
    after = rewrite(before, table, source=str(path))
    if after != before:
        atomic_write_text(path, after)
    return after != before
