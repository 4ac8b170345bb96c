"""CMake 4 refuses a project whose cmake_minimum_required (or cmake_policy) asks for a policy
version older than 3.5, often in a project it vendors (an old pybind11 under third_party/):
`recipe new` names each such call in every CMake file of the sdist with its file:line, and the
recipe gets the one setting that lets CMake take it (CMAKE_POLICY_VERSION_MINIMUM, which
builder/diagnose.py names for the same error). Generated CMake files; the real configure is in
tests/builder/test_cmake_build.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.recipes.test_setup_py_patterns import SDIST, recipe_body, tree_with
from wheelsmith.builder.diagnose import SIGNATURES
from wheelsmith.recipes.envnames import protection
from wheelsmith.recipes.model import load_recipe
from wheelsmith.scaffold import render, report, setup_py
from wheelsmith.scaffold.cmake import POLICY_MINIMUM, cmake_lines, old_policies, read_cmake
from wheelsmith.scaffold.findings import Findings
from wheelsmith.scaffold.sdist import Metadata

COMMANDS = st.sampled_from(["cmake_minimum_required", "CMAKE_MINIMUM_REQUIRED",
                            "Cmake_Minimum_Required", "cmake_policy", "CMAKE_POLICY"])
VERSION = st.tuples(st.integers(2, 4), st.integers(0, 31), st.none() | st.integers(0, 12))
PLACES = st.sampled_from(["CMakeLists.txt", "csrc/CMakeLists.txt",
                          "third_party/pybind11/CMakeLists.txt", "3rdparty/x/CMakeLists.txt",
                          "tests/CMakeLists.txt", "cmake/FindThing.cmake", "extern/y/z.cmake"])
SHAPES = st.sampled_from(["{cmd}(VERSION {v})", "{cmd} (VERSION {v} FATAL_ERROR)",
                          "  {cmd}(\n  VERSION {v}\n)", "\t{cmd}( VERSION {v})",
                          "# {cmd}(VERSION {v})", "message(\"{cmd}(VERSION {v})\")"])
FILLER = st.sampled_from(["", "project(p LANGUAGES CXX)", "# a comment",
                          "set(X ON)", "cmake_policy(SET CMP0048 NEW)"])
CALL = st.tuples(COMMANDS, VERSION, st.none() | VERSION, SHAPES, st.lists(FILLER, max_size=3))


def spelled(version: tuple[int, int, int | None]) -> str:
    return ".".join(str(part) for part in version if part is not None)


def policy(version: tuple[int, int, int | None]) -> tuple[int, ...]:
    return tuple(part for part in version if part is not None)


@given(files=st.dictionaries(PLACES, st.lists(CALL, min_size=1, max_size=3), min_size=1,
                             max_size=4))
def test_each_call_that_asks_for_a_policy_version_cmake_4_refuses_is_named_at_its_line(
        tmp_path_factory: pytest.TempPathFactory,
        files: dict[str, list[tuple[str, tuple[int, int, int | None],
                                    tuple[int, int, int | None] | None, str, list[str]]]]
) -> None:
    """`VERSION min...max` sets max's policies, `VERSION min` min's (CMake's docs): a call
    whose policy version is below 3.5 is named, in any directory, third-party and tests
    too; a commented one, one inside a string and one that asks for 3.5 or later are not."""
    tree = tmp_path_factory.mktemp("policy")
    expected = []
    for place, calls in sorted(files.items()):
        text = ""
        for command, low, high, shape, filler in calls:
            text += "".join(f"{line}\n" for line in filler)
            asked = spelled(low) + (f"...{spelled(high)}" if high else "")
            line = text.count("\n") + 1
            text += shape.format(cmd=command, v=asked) + "\n"
            if not shape.startswith(("#", "message")) and policy(high or low) < (3, 5):
                expected.append((f"{place}:{line}", f"{command}(VERSION {asked})"))
        (tree / place).parent.mkdir(parents=True, exist_ok=True)
        (tree / place).write_text(text)
    assert old_policies(tree) == tuple(expected)
    assert old_policies(tree, "4.4.5") == tuple(expected)
    assert old_policies(tree, "3.31.6") == ()  # CMake 3 takes them all


def test_the_policy_minimum_is_in_the_recipe_with_the_call_that_needs_it(tmp_path: Path) -> None:
    """The recipe gets CMAKE_POLICY_VERSION_MINIMUM: "3.5" (its comment names the first call,
    and how many more), a finding line for each call; a recipe build may set it (it is not
    one of wheelsmith's protected variables), and diagnose's remedy for CMake's error names the
    same setting."""
    tree = tree_with(tmp_path, "import subprocess\nfrom setuptools import Extension, setup\n"
                               'subprocess.check_call(["cmake", "csrc"])\n'
                               'setup(name="demo", ext_modules=[Extension("demo._lib", [])])\n')
    (tree / "csrc").mkdir()
    (tree / "csrc" / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\nproject(p LANGUAGES CXX CUDA)\n"
        "add_subdirectory(../third_party/pybind11 pybind11)\n")
    (tree / "third_party" / "pybind11").mkdir(parents=True)
    (tree / "third_party" / "pybind11" / "CMakeLists.txt").write_text(
        "# CMakeLists.txt -- Build system for the pybind11 modules\n"
        "cmake_minimum_required(VERSION 2.8.12)\nif (POLICY CMP0048)\n"
        "  cmake_policy(VERSION 3.1...3.4)\nendif()\n")
    side = read_cmake(tree, "4.4.5")
    assert side is not None
    found = Findings(SDIST, Metadata("", None, ()), setup_py.read_setup(tree), (), cmake=side)
    setting = f'build.env {POLICY_MINIMUM[0]}: "{POLICY_MINIMUM[1]}"'
    assert [line for line in cmake_lines(side) if "policy" in line] == [
        "third_party/pybind11/CMakeLists.txt:2: cmake_minimum_required(VERSION 2.8.12) asks for "
        f"a CMake policy version older than the toolchain's CMake takes (3.5): {setting}",
        "third_party/pybind11/CMakeLists.txt:4: cmake_policy(VERSION 3.1...3.4) asks for a CMake "
        f"policy version older than the toolchain's CMake takes (3.5): {setting}"]
    assert all(line in report.report_lines(found) for line in cmake_lines(side))
    assert '  env:\n    CMAKE_POLICY_VERSION_MINIMUM: "3.5"  # third_party/pybind11/' \
           'CMakeLists.txt:2: cmake_minimum_required(VERSION 2.8.12) (and 1 more)\n' in \
           recipe_body(found)
    written = render.write(found, tmp_path / "repo")[0]
    assert dict(load_recipe(written).env) == {"CMAKE_POLICY_VERSION_MINIMUM": "3.5"}
    assert protection(POLICY_MINIMUM[0]) is None
    [signature] = [s for s in SIGNATURES if s.name == "cmake-policy-minimum"]
    assert f'`{POLICY_MINIMUM[0]}: "{POLICY_MINIMUM[1]}"` in the recipe\'s build.env' in \
        signature.remedy
