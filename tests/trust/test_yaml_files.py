"""The user's YAML files (recipes, profiles, matrix.yaml, known-bad.yaml, images.lock), read by
every command through one loader (document.py): whatever they hold, each is read or refused
with located problems (`file:line:col`) in bounded time and memory, and no command prints
without bound. docs/security.md: the user's own files are trusted to mean what they say, not
to be well-formed."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.hostile import assert_orderly, run_bounded
from wheelsmith import document
from wheelsmith.builder import baseimage
from wheelsmith.errors import MAX_LISTED, RecipeError, WheelsmithError
from wheelsmith.fleet import matrix
from wheelsmith.recipes import knownbad, repos
from wheelsmith.recipes.model import load_recipe
from wheelsmith.toolchain.profile import load_profile

REPO = Path(__file__).resolve().parents[2]
RECIPE = (REPO / "recipes" / "causal-conv1d.yaml").read_bytes()


def _images_lock(path: Path) -> object:
    return baseimage._read(path)  # its callers need a container engine


LOADERS: dict[str, Callable[[Path], object]] = {
    "recipe": load_recipe,
    "profile": load_profile,
    "matrix": lambda path: matrix.load(path, repos.recipe_file,
                                       default_toolchain="cu130-torch2.14",
                                       default_python="3.11"),
    "known-bad": knownbad.load,
    "known-bad runtime rules": knownbad.load_runtime,
    "images.lock": _images_lock,
}


def read_each_way(path: Path) -> list[RecipeError]:
    """Every loader reads `path`: each returns, or raises a WheelsmithError; a RecipeError's
    problems are located inside the file. Returns the RecipeErrors."""
    text = path.read_bytes().decode("utf-8", errors="replace")
    lines = len(re.findall("\r\n|[\r\n\x85\u2028\u2029]", text)) + 1  # YAML's line breaks
    refused = []
    for kind, loader in LOADERS.items():
        started = time.monotonic()
        outcome = _outcome(loader, path)
        assert time.monotonic() - started < 10, kind
        if isinstance(outcome, RecipeError):
            assert outcome.problems, kind
            for problem in outcome.problems:
                assert 1 <= problem.line <= lines, (kind, problem.render())
                assert problem.file == str(path), (kind, problem.render())
            refused.append(outcome)
    return refused


def _outcome(loader: Callable[[Path], object], path: Path) -> object:
    """What `loader` returned, or the WheelsmithError it raised (anything else fails)."""
    try:
        return loader(path)
    except WheelsmithError as error:
        return error


# --- generated YAML: tags, anchors, aliases, flow and block styles -------------------------

WORDS = st.sampled_from(["package", "version", "versions", "source", "pypi", "sha256", "arch",
                         "default", "env", "packages", "recipe", "toolchains", "pythons",
                         "x", "12.0", "1.7.0", "causal-conv1d", "stage", "runtime"])
SCALARS = st.one_of(
    WORDS, st.integers(-(10**30), 10**30).map(str),
    st.sampled_from([".nan", ".inf", "-.inf", "1e400", "0x1F", "0o17", "~", "null", "yes",
                     "2020-13-45", "2024-02-30 25:61:00", "!!int 0xZZ", "!!float abc",
                     "!!timestamp soon", "!!binary ###", "!!binary aGk=", "!!bool maybe",
                     "!!python/object:os.system x", "!!python/name:os.system", "!!set {a}",
                     '"\\ud800"', '"\\x00"', '"\\U0010FFFF"', "'quoted'", "1" * 5000,
                     "!!str 12", "? complex", "- dash", "a: b", "[", "}", "&", "*", "|", ">"]),
    st.text(max_size=12).map(lambda text: '"' + text.replace("\\", "\\\\")
                              .replace('"', '\\"') + '"'))

Tree = Any  # ("scalar", text) | ("map", [(key, tree)]) | ("seq", [tree]) | anchors/aliases


def _trees() -> st.SearchStrategy[Tree]:
    leaves = st.one_of(SCALARS.map(lambda s: ("scalar", s)),
                       st.integers(0, 3).map(lambda n: ("alias", f"a{n}")))
    return st.recursive(leaves, lambda children: st.one_of(
        st.lists(st.tuples(WORDS, children), max_size=4).map(lambda kv: ("map", kv)),
        st.lists(children, max_size=4).map(lambda items: ("seq", items)),
        st.tuples(st.integers(0, 3), children).map(lambda ac: ("anchor", f"a{ac[0]}", ac[1])),
        children.map(lambda child: ("flow", child)),
    ), max_leaves=25)


def render(tree: Tree, indent: int = 0, flow: bool = False) -> str:
    """YAML text for `tree`: block style, flow style under a `flow` node."""
    kind = tree[0]
    leaves: dict[str, Callable[[], str]] = {
        "scalar": lambda: str(tree[1]), "alias": lambda: f"*{tree[1]}",
        "anchor": lambda: f"&{tree[1]} {render(tree[2], indent, flow)}",
        "flow": lambda: render(tree[1], indent, flow=True)}
    if kind in leaves:
        return leaves[kind]()
    items = tree[1]
    if flow or not items:
        if kind == "map":
            return "{" + ", ".join(f"{k}: {render(v, 0, True)}" for k, v in items) + "}"
        return "[" + ", ".join(render(v, 0, True) for v in items) + "]"
    pad = " " * indent
    if kind == "map":
        return "".join(f"\n{pad}{k}: {render(v, indent + 2)}" for k, v in items)
    return "".join(f"\n{pad}- {render(v, indent + 2)}" for v in items)


@given(tree=_trees())
def test_generated_yaml_is_read_or_refused_with_located_problems(tmp_path: Path,
                                                                  tree: Tree) -> None:
    path = tmp_path / "generated.yaml"
    path.write_text(render(tree).lstrip("\n") + "\n")
    read_each_way(path)


@given(data=st.binary(max_size=400))
def test_arbitrary_bytes_are_read_or_refused_with_located_problems(tmp_path: Path,
                                                                    data: bytes) -> None:
    path = tmp_path / "bytes.yaml"
    path.write_bytes(data)
    read_each_way(path)


@given(text=st.text(max_size=300))
def test_arbitrary_text_is_read_or_refused_with_located_problems(tmp_path: Path,
                                                                  text: str) -> None:
    path = tmp_path / "text.yaml"
    path.write_bytes(text.encode("utf-8", errors="surrogatepass"))
    read_each_way(path)


# --- aliases ------------------------------------------------------------------------------

def laughs(depth: int, fan: int) -> str:
    """Nested anchors: the last key stands for fan**depth copies of the first."""
    lines = ['package: laughs', 'l0: &l0 "lol"']
    lines += [f"l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * fan)}]" for n in range(1, depth + 1)]
    return "\n".join(lines) + "\n"


@given(depth=st.integers(1, 40), fan=st.integers(1, 12))
def test_an_alias_is_refused_at_its_position_before_anything_expands(tmp_path: Path,
                                                                       depth: int,
                                                                       fan: int) -> None:
    path = tmp_path / "laughs.yaml"
    path.write_text(laughs(depth, fan))
    started = time.monotonic()
    for error in read_each_way(path):
        assert [p.render() for p in error.problems] == [
            f"{path}:3:10: an alias (*l0) is not allowed here: write the value out (aliases "
            "can make a small file expand without bound)"]
    assert time.monotonic() - started < 5


def test_a_billion_laughs_recipe_is_one_located_line_from_the_real_cli(tmp_path: Path) -> None:
    (tmp_path / "laughs.yaml").write_text(laughs(30, 10))
    outcome = run_bounded("check-recipes", "laughs.yaml", cwd=tmp_path, seconds=30,
                          address_space=1 << 30)
    assert_orderly(outcome, seconds=30)
    assert (outcome.returncode, outcome.stderr) == (3, (
        "error: 1 problem in laughs.yaml\n"
        "  laughs.yaml:3:10: an alias (*l0) is not allowed here: write the value out "
        "(aliases can make a small file expand without bound)\n"
        "hint: the schema is printed by `wheelsmith schema`\n"))


# --- size, depth, node count ----------------------------------------------------------------

@pytest.mark.parametrize("make", ["sparse zeros", "recipe lines"])
def test_a_50_mb_file_is_one_problem_not_millions(tmp_path: Path, make: str) -> None:
    path = tmp_path / "huge.yaml"
    if make == "sparse zeros":
        with path.open("wb") as stream:
            stream.truncate(50 << 20)  # cheap: no block is written
    else:
        path.write_bytes(RECIPE * ((50 << 20) // len(RECIPE)))
    outcome = run_bounded("check-recipes", "huge.yaml", cwd=tmp_path, seconds=30,
                          address_space=1 << 30)
    assert_orderly(outcome, seconds=30)
    assert (outcome.returncode, outcome.stderr.splitlines()) == (3, [
        "error: 1 problem in huge.yaml",
        f"  huge.yaml:1:1: the file is larger than {document.MAX_BYTES // 1024} KiB, the most "
        "a YAML file wheelsmith reads may have",
        "    hint: is it the file you meant? recipes, profiles and matrix files are a few KiB",
        "hint: the schema is printed by `wheelsmith schema`"])


def refused(path: Path) -> RecipeError:
    """The recipe loader's refusal of `path` (every loader reads through the same one)."""
    with pytest.raises(RecipeError) as caught:
        load_recipe(path)
    return caught.value


