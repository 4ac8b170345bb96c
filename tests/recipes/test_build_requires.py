"""A recipe adds the packages its build imports that the toolchain lacks (`build.requires`):
each pinned to one version, installed once per toolchain beside it (never replacing one of its
packages), in the content key only when present. `recipe new` pins pyproject.toml's build
requirements with what they need, so a package that builds with hatchling (or imports
setuptools_rust) gets its recipe right the first time: real pip against the index the machine's
pip uses, real builds."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import zipfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import sdist_index, wheelsmith
from wheelsmith.builder.plan import BuildPlan
from wheelsmith.errors import RecipeError, ToolchainError, UsageError
from wheelsmith.recipes.model import load_recipe
from wheelsmith.toolchain import overlay
from wheelsmith.toolchain.env import Toolchain

RECIPE = """package: tiny-pure
kind: pure
build:
  requires: {requires}
versions:
  - version: "0.1.0"
    source:
      pypi: tiny-pure
      sha256: "{sha}"
"""
NAME = st.from_regex(r"[A-Za-z][A-Za-z0-9._-]{0,10}[A-Za-z0-9]", fullmatch=True)
VERSION = st.from_regex(r"[0-9]{1,3}(\.[0-9]{1,3}){0,2}", fullmatch=True)


def recipe_with(tmp_path: Path, requires: list[str], sha: str = "0" * 64) -> Path:
    file = tmp_path / "recipes" / "tiny-pure.yaml"
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(RECIPE.format(requires=json.dumps(requires), sha=sha))
    return file


@given(name=NAME, version=VERSION, exact=st.booleans(),
       marker=st.sampled_from(["", '; python_version >= "3.10"']))
def test_a_pin_to_one_version_is_taken(tmp_path_factory: pytest.TempPathFactory, name: str,
                                       version: str, exact: bool, marker: str) -> None:
    pin = f"{name}{'===' if exact else '=='}{version}{marker}"
    recipe = load_recipe(recipe_with(tmp_path_factory.mktemp("r"), [pin]))
    assert recipe.build_requires == (pin,)


@given(name=NAME, version=VERSION, form=st.sampled_from(
    [">={v}", "~={v}", "=={v}.*", ">={v},<99", "!={v}", "", "[extra]=={v}",
     " @ file:///tmp/x.whl"]))
def test_anything_but_one_version_is_refused_at_its_line(
        tmp_path_factory: pytest.TempPathFactory, name: str, version: str, form: str) -> None:
    """A range, a wildcard, extras or a URL would let two builds get different packages."""
    value = name + form.format(v=version)
    with pytest.raises(RecipeError) as caught:
        load_recipe(recipe_with(tmp_path_factory.mktemp("r"), ["ninja-free==1.0", value]),
                    "recipes/tiny-pure.yaml")
    [problem] = caught.value.problems
    assert (problem.line, problem.message, problem.hint) == (
        4, f"'build.requires[1]' is not pinned to one version: '{value}'",
        "write NAME==VERSION (no range, extras or URL): every build gets the same packages")


def test_the_content_key_holds_build_requires_only_where_a_recipe_has_them(
        tmp_path: Path, toolchain: Toolchain) -> None:
    """Recipes without them keep the keys their wheels were built under."""
    with_pins = load_recipe(recipe_with(tmp_path / "a", ["hatchling==1.33.0"]))
    without = load_recipe(recipe_with(tmp_path / "b", []))
    plans = [BuildPlan(recipe=r, release=r.latest, archs=r.arch.default, toolchain=toolchain)
             for r in (with_pins, without)]
    assert plans[0].key_inputs()["recipe"]["requires"] == ["hatchling==1.33.0"]
    assert "requires" not in plans[1].key_inputs()["recipe"]


def test_a_package_the_toolchain_holds_is_refused(tmp_path: Path, toolchain: Toolchain) -> None:
    """The build would import the toolchain's (first on the path): the pin would lie."""
    held = next(pin for pin in toolchain.pins if pin.startswith("ninja=="))
    with pytest.raises(UsageError) as caught:
        overlay.check_adds_only((held, "hatchling==1.33.0"), toolchain, Path("r.yaml"))
    assert (caught.value.message, caught.value.hint) == (
        f"r.yaml: build.requires names {held}, which the toolchain {toolchain.name} holds "
        "already", "a recipe adds packages beside the toolchain's, it never replaces one: "
                   "remove it from build.requires")


