"""build.libraries (recipes/libraries.py): each entry a wheel pinned to one version (or a bare
name: the toolchain's copy) or an archive with a name; every problem named with its file, line
and key path; the entries in the content key only when present."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wheelsmith.errors import RecipeError
from wheelsmith.recipes.envnames import protection
from wheelsmith.recipes.model import canonical, load_recipe

RECIPE = """package: tiny-ext
build:
  libraries: {libraries}
versions:
  - version: "0.1.0"
    source:
      pypi: tiny-ext
      sha256: "{sha}"
"""
NAME = st.from_regex(r"[A-Za-z][A-Za-z0-9_-]{0,10}[A-Za-z0-9]", fullmatch=True)
VERSION = st.from_regex(r"[0-9]{1,3}(\.[0-9]{1,3}){0,3}", fullmatch=True)
CUDA = st.sampled_from(["12", "13"])


def recipe_with(tmp_path: Path, libraries: list[Any]) -> Path:
    file = tmp_path / "recipes" / "tiny-ext.yaml"
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(RECIPE.format(libraries=json.dumps(libraries), sha="0" * 64))
    return file


def problems(file: Path) -> list[str]:
    with pytest.raises(RecipeError) as caught:
        load_recipe(file)
    return "\n".join(caught.value.details()).replace(str(file), "R").splitlines()


def column(entry: int, libraries: list[Any], key: str | None = None) -> int:
    """The column (1-based) where entry `entry`'s value (or its `key`'s value) starts on the
    recipe's line 3, as json.dumps writes the flow sequence."""
    text = "  libraries: [" + "".join(json.dumps(e) + ", " for e in libraries[:entry])
    start = len(text)
    if key is not None:
        item = json.dumps(libraries[entry])
        start += item.index(json.dumps(libraries[entry][key]), item.index(f'"{key}"'))
    return start + 1


@given(name=NAME, version=VERSION, exact=st.booleans(), cuda=st.none() | CUDA)
def test_a_wheel_pinned_to_one_version_is_taken_and_keyed(
        tmp_path_factory: pytest.TempPathFactory, name: str, version: str, exact: bool,
        cuda: str | None) -> None:
    entry = {"wheel": f"{name}{'===' if exact else '=='}{version}",
             **({"cuda": cuda} if cuda else {})}
    recipe = load_recipe(recipe_with(tmp_path_factory.mktemp("r"), [entry]))
    (library,) = recipe.libraries
    assert (library.wheel, library.version, library.cuda) == (
        entry["wheel"], version, int(cuda) if cuda else None)
    assert canonical(recipe, recipe.releases[0])["libraries"] == [entry]


@given(name=NAME, version=VERSION, form=st.sampled_from(
    [">={v}", "~={v}", "=={v}.*", ">={v},<99", "!={v}", "[extra]=={v}", "=={v}; os_name=='x'",
     " @ file:///tmp/x.whl", "<{v}"]))
def test_a_wheel_not_pinned_to_one_version_is_refused_at_its_line(
        tmp_path_factory: pytest.TempPathFactory, name: str, version: str, form: str) -> None:
    value = name + form.format(v=version)
    libraries = [{"wheel": value}]
    found = problems(recipe_with(tmp_path_factory.mktemp("r"), libraries))
    assert found == [
        f"R:3:{column(0, libraries, 'wheel')}: 'build.libraries[0].wheel' is not pinned to one "
        f"version: '{value}'",
        "    hint: write NAME==VERSION (no range, extras, markers or URL: `cuda` picks the "
        "toolchains), or NAME alone for the toolchain's own copy"]


@given(name=NAME, version=st.from_regex(r"[a-z]{2,8}(-[a-z]{1,5})?", fullmatch=True))
def test_a_version_that_is_none_is_named(tmp_path_factory: pytest.TempPathFactory, name: str,
                                         version: str) -> None:
    libraries = [{"wheel": f"{name}=={version}"}]
    found = problems(recipe_with(tmp_path_factory.mktemp("r"), libraries))
    assert found == [
        f"R:3:{column(0, libraries, 'wheel')}: 'build.libraries[0].wheel': '{version}' is not "
        f"a version ({name}=={version})",
        f"    hint: write {name}==VERSION, a release on the index pip uses"]


@given(bad=st.sampled_from(["-nccl==1", "==2.0", ".x==1", "nccl-==1", "_a==1"]))
def test_a_wheel_without_a_project_name_is_refused(tmp_path_factory: pytest.TempPathFactory,
                                                   bad: str) -> None:
    libraries = [{"wheel": bad}]
    found = problems(recipe_with(tmp_path_factory.mktemp("r"), libraries))
    assert found == [
        f"R:3:{column(0, libraries, 'wheel')}: 'build.libraries[0].wheel' does not start with "
        f"a project name: '{bad}'",
        "    hint: write NAME==VERSION, e.g. nvidia-nccl-cu13==2.30.7"]


@given(name=NAME, first=VERSION, second=VERSION, cuda=st.sampled_from([
    (None, None), ("13", None), (None, "12"), ("13", "13")]),
       respell=st.sampled_from([str.upper, lambda n: n.replace("-", "_"), str]))
