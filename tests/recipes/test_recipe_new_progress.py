"""What `recipe new` shows while it works (issue 45 item 8): each stage as it starts, in the
stage lines `build` prints; each finding once, with its severity, as soon as the stage that
made it has run (before the next stage starts), never again at the end; then a count and the
files it wrote. Through the real CLI, on sdists generated from the tiny extension and served
from a file:// index, stdout and stderr read as one stream, in the order a terminal shows
them; `--json` of the same sdist holds exactly the findings the terminal was shown."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import FIXTURES, sdist_index
from wheelsmith.scaffold import report
from wheelsmith.toolchain.env import Toolchain

STAGE_RE = re.compile(r"^==> \[\s*\S+\] ([^:]+): (.*)$")
LEVEL_RE = re.compile(r"^(todo|fixed|info): (.*)$")
SUMMARY_RE = re.compile(r"^(\d+) findings?: (\d+) to do by hand \(todo\), (\d+) fixed in the "
                        r"recipe or its patches, (\d+) for information$")


def seen(*args: str, cwd: Path, env: dict[str, str]) -> list[str]:
    """The command's lines as a terminal shows them: stdout and stderr in one stream."""
    done = subprocess.run([sys.executable, "-m", "wheelsmith", *args], cwd=cwd, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          check=False)
    assert done.returncode == 0, done.stdout
    return done.stdout.splitlines()


def under_stages(lines: list[str]) -> list[tuple[str, str, str]]:
    """Each finding with the stage line it came under (name: detail), in order, its
    continuation lines (indented) joined to it: (stage, severity, finding)."""
    stage, found = "", []
    for line in lines:
        if (match := STAGE_RE.match(line)) is not None:
            stage = f"{match[1]}: {match[2]}"
        elif (level := LEVEL_RE.match(line)) is not None:
            found.append((stage, level[1], level[2]))
        elif line.startswith("  ") and found and not line.startswith("    compile ["):
            found[-1] = (found[-1][0], found[-1][1], f"{found[-1][2]}\n{line}")
    return found


def tiny_sdist(root: Path, project: str, top: int, *, pkg_resources: bool, cxx17: bool,
               setup_requires: bool, missing: bool) -> Path:
    """The tiny extension as PROJECT-0.1.0, its setup.py `top` comment lines down, with the
    classes asked for: `import pkg_resources`, -std=c++17 for nvcc, setup_requires, and its
    CUDA source left out of the sdist."""
    tree = root / "src" / f"{project}-0.1.0"
    shutil.copytree(FIXTURES / "tiny-ext", tree)
    setup = (FIXTURES / "tiny-ext" / "setup.py").read_text().replace(
        'name="tiny-ext"', f'name="{project}"')
    if pkg_resources:
        setup = setup.replace("from setuptools import setup\n",
                              "import pkg_resources\nfrom setuptools import setup\n")
    if cxx17:
        setup = setup.replace('"nvcc": ["-O2"]', '"nvcc": ["-O2", "-std=c++17"]')
    if setup_requires:
        setup = setup.replace('install_requires=["torch"],',
                              'install_requires=["torch"],\n    setup_requires=["psutil"],')
    (tree / "setup.py").write_text("# a comment\n" * top + setup)
    (tree / "PKG-INFO").write_text(f"Metadata-Version: 2.1\nName: {project}\nVersion: 0.1.0\n")
    if missing:
        (tree / "csrc" / "add_kernel.cu").unlink()
    return tree


def line_of(tree: Path, text: str) -> int:
    return 1 + next(i for i, line in enumerate((tree / "setup.py").read_text().splitlines())
                    if text in line)


READ_STAGES = ["read: setup.py (with ast, not run)", "read: CMake files",
               "read: sources: the modules setup.py runs, what the extensions compile"]


@settings(max_examples=6)
@given(top=st.integers(0, 40), pkg_resources=st.booleans(), cxx17=st.booleans(),
       setup_requires=st.booleans(), missing=st.booleans())
