"""CMake builds through the same machinery as torch's (issue 33 item 3): a setup.py that drives
CMake (tests/fixtures/tiny-cmake, natten's shape: its own arch variable in CMake's form, its
own build-directory variable) gets Ninja, the pre-build check reads CMake's build.ninja,
`--configure-only` stops after CMake's generate step, a package that ignores the arch list is
stopped before compiling, and the build gives a verified wheel, resumed from its build tree."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, header_tarball, sdist_index, wheelsmith
from wheelsmith.recipes.model import load_recipe
from wheelsmith.scaffold import patches
from wheelsmith.toolchain.env import Toolchain

pytestmark = pytest.mark.toolchain


def cmake_variant(project: Path, name: str = "tiny-cmake",
                  edit: tuple[str, str] | None = None) -> Path:
    """A copy of the tiny CMake package (its CMakeLists.txt optionally edited) and its recipe
    in `project`'s recipes/."""
    source = project.parent / "sources" / name
    shutil.copytree(FIXTURES / "tiny-cmake", source)
    if edit is not None:
        lists = source / "csrc" / "CMakeLists.txt"
        assert edit[0] in lists.read_text()
        lists.write_text(lists.read_text().replace(*edit))
    setup = source / "setup.py"  # the wheel is the release its recipe names
    setup.write_text(setup.read_text().replace('name="tiny-cmake"', f'name="{name}"'))
    recipe = (FIXTURES / "tiny-cmake.recipe.yaml").read_text().replace("PATH", str(source))
    (project / "recipes" / f"{name}.yaml").write_text(recipe.replace(
        "package: tiny-cmake", f"package: {name}"))
    return source


@pytest.mark.parametrize(("archs", "sass", "ptx"), [("12.0", ["sm_120"], []),
                                                     ("9.0;12.0+PTX", ["sm_120", "sm_90"],
                                                      ["sm_120"]),
                                                     ("12.0f+PTX", ["sm_120f"], ["sm_120f"])])
def test_configure_only_stops_after_cmakes_generate_step(
        project: Path, toolchain: Toolchain, archs: str, sass: list[str], ptx: list[str]) -> None:
    """CMake configures and generates its build.ninja with Ninja, the recipe's `format: cmake`
    list (`90-real;120`) reaches CUDA_ARCHITECTURES, the check reads the targets there and the
    build stops: nothing of the package is compiled, nothing is kept but build.ninja."""
    cmake_variant(project)
    result = wheelsmith("build", "tiny-cmake", "--arch", archs, "--configure-only", "--json",
                        cwd=project)
    assert result.returncode == 0, result.stderr[-3000:]
    data = json.loads(result.stdout)
    assert data["wheel"] is None
    [configured] = data["configured"]
    assert (configured["extension"], configured["sass"], configured["ptx"]) == (
        "tinycmake", sass, ptx)
    assert (configured["cuda_units"], configured["cxx_units"]) == (1, 1)
    build_ninja = Path(configured["build_ninja"])
    assert build_ninja.parent.name == "cmake"
    assert build_ninja.parent.parent.name == "build"
    left = sorted(p.name for p in build_ninja.parent.rglob("*") if p.is_file())
    assert left == ["build.ninja"]
    # the host compiles get the prefix maps (CMake reads CXXFLAGS, not CPPFLAGS)
    host = build_ninja.read_text().split("version.cpp.o: CXX_COMPILER__")[1].split("\n\n")[0]
    assert "-ffile-prefix-map=" in host
    assert "=/wheelsmith/src " in host
    log = Path(data["log"]).read_text()
    assert log.index("-- Generating done") < log.index("wheelsmith configure-only: ") < \
        log.index("wheelsmith configure-only stop: ")
    assert "Building CUDA object" not in log
    assert "Building CXX object" not in log
    assert "-- Check for working CUDA compiler" in log  # CMake's own checks ran, through ninja


def test_a_package_that_ignores_the_arch_list_is_stopped_before_compiling(
        project: Path, toolchain: Toolchain) -> None:
    cmake_variant(project, "tiny-cmake-fixed", ('"${TINY_ARCHS}"', '"90-real"'))
    result = wheelsmith("build", "tiny-cmake-fixed", "--arch", "12.0", cwd=project)
    assert result.returncode == 10, result.stderr[-3000:]
    error = next(line for line in result.stderr.splitlines() if line.startswith("error: "))
    assert error == ("error: pre-build check: build/cmake/build.ninja compiles SASS sm_90 "
                     "and PTX -, but SASS sm_120 and PTX - were requested; stopping before "
                     "compiling")  # the path in the source tree, relative to it
    assert not (project / "wheelhouse").exists() or not list((project / "wheelhouse").iterdir())


