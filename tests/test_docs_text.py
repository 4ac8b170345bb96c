"""The documentation's text. No machine's own directories under docs/: committed logs name the
checkout, the home directory, scratch directories and a machine's own Python environment by
placeholders ($CHECKOUT, $HOME, $OUT, $WORK, $TMPDIR, $VENV); the detector is itself tested on
generated paths in generated surroundings. No
diary of how the work went anywhere in the repository. A README of two screens, with the
delimited blocks that a script rewrites."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import REPO

# Absolute paths that belong to one machine: home directories, checkouts, scratch directories.
MACHINE_ROOTS = ("home", "root", "Users", "work", "workspace", "tmp", "var/tmp", "scratch",
                 "mnt", "nfs")
# A Python environment of one machine, wherever it lies (/opt/torch/.venv, /usr/local/venv,
# ~/miniconda3): a directory of one of these names anywhere in an absolute path.
ENV_DIRS = (".venv", "venv", ".virtualenvs", "virtualenvs", ".pyenv", ".conda", "miniconda3",
            "anaconda3", "miniforge3", "mambaforge")
# Fixed paths the product itself uses, the same on every machine (docs/reproducibility.md; the
# image's venv and cache).
PRODUCT_PATHS = ("/tmp/wheelsmith-view", "/opt/wheelsmith/")
_BEFORE = r"(?:^|(?<=[\s`'\"(\[=:,<>|])|(?<=file://))"
_REST = r"(?![\w.-])[^\s`'\")\],;<>|]*"
_PATH = re.compile(_BEFORE + r"(/(?:" + "|".join(MACHINE_ROOTS) + r")" + _REST + ")",
                   re.MULTILINE)
_ENV = re.compile(_BEFORE + r"(/(?:[\w.+-]+/)*(?:" + "|".join(map(re.escape, ENV_DIRS)) + r")" +
                  _REST + ")", re.MULTILINE)


def machine_paths(text: str) -> list[str]:
    """The absolute home, checkout, scratch or Python-environment paths in `text` (product
    paths excepted)."""
    found = [m[1] for m in _PATH.finditer(text)] + [m[1] for m in _ENV.finditer(text)]
    return list(dict.fromkeys(p for p in found if not p.startswith(PRODUCT_PATHS)))


def doc_files() -> list[Path]:
    return [p for p in sorted((REPO / "docs").rglob("*")) if p.is_file()]


def test_no_file_under_docs_names_a_machine_path() -> None:
    here = [str(REPO), str(Path.home())]  # this machine's own, whatever they are
    found = []
    for path in [*doc_files(), REPO / "README.md", REPO / "mkdocs.yml"]:
        text = path.read_text(errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            bad = machine_paths(line) + [d for d in here if len(d) > 1 and d + "/" in line]
            found += [f"{path.relative_to(REPO)}:{number}: {p}" for p in bad]
    assert not found, "machine paths (use $CHECKOUT, $HOME, $OUT, $WORK, $TMPDIR, $VENV):\n" + (
        "\n".join(found[:40]))


SEGMENT = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,11}", fullmatch=True)
CONTEXT = st.sampled_from([(" ", " "), ("`", "`"), ("(", ")"), ('"', '"'), ("=", "\n"),
                           ("file://", " "), ("\n", ":"), ("[", "]"), ("'", "',")])
PROSE = st.text(st.sampled_from("abc xyz\n.-"), max_size=20)


@given(root=st.sampled_from(MACHINE_ROOTS), segments=st.lists(SEGMENT, min_size=1, max_size=4),
       context=CONTEXT, before=PROSE, after=PROSE)
def test_the_detector_finds_a_machine_path_wherever_it_stands(
        root: str, segments: list[str], context: tuple[str, str], before: str,
        after: str) -> None:
    path = "/" + "/".join([root, *segments])
    if path.startswith(PRODUCT_PATHS):
        return
    text = f"{before} {context[0]}{path}{context[1]}{after}"
    assert path in machine_paths(text), text


@given(parents=st.lists(SEGMENT, max_size=3), env=st.sampled_from(ENV_DIRS),
       segments=st.lists(SEGMENT, max_size=3), context=CONTEXT, before=PROSE, after=PROSE)
def test_the_detector_finds_a_python_environment_of_one_machine_wherever_it_lies(
        parents: list[str], env: str, segments: list[str], context: tuple[str, str],
        before: str, after: str) -> None:
    path = "/" + "/".join([*parents, env, *segments])
    if path.startswith(PRODUCT_PATHS):
        return
    text = f"{before} {context[0]}{path}{context[1]}{after}"
    assert path in machine_paths(text), text


def test_the_detector_finds_the_venv_of_the_many_cores_logs_and_not_the_images() -> None:
    assert machine_paths("python3  /opt/torch/.venv/bin/python3 -m pip") == [
        "/opt/torch/.venv/bin/python3"]
    assert machine_paths("-I /opt/wheelsmith/venv/lib/python3.11/site-packages") == []
    assert machine_paths("`$VENV/bin/python3`, .venv/bin/pytest, $CHECKOUT/.venv/bin/x") == []


@given(segments=st.lists(SEGMENT, min_size=1, max_size=4), context=CONTEXT,
       placeholder=st.sampled_from(["$CHECKOUT", "$HOME", "$OUT", "$WORK", "$TMPDIR", "$VENV",
                                    "~", "build", "../work", ".venv", "build/.venv",
                                    "http://127.0.0.1:8080/tmp", "http://host/venv",
                                    "/tmp/wheelsmith-view", "/usr/local/cuda", "/opt/wheelsmith",
                                    "/opt/wheelsmith/venv"]))
def test_placeholders_relative_paths_urls_and_product_paths_pass(
        segments: list[str], context: tuple[str, str], placeholder: str) -> None:
    text = f"see {context[0]}{placeholder}/{'/'.join(segments)}{context[1]} there"
    assert machine_paths(text) == [], text


def test_no_diary_of_how_the_work_went_in_the_repository() -> None:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    words = "|".join(["sit" + "ting", "device" + " time"])  # spelt apart: this file is searched too
    found = subprocess.run(["git", "grep", "-n", "-i", "-E", words], cwd=REPO,
                           capture_output=True, text=True, check=False)
    assert found.returncode == 1, found.stdout[:4000]  # 1: no line matched


README = REPO / "README.md"


def block(text: str, name: str) -> str:
    """The text between <!-- NAME:begin --> and <!-- NAME:end --> (exactly one such block)."""
    found = re.findall(rf"^<!-- {name}:begin -->\n(.*?)^<!-- {name}:end -->$", text,
                       re.MULTILINE | re.DOTALL)
    assert len(found) == 1, f"README.md: one {name} block"
    return str(found[0])


def test_the_readme_fits_two_screens_with_its_rewritable_blocks() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    table = block(text, "support-table")
    assert table.lstrip().startswith("| recipe |"), table[:80]
    rows = [row for row in table.splitlines() if row.startswith("| ") and "---" not in row]
    assert len(rows) >= 4, rows  # the header and a row per proven recipe at least
    assert "make fuzz" in block(text, "reliability")
    assert "make demo" in text
    assert "make test" in text