@given(depth=st.integers(document.MAX_DEPTH + 1, 200), flow=st.booleans())
def test_nesting_deeper_than_the_limit_is_refused_where_it_goes_too_deep(
        tmp_path: Path, depth: int, flow: bool) -> None:
    path = tmp_path / "deep.yaml"
    text = "[" * depth if flow else "".join(f"{' ' * n}k:\n" for n in range(depth))
    path.write_text("a: " + text if flow else text)
    (problem,) = refused(path).problems
    assert problem.message == f"nested more than {document.MAX_DEPTH} levels deep"
    assert (problem.line, problem.column) == ((1, 3 + document.MAX_DEPTH) if flow
                                              else (document.MAX_DEPTH, document.MAX_DEPTH))


def test_more_values_than_the_limit_are_refused_at_the_first_one_too_many(
        tmp_path: Path) -> None:
    path = tmp_path / "many.yaml"
    path.write_text("package: x\nversions:\n" + "- 1\n" * (document.MAX_NODES + 500))
    started = time.monotonic()
    assert [(p.line, p.message) for p in refused(path).problems] == [
        (document.MAX_NODES - 2, f"more than {document.MAX_NODES} keys and values: is it the "
                                 "file you meant?")]  # the mapping, 3 scalars, the list: 5
    assert time.monotonic() - started < 10


