"""A release's `carry`: sources its build would download (CMake's FetchContent, a submodule the
sdist lacks), pinned in the recipe, fetched like the release's own and placed at `into` in its
tree before the patches. Bad entries are refused at their line; a tree that already has
something at `into` (or a link on the way) is refused before anything is moved."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path, PurePosixPath

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import Served, header_tarball
from tests.recipes.test_fetch import hardlink, hostile_tar, symlink
from wheelsmith.arch import ArchSet
from wheelsmith.builder.buildenv import check_extra_env, recipe_sets
from wheelsmith.errors import RecipeError, SourceError, UsageError
from wheelsmith.files import sha256_file
from wheelsmith.recipes.fetch import carry_in
from wheelsmith.recipes.model import canonical, load_recipe
from wheelsmith.recipes.sources import CarriedSource, LocalSource, UrlSource
from wheelsmith.scaffold.rebase import Base
from wheelsmith.scaffold.render import base_version_lines

RECIPE = """package: tiny-carry
arch:
  env: TINY_ARCHS
build:
  env: {{TINY_SET: "1"}}
versions:
  - version: "1.0"
    source:
      path: src
    carry: {carry}
"""
# a part of `into` as written: what a directory may be named in it
PART = st.from_regex(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,11}", fullmatch=True).filter(
    lambda p: p not in (".", ".."))
INTO = st.lists(PART, min_size=1, max_size=4).map("/".join)
SHA = "a" * 64


def loaded(tmp_path: Path, carry: list[dict[str, object]]) -> RecipeError | list[CarriedSource]:
    file = tmp_path / "recipes" / "tiny-carry.yaml"
    file.parent.mkdir(parents=True, exist_ok=True)
    flow = yaml.safe_dump(carry, default_flow_style=True, width=1 << 20).strip()
    file.write_text(RECIPE.format(carry=flow))
    try:
        return list(load_recipe(file, "recipes/tiny-carry.yaml").latest.carried)
    except RecipeError as error:
        return error


def problems(result: RecipeError | list[CarriedSource]) -> list[tuple[int, str, str | None]]:
    assert isinstance(result, RecipeError), result
    return [(p.line, p.message, p.hint) for p in result.problems]


def url(into: str, **names: str) -> dict[str, object]:
    return {"into": into, "source": {"url": "http://127.0.0.1:9/dep.tar.gz", "sha256": SHA},
            **names}


@given(into=INTO, env=st.booleans(), cmake=st.booleans())
def test_a_directory_inside_the_tree_is_taken_with_the_variables_that_name_it(
        tmp_path_factory: pytest.TempPathFactory, into: str, env: bool, cmake: bool) -> None:
    names = {**({"env": "DEP_DIR"} if env else {}),
             **({"cmake": "FETCHCONTENT_SOURCE_DIR_DEP"} if cmake else {})}
    [carried] = loaded(tmp_path_factory.mktemp("r"), [url(into, **names)])  # type: ignore[misc]
    assert carried == CarriedSource(into=PurePosixPath(into),
                              source=UrlSource(url="http://127.0.0.1:9/dep.tar.gz", sha256=SHA),
                              env=names.get("env"), cmake=names.get("cmake"))


@given(parts=st.lists(st.one_of(PART, st.sampled_from(["", ".", ".."])), min_size=1,
                      max_size=4).filter(lambda ps: any(p in ("", ".", "..") for p in ps)),
       lead=st.sampled_from(["", "/", "./"]))
def test_an_into_that_is_not_a_plain_relative_path_is_refused_at_its_line(
        tmp_path_factory: pytest.TempPathFactory, parts: list[str], lead: str) -> None:
    into = lead + "/".join(parts)
    assert problems(loaded(tmp_path_factory.mktemp("r"), [url(into)])) == [
        (10, f"'versions[0].carry[0].into' is not a directory inside the source tree: "
             f"{into!r}",
         "write a relative path such as third_party/cutlass (letters, digits, '.', '_', '-' "
         "and '/'; no '..')")]


@given(into=INTO, odd=st.characters(blacklist_categories=["Cs"]).filter(
    lambda c: not (c.isascii() and (c.isalnum() or c in "._-/"))), at=st.integers(0, 40))
def test_an_into_with_a_character_a_shell_or_cmake_would_read_is_refused(
        tmp_path_factory: pytest.TempPathFactory, into: str, odd: str, at: int) -> None:
    at = min(at, len(into))
    bad = into[:at] + odd + into[at:]
    [(line, message, _)] = problems(loaded(tmp_path_factory.mktemp("r"), [url(bad)]))
    assert (line, message) == (10, "'versions[0].carry[0].into' is not a directory inside the "
                                   f"source tree: {bad!r}")


@given(first=INTO, rest=st.lists(PART, max_size=2))
def test_two_carried_sources_in_one_directory_or_one_inside_the_other_are_refused(
        tmp_path_factory: pytest.TempPathFactory, first: str, rest: list[str]) -> None:
    second = "/".join([first, *rest])
    assert problems(loaded(tmp_path_factory.mktemp("r"), [url(first), url(second)])) == [
        (10, f"'versions[0].carry[1].into': '{second}' overlaps the carried '{first}'",
         "give each carried source a directory of its own")]


@pytest.mark.parametrize("name", ["TINY_ARCHS", "TINY_SET", "CMAKE_ARGS", "DEP_DIR"])
def test_a_variable_the_recipe_sets_already_is_refused(tmp_path: Path, name: str) -> None:
    carry = [url("a", env="DEP_DIR"), url("b", env=name)]
    assert problems(loaded(tmp_path, carry)) == [
        (10, f"'versions[0].carry[1].env': {name} is set twice: here and by the recipe's "
             "arch, env or another carried source", "set it in one place")]


def test_a_carried_sdist_from_the_package_index_is_refused(tmp_path: Path) -> None:
    carry: list[dict[str, object]] = [{"into": "dep", "source": {"pypi": "dep", "sha256": SHA}}]
    assert problems(loaded(tmp_path, carry)) == [
        (10, "'versions[0].carry[0].source' is an sdist of the index: a carried source is a "
             "url, git or path source",
         "give the archive's URL and its sha256")]


def test_recipes_without_carry_keep_their_content_key(tmp_path: Path) -> None:
    [carried] = loaded(tmp_path, [url("dep", cmake="FETCHCONTENT_SOURCE_DIR_DEP")])  # type: ignore[misc]
    recipe = load_recipe(tmp_path / "recipes" / "tiny-carry.yaml")
    assert canonical(recipe, recipe.latest)["carry"] == [
        {"into": "dep", "source": {"url": "http://127.0.0.1:9/dep.tar.gz", "sha256": SHA},
         "cmake": "FETCHCONTENT_SOURCE_DIR_DEP"}]
    bare = recipe.latest.__class__(version="1.0", source=recipe.latest.source, patches=(),
                                   env=())
    assert "carry" not in canonical(recipe, bare)
    assert carried.into == PurePosixPath("dep")


@given(into=INTO, tree=st.sampled_from(["/w/src/pkg-1.0", "/w w/src/pkg-1.0"]))
def test_the_build_is_given_the_carried_directory_in_its_variable_and_in_cmake_args(
        tmp_path_factory: pytest.TempPathFactory, into: str, tree: str) -> None:
    file = tmp_path_factory.mktemp("r")
    loaded(file, [url(into, env="DEP_DIR", cmake="FETCHCONTENT_SOURCE_DIR_DEP")])
    recipe = load_recipe(file / "recipes" / "tiny-carry.yaml")
    env = recipe_sets(recipe, recipe.latest, ArchSet.parse(["12.0"]), Path(tree))
    where = f"{tree}/{into}"
    assert env["DEP_DIR"] == where
    quoted = f"'-DFETCHCONTENT_SOURCE_DIR_DEP={where}'" if " " in where else \
        f"-DFETCHCONTENT_SOURCE_DIR_DEP={where}"
    assert env["CMAKE_ARGS"] == quoted


@pytest.mark.parametrize("name", ["DEP_SRC", "CMAKE_ARGS"])
def test_env_cannot_set_what_a_carried_source_sets(tmp_path: Path, name: str) -> None:
    loaded(tmp_path, [url("dep", env="DEP_SRC", cmake="FETCHCONTENT_SOURCE_DIR_DEP")])
    recipe = load_recipe(tmp_path / "recipes" / "tiny-carry.yaml")
    with pytest.raises(UsageError) as refused:
        check_extra_env([(name, "/elsewhere")],
                        recipe_sets(recipe, recipe.latest, ArchSet.parse(["12.0"])))
    assert refused.value.message == (
        f"--env {name}: the recipe sets it for this build (its build env, arch knob or a "
        "carried source); a build's --env cannot override it")


# --- placing it in the tree -------------------------------------------------------------------

def test_a_carried_archive_is_downloaded_checked_and_placed_at_into(
        tmp_path: Path, http_dir: Served) -> None:
    tarball = header_tarball(http_dir.root, "dep", 41)
    sha = sha256_file(tarball)
    tree = tmp_path / "pkg-1.0"
    (tree / "third_party" / "dep").mkdir(parents=True)  # as a submodule the sdist left empty
    carried = CarriedSource(into=PurePosixPath("third_party/dep"),
                      source=UrlSource(url=f"{http_dir.url}/{tarball.name}", sha256=sha))
    placed = carry_in(carried, tree, tmp_path / "scratch", tmp_path / "cache")
    assert placed == tree / "third_party" / "dep"
    assert (placed / "include" / "dep.h").read_text() == "#define DEP_ANSWER 41\n"
    assert not (tmp_path / "scratch").exists()
    wrong = CarriedSource(into=PurePosixPath("other"),
                    source=UrlSource(url=f"{http_dir.url}/{tarball.name}", sha256="0" * 64))
    with pytest.raises(SourceError):
        carry_in(wrong, tree, tmp_path / "scratch", tmp_path / "cache")
    assert not (tree / "other").exists()


@pytest.mark.parametrize("found", ["file", "non-empty directory", "link to a directory",
                                   "link on the way", "file on the way"])
def test_a_tree_that_has_something_at_into_is_refused_and_left_as_it_was(
        tmp_path: Path, found: str) -> None:
    tree = tmp_path / "pkg-1.0"
    (tree / "real").mkdir(parents=True)
    (tree / "real" / "kept.h").write_text("kept\n")
    into = "third_party/dep"
    if found == "file":
        (tree / "third_party").mkdir()
        (tree / into).write_text("x\n")
    elif found == "non-empty directory":
        (tree / into).mkdir(parents=True)
        (tree / into / "kept.h").write_text("kept\n")
    elif found == "link to a directory":
        (tree / "third_party").mkdir()
        (tree / into).symlink_to(tree / "real")
    elif found == "link on the way":
        (tree / "third_party").symlink_to(tree / "real")
    else:
        (tree / "third_party").write_text("x\n")
    before = sorted(str(p.relative_to(tree)) for p in tree.rglob("*"))
    dep = tmp_path / "dep"
    dep.mkdir()
    (dep / "dep.h").write_text("dep\n")
    carried = CarriedSource(into=PurePosixPath(into), source=LocalSource(path=dep))
    with pytest.raises(SourceError) as caught:
        carry_in(carried, tree, tmp_path / "scratch", tmp_path / "cache")
    what = "the source carried into 'third_party/dep' (a local directory)"
    step = "third_party" if found in ("link on the way", "file on the way") else into
    kind = "link" if "link" in found else "file"
    assert caught.value.message == (
        f"cannot place {what}: the source tree has '{into}' already, and it is not empty"
        if found == "non-empty directory" else
        f"cannot place {what}: '{step}' in the source tree is a {kind}")
    assert sorted(str(p.relative_to(tree)) for p in tree.rglob("*")) == before
    assert (tree / "real" / "kept.h").read_text() == "kept\n"
    assert not os.path.lexists(tmp_path / "scratch" / "dep")


# --- a new version of a recipe that carries sources --------------------------------------------

@given(intos=st.lists(INTO, min_size=1, max_size=3, unique=True).filter(
    lambda xs: not any(a != b and (a + "/").startswith(b + "/") for a in xs for b in xs)),
       kinds=st.lists(st.sampled_from(["url", "git", "path"]), min_size=3, max_size=3),
       env=st.dictionaries(st.from_regex(r"[A-Z][A-Z0-9_]{0,8}", fullmatch=True)
                           .filter(lambda n: n not in ("TINY_ARCHS", "TINY_SET", "CMAKE_ARGS")),
                           st.text(min_size=0, max_size=8), max_size=2))
def test_a_new_version_starts_from_the_carried_sources_and_variables_of_the_one_below(
        tmp_path_factory: pytest.TempPathFactory, intos: list[str], kinds: list[str],
        env: dict[str, str]) -> None:
    """`recipe new NAME==NEWER` for a recipe wheelsmith ships writes the base release's own
    env and carry entries into the new version, read back as the same."""
    sources = {"url": {"url": "https://example.invalid/a b.tar.gz", "sha256": SHA},
               "git": {"git": "https://example.invalid/r.git", "commit": "b" * 40},
               "path": {"path": "/srv/dep"}}
    carry: list[dict[str, object]] = [
        {"into": into, "source": dict(sources[kind]), "cmake": f"FETCHCONTENT_SOURCE_DIR_D{i}"}
        for i, (into, kind) in enumerate(zip(intos, kinds, strict=False))]
    folder = tmp_path_factory.mktemp("r")
    loaded(folder, carry)
    file = folder / "recipes" / "tiny-carry.yaml"
    text = file.read_text().replace('    source:\n      path: src\n',
                                    '    source:\n      path: src\n    env: '
                                    + yaml.safe_dump(env, default_flow_style=True, width=1 << 20))
    file.write_text(text)
    base = load_recipe(file)
    lines = base_version_lines(Base(base, base.latest))
    file.write_text(text.split("    source:")[0] + "    source:\n      path: src\n"
                    + "\n".join(lines) + "\n")
    again = load_recipe(file).latest
    assert (again.carried, again.env) == (base.latest.carried, base.latest.env)


@pytest.mark.parametrize("member", [symlink("demo-1.0.0/link", "../../etc/passwd"),
                                    hardlink("demo-1.0.0/hard", "../outside"),
                                    tarfile.TarInfo("demo-1.0.0/../../evil")],
                         ids=["symlink-out", "hardlink-out", "dotdot"])
def test_a_hostile_carried_archive_is_refused_and_nothing_reaches_the_tree(
        tmp_path: Path, http_dir: Served, member: tarfile.TarInfo) -> None:
    """A carried archive is checked as the release's own is, before anything is unpacked."""
    archive = hostile_tar(http_dir.root / "dep.tar.gz", member)
    tree = tmp_path / "pkg-1.0"
    tree.mkdir()
    carried = CarriedSource(into=PurePosixPath("third_party/dep"),
                            source=UrlSource(url=f"{http_dir.url}/dep.tar.gz",
                                             sha256=sha256_file(archive)))
    with pytest.raises(SourceError) as caught:
        carry_in(carried, tree, tmp_path / "scratch", tmp_path / "cache")
    assert caught.value.message.startswith("refusing to unpack ")
    assert list(tree.iterdir()) == []