def test_a_hard_coded_cuda_architectures_patched_as_recipe_new_writes_it_builds_the_list_given(
        project: Path, toolchain: Toolchain) -> None:
    """torch-kdtree's shape: the target's CUDA_ARCHITECTURES hard-coded (90-real). The patch
    `recipe new` writes (scaffold/patches.py) and the arch knob it writes for a CMake project
    that links no torch (CUDAARCHS, CMake's form) give exactly the list asked for, through
    the real CMake and nvcc: the pre-build check passes with sm_120 alone."""
    source = cmake_variant(project, "tiny-cmake-kdtree", ('"${TINY_ARCHS}"', "90-real"))
    made = patches.cmake_arch_list(source, 1, torch=False)
    assert made is not None
    place = project / "patches" / "tiny-cmake-kdtree" / "0.1.0"
    place.mkdir(parents=True)
    (place / made.file).write_text(made.text)
    recipe = project / "recipes" / "tiny-cmake-kdtree.yaml"
    digest = hashlib.sha256(made.text.encode()).hexdigest()
    recipe.write_text(recipe.read_text().replace("env: TINY_CMAKE_ARCHS", "env: CUDAARCHS")
                      + f"    patches:\n      - file: {made.file}\n        sha256: {digest}\n"
                        f"        description: {made.description}\n")
    result = wheelsmith("build", "tiny-cmake-kdtree", "--arch", "12.0", "--configure-only",
                        "--json", cwd=project)
    assert result.returncode == 0, result.stderr[-3000:]
    [configured] = json.loads(result.stdout)["configured"]
    assert (configured["sass"], configured["ptx"]) == (["sm_120"], [])


def test_what_cmake_builds_while_it_configures_is_not_taken_for_the_project(
        project: Path, toolchain: Toolchain, tmp_path: Path) -> None:
    """FetchContent (CMake < 3.30's policy: vllm's cutlass) populates a dependency by a
    sub-build that CMake runs with ninja while it configures: the check once took that
    build.ninja for the project's, stopped it, and CMake's configure failed (`Build step for
    dep failed: 87`), which `--check` then reported as nothing compiled for the GPU."""
    tarball = header_tarball(tmp_path, "dep", 41)
    fetch = ("include(FetchContent)\n"
             f"FetchContent_Declare(dep URL {tarball.as_uri()})\n"
             "FetchContent_MakeAvailable(dep)\n"
             "add_library(")
    source = cmake_variant(project, "tiny-cmake-fetch", ("add_library(", fetch))
    lists = source / "csrc" / "CMakeLists.txt"
    lists.write_text(lists.read_text() + "target_include_directories(tinycmake PRIVATE "
                                         "${dep_SOURCE_DIR}/include)\n")
    host = source / "csrc" / "version.cpp"  # the host sample: it compiles only if dep came
    host.write_text('#include "dep.h"\nstatic_assert(DEP_ANSWER == 41, "dep");\n' +
                    host.read_text())
    result = wheelsmith("build", "tiny-cmake-fetch", "--arch", "12.0", "--check", "--json",
                        cwd=project)
    assert result.returncode == 0, result.stderr[-3000:]
    [configured] = json.loads(result.stdout)["configured"]
    assert (Path(configured["build_ninja"]).parent.name, configured["sass"]) == (
        "cmake", ["sm_120"])
    assert [Path(s["source"]).name for s in configured["samples"]] == [
        "version.cpp", "add_kernel.cu"]


def test_a_cmake_error_is_named_with_its_file_and_line(project: Path, toolchain: Toolchain) -> None:
    """CMake's own error, not only 'exit code 1, read the full log': its file:line and its
    message over several lines as one."""
    cmake_variant(project, "tiny-cmake-broken", (
        "add_library(", 'message(FATAL_ERROR "this package needs\n  a newer thing")\nadd_library('))
    result = wheelsmith("build", "tiny-cmake-broken", "--arch", "12.0", "--check", cwd=project)
    assert result.returncode == 9, result.stderr[-3000:]
    error = next(line for line in result.stderr.splitlines() if line.startswith("error: "))
    assert error.endswith("; the compiler's first error: csrc/CMakeLists.txt:3: error: this "
                          "package needs a newer thing"), error