# --- encodings and characters ----------------------------------------------------------------

COMMENTED = RECIPE.replace(b"\nbuild:", b"\n# a comment before build:\nbuild:")


@given(at=st.integers(0, len(COMMENTED)),
       byte=st.sampled_from([0xFF, 0xFE, 0xC0, 0x80, 0xBF, 0xF8]))
def test_a_byte_that_is_not_utf8_is_one_problem_on_its_line(tmp_path: Path, at: int,
                                                             byte: int) -> None:
    path = tmp_path / "recipe.yaml"
    path.write_bytes(COMMENTED[:at] + bytes([byte]) + COMMENTED[at:])
    errors = read_each_way(path)
    assert len(errors) == len(LOADERS)
    for error in errors:
        (problem,) = error.problems
        assert (problem.line, problem.message) == (COMMENTED[:at].count(b"\n") + 1,
                                                   f"byte 0x{byte:02x} is not UTF-8")
        assert problem.hint == ("save the file as UTF-8 (comments too): wheelsmith reads YAML "
                                "as UTF-8 only")


@given(character=st.sampled_from(["\x00", "\x07", "\x1b", "\x7f", "\ufffe", "\x85\x00"]),
       at=st.integers(0, 200))
def test_a_character_yaml_refuses_is_one_problem_at_it(tmp_path: Path, character: str,
                                                       at: int) -> None:
    text = RECIPE.decode()
    path = tmp_path / "recipe.yaml"
    path.write_text(text[:at] + character + text[at:])
    (problem,) = refused(path).problems
    assert problem.line == text[:at].count("\n") + 1
    assert re.fullmatch(r"character U\+[0-9A-F]{4} is not allowed in YAML", problem.message)


def test_an_escaped_lone_surrogate_is_a_problem_not_a_crash_when_printed(
        tmp_path: Path) -> None:
    (tmp_path / "recipe.yaml").write_bytes(re.sub(rb"summary: .*", rb'summary: "\\ud800 x"',
                                                  RECIPE))
    outcome = run_bounded("check-recipes", "recipe.yaml", cwd=tmp_path, seconds=60)
    assert_orderly(outcome)
    assert outcome.returncode == 3
    assert outcome.stderr.splitlines()[1] == (
        "  recipe.yaml:3:10: 'summary': !!str cannot read '\\ud800 x': 'utf-8' codec can't "
        "encode character '\\ud800' in position 0: surrogates not allowed")


# --- what is printed ---------------------------------------------------------------------------

def test_thousands_of_problems_print_the_first_ones_and_a_count(tmp_path: Path) -> None:
    count = 3000  # 6,000 values: under the limit of a file
    text = RECIPE.decode().replace("  default: [\"12.0\"]",
                                   "  default: [" + ", ".join(["[1]"] * count) + "]")
    (tmp_path / "recipe.yaml").write_text(text)
    outcome = run_bounded("check-recipes", "recipe.yaml", cwd=tmp_path, seconds=60)
    assert_orderly(outcome, seconds=60)
    lines = outcome.stderr.splitlines()
    found = re.fullmatch(r"error: (\d+) problems in recipe.yaml", lines[0])
    assert found is not None, lines[0]
    total = int(found[1])
    assert total >= count  # and what the invalid arch list leaves undecided
    assert lines[1] == "  recipe.yaml:9:13: 'arch.default[0]' must be a string, got a list"
    assert lines[MAX_LISTED + 1:] == [f"  ... and {total - MAX_LISTED} more",
                                      "hint: the schema is printed by `wheelsmith schema`"]


def test_images_lock_is_read_through_the_same_loader(tmp_path: Path) -> None:
    lock = tmp_path / "images.lock"
    lock.write_text('debian-bookworm: "debian@sha256:ab"\ndebian-trixie: &x [1]\n'
                    "debian-forky: *x\n")
    with pytest.raises(RecipeError) as refused:
        baseimage._read(lock)
    assert [p.render() for p in refused.value.problems] == [
        f"{lock}:3:15: an alias (*x) is not allowed here: write the value out (aliases can "
        "make a small file expand without bound)"]
    lock.write_text('debian-bookworm: "debian@sha256:ab"\ndebian-trixie: ""\n')
    assert baseimage._read(lock) == {"debian-bookworm": "debian@sha256:ab"}