def test_each_finding_is_said_once_with_its_severity_before_the_next_stage_starts(
        top: int, pkg_resources: bool, cxx17: bool, setup_requires: bool,
        missing: bool) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        tree = tiny_sdist(root, "said-once", top, pkg_resources=pkg_resources, cxx17=cxx17,
                          setup_requires=setup_requires, missing=missing)
        env = {**_environ(), "WHEELSMITH_INDEX_URL": sdist_index(root, tree, "said-once")}
        lines = seen("recipe", "new", "said-once==0.1.0", "--recipes", "mine",
                     "--no-configure", cwd=root, env=env)
        found = under_stages(lines)
        stages = [f"{m[1]}: {m[2]}" for m in map(STAGE_RE.match, lines) if m]
        assert stages == [
            "fetch: the sdist of said-once 0.1.0 from the index pip uses", *READ_STAGES,
            "read: build requirements and host libraries: those the toolchain cu130-torch2.14 "
            "lacks, pinned by pip",
            "patch: the standard patches",
            f"write: the recipe and {pkg_resources + cxx17 + setup_requires} patch(es) into "
            "mine"]
        assert found[0][:2] == (stages[0], "info")  # the sdist, before setup.py is read
        assert found[0][2].startswith("sdist: said-once-0.1.0.tar.gz sha256 ")
        extension = (READ_STAGES[2], "info", f"setup.py:{line_of(tree, 'CUDAExtension(')}: "
                     "extension tiny_ext._C (CUDAExtension): CUDA")
        assert extension in found
        lacks = (READ_STAGES[2], "todo", "the sdist lacks what its extensions compile: "
                 "csrc/add_kernel.cu; build from the repository instead:\n  source:\n"
                 "    git: REPOSITORY-URL\n"
                 "    commit: COMMIT  # the full 40-digit commit of the v0.1.0 tag\n"
                 "    tag: v0.1.0")
        assert (lacks in found) == missing
        if pkg_resources:
            number = 1 + setup_requires + cxx17
            assert ("patch: the standard patches", "fixed",
                    f"setup.py:{line_of(tree, 'import pkg_resources')}: import pkg_resources: "
                    f"wrote 000{number}-no-pkg-resources.patch: importlib.metadata and "
                    "packaging in place of pkg_resources, which the toolchain's setuptools no "
                    "longer has") in found
        assert [stage for stage, _, _ in found] == sorted(
            (stage for stage, _, _ in found), key=stages.index)  # in the stages' order
        after = lines[lines.index(next(line for line in lines if line.startswith("==> ")
                                       and "] write: " in line)) + 1:]
        assert after[0] == SUMMARY_TEXT.format(
            len(found), *(sum(level == w for _, level, _ in found)
                          for w in ("todo", "fixed", "info")))
        assert after[1:] == [f"wrote {display}" for display in _written(root)] + [
            "next: wheelsmith build said-once --recipes mine --check"]
        shown = json.loads(subprocess.run(
            [sys.executable, "-m", "wheelsmith", "recipe", "new", "said-once==0.1.0",
             "--recipes", "json", "--no-configure", "--json"], cwd=root, env=env,
            capture_output=True, text=True, check=True).stdout)["findings"]
        assert Counter(text for _, _, text in found) == Counter(_joined(shown))


SUMMARY_TEXT = ("{} findings: {} to do by hand (todo), {} fixed in the recipe or its patches, "
                "{} for information")


def _environ() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "WHEELSMITH_RECIPES"}


def _written(root: Path) -> list[str]:
    recipe = "mine/recipes/said-once.yaml"
    patches = sorted(p.relative_to(root).as_posix()
                     for p in (root / "mine" / "patches").rglob("*.patch"))
    return [recipe, *patches]


def _joined(lines: list[str]) -> list[str]:
    """--json's findings with each indented line joined to the one before, as shown."""
    joined: list[str] = []
    for line in lines:
        if line.startswith("  ") and joined:
            joined[-1] += f"\n{line}"
        else:
            joined.append(line)
    return joined


def test_every_finding_belongs_to_one_stage_and_the_recipe_keeps_them_all() -> None:
    """The stages' sections are the recipe's sections: none left out, none said twice."""
    staged = [section for sections in report.STAGES.values() for section in sections]
    assert sorted(s.__name__ for s in staged) == sorted(s.__name__ for s in report.ORDER)
    assert len(set(staged)) == len(staged)


@pytest.mark.toolchain
def test_the_check_shows_its_sample_compile_and_what_it_read_back_once(
        tmp_path: Path, toolchain: Toolchain, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check runs the build machinery on the same stage lines: its compile stage names
    the sample of each extension, ninja's count moves the progress line (not a bar full from
    the start), and what the check read back is said after it, once, before the count."""
    tree = tiny_sdist(tmp_path, "checked-once", 3, pkg_resources=False, cxx17=False,
                      setup_requires=False, missing=False)
    monkeypatch.setenv("WHEELSMITH_INDEX_URL", sdist_index(tmp_path, tree, "checked-once"))
    lines = seen("recipe", "new", "checked-once==0.1.0", "--recipes", "mine", cwd=tmp_path,
                 env=_environ())
    stages = [(i, f"{m[1]}: {m[2]}") for i, m in enumerate(map(STAGE_RE.match, lines)) if m]
    names = [stage for _, stage in stages]
    sample = names.index("compile: sample of _C: add.o, add_kernel.o")
    assert names.index("patch: the standard patches") < names.index(
        "write: the recipe and 0 patch(es) into mine") < sample
    assert names[sample + 1:] == ["read back: what the check showed, into the recipe"]
    start, end = stages[sample][0], stages[sample + 1][0]
    counts = [match[1] for line in lines[start + 1:end]
              if (match := re.match(r"    compile \[[#-]+\] (\d+/\d+) ", line))]
    assert (counts[0], counts[-1]) == ("1/2", "2/2"), lines[start:end]
    check = "info: check: build.ninja targets _C: SASS sm_120, compiled add.o and add_kernel.o"
    read_back = stages[-1][0]
    assert lines[read_back + 1:read_back + 3] == [
        check, "5 findings: 0 to do by hand (todo), 0 fixed in the recipe or its patches, "
               "5 for information"]
    assert lines.count(check) == 1
