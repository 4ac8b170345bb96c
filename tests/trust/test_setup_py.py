"""An sdist's setup.py is not trusted (recipe new reads it with `ast`; a build checks it before
running it): code nested past what Python's parser or wheelsmith's walks can take is one
located error (recipe new) or no finding (the build, whose own Python then says what is
wrong), never a RecursionError or MemoryError."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.hostile import assert_orderly, returned_or_raised, run_bounded
from wheelsmith.builder.compilesetup import ninja_switched_off
from wheelsmith.errors import UntrustedDataError
from wheelsmith.scaffold import patches
from wheelsmith.scaffold.setup_py import read_setup

SHAPES = {  # one level of nesting, around `{}`
    "attributes": "{}.a", "calls": "{}()", "subscripts": "{}[0]", "sums": "{} + 'x'",
    "negations": "-{}", "nots": "not {}", "parentheses": "({})", "lists": "[{}]",
    "lambdas": "lambda: {}", "conditions": "1 if 1 else {}", "arguments": "f({})",
}


def nested(shape: str, depth: int) -> str:
    text = "x"
    for _ in range(depth):
        text = shape.format(text)
    return text


def sdist_tree(root: Path, setup: str) -> Path:
    tree = root / "demo_pkg-1.0.0"
    tree.mkdir(parents=True)
    (tree / "setup.py").write_text(setup)
    return tree


@given(st.sampled_from(sorted(SHAPES)), st.integers(min_value=1, max_value=20_000))
def test_any_nesting_is_read_or_refused_naming_setup_py(
        tmp_path_factory: pytest.TempPathFactory, shape: str, depth: int) -> None:
    setup = ("from setuptools import setup\n"
             f"flags = {nested(SHAPES[shape], depth)}\nsetup(name='demo')\n")
    tree = sdist_tree(tmp_path_factory.mktemp("sdist"), setup)
    read = returned_or_raised(lambda: read_setup(tree), UntrustedDataError)
    assert ninja_switched_off(tree / "setup.py") is None  # the build's check never raises
    if isinstance(read, UntrustedDataError):
        assert read.message in ("demo_pkg-1.0.0/setup.py: nests too deeply for Python's parser",
                                "demo_pkg-1.0.0/setup.py:2: nests deeper than 200 levels",
                                "demo_pkg-1.0.0/setup.py:2: not valid Python (too many nested "
                                "parentheses)"), read.message
        return
    patches.written(tree, read, cxx20=True)  # every patch recipe new writes walks the tree


def file_index(root: Path, setup: str) -> str:
    """A file:// simple index whose demo-pkg holds one sdist with `setup`."""
    sdist = root / "files" / "demo_pkg-1.0.0.tar.gz"
    sdist.parent.mkdir(parents=True)
    with tarfile.open(sdist, "w:gz") as tar:
        for name, text in (("setup.py", setup), ("PKG-INFO", "Name: demo-pkg\n")):
            info = tarfile.TarInfo(f"demo_pkg-1.0.0/{name}")
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    page = root / "simple" / "demo-pkg"
    page.mkdir(parents=True)
    (page / "index.json").write_text(json.dumps({"files": [{
        "filename": sdist.name, "url": "../../files/demo_pkg-1.0.0.tar.gz",
        "hashes": {"sha256": hashlib.sha256(sdist.read_bytes()).hexdigest()}}]}))
    return (root / "simple").as_uri()


@pytest.mark.parametrize(("setup", "said"), [
    (f"x = {nested('-{}', 200_000)}\n", "nests too deeply for Python's parser"),
    (f"x = {nested('{}.a', 500)}\n", "nests deeper than 200 levels"),
], ids=["past Python's parser", "past wheelsmith's walks"])
def test_recipe_new_with_a_setup_py_nested_too_deep_says_so_in_one_line(
        tmp_path: Path, setup: str, said: str) -> None:
    base = file_index(tmp_path / "index", setup)
    outcome = run_bounded("recipe", "new", "demo-pkg", "--recipes", str(tmp_path / "r"),
                          "--no-configure", cwd=tmp_path, seconds=60,
                          env={**os.environ, "WHEELSMITH_INDEX_URL": base})
    assert_orderly(outcome, seconds=30)
    assert outcome.returncode == 21
    line = "" if "parser" in said else ":1"
    assert outcome.stderr.splitlines()[-1] == f"error: demo_pkg-1.0.0/setup.py{line}: {said}"
    assert not (tmp_path / "r").exists()
