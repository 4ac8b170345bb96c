"""Pointers from code to the documentation stay true: a page named in a comment, a docstring or
a message (`docs/cli.md`, `README.md`) exists, and the section it names, by anchor
(`docs/cli.md#exit-codes`) or by title (`docs/cli.md, "Exit codes"`), is one of its headings.
The pages themselves are checked by mkdocs --strict (make lint)."""

from __future__ import annotations

import re
import subprocess
import unicodedata
from pathlib import Path

import pytest

from tests.conftest import REPO

PAGE = r"(?<![\w/.-])((?:docs/[\w/.-]+\.md)|README(?:\.md)?)(?![\w/.-])"
ANCHOR = re.compile(PAGE + r"#([\w-]+)")
TITLE = re.compile(PAGE + r"(?:, | \()([\"'“])(?=[A-Z])")
QUOTES = {'"': '"', "'": "'", "“": "”"}
SUFFIXES = (".py", ".sh", ".toml", ".yml", ".yaml", ".cfg", "Makefile", "Dockerfile")
# Files whose page names are test data (made-up pages, a README in a temporary directory).
DATA = ("tests/test_docs_pointers.py", "tests/fleet/test_support.py")


def slug(title: str) -> str:
    """The anchor Python-Markdown's toc (mkdocs) and GitHub give a heading, for plain titles."""
    text = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def headings(page: Path) -> list[str]:
    """The titles of a Markdown page's headings, code spans kept as their text."""
    found, fenced = [], False
    for line in page.read_text(encoding="utf-8").splitlines():
        fenced ^= line.startswith("```")
        if not fenced and (match := re.match(r"#{1,6} +(.+?) *#*$", line)):
            found.append(match[1].replace("`", ""))
    return found


def pointers(text: str) -> list[tuple[str, str]]:
    """(page, problem) for each pointer in `text`; "" as the problem: it holds."""
    found = []
    for match in ANCHOR.finditer(text):
        found.append((match[1], _anchor_problem(match[1], match[2])))
    for match in TITLE.finditer(text):
        found.append((match[1], _title_problem(match[1], match[2], text[match.end():])))
    plain = re.finditer(PAGE, text)
    found += [(m[1], "" if _page(m[1]).is_file() else "no such page") for m in plain]
    return found


def _page(name: str) -> Path:
    return REPO / ("README.md" if name == "README" else name)


def _anchor_problem(name: str, anchor: str) -> str:
    page = _page(name)
    if not page.is_file():
        return "no such page"
    return "" if anchor in {slug(h) for h in headings(page)} else f"no heading #{anchor}"


def _title_problem(name: str, quote: str, after: str) -> str:
    page = _page(name)
    if not page.is_file():
        return "no such page"
    close, titles = QUOTES[quote], [h.lower() for h in headings(page)]
    cut = after.rstrip(" \"'\\").lower()  # a title that goes on in the next line's string
    if any(after.lower().startswith(t + close) or (cut and t.startswith(cut)) for t in titles):
        return ""
    return f"no heading {quote}{after.split(close, maxsplit=1)[0][:60]}{close}"


def code_files() -> list[Path]:
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True,
                            text=True, check=True).stdout.split("\0")
    return [REPO / name for name in listed
            if name.endswith(SUFFIXES) and not name.startswith("docs/")
            and name not in DATA and (REPO / name).is_file()]


def test_every_page_and_section_that_code_points_to_exists() -> None:
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    wrong = []
    for path in code_files():
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            wrong += [f"{path.relative_to(REPO)}:{number}: {page}: {problem}"
                      for page, problem in pointers(line) if problem]
    assert not wrong, "\n".join(wrong)


def test_the_checker_tells_a_section_that_is_gone_from_one_that_is_there() -> None:
    cli, readme = "docs/" + "cli.md", "READ" + "ME"
    assert [p for p in pointers(f"see {cli}, \"Exit codes\" and {cli}#exit-codes") if p[1]] == []
    assert [p for p in pointers(f"({cli}, 'The build's environment')") if p[1]] == []
    assert [p for p in pointers(f"wheelsmith's ({cli}, 'The build's \"") if p[1]] == []
    assert [p for p in pointers(f'2.4-3 h on 2 ({readme}, "What a kill costs")') if p[1]] == [
        (readme, 'no heading "What a kill costs"')]
    assert [p for p in pointers(f"{cli}#what-a-kill-costs, docs/{'gone'}.md") if p[1]] == [
        (cli, "no heading #what-a-kill-costs"), ("docs/gone.md", "no such page")]
    assert slug("Slow tests (`make test-slow`)".replace("`", "")) == "slow-tests-make-test-slow"
