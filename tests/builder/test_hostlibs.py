"""The host libraries of a build (builder/hostlibs.py) against the real toolchain: the
toolchain's own NCCL is read from its wheel's RECORD and pointed at (include, library, the
variables CMake and setup.py read, the linker name -lnccl finds), required by the wheel at the
version built against; another version of it, a wheel of another CUDA, a bare name the
toolchain does not hold and a build.env that sets one of the library's variables are refused
before anything is fetched."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from wheelsmith.builder import hostlibs
from wheelsmith.errors import RecipeError, UsageError
from wheelsmith.recipes.model import Recipe, load_recipe
from wheelsmith.toolchain.env import Toolchain

pytestmark = pytest.mark.toolchain

RECIPE = """package: tiny-ext
build:
  libraries: {libraries}
{env}versions:
  - version: "0.1.0"
    source:
      pypi: tiny-ext
      sha256: "{sha}"
"""


def recipe(tmp_path: Path, libraries: list[dict[str, Any]], env: str = "") -> Recipe:
    file = tmp_path / "recipes" / "tiny-ext.yaml"
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(RECIPE.format(libraries=json.dumps(libraries), sha="0" * 64,
                                  env=f"  env: {env}\n" if env else ""))
    return load_recipe(file)


def held_nccl(toolchain: Toolchain) -> str:
    return hostlibs.held(toolchain)["nvidia-nccl-cu13"]


def test_the_toolchains_nccl_is_pointed_at_and_required(tmp_path: Path,
                                                        toolchain: Toolchain) -> None:
    version = held_nccl(toolchain)
    wanted = recipe(tmp_path, [{"wheel": "nvidia-nccl-cu13"}])
    hostlibs.check(wanted, toolchain)
    (found,) = hostlibs.provide(wanted, toolchain, tmp_path / "work", tmp_path / "cache")
    assert toolchain.site is not None
    nccl = toolchain.site / "nvidia" / "nccl"
    assert (found.origin, found.version) == (hostlibs.TOOLCHAIN, version)
    assert found.requirement() == f"nvidia-nccl-cu13>={version},=={version.split('.')[0]}.*"
    env = hostlibs.environment((found,), tmp_path / "work" / hostlibs.LINKS)
    assert {k: v for k, v in env.items() if k.startswith("NCCL_")} == {
        "NCCL_ROOT": str(nccl), "NCCL_ROOT_DIR": str(nccl), "NCCL_HOME": str(nccl),
        "NCCL_PATH": str(nccl), "NCCL_DIR": str(nccl),
        "NCCL_INCLUDE_DIR": str(nccl / "include"), "NCCL_LIB_DIR": str(nccl / "lib")}
    links = tmp_path / "work" / hostlibs.LINKS
    assert env["LIBRARY_PATH"].split(":") == [str(nccl / "lib"), str(links / "lib")]
    assert env["CMAKE_PREFIX_PATH"].split(":") == [str(nccl), str(links)]
    assert (links / "lib" / "libnccl.so").resolve() == (nccl / "lib" / "libnccl.so.2").resolve()
    assert hostlibs.include_dirs((found,)) == [nccl / "include"]


def test_another_version_of_a_library_the_toolchain_holds_is_refused(
        tmp_path: Path, toolchain: Toolchain) -> None:
    version = held_nccl(toolchain)
    other = f"{version}.1"
    wanted = recipe(tmp_path, [{"wheel": f"nvidia-nccl-cu13=={other}"}])
    with pytest.raises(UsageError) as caught:
        hostlibs.check(wanted, toolchain)
    assert (caught.value.message, caught.value.hint) == (
        f"{wanted.file}: build.libraries[0] names nvidia-nccl-cu13=={other}, and the toolchain "
        f"{toolchain.name} holds nvidia-nccl-cu13=={version}: torch loads its own at run time",
        "write wheel: nvidia-nccl-cu13 (the toolchain's copy, whichever version its profile "
        "pins)")


def test_a_wheel_of_another_cuda_is_refused(tmp_path: Path, toolchain: Toolchain) -> None:
    wanted = recipe(tmp_path, [{"wheel": "nvidia-nccl-cu12==2.27.5"}])
    with pytest.raises(UsageError) as caught:
        hostlibs.check(wanted, toolchain)
    assert caught.value.message == (
        f"{wanted.file}: build.libraries[0]: nvidia-nccl-cu12 is built for CUDA 12, and the "
        f"toolchain {toolchain.name} is CUDA {toolchain.torch_cuda}")
    for_12 = recipe(tmp_path, [{"wheel": "nvidia-nccl-cu12==2.27.5", "cuda": "12"}])
    hostlibs.check(for_12, toolchain)  # not for this toolchain: left out
    assert hostlibs.applicable(for_12, toolchain) == ()


def test_a_bare_name_the_toolchain_does_not_hold_is_refused(tmp_path: Path,
                                                            toolchain: Toolchain) -> None:
    wanted = recipe(tmp_path, [{"wheel": "nvidia-cuda-profiler-api"}])
    with pytest.raises(UsageError) as caught:
        hostlibs.check(wanted, toolchain)
    assert (caught.value.message, caught.value.hint) == (
        f"{wanted.file}: build.libraries[0] names nvidia-cuda-profiler-api alone, the "
        f"toolchain's copy, and the toolchain {toolchain.name} holds none",
        "pin the wheel to install: nvidia-cuda-profiler-api==VERSION")


@pytest.mark.parametrize("variable", ["NCCL_ROOT", "NCCL_HOME", "NCCL_INCLUDE_DIR"])
def test_a_build_env_that_sets_a_librarys_variable_is_refused(tmp_path: Path,
                                                               variable: str) -> None:
    """What build.libraries' prefixes set is wheelsmith's: the recipe is refused where it is
    read, at the line that sets it, pointing at build.libraries."""
    with pytest.raises(RecipeError) as caught:
        recipe(tmp_path, [{"wheel": "nvidia-nccl-cu13"}], env=f'{{{variable}: "/x"}}')
    [problem] = caught.value.problems
    assert (problem.line, problem.message) == (4, (
        f"{variable}: it changes where programs, libraries, headers or modules come from; a "
        "recipe's env cannot set it"))
    assert "a library the build needs goes in build.libraries (wheelsmith sets its *_ROOT, " \
        "*_HOME and *_DIR)" in str(problem.hint)