def test_markers_are_read_for_the_toolchain_s_python(toolchain: Toolchain) -> None:
    pins = ('a==1; python_version == "2.7"', f'b==1; python_version == '
            f'"{toolchain.python_version}"', "c==1")
    assert overlay.applicable(pins, toolchain) == pins[1:]


# --- real: recipe new, then build, of a package whose backend the toolchain lacks ---------

PYPROJECT = """[build-system]
requires = BUILD_REQUIRES
build-backend = "hatchling.build"

[project]
name = "tiny-pure"
version = "0.1.0"
description = "a pure package built by hatchling"
dependencies = DEPENDENCIES

[tool.hatch.metadata]
allow-direct-references = true
"""


def served_sdist(tmp_path: Path, init: str = "ANSWER = 42\n",
                 dependencies: tuple[str, ...] = (),
                 build_requires: tuple[str, ...] = ("hatchling",)) -> str:
    """tiny-pure 0.1.0's sdist (pyproject.toml alone, hatchling's; `init` its __init__.py,
    `dependencies` its runtime requirements) on a file:// PEP 691 index; the index's URL."""
    tree = tmp_path / "tiny_pure-0.1.0"
    (tree / "tiny_pure").mkdir(parents=True)
    (tree / "tiny_pure" / "__init__.py").write_text(init)
    (tree / "pyproject.toml").write_text(PYPROJECT.replace(
        "DEPENDENCIES", json.dumps(list(dependencies))).replace(
        "BUILD_REQUIRES", json.dumps(list(build_requires))))
    (tree / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: tiny-pure\nVersion: 0.1.0\n")
    return sdist_index(tmp_path, tree, "tiny-pure")


def failed_build(tmp_path: Path, code: int) -> list[str]:
    """The error and hint lines of `build tiny-pure` (mine/'s recipe, into out2), which fails
    with exit `code`."""
    result = wheelsmith("build", "tiny-pure", "--recipes", "mine", "--out", "out2",
                        "--work-dir", "work2", cwd=tmp_path)
    assert result.returncode == code, result.stderr
    return [line for line in result.stderr.splitlines() if line.startswith(("error", "hint"))]


@pytest.mark.toolchain
def test_recipe_new_pins_the_backend_and_the_build_imports_it_beside_the_toolchain(
        tmp_path: Path, toolchain: Toolchain, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WHEELSMITH_INDEX_URL", served_sdist(tmp_path))
    made = wheelsmith("recipe", "new", "tiny-pure==0.1.0", "--recipes", "mine", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    said = made.stdout.splitlines()
    assert said[1] == ("info: kind: pure: pyproject.toml's backend builds pure Python and the "
                       "sdist holds no .cu file")
    recipe = load_recipe(tmp_path / "mine" / "recipes" / "tiny-pure.yaml")
    names = [pin.split("==")[0] for pin in recipe.build_requires]
    assert "hatchling" in names
    assert all("==" in pin for pin in recipe.build_requires)
    assert said[2] == (f"fixed: build.requires: {', '.join(recipe.build_requires)}: the build "
                       f"requirements the toolchain {toolchain.name} lacks, with what they need "
                       "(pyproject.toml, setup_requires), installed beside it for each build")
    assert said[-4].startswith("info: check: built tiny_pure-0.1.0+cu.13.0.torch.")
    assert said[-4].endswith("-none-any.whl and passed its smoke test")

    built = wheelsmith("build", "tiny-pure", "--recipes", "mine", "--json", "--out", "out",
                       "--work-dir", "work", cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    with zipfile.ZipFile(json.loads(built.stdout)["wheel"]) as wheel:
        assert wheel.read("tiny_pure/__init__.py") == b"ANSWER = 42\n"

    # the same recipe without them: the build cannot import its backend, and says so
    text = (tmp_path / "mine" / "recipes" / "tiny-pure.yaml").read_text()
    (tmp_path / "mine" / "recipes" / "tiny-pure.yaml").write_text(
        text.replace("build:\n  requires: ", "# requires: "))
    error = failed_build(tmp_path, 9)
    assert error == [
        "error: the build of tiny-pure 0.1.0 failed: Backend 'hatchling.build' is not "
        "available.",
        "hint: the build imports a package the toolchain does not hold (its pyproject.toml's "
        "build backend, or a module setup.py imports); add it, pinned, to the recipe's "
        "build.requires (NAME==VERSION, with what it needs; `wheelsmith recipe new` pins "
        "pyproject.toml's build requirements)" + error[1][error[1].index(" (the log's"):]]


@pytest.mark.toolchain
def test_a_pin_pip_cannot_install_leaves_nothing_half_made(tmp_path: Path,
                                                          toolchain: Toolchain) -> None:
    pins = ("wheelsmith-no-such-project==0.0.1",)
    with pytest.raises(ToolchainError) as caught:
        overlay.ensure(pins, toolchain, tmp_path)
    assert caught.value.message.startswith(
        "could not install the build requirements wheelsmith-no-such-project==0.0.1: ")
    assert caught.value.hint == ("each must be a wheel on the index pip uses, for Python "
                                 f"{toolchain.python_version} on {toolchain.platform}")
    made = overlay.directory(pins, toolchain, tmp_path)
    assert sorted(p.name for p in made.parent.iterdir()) == [f"{made.name}.lock",
                                                             f"{made.name}.log"]


# --- the smoke test imports a wheel with what it requires ---------------------------------

@pytest.mark.toolchain
def test_the_smoke_test_imports_a_wheel_with_what_it_requires_that_the_toolchain_lacks(
        tmp_path: Path, toolchain: Toolchain, monkeypatch: pytest.MonkeyPatch) -> None:
    """A user's pip installs a wheel's requirements with it, so its import may use them
    (torch-linear-assignment 0.1.0 imports scipy): the smoke test once installed the wheel
    alone and failed with `No module named 'scipy'` a wheel that works where it is installed.
    A requirement the toolchain holds is met by the toolchain's (torch with any specifier);
    one by URL, which a package's metadata could point anywhere, is not fetched."""
    monkeypatch.setenv("WHEELSMITH_INDEX_URL", served_sdist(
        tmp_path, init="import six\nimport torch\nANSWER = six.PY3\n",
        dependencies=("six>=1.16", "torch>=1", 'ninja; python_version >= "3"',
                      'wheelsmith-no-such-project; extra == "never"',
                      f"wheelsmith-by-url @ {(tmp_path / 'no-such.whl').as_uri()}")))
    made = wheelsmith("recipe", "new", "tiny-pure==0.1.0", "--recipes", "mine", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    built = wheelsmith("build", "tiny-pure", "--recipes", "mine", "--out", "out",
                       "--work-dir", "work", cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    [smoke] = [line.split("] ", 1)[1] for line in built.stderr.splitlines()
               if "] smoke: " in line]
    assert re.fullmatch(rf"smoke: import against torch {re.escape(str(toolchain.torch_version))}"
                        r", with what it requires that the toolchain lacks: six==[0-9.]+; left "
                        r"out of what it requires \(an import that needs it is not made\): "
                        rf"wheelsmith-by-url @ {re.escape((tmp_path / 'no-such.whl').as_uri())} "
                        r"\(a requirement by URL is not fetched\)", smoke), smoke


@pytest.mark.toolchain
def test_the_smoke_test_installs_what_resolves_and_names_what_it_left_out_and_why(
        tmp_path: Path, toolchain: Toolchain, monkeypatch: pytest.MonkeyPatch) -> None:
    """One requirement pip cannot find no longer leaves out all of them: the others are
    installed and imported, and an import that needs the missing one is named, not made."""
    monkeypatch.setenv("WHEELSMITH_INDEX_URL", served_sdist(
        tmp_path, init="import six\nimport wheelsmith_no_such_project\n",
        dependencies=("six>=1.16", "wheelsmith-no-such-project>=1")))
    made = wheelsmith("recipe", "new", "tiny-pure==0.1.0", "--recipes", "mine", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    built = wheelsmith("build", "tiny-pure", "--recipes", "mine", "--out", "out", "--json",
                       "--work-dir", "work", cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    missing = ("wheelsmith-no-such-project>=1 (Could not find a version that satisfies the "
               "requirement wheelsmith-no-such-project>=1 (from versions: none))")
    [smoke] = [line.split("] ", 1)[1] for line in built.stderr.splitlines()
               if "] smoke: " in line]
    assert re.fullmatch(rf"smoke: import against torch {re.escape(str(toolchain.torch_version))}"
                        r", with what it requires that the toolchain lacks: six==[0-9.]+; left "
                        r"out of what it requires \(an import that needs it is not made\): "
                        + re.escape(missing), smoke), smoke
    assert json.loads(built.stdout)["run"]["smoke"] == [
        f"not imported: tiny_pure: it needs wheelsmith_no_such_project, which was left out: "
        f"{missing}"]

    # an import that fails for another reason fails the smoke test, naming what was left out
    recipe = tmp_path / "mine" / "recipes" / "tiny-pure.yaml"
    sha = re.search(r'sha256: "(\w+)"', recipe.read_text())
    assert sha is not None
    monkeypatch.setenv("WHEELSMITH_INDEX_URL", served_sdist(
        tmp_path / "other", init="import six\nimport wheelsmith_not_required\n",
        dependencies=("six>=1.16", "wheelsmith-no-such-project>=1")))
    sdist = tmp_path / "other" / "dist" / "tiny_pure-0.1.0.tar.gz"
    recipe.write_text(recipe.read_text().replace(
        sha[1], hashlib.sha256(sdist.read_bytes()).hexdigest()))
    assert failed_build(tmp_path, 10) == [
        "error: the smoke test of tiny_pure-0.1.0-py2.py3-none-any.whl failed with exit code 1: "
        "tiny_pure/__init__.py:2: ModuleNotFoundError: No module named 'wheelsmith_not_required'",
        f"hint: it may need what its runtime requirements left out: {missing}"]


@pytest.mark.toolchain
@given(names=st.lists(st.sampled_from(["torch", "ninja", "packaging", "filelock", "sympy"]),
                      min_size=1, max_size=4),
       spec=st.sampled_from(["", ">=0", "<99", "!=0.0.1"]), absent=st.lists(NAME, max_size=2))
def test_a_wheel_whose_requirements_the_toolchain_holds_needs_no_pip(
        tmp_path_factory: pytest.TempPathFactory, toolchain: Toolchain, names: list[str],
        spec: str, absent: list[str]) -> None:
    """Requirements of packages the toolchain holds, ones under an extra and ones by URL ask
    pip nothing (no index is needed): the common case costs no resolution."""
    wheel = tmp_path_factory.mktemp("w") / "tiny_pure-0.1.0-py3-none-any.whl"
    requires = [f"{name}{spec}" for name in names] + \
        [f'{name}; extra == "gpu"' for name in absent] + \
        [f"{name} @ https://example.invalid/{name}-1.0-py3-none-any.whl" for name in absent]
    metadata = "Metadata-Version: 2.1\nName: tiny-pure\nVersion: 0.1.0\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("tiny_pure-0.1.0.dist-info/METADATA", metadata)
    no_pip = dataclasses.replace(toolchain, python=Path("/nonexistent/python"))
    assert overlay.runtime_needs(wheel, no_pip) == overlay.RuntimeNeeds((), tuple(
        overlay.LeftOut(f"{name} @ https://example.invalid/{name}-1.0-py3-none-any.whl",
                        "a requirement by URL is not fetched") for name in absent))


@pytest.mark.toolchain
def test_build_requirements_pip_cannot_pin_are_not_written_and_recipe_new_says_why(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A recipe never gets a pin set pip did not resolve: recipe new says what it could not
    pin and why, writes no build.requires, and its check then fails on the missing backend."""
    monkeypatch.setenv("WHEELSMITH_INDEX_URL", served_sdist(
        tmp_path, build_requires=("hatchling", "wheelsmith-no-such-project>=1")))
    made = wheelsmith("recipe", "new", "tiny-pure==0.1.0", "--recipes", "mine", cwd=tmp_path)
    [line] = [line for line in made.stdout.splitlines()
              if line.startswith("todo: build.requires")]
    assert line.startswith(
        "todo: build.requires: not written, pip could not pin hatchling, "
        "wheelsmith-no-such-project>=1: pip's resolution of the build requirements failed"), line
    assert made.returncode == 9, made.stderr
    assert "build:" not in (tmp_path / "mine" / "recipes" / "tiny-pure.yaml").read_text()