CMAKE_CAUSE = ("the build went on past this error: csrc/CMakeLists.txt:1: error: Compatibility "
               "with CMake < 3.5 has been removed from CMake. Update the VERSION argument <min> "
               "value.")


def served_variant(tmp_path: Path, name: str, edit: Callable[[Path], None]) -> str:
    """The tiny CMake package, `edit`ed and named `name`, as an sdist on a file:// index under
    `tmp_path`: the index's URL."""
    tree = tmp_path / "sdists" / f"{name.replace('-', '_')}-0.1.0"
    shutil.copytree(FIXTURES / "tiny-cmake", tree)
    setup = tree / "setup.py"
    setup.write_text(setup.read_text().replace('name="tiny-cmake"', f'name="{name}"'))
    edit(tree)
    (tree / "PKG-INFO").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1.0\n")
    return sdist_index(tmp_path / "served", tree, name)


def _swallow_cmake(source: Path) -> None:
    """The tiny CMake package with a policy version CMake 4 refuses and a setup.py that goes on
    when CMake fails, as some do."""
    lists = source / "csrc" / "CMakeLists.txt"
    lists.write_text(lists.read_text().replace("cmake_minimum_required(VERSION 3.20)",
                                               "cmake_minimum_required(VERSION 3.1)"))
    setup = source / "setup.py"
    setup.write_text(setup.read_text().replace(
        'subprocess.check_call(["cmake", str(HERE / "csrc"), f"-DTINY_ARCHS={archs}"], cwd=build)',
        'if subprocess.call(["cmake", str(HERE / "csrc"), f"-DTINY_ARCHS={archs}"], cwd=build):\n'
        '            return  # its failure swallowed'))


@pytest.mark.parametrize("mode", ["--configure-only", "--check", "a whole build"])
def test_a_cmake_error_the_setup_py_went_on_past_is_the_cause_named(
        project: Path, toolchain: Toolchain, mode: str) -> None:
    """A setup.py that runs CMake and ignores its failure (CMake 4 refusing an old
    cmake_minimum_required) builds nothing for the GPU: --configure-only and --check both exit
    9 and a whole build's wheel is refused (exit 10), each with CMake's error at its file:line
    as the cause and the remedy for it."""
    _swallow_cmake(cmake_variant(project, "tiny-cmake-swallows"))
    options = () if mode == "a whole build" else (mode,)
    result = wheelsmith("build", "tiny-cmake-swallows", "--arch", "12.0", *options, cwd=project)
    error = next(line for line in result.stderr.splitlines() if line.startswith("error: "))
    cause = CMAKE_CAUSE
    if mode == "a whole build":
        assert result.returncode == 10, result.stderr[-3000:]
        assert error.startswith(
            "error: tiny_cmake_swallows-0.1.0-cp311-cp311-linux_x86_64.whl does not contain "
            "exactly the "
            f"device code for 12.0; {cause}"), error
    else:
        assert result.returncode == 9, result.stderr[-3000:]
        said = "the check" if mode == "--check" else "configuring"
        assert error.startswith(
            f"error: {said} of tiny-cmake-swallows 0.1.0 found nothing to compile for the GPU: "
            f"its build generated no build.ninja with CUDA rules; {cause}"), error
    assert "set `CMAKE_POLICY_VERSION_MINIMUM: \"3.5\"` in the recipe's build.env" in \
        result.stderr


