"""What a build prints names things the user knows, never one of wheelsmith's own classes: the
fetch stage line says where the recipe's source comes from (the package index, an archive URL,
a git repository, a local directory), from the one place that words a source kind
(recipes/sources.py: SOURCE_WORDS). Every kind of source a recipe can name is built for real,
with the real CLI, up to a patch that does not apply (exit 6): no compile."""

from __future__ import annotations

import ast
import hashlib
import io
import json
import re
import subprocess
import tarfile
import typing
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, REPO, Served, wheelsmith
from wheelsmith.recipes.sources import (
    SOURCE_WORDS,
    GitSource,
    LocalSource,
    PypiSource,
    Source,
    UrlSource,
    describe_source,
)

NAME, VERSION = "words-ext", "0.1.0"
KINDS: tuple[type[Source], ...] = typing.get_args(Source)
# The exact words the stage line shows for each kind (a new kind without words fails below).
SAID = {PypiSource: "the package index", UrlSource: "an archive URL",
        GitSource: "a git repository", LocalSource: "a local directory"}
STAGE = re.compile(r"^==> \[\s*[\dhms]+\] (.*)$")


def class_names() -> set[str]:
    """wheelsmith's own class names that read as identifiers, not words: CamelCase with two
    capitals or more (PypiSource, BuildRequest, CompileError; not Toolchain)."""
    names = set()
    for module in (REPO / "src" / "wheelsmith").rglob("*.py"):
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.ClassDef) and len(re.findall("[A-Z]", node.name)) >= 2:
                names.add(node.name)
    return names


def test_every_source_kind_has_words_that_are_no_class_name() -> None:
    assert set(SOURCE_WORDS) == set(KINDS) == set(SAID)
    names = class_names()
    assert {"PypiSource", "LocalSource", "BuildRequest"} <= names  # the scan finds classes
    for kind in KINDS:
        words = SOURCE_WORDS[kind]
        assert words == SAID[kind]
        assert not names & set(re.findall(r"\w+", words)), words


def sdist(path: Path) -> str:
    """The tiny fixture as an sdist (words-ext-0.1.0/...); its sha256."""
    with tarfile.open(path, "w:gz") as tar:
        for file in sorted(p for p in (FIXTURES / "tiny-ext").rglob("*") if p.is_file()):
            data = file.read_bytes()
            info = tarfile.TarInfo(f"{NAME}-{VERSION}/{file.relative_to(FIXTURES / 'tiny-ext')}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return hashlib.sha256(path.read_bytes()).hexdigest()


def git_repo(root: Path) -> str:
    """The tiny fixture committed to a local git repository; the commit."""
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin", "HOME": str(root)}
    subprocess.run(["cp", "-r", str(FIXTURES / "tiny-ext"), str(root)], check=True)
    for args in (["init", "-q", "-b", "main"], ["add", "."], ["commit", "-qm", "tiny"]):
        subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True)
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, env=env, check=True,
                          capture_output=True, text=True).stdout.strip()


def source_yaml(kind: type[Source], tmp_path: Path, http_dir: Served,
                monkeypatch: pytest.MonkeyPatch) -> str:
    """The recipe's `source:` mapping (flow style) for a real source of `kind`."""
    if kind is LocalSource:
        return json.dumps({"path": str(FIXTURES / "tiny-ext")})
    if kind is GitSource:
        return json.dumps({"git": str(tmp_path / "repo"), "commit": git_repo(tmp_path / "repo")})
    sha = sdist(http_dir.root / f"{NAME}-{VERSION}.tar.gz")
    if kind is UrlSource:
        return json.dumps({"url": f"{http_dir.url}/{NAME}-{VERSION}.tar.gz", "sha256": sha})
    page = http_dir.root / "simple" / NAME
    page.mkdir(parents=True)
    file = f"{NAME}-{VERSION}.tar.gz"  # a PEP 503 page, as a static server serves it
    (page / "index.html").write_text(
        f'<!DOCTYPE html><html><body><a href="../../{file}#sha256={sha}">{file}</a>'
        "</body></html>\n")
    monkeypatch.setenv("WHEELSMITH_INDEX_URL", f"{http_dir.url}/simple")
    return json.dumps({"pypi": NAME, "sha256": sha})


def recipe_with_a_patch_that_does_not_apply(project: Path, source: str) -> None:
    patches = project / "patches" / NAME / VERSION
    patches.mkdir(parents=True)
    patch = patches / "0001-nothing-here.patch"
    patch.write_text("--- a/setup.py\n+++ b/setup.py\n@@ -1,1 +1,1 @@\n-no such line\n"
                     "+another line\n")
    sha = hashlib.sha256(patch.read_bytes()).hexdigest()
    (project / "recipes" / f"{NAME}.yaml").write_text(
        f"package: {NAME}\nversions:\n  - version: \"{VERSION}\"\n    source: {source}\n"
        f"    patches:\n      - {{file: {patch.name}, sha256: {sha}}}\n")


@pytest.mark.toolchain
@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: SAID[kind])
def test_the_fetch_stage_line_names_where_the_source_comes_from(
        kind: type[Source], project: Path, tmp_path: Path, http_dir: Served,
        monkeypatch: pytest.MonkeyPatch) -> None:
    recipe_with_a_patch_that_does_not_apply(
        project, source_yaml(kind, tmp_path, http_dir, monkeypatch))
    result = wheelsmith("build", NAME, "--arch", "12.0", cwd=project)
    assert result.returncode == 6, result.stderr  # the patch: after fetch, before compiling
    stages = [m[1] for line in result.stderr.splitlines() if (m := STAGE.match(line))]
    assert f"fetch: {NAME} {VERSION} ({SAID[kind]})" in stages, result.stderr
    shown = set(re.findall(r"\w+", result.stdout + result.stderr))
    assert not class_names() & shown, result.stderr


def test_describe_source_is_what_the_stage_line_shows() -> None:
    assert describe_source(PypiSource(project=NAME, version=VERSION, sha256="ab" * 32)) == (
        "the package index")
    assert describe_source(LocalSource(path=Path())) == "a local directory"