def test_a_library_named_twice_for_the_same_toolchains_is_refused(
        tmp_path_factory: pytest.TempPathFactory, name: str, first: str, second: str,
        cuda: tuple[str | None, str | None], respell: Any) -> None:
    libraries = [{"wheel": f"{name}=={first}", **({"cuda": cuda[0]} if cuda[0] else {})},
                 {"wheel": f"{respell(name)}=={second}",
                  **({"cuda": cuda[1]} if cuda[1] else {})}]
    found = problems(recipe_with(tmp_path_factory.mktemp("r"), libraries))
    canonical_name = name.lower().replace("_", "-")
    assert found == [
        f"R:3:{column(1, libraries)}: 'build.libraries[1]' names {canonical_name} a second time "
        "for the same toolchains",
        "    hint: name each library once (give each CUDA major's entry its `cuda`)"]


@given(name=NAME, version=VERSION)
def test_one_library_for_each_cuda_major_is_taken(tmp_path_factory: pytest.TempPathFactory,
                                                  name: str, version: str) -> None:
    libraries = [{"wheel": f"{name}=={version}", "cuda": "12"},
                 {"wheel": f"{name}=={version}", "cuda": "13"}]
    recipe = load_recipe(recipe_with(tmp_path_factory.mktemp("r"), libraries))
    assert [library.applies(13) for library in recipe.libraries] == [False, True]


@given(base=NAME, built=CUDA, said=CUDA)
def test_a_wheel_of_one_cuda_given_another_cuda_is_refused(
        tmp_path_factory: pytest.TempPathFactory, base: str, built: str, said: str) -> None:
    if built == said:
        return
    libraries = [{"wheel": f"{base}-cu{built}==1.0", "cuda": said}]
    found = problems(recipe_with(tmp_path_factory.mktemp("r"), libraries))
    assert found == [
        f"R:3:{column(0, libraries, 'cuda')}: 'build.libraries[0]': "
        f"{base.lower().replace('_', '-')}-cu{built} is built for CUDA {built}, but its cuda "
        f"says {said}",
        f'    hint: write cuda: "{built}", or name the wheel of CUDA {said}']


@pytest.mark.parametrize("keys", [(), ("wheel", "archive")])
def test_an_entry_is_a_wheel_or_an_archive(tmp_path: Path, keys: tuple[str, ...]) -> None:
    values = {"wheel": "nvidia-nccl-cu13==2.30.7",
              "archive": {"url": "https://example.invalid/h.tgz", "sha256": "1" * 64}}
    libraries = [{"cuda": "13", **{key: values[key] for key in keys}}]
    assert problems(recipe_with(tmp_path, libraries)) == [
        f"R:3:{column(0, libraries)}: 'build.libraries[0]' needs exactly one of wheel, archive "
        f"(found {', '.join(keys) or 'none'})",
        "    hint: wheel: NAME==VERSION (a wheel of the index), or archive: {url, sha256} with "
        "name"]


@given(name=st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,8}", fullmatch=True))
def test_an_archive_is_taken_with_its_name_and_refused_without(
        tmp_path_factory: pytest.TempPathFactory, name: str) -> None:
    archive = {"url": "https://example.invalid/h.tgz", "sha256": "1" * 64}
    recipe = load_recipe(recipe_with(tmp_path_factory.mktemp("r"),
                                     [{"archive": archive, "name": name}]))
    assert recipe.libraries[0].describe() == f"{name} (archive {archive['url']})"
    libraries = [{"archive": archive}]
    assert problems(recipe_with(tmp_path_factory.mktemp("r"), libraries)) == [
        f"R:3:{column(0, libraries)}: 'build.libraries[0]' is an archive without a name",
        "    hint: name: the library's name, e.g. hdf5 (its variables: HDF5_ROOT, ...)"]


def test_a_pure_recipe_has_no_libraries(tmp_path: Path) -> None:
    file = recipe_with(tmp_path, [{"wheel": "nvidia-nccl-cu13==2.30.7"}])
    file.write_text("kind: pure\n" + file.read_text())
    assert problems(file) == [
        "R:4:3: 'build.libraries' in a pure recipe: a pure wheel compiles nothing",
        "    hint: remove build.libraries, or set the recipe's kind to extension"]


def test_a_recipe_without_libraries_keeps_its_content_key(tmp_path: Path) -> None:
    file = recipe_with(tmp_path, [])
    recipe = load_recipe(file)
    assert recipe.libraries == ()
    assert "libraries" not in canonical(recipe, recipe.releases[0])


@given(name=st.from_regex(r"[A-Z][A-Z0-9]{1,8}", fullmatch=True),
       suffix=st.sampled_from(["ROOT", "ROOT_DIR", "HOME", "DIR", "INCLUDE_DIR", "LIB_DIR",
                               "PATH"]))
def test_the_variables_wheelsmith_sets_for_a_library_stay_refused_from_env(
        name: str, suffix: str) -> None:
    """What hostlibs.Prefix.variables sets is wheelsmith's: `--env` cannot set one."""
    found = protection(f"{name}_{suffix}")
    assert found is not None
    assert found.error().message == (
        f"--env {name}_{suffix}: it changes where programs, libraries, headers or modules come "
        "from; a build's --env cannot override it")