def test_recipe_new_names_the_cmake_error_a_setup_py_went_on_past(
        project: Path, toolchain: Toolchain, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """recipe new's check of an sdist whose setup.py ignores CMake's failure: the same cause,
    CMake's error at its file:line, not 'nothing to compile'. (The old policy version its
    CMakeLists.txt asks for is one the recipe lets CMake take: the error is the project's
    own.)"""
    def fails(tree: Path) -> None:
        _swallow_cmake(tree)
        lists = tree / "csrc" / "CMakeLists.txt"
        lists.write_text(lists.read_text().replace(
            "add_library(", 'message(FATAL_ERROR "this package needs a newer thing")\n'
                            "add_library("))
    monkeypatch.setenv("WHEELSMITH_INDEX_URL",
                       served_variant(tmp_path, "tiny-cmake-swallows", fails))
    result = wheelsmith("recipe", "new", "tiny-cmake-swallows==0.1.0", "--recipes", "mine",
                        cwd=project)
    assert result.returncode == 9, result.stdout + result.stderr
    error = next(line for line in result.stderr.splitlines() if line.startswith("error: "))
    assert error.startswith(
        "error: the check of the new recipe failed: the check of tiny-cmake-swallows 0.1.0 found "
        "nothing to compile for the GPU: its build generated no build.ninja with CUDA rules; "
        "the build went on past this error: csrc/CMakeLists.txt:3: error: this package needs a "
        "newer thing"), error


SCIKIT_BUILD = """[build-system]
requires = ["scikit-build-core"]
build-backend = "scikit_build_core.build"

[project]
name = "NAME"
version = "0.1.0"

[tool.scikit-build]
cmake.source-dir = "csrc"
"""


@pytest.mark.parametrize("name", ["tiny-cmake-old", "tiny-cmake-old-skbuild"])
def test_recipe_new_lets_cmake_4_configure_a_project_that_asks_for_an_old_policy_version(
        project: Path, toolchain: Toolchain, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """A project whose cmake_minimum_required asks for 3.1 (CMake 4.4 refuses anything below
    3.5), run by its setup.py or by scikit-build-core: recipe new names the call, writes
    CMAKE_POLICY_VERSION_MINIMUM into the recipe's build.env, which reaches CMake either way,
    and its real check configures and compiles the sample; the same recipe without it fails
    there, naming CMake's error."""
    def old_policy(tree: Path) -> None:  # its arch list from CUDAARCHS, as recipe new asks
        lists = tree / "csrc" / "CMakeLists.txt"
        lists.write_text("".join(line for line in lists.read_text().replace(
            "VERSION 3.20", "VERSION 3.1").splitlines(keepends=True)
            if "CUDA_ARCHITECTURES" not in line))
        if name.endswith("skbuild"):
            (tree / "setup.py").unlink()
            (tree / "pyproject.toml").write_text(SCIKIT_BUILD.replace("NAME", name))
    monkeypatch.setenv("WHEELSMITH_INDEX_URL", served_variant(tmp_path, name, old_policy))
    made = wheelsmith("recipe", "new", f"{name}==0.1.0", "--recipes", "mine", cwd=project)
    assert made.returncode == 0, made.stdout + made.stderr
    said = made.stdout.splitlines()
    assert 'fixed: csrc/CMakeLists.txt:1: cmake_minimum_required(VERSION 3.1) asks for a CMake ' \
           "policy version older than the toolchain's CMake takes (3.5): build.env " \
           'CMAKE_POLICY_VERSION_MINIMUM: "3.5"' in said
    assert "info: check: build.ninja targets tinycmake: SASS sm_120, compiled version.cpp.o and " \
           "add_kernel.cu.o" in said
    recipe = project / "mine" / "recipes" / f"{name}.yaml"
    assert dict(load_recipe(recipe).env) == {"CMAKE_POLICY_VERSION_MINIMUM": "3.5"}

    recipe.write_text(re.sub(r"  env:\n    CMAKE_POLICY_VERSION_MINIMUM: .*\n", "",
                             recipe.read_text()).replace("build:\nsmoke:", "smoke:"))
    assert load_recipe(recipe).env == ()
    result = wheelsmith("build", name, "--recipes", "mine", "--check", cwd=project)
    assert result.returncode == 9, result.stderr[-3000:]
    error = next(line for line in result.stderr.splitlines() if line.startswith("error: "))
    assert error.endswith("the compiler's first error: csrc/CMakeLists.txt:1: error: "
                          "Compatibility with CMake < 3.5 has been removed from CMake. Update the "
                          "VERSION argument <min> value. Or, use the <min>...<max> syntax to tell "
                          "CMake that the project requires at least <min> but has been updated "
                          "to work with policies introduced by <max> or earlier. Or, add "
                          "-DCMAKE_POLICY_VERSION_MINIMUM=3.5 to try configuring anyway."), error


@pytest.mark.build
def test_a_cmake_build_gives_a_verified_wheel_compiled_through_the_same_machinery(
        project: Path, toolchain: Toolchain) -> None:
    """The real build: CMake's objects compiled by ninja through the pre-build check's
    launcher (its plan line), in the fixed build directory whose ninja log gives the run
    facts' seconds per object (what a resumed build and longest-first read), and the wheel
    verified with cuobjdump: exactly sm_120."""
    cmake_variant(project)
    result = wheelsmith("build", "tiny-cmake", "--arch", "12.0", "--json", cwd=project)
    assert result.returncode == 0, result.stderr[-3000:]
    data = json.loads(result.stdout)
    wheel = Path(data["wheel"])
    assert wheel.name.startswith("tiny_cmake-0.1.0+cu.13.0.torch.2.14.sm.120-cp311-cp311-")
    assert data["provenance"]["device_code"] == [
        {"path": "tiny_cmake/libtinycmake.cpython-311-x86_64-linux-gnu.so", "sass": ["sm_120"],
         "ptx": []}]
    run = data["run"]
    assert sorted(run["build"]["object_seconds"]) == [
        "CMakeFiles/tinycmake.dir/add_kernel.cu.o", "CMakeFiles/tinycmake.dir/version.cpp.o"]
    assert [(c["extension"], c["sass"]) for c in run["prebuild_check"]] == [
        ("tinycmake", ["sm_120"])]
    assert run["smoke"][:2] == [  # the library ctypes loads has the ABI tag, but no PyInit_
        "imported tiny_cmake", "not imported: tiny_cmake/libtinycmake.cpython-311-x86_64-linux-"
        "gnu.so: no Python module (it exports no PyInit_libtinycmake)"]
    # both compiles went through the compile cache: nvcc by CMAKE_CUDA_COMPILER_LAUNCHER, c++ by
    # the launcher first on PATH
    sources = {Path(name).name for name in run["compile_cache"]["sources"]}
    assert {"add_kernel.cu", "version.cpp"} <= sources, run["compile_cache"]
    verified = wheelsmith("verify", str(wheel), cwd=project)
    assert verified.returncode == 0, verified.stderr


@pytest.mark.slow  # the CUDA-only toolchain: a second venv
@pytest.mark.build
def test_a_package_without_torch_builds_in_the_cuda_only_channel(
        project: Path, toolchain: Toolchain) -> None:
    """kind: cuda: the CUDA-only profile (cu130, no torch) builds it; the wheel is labelled
    without torch, pins no torch, goes to the channel cu130, is verified with cuobjdump, and its
    smoke test loads its shared objects; a torch profile is refused for it."""
    cmake_variant(project, "tiny-cuda")
    recipe = project / "recipes" / "tiny-cuda.yaml"
    recipe.write_text(recipe.read_text().replace("package: tiny-cuda\n",
                                                 "package: tiny-cuda\nkind: cuda\n"))
    refused = wheelsmith("build", "tiny-cuda", "--toolchain", "cu130-torch2.14", cwd=project)
    assert refused.returncode == 4
    assert refused.stderr.splitlines()[-2:] == [
        "error: the cu130-torch2.14 profile pins torch 2.14.1, but this recipe (kind: cuda) "
        "links no torch: its wheel would claim a torch it does not need",
        "hint: leave out --toolchain (the CUDA-only profile, cu130), or name another CUDA-only "
        "one"]
    result = wheelsmith("build", "tiny-cuda", "--json", cwd=project)
    assert result.returncode == 0, result.stderr[-3000:]
    data = json.loads(result.stdout)
    wheel = Path(data["wheel"])
    assert wheel.name.startswith("tiny_cuda-0.1.0+cu.13.0.sm.120-cp311-cp311-")  # its release
    provenance = data["provenance"]
    assert (provenance["toolchain"]["channel"], provenance["toolchain"]["torch"]) == (
        "cu130", None)
    with zipfile.ZipFile(wheel) as zf:
        metadata = zf.read(next(n for n in zf.namelist() if n.endswith("/METADATA"))).decode()
    assert "Requires-Dist: torch" not in metadata
    assert data["run"]["smoke"][:2] == [
        "imported tiny_cmake",
        "loaded site/tiny_cmake/libtinycmake.cpython-311-x86_64-linux-gnu.so"]
    verified = wheelsmith("verify", str(wheel), cwd=project)
    assert verified.returncode == 0, verified.stderr
