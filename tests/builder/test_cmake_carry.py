"""Carried sources in a real CMake build (vllm's shape: FetchContent of a dependency that an
offline build cannot download, a directory named in a variable of the package's own, and a
submodule the sdist lacks): each fetched and pinned from the recipe (an archive over HTTP, a
git commit, a local directory), placed in the tree, named to the build, and compiled into a
verified wheel; without them the build stops at the download it cannot make."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.builder.test_build_tiny import error_lines
from tests.builder.test_cmake_build import cmake_variant, served_variant
from tests.conftest import Served, header_source, header_tarball, wheelsmith
from tests.recipes.test_fetch import git
from wheelsmith.files import sha256_file
from wheelsmith.recipes.model import load_recipe
from wheelsmith.recipes.sources import UrlSource
from wheelsmith.toolchain.env import Toolchain

pytestmark = [pytest.mark.toolchain, pytest.mark.build]

# the CMake of a package that downloads one dependency, reads another from a variable of its
# own, and includes a third from a submodule's directory
FETCHES = """include(FetchContent)
FetchContent_Declare(dep URL https://example.invalid/dep-2.0.tar.gz)
FetchContent_MakeAvailable(dep)
if(NOT DEFINED ENV{TINY_GEN_DIR})
  message(FATAL_ERROR "TINY_GEN_DIR is not set")
endif()
add_library("""
INCLUDES = ("target_include_directories(tinycmake PRIVATE ${dep_SOURCE_DIR}/include "
            "$ENV{TINY_GEN_DIR}/include ${CMAKE_SOURCE_DIR}/../third_party/sub/include)\n")
USES = """#include "dep.h"
#include "gen.h"
#include "sub.h"
static_assert(DEP_ANSWER + GEN_ANSWER + SUB_ANSWER == 6, "the carried headers");
"""


@pytest.fixture
def carrying(project: Path, http_dir: Served, tmp_path: Path) -> Path:
    """The package, and its recipe carrying all three: returns the recipe file."""
    source = cmake_variant(project, "tiny-carry", ("add_library(", FETCHES))
    lists = source / "csrc" / "CMakeLists.txt"
    lists.write_text(lists.read_text() + INCLUDES)
    host = source / "csrc" / "version.cpp"
    host.write_text(USES + host.read_text())
    setup = source / "setup.py"  # CMAKE_ARGS reaches cmake, as vllm's and scikit-build's do
    setup.write_text(setup.read_text().replace(
        'f"-DTINY_ARCHS={archs}"]', 'f"-DTINY_ARCHS={archs}", '
        '*__import__("shlex").split(os.environ.get("CMAKE_ARGS", ""))]'))
    header_tarball(http_dir.root, "dep", 1)
    gen = header_source(tmp_path / "gen", "gen", 2)
    git("init", "-q", cwd=gen)
    git("add", ".", cwd=gen)
    git("commit", "-qm", "gen", cwd=gen)
    sub = header_source(tmp_path / "sub", "sub", 3)
    recipe = project / "recipes" / "tiny-carry.yaml"
    recipe.write_text(recipe.read_text() + f"""    carry:
      - into: third_party/dep
        source:
          url: {http_dir.url}/dep-2.0.tar.gz
          sha256: {sha256_file(http_dir.root / "dep-2.0.tar.gz")}
        cmake: FETCHCONTENT_SOURCE_DIR_DEP
      - into: third_party/gen
        source:
          git: {gen}
          commit: {git("rev-parse", "HEAD", cwd=gen)}
        env: TINY_GEN_DIR
      - into: third_party/sub
        source:
          path: {sub}
""")
    return recipe


def test_carried_sources_are_built_into_a_verified_wheel_and_named_in_its_provenance(
        project: Path, toolchain: Toolchain, carrying: Path, http_dir: Served) -> None:
    result = wheelsmith("build", "tiny-carry", "--arch", "12.0", "--json", cwd=project)
    assert result.returncode == 0, result.stderr[-3000:]
    data = json.loads(result.stdout)
    assert "/dep-2.0.tar.gz" in http_dir.requests
    stages = [line for line in result.stderr.splitlines() if "] fetch: " in line]
    assert [line.split("] fetch: ")[1] for line in stages] == [
        "tiny-carry 0.1.0 (a local directory)", "into third_party/dep (an archive URL)",
        "into third_party/gen (a git repository)", "into third_party/sub (a local directory)"]
    carried = data["provenance"]["carried"]
    assert [(c["into"], sorted(c["source"])) for c in carried] == [
        ("third_party/dep", ["sha256", "url"]), ("third_party/gen", ["commit", "git"]),
        ("third_party/sub", ["path"])]
    assert data["provenance"]["device_code"][0]["sass"] == ["sm_120"]
    verified = wheelsmith("verify", data["wheel"], cwd=project)
    assert verified.returncode == 0, verified.stderr


@pytest.mark.slow  # CMake retries a download that cannot connect for about 90 s
def test_without_the_carry_the_build_stops_at_the_download_it_cannot_make(
        project: Path, toolchain: Toolchain, carrying: Path) -> None:
    carrying.write_text(carrying.read_text().split("    carry:\n")[0])
    result = wheelsmith("build", "tiny-carry", "--arch", "12.0", "--configure-only",
                        cwd=project)
    assert result.returncode == 9, result.stderr[-3000:]
    error, *rest = error_lines(result.stderr)
    assert error.startswith(
        "error: the build of tiny-carry 0.1.0 failed with exit code 1; the compiler's first "
        "error: dep-subbuild/dep-populate-prefix/src/dep-populate-stamp/download-dep-populate"
        ".cmake:163: error: Each download failed! error: downloading "
        "'https://example.invalid/dep-2.0.tar.gz' failed"), error
    hint = next(line for line in rest if line.startswith("hint: "))
    assert hint.endswith(
        "; make the recipe carry the source: a `carry` entry in its version (docs/recipes.md) "
        "fetches and pins it, places it in the tree and names it to the build (cmake: "
        "FETCHCONTENT_SOURCE_DIR_<NAME>, or env: the package's variable); `wheelsmith recipe "
        "new` names each download it finds ('carry needed')"), hint


def test_recipe_new_pins_what_cmake_would_download_and_its_check_configures_offline(
        project: Path, toolchain: Toolchain, tmp_path: Path, http_dir: Served,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An sdist whose CMake downloads a dependency over HTTP (FetchContent, no hash stated):
    recipe new downloads it once, writes the version's carry entry pinned by its sha256, and
    the check's offline build configures and compiles with it."""
    tarball = header_tarball(http_dir.root, "dep", 6)
    url = f"{http_dir.url}/{tarball.name}"

    def downloads(tree: Path) -> None:
        lists = tree / "csrc" / "CMakeLists.txt"  # its arch list from CUDAARCHS
        lists.write_text("".join(line for line in lists.read_text().splitlines(keepends=True)
                                 if "CUDA_ARCHITECTURES" not in line))
        lists.write_text(lists.read_text().replace("add_library(", (
            f"include(FetchContent)\nFetchContent_Declare(dep URL {url})\n"
            "FetchContent_MakeAvailable(dep)\nadd_library(")) + (
            "target_include_directories(tinycmake PRIVATE ${dep_SOURCE_DIR}/include)\n"))
        host = tree / "csrc" / "version.cpp"
        host.write_text('#include "dep.h"\nstatic_assert(DEP_ANSWER == 6, "the pinned dep");\n'
                        + host.read_text())
        setup = tree / "setup.py"  # CMAKE_ARGS reaches cmake, as vllm's does
        setup.write_text(setup.read_text().replace(
            'f"-DTINY_ARCHS={archs}"]', 'f"-DTINY_ARCHS={archs}", '
            '*__import__("shlex").split(os.environ.get("CMAKE_ARGS", ""))]'))

    monkeypatch.setenv("WHEELSMITH_INDEX_URL", served_variant(tmp_path, "tiny-fetches",
                                                              downloads))
    made = wheelsmith("recipe", "new", "tiny-fetches==0.1.0", "--recipes", "mine", cwd=project)
    assert made.returncode == 0, made.stdout + made.stderr[-3000:]
    digest = sha256_file(tarball)
    assert (f"fixed: csrc/CMakeLists.txt:4: FetchContent_Declare(dep) downloads {url} while "
            f"CMake runs: carry: into third_party/dep, pinned by sha256 {digest}, cmake: "
            "FETCHCONTENT_SOURCE_DIR_DEP (the offline build finds it there)") in \
        made.stdout.splitlines()
    release = load_recipe(project / "mine" / "recipes" / "tiny-fetches.yaml").releases[0]
    assert [(str(c.into), c.source, c.cmake) for c in release.carried] == [
        ("third_party/dep", UrlSource(url=url, sha256=digest), "FETCHCONTENT_SOURCE_DIR_DEP")]
    assert http_dir.requests == [f"/{tarball.name}"]  # once: the check found it cached
