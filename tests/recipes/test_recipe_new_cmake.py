"""`recipe new` on CMake builds (issue 33 items 3): scikit-build-core (llama-cpp-python), a
setup.py that drives CMake (natten), CMakeLists with CUDA. It finds the package's own arch knob
(NATTEN_CUDA_ARCH, not TORCH_CUDA_ARCH_LIST), its build-directory variable, the CMake options a
build machine needs (the CUDA switch on, the native one off), does not call a CMake-built CUDA
library host_only, and writes a CUDA package that links no torch as `kind: cuda`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import wheelsmith
from wheelsmith.recipes import fetch, repos
from wheelsmith.recipes.model import load_recipe
from wheelsmith.recipes.patch import apply_all
from wheelsmith.scaffold.cmake import cmake_lines, read_cmake
from wheelsmith.toolchain.env import Toolchain

NATTEN = "8417236b74db079b2d23899ec8f77514fb2dc73d4bbd6b346a45b6967fc05ffb"
LLAMA = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"


@pytest.fixture
def no_repo_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(repos.ENV, raising=False)


def test_natten_is_read_as_the_setup_py_driven_cmake_build_it_is(
        tmp_path: Path, no_repo_variable: None) -> None:
    made = wheelsmith("recipe", "new", "natten==0.21.7", "--recipes", "mine", "--no-configure",
                      cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert made.stdout.splitlines() == [
        f"info: sdist: natten-0.21.7.tar.gz sha256 {NATTEN}",
        "fixed: setup.py:55: arch variable NATTEN_CUDA_ARCH: the package's own (not "
        "TORCH_CUDA_ARCH_LIST); arch.env, format torch (12.0)",
        "fixed: setup.py:66: NATTEN_BUILD_DIR names its CMake build directory (else a temporary "
        "one): build.build_dir_env, so a build resumes from build/cmake",
        "info: cmake: setup.py:396 runs cmake; its project compiles CUDA "
        "(csrc/CMakeLists.txt:4): built with Ninja through the pre-build check",
        "info: setup.py:521: extension natten.libnatten (Extension): built by CMake, whose "
        "project compiles CUDA (csrc/CMakeLists.txt:4)",
        "info: sources: CMake's (the check reads what its build.ninja compiles)",
        "info: csrc/include/natten/cuda/fmha/kernel_forward.h:10: it needs cuRAND (includes "
        "curand_kernel.h): the toolchain cu130-torch2.14's CUDA provides it (nvidia-curand "
        "10.4.0.35)",
        "fixed: its CMake files ask for an older C++ standard than torch's headers need: wrote "
        "0001-cxx20-for-newer-torch-headers.patch: C++20 in the CMake project, as the "
        "toolchain's torch headers need (it asks for an older standard)",
        "8 findings: 0 to do by hand (todo), 3 fixed in the recipe or its patches, "
        "5 for information",
        "wrote mine/recipes/natten.yaml",
        "wrote mine/patches/natten/0.21.7/0001-cxx20-for-newer-torch-headers.patch",
        "next: wheelsmith build natten --recipes mine --check"]
    recipe = load_recipe(tmp_path / "mine" / "recipes" / "natten.yaml")
    assert (recipe.kind, recipe.arch.env, recipe.arch.format, str(recipe.arch.default)) == (
        "extension", "NATTEN_CUDA_ARCH", "torch", "12.0")
    assert (recipe.build_dir_env, recipe.host_only) == ("NATTEN_BUILD_DIR", ())
    tree = fetch.fetch(recipe.latest.source, tmp_path / "src", tmp_path / "cache")
    apply_all(recipe.latest.patches, tree)
    lists = (tree / "csrc" / "CMakeLists.txt").read_text()
    assert 'set(CXX_STD "20" CACHE STRING "C++ standard")' in lists
    assert "-std=c++17" not in lists


def test_llama_cpp_python_is_a_cuda_package_without_torch(
        tmp_path: Path, no_repo_variable: None) -> None:
    made = wheelsmith("recipe", "new", "llama-cpp-python==0.3.36", "--recipes", "mine",
                      "--no-configure", "--json", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    data = json.loads(made.stdout)
    assert data["findings"] == [
        f"sdist: llama_cpp_python-0.3.36.tar.gz sha256 {LLAMA}",
        "cmake: scikit_build_core.build (pyproject.toml's build-backend); its project compiles "
        "CUDA (vendor/llama.cpp/ggml/src/ggml-cuda/CMakeLists.txt:72): built with Ninja "
        "through the pre-build check",
        "vendor/llama.cpp/ggml/CMakeLists.txt:123: option GGML_NATIVE optimises for the build "
        "machine (its CPU; its GPU, which it lacks): build.env CMAKE_ARGS -DGGML_NATIVE=OFF",
        "vendor/llama.cpp/ggml/CMakeLists.txt:199: option GGML_CUDA turns CUDA on (off by "
        "default): build.env CMAKE_ARGS -DGGML_CUDA=ON",
        "links no torch: kind: cuda (the CUDA-only channel, no torch pin)",
        "smoke: its shared libraries are loaded (its Python side needs runtime dependencies "
        "the toolchain does not hold)",
        "sources: CMake's (the check reads what its build.ninja compiles)",
        "vendor/llama.cpp/ggml/src/ggml-cuda/vendors/cuda.h:10: it needs NCCL (includes "
        "nccl.h under #ifdef GGML_USE_NCCL): the build goes on without it (a condition or an "
        "optional find_package): no entry; where the recipe turns it on, add build.libraries "
        "for NCCL",
        "vendor/llama.cpp/ggml/src/ggml-cuda/vendors/cuda.h:5: it needs cuBLAS (includes "
        "cublas_v2.h): the toolchain cu130's CUDA provides it (nvidia-cublas "
        "13.1.1.3)",
        "patches: none of the standard ones is needed"]
    assert data["libraries"] == []  # NCCL only where GGML_USE_NCCL is defined
    assert data["kind"] == "cuda"
    recipe = load_recipe(tmp_path / "mine" / "recipes" / "llama-cpp-python.yaml")
    assert (recipe.kind, recipe.arch.env, recipe.arch.format, recipe.env) == (
        "cuda", "CMAKE_ARGS", "cmake", (("CMAKE_ARGS", "-DGGML_NATIVE=OFF -DGGML_CUDA=ON"),))
    assert recipe.smoke_imports == ()  # its shared libraries are loaded instead


# --- the CMake side, on generated projects ----------------------------------------------------

PREFIX = st.from_regex(r"[A-Z][A-Z0-9]{0,6}", fullmatch=True)
OFF = st.sampled_from(["OFF", "off", "FALSE", ""])
ON = st.sampled_from(["ON", "on", "TRUE", "${X_NATIVE_DEFAULT}"])


def scikit_build_project(tmp_path: Path, prefix: str, cuda_default: str, native_default: str,
                         torch: bool) -> Path:
    tree = tmp_path / "p"
    (tree / "src" / "k").mkdir(parents=True)
    (tree / "pyproject.toml").write_text('[build-system]\nrequires = ["scikit-build-core"]\n'
                                         'build-backend = "scikit_build_core.build"\n')
    (tree / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.21)\nproject(p LANGUAGES CXX)\n"
        f'option({prefix}_NATIVE "optimise for this machine" {native_default})\n'
        f'option({prefix}_CUDA    "use CUDA" {cuda_default})\n'
        f'option({prefix}_CUDA_FA "flash attention kernels" ON)\n'
        + ("find_package(Torch REQUIRED)\n" if torch else "") + "add_subdirectory(src/k)\n")
    (tree / "src" / "k" / "CMakeLists.txt").write_text(
        f"if ({prefix}_CUDA)\n  enable_language(CUDA)\n  add_library(k SHARED k.cu)\nendif()\n")
    (tree / "src" / "k" / "k.cu").write_text("__global__ void k() {}\n")
    return tree


@given(prefix=PREFIX, cuda_default=OFF, native_default=ON, torch=st.booleans())
def test_the_cuda_switch_is_turned_on_and_the_native_one_off(
        tmp_path_factory: pytest.TempPathFactory, prefix: str, cuda_default: str,
        native_default: str, torch: bool) -> None:
    tree = scikit_build_project(tmp_path_factory.mktemp("cmake"), prefix, cuda_default,
                                native_default, torch)
    side = read_cmake(tree)
    assert side is not None
    assert side.how == "scikit_build_core.build (pyproject.toml's build-backend)"
    assert side.passes_args
    assert side.cuda_at == "src/k/CMakeLists.txt:2"
    assert side.switches == ((f"{prefix}_NATIVE", "OFF", "CMakeLists.txt:3"),
                             (f"{prefix}_CUDA", "ON", "CMakeLists.txt:4"))
    assert side.cmake_args() == f"-D{prefix}_NATIVE=OFF -D{prefix}_CUDA=ON"
    assert side.links_torch is torch


def test_a_setup_py_that_runs_no_cmake_is_not_read_as_one(tmp_path: Path) -> None:
    (tmp_path / "setup.py").write_text('import subprocess\nsubprocess.run(["make", "cmake"])\n')
    (tmp_path / "CMakeLists.txt").write_text("project(p LANGUAGES CXX CUDA)\n")
    assert read_cmake(tmp_path) is None
    (tmp_path / "setup.py").write_text('import subprocess\nsubprocess.check_call(\n'
                                       '    ["cmake", "--build", "b"])\n')
    side = read_cmake(tmp_path)
    assert side is not None
    assert (side.how, side.passes_args, side.switches) == ("setup.py:3 runs cmake", False, ())


DOWNLOADS = st.sampled_from(["FetchContent_Declare", "ExternalProject_Add",
                             "fetchcontent_declare", "EXTERNALPROJECT_ADD"])
ORIGINS = st.sampled_from([("URL", "https://example.invalid/eigen-3.4.0.tar.bz2"),
                           ("GIT_REPOSITORY", "https://example.invalid/fmt.git"),
                           ("URL", '"https://example.invalid/a b.zip"')])


@given(calls=st.lists(st.tuples(DOWNLOADS, ORIGINS, st.booleans()), min_size=1, max_size=3),
       dirname=st.sampled_from(["", "csrc/", "cmake/", "cmake/external_projects/"]),
       skbuild=st.booleans())
def test_a_dependency_cmake_downloads_is_a_carry_needed_naming_its_line_and_entry(
        tmp_path_factory: pytest.TempPathFactory, calls: list[tuple[str, tuple[str, str], bool]],
        dirname: str, skbuild: bool) -> None:
    """torch-kdtree's ExternalProject_Add(eigen URL ...): build machines are offline, so
    each download CMake would make is named with its file:line; a FetchContent whose source
    is already there (SOURCE_DIR alone) is not one."""
    tree = tmp_path_factory.mktemp("dl")
    if skbuild:  # CMAKE_ARGS reaches CMake
        (tree / "pyproject.toml").write_text('[build-system]\nbuild-backend = '
                                             '"scikit_build_core.build"\n')
    else:
        (tree / "setup.py").write_text('import subprocess\n'
                                       'subprocess.check_call(["cmake", "."])\n')
    text, expected = "project(p LANGUAGES CXX CUDA)\n", []
    name = "deps.cmake" if dirname.startswith("cmake/") else "CMakeLists.txt"
    for i, (call, (key, origin), split) in enumerate(calls):
        sep = "\n  " if split else " "
        expected.append((f"{dirname}{name}:{text.count(chr(10)) + 1}", f"{call}(dep{i})",
                         origin.strip('"')))
        text += f"{call}( dep{i}{sep}{key} {origin}{sep}SOURCE_DIR x)\n"
    text += "FetchContent_Declare(local SOURCE_DIR ${CMAKE_SOURCE_DIR}/third/local)\n"
    (tree / dirname / name).parent.mkdir(parents=True, exist_ok=True)
    (tree / dirname / name).write_text(text)
    if dirname:
        (tree / "CMakeLists.txt").write_text("project(top LANGUAGES CXX)\n")
    side = read_cmake(tree)
    assert side is not None
    assert [(at, call, origin.split()[0]) for at, call, origin in side.downloads] == [
        (at, call, origin.split()[0]) for at, call, origin in expected]
    said = [line for line in cmake_lines(side) if ": carry needed: " in line]
    assert said == [f"{at}: carry needed: {call} downloads {origin} while CMake runs: build "
                    "machines are offline and a build must be the same every time; give the "
                    f"version a `carry` entry (into: third_party/{call[-5:-1]}, its source "
                    "pinned: url and sha256, or git and commit" + (
                        f", cmake: FETCHCONTENT_SOURCE_DIR_{call[-5:-1].upper()})" + (
                            "" if skbuild else "; setup.py must pass CMAKE_ARGS on to CMake "
                            "(vllm's does; else a patch makes it)")
                        if call.lower().startswith("fetchcontent") else
                        f", env: a variable) and a patch that makes {call} take it as its "
                        "SOURCE_DIR") for at, call, origin in side.downloads]


# --- for real: the check compiles the sample; llama-cpp-python in the CUDA-only channel -------


@pytest.mark.slow  # a real CMake sdist's configure (25 s); tiny-cmake's in make test
@pytest.mark.toolchain
@pytest.mark.build
def test_natten_configures_with_libnattens_cuda_objects_targeting_exactly_sm_120(
        tmp_path: Path, no_repo_variable: None, toolchain: Toolchain) -> None:
    """recipe new's check (CMake configured and generated, then libnatten's cheapest host and
    CUDA object compiled), then `build --configure-only --arch 12.0`: CMake's generate step and
    no compile."""
    made = wheelsmith("recipe", "new", "natten==0.21.7", "--recipes", "mine", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    checked = next(line for line in made.stdout.splitlines()
                   if line.startswith("info: check: "))
    assert checked.startswith("info: check: build.ninja targets libnatten: SASS sm_120, compiled "
                              "natten.cpp.o and "), checked
    built = wheelsmith("build", "natten", "--recipes", "mine", "--configure-only", "--arch",
                       "12.0", "--json", "--work-dir", "work", "--out", "out", cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    [configured] = json.loads(built.stdout)["configured"]
    assert (configured["extension"], configured["sass"], configured["ptx"]) == (
        "libnatten", ["sm_120"], [])
    assert configured["cuda_units"] > 10
    log = Path(json.loads(built.stdout)["log"]).read_text()
    assert "Building CUDA object" not in log


@pytest.mark.slow  # the CUDA-only toolchain and llama.cpp's configure: minutes
@pytest.mark.toolchain
@pytest.mark.build
def test_llama_cpp_python_is_checked_in_the_cuda_only_channel(
        tmp_path: Path, no_repo_variable: None, toolchain: Toolchain) -> None:
    """Its CMake turns 12.0 into 12.0a (Blackwell's FP4 instructions): the check finds that,
    writes arch.default 12.0a, and compiles ggml-cuda's sample into exactly sm_120a; the CPU
    libraries beside it are host_only."""
    made = wheelsmith("recipe", "new", "llama-cpp-python==0.3.36", "--recipes", "mine",
                      cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    lines = made.stdout.splitlines()
    assert "fixed: check: the package builds the arch-specific variant of the default arch " \
           'itself: arch.default ["12.0a"]' in lines
    checked = next(line for line in lines if line.startswith("info: check: build.ninja"))
    assert checked.startswith("info: check: build.ninja targets ggml-cuda: SASS sm_120a, compiled ")
    recipe = load_recipe(tmp_path / "mine" / "recipes" / "llama-cpp-python.yaml")
    assert str(recipe.arch.default) == "12.0a"
    assert "*/libllama.so*" in recipe.host_only


@pytest.mark.slow
@pytest.mark.toolchain
def test_llama_cpp_python_builds_a_verified_wheel_with_no_torch_pin(
        tmp_path: Path, no_repo_variable: None, toolchain: Toolchain) -> None:
    made = wheelsmith("recipe", "new", "llama-cpp-python==0.3.36", "--recipes", "mine",
                      cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    built = wheelsmith("build", "llama-cpp-python", "--recipes", "mine", "--json",
                       "--work-dir", "work", "--out", "out", cwd=tmp_path)
    assert built.returncode == 0, built.stderr[-4000:]
    data = json.loads(built.stdout)
    wheel = Path(data["wheel"])
    assert wheel.name.startswith("llama_cpp_python-0.3.36+cu.13.0.sm.120a-")
    assert data["provenance"]["toolchain"]["channel"] == "cu130"
    assert [c["sass"] for c in data["provenance"]["device_code"] if c["sass"]] == [["sm_120a"]]
    verified = wheelsmith("verify", str(wheel), cwd=tmp_path)
    assert verified.returncode == 0, verified.stderr


@given(guard=st.sampled_from([("", True), ("OPT_ON", True), ("OPT_OFF", False),
                              ("NEVER_DECLARED", False), ("SET_ON", True), ("X_CUDA", True)]),
       sibling=st.booleans(), branch=st.sampled_from(["if", "else", "elseif"]),
       nested=st.booleans())
def test_a_download_the_cuda_build_never_reaches_is_no_finding(
        tmp_path_factory: pytest.TempPathFactory, guard: tuple[str, bool], sibling: bool,
        branch: str, nested: bool) -> None:
    """llama.cpp fetches CCCL only `if (GGML_CUDA_CUB_3DOT2)`, which nothing turns on, and
    ZenDNN in the ggml-zendnn backend beside ggml-cuda: neither is reached by its CUDA build.
    Under an option on by default, one set ON, or the CUDA switch wheelsmith turns on, it is;
    in the else() or elseif() of such a test (vllm's cutlass, fetched unless
    VLLM_CUTLASS_SRC_DIR is given) it is reached where the test is not."""
    name, reached = guard
    if name and branch != "if":
        reached = not reached
    tree = tmp_path_factory.mktemp("g")
    (tree / "setup.py").write_text('import subprocess\nsubprocess.check_call(["cmake", "."])\n')
    (tree / "CMakeLists.txt").write_text(
        'option(OPT_ON "a" ON)\noption(OPT_OFF "b" OFF)\noption(X_CUDA "c" OFF)\n'
        "set(SET_ON ON)\nadd_subdirectory(src/k)\n")
    (tree / "src" / "k").mkdir(parents=True)
    (tree / "src" / "k" / "CMakeLists.txt").write_text("enable_language(CUDA)\n")
    fetch = "FetchContent_Declare(dep URL https://example.invalid/dep.zip)\n"
    if nested:  # an if() block before it, closed, and one around it that is entered
        fetch = "if(OPT_OFF)\nelse()\nendif()\nif(OPT_ON)\n" + fetch + "endif()\n"
    body = {"if": f"if ({name})\n  {fetch}endif()\n",
            "else": f"if ({name})\n  set(A 1)\nelse()\n  {fetch}endif()\n",
            "elseif": f"if ({name})\n  set(A 1)\nelseif(DEFINED ENV{{X}})\n  {fetch}"
                      "else()\n  set(B 1)\nendif()\n"}[branch] if name else fetch
    where = tree / "src" / ("other" if sibling else "k") / "deps.cmake"
    where.parent.mkdir(parents=True, exist_ok=True)
    where.write_text(body)
    side = read_cmake(tree)
    assert side is not None
    assert bool(side.downloads) == (reached and not sibling), side.downloads
