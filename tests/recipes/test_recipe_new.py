"""`wheelsmith recipe new` on real sdists from the index pip uses: one that holds its sources
(causal-conv1d 1.7.0, which the project already pins), one that does not
(fast-hadamard-transform 1.1.0, no csrc/); its findings, the recipe it writes, and bad input in
one line each (issue 13 item 4)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import REPO, wheelsmith
from wheelsmith.recipes import repos, simple
from wheelsmith.recipes.model import load_recipe
from wheelsmith.toolchain.env import Toolchain

ARCH_PATCH = ("hard-coded -gencode list: wrote 0001-honour-torch-cuda-arch-list.patch: keep the "
              "hard-coded -gencode list only when TORCH_CUDA_ARCH_LIST is unset, so torch emits "
              "exactly the requested archs")
NVCC_PATCH = ("patch needed: clear-error-without-nvcc: setup.py sets bare_metal_version only "
              "when it finds nvcc and uses it anyway (NameError without nvcc) (start from "
              "patches/mamba-ssm/2.3.1/0002-clear-error-without-nvcc.patch)")
DOWNLOAD_PATCH = ("patch needed: never-download-prebuilt-wheel: setup.py downloads a prebuilt "
                  "wheel unless forced to build (start from "
                  "patches/mamba-ssm/2.3.1/0003-never-download-prebuilt-wheel.patch)")
GENCODE = "hard-coded -gencode family: 75, 80, 87, 90, 100, 103, 110, 120, 121"


def said(stderr: str) -> list[str]:
    """What stderr says besides the stage lines (`==> [ 0s] fetch: ...`)."""
    return [line for line in stderr.splitlines() if not line.startswith("==> ")]


@pytest.fixture
def no_repo_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(repos.ENV, raising=False)


def test_a_complete_sdist_gives_the_recipe_the_project_ships(tmp_path: Path,
                                                             no_repo_variable: None) -> None:
    result = wheelsmith("recipe", "new", "causal-conv1d==1.7.0", "--recipes", "mine",
                        "--no-configure", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "info: sdist: causal_conv1d-1.7.0.tar.gz sha256 "
        "3202758494eaa7b597ce1c282dfa188889506bfcb92cad3c407d26736bfcd32b",
        'fixed: setup.py:43: CAUSAL_CONV1D_FORCE_BUILD == "TRUE" builds from source instead of '
        'fetching a prebuilt wheel: build.env CAUSAL_CONV1D_FORCE_BUILD: "TRUE"',
        f"info: setup.py:180: {GENCODE}",
        "info: setup.py:243: extension causal_conv1d_cuda (CUDAExtension): CUDA",
        "info: sources: the sdist holds all 4 the extensions compile",
        f"fixed: setup.py:180: {ARCH_PATCH}",
        f"todo: setup.py:75: {NVCC_PATCH}", f"todo: setup.py:330: {DOWNLOAD_PATCH}",
        "8 findings: 2 to do by hand (todo), 2 fixed in the recipe or its patches, "
        "4 for information",
        "wrote mine/recipes/causal-conv1d.yaml",
        "wrote mine/patches/causal-conv1d/1.7.0/0001-honour-torch-cuda-arch-list.patch",
        "next: wheelsmith build causal-conv1d --recipes mine --check"]
    written = load_recipe(tmp_path / "mine" / "recipes" / "causal-conv1d.yaml")
    shipped = load_recipe(REPO / "recipes" / "causal-conv1d.yaml")
    assert written.release("1.7.0").source == shipped.release("1.7.0").source
    assert (written.env, written.smoke_imports, written.arch.env, written.homepage) == (
        shipped.env, shipped.smoke_imports, shipped.arch.env, shipped.homepage)
    assert len(shipped.release("1.7.0").patches) == 3  # the three the findings name
    checked = wheelsmith("check-recipes", "--recipes", "mine", cwd=tmp_path)
    assert checked.stdout == "ok: 6 recipe(s) valid\n", checked.stderr


def test_an_sdist_without_its_sources_is_named_and_the_git_form_shown(
        tmp_path: Path, no_repo_variable: None) -> None:
    result = wheelsmith("recipe", "new", "fast-hadamard-transform==1.1.0", "--recipes",
                        str(tmp_path / "mine"), "--no-configure", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "info: sdist: fast_hadamard_transform-1.1.0.tar.gz sha256 "
        "7c03daf825dc74c7200605a5b758f2d5a3bc47ef3b817bf02e97b24076a83906",
        'fixed: setup.py:40: FAST_HADAMARD_TRANSFORM_FORCE_BUILD == "TRUE" builds from source '
        'instead of fetching a prebuilt wheel: build.env FAST_HADAMARD_TRANSFORM_FORCE_BUILD: '
        '"TRUE"',
        f"info: setup.py:107: {GENCODE}",
        "info: setup.py:136: extension fast_hadamard_transform_cuda (CUDAExtension): CUDA",
        "todo: the sdist lacks what its extensions compile: csrc/fast_hadamard_transform.cpp, "
        "csrc/fast_hadamard_transform_cuda.cu; build from the repository instead:",
        "  source:",
        "    git: https://github.com/Dao-AILab/fast-hadamard-transform",
        "    commit: COMMIT  # the full 40-digit commit of the v1.1.0 tag",
        "    tag: v1.1.0",
        f"fixed: setup.py:107: {ARCH_PATCH}",
        f"todo: setup.py:69: {NVCC_PATCH}", f"todo: setup.py:218: {DOWNLOAD_PATCH}",
        "8 findings: 3 to do by hand (todo), 2 fixed in the recipe or its patches, "
        "3 for information",
        "wrote mine/recipes/fast-hadamard-transform.yaml",
        "wrote mine/patches/fast-hadamard-transform/1.1.0/0001-honour-torch-cuda-arch-list.patch",
        "next: wheelsmith build fast-hadamard-transform --recipes mine --check"]
    text = (tmp_path / "mine" / "recipes" / "fast-hadamard-transform.yaml").read_text()
    assert "#     git: https://github.com/Dao-AILab/fast-hadamard-transform\n" in text
    recipe = load_recipe(tmp_path / "mine" / "recipes" / "fast-hadamard-transform.yaml")
    assert recipe.env == (("FAST_HADAMARD_TRANSFORM_FORCE_BUILD", "TRUE"),)
    assert recipe.smoke_imports == ("fast_hadamard_transform", "fast_hadamard_transform_cuda")


def test_without_a_repository_to_write_into_it_says_how_to_name_one(
        tmp_path: Path, no_repo_variable: None) -> None:
    result = wheelsmith("recipe", "new", "causal-conv1d", cwd=tmp_path)
    assert result.returncode == 4
    assert result.stderr.splitlines() == [
        "error: say which recipe repository to write into: --recipes DIR",
        "hint: or set WHEELSMITH_RECIPES; the recipes wheelsmith ships are not written to"]


def test_an_existing_recipe_is_never_replaced(tmp_path: Path, no_repo_variable: None) -> None:
    (tmp_path / "mine" / "recipes").mkdir(parents=True)
    (tmp_path / "mine" / "recipes" / "causal-conv1d.yaml").write_text("mine\n")
    result = wheelsmith("recipe", "new", "causal-conv1d==1.7.0", "--recipes", "mine",
                        cwd=tmp_path)
    assert result.returncode == 4
    assert said(result.stderr) == [
        f"error: {tmp_path}/mine/recipes/causal-conv1d.yaml exists already",
        "hint: add version 1.7.0 to it by hand, or remove it first"]
    assert (tmp_path / "mine" / "recipes" / "causal-conv1d.yaml").read_text() == "mine\n"


def test_a_version_without_an_sdist_lists_the_ones_there(tmp_path: Path,
                                                         no_repo_variable: None) -> None:
    result = wheelsmith("recipe", "new", "fast-hadamard-transform==9.9", "--recipes", "mine",
                        cwd=tmp_path)
    assert result.returncode == 4
    lines = said(result.stderr)
    assert lines[0].startswith("error: ")
    assert lines[0].endswith("/fast-hadamard-transform/ has no sdist of "
                             "fast-hadamard-transform 9.9")
    assert lines[1] == ("hint: versions with an sdist there: 1.0.0.post1, 1.0.1, 1.0.3.post3, "
                        "1.0.4.post1, 1.1.0")
    assert not (tmp_path / "mine").exists()



def test_a_project_the_index_does_not_have_is_one_line(tmp_path: Path,
                                                       no_repo_variable: None) -> None:
    result = wheelsmith("recipe", "new", "no-such-project-wheelsmith-13", "--recipes", "mine",
                        cwd=tmp_path)
    assert result.returncode == 4
    assert said(result.stderr) == [
        f"error: {simple.index_url()} has no project 'no-such-project-wheelsmith-13'",
        "hint: check the name (the index's own spelling), or the index pip uses "
        "(`pip config list`)"]


@pytest.mark.toolchain
def test_a_check_that_stops_at_missing_sources_exits_5_and_says_what_it_wrote(
        tmp_path: Path, no_repo_variable: None, toolchain: Toolchain) -> None:
    """With the toolchain here the check runs: the sdist without csrc/ stops at the source
    check (nothing is compiled), which is `recipe new`'s error; the recipe it wrote stays."""
    lacking = wheelsmith("recipe", "new", "fast-hadamard-transform==1.1.0", "--recipes", "mine",
                         cwd=tmp_path)
    assert lacking.returncode == 5, lacking.stderr
    assert lacking.stdout.splitlines()[-2:] == [
        "wrote mine/recipes/fast-hadamard-transform.yaml",
        "wrote mine/patches/fast-hadamard-transform/1.1.0/0001-honour-torch-cuda-arch-list.patch"]
    error = next(line for line in lacking.stderr.splitlines() if line.startswith("error: "))
    hint = next(line for line in lacking.stderr.splitlines() if line.startswith("hint: "))
    assert re.fullmatch(  # paths in the source tree, relative to it
        r"error: the check of the new recipe failed: source check: "
        r"build/temp\.linux-x86_64-cpython-3\d+/build\.ninja compiles 2 file\(s\) the source "
        r"tree does not hold: csrc/fast_hadamard_transform\.cpp, "
        r"csrc/fast_hadamard_transform_cuda\.cu; stopping before compiling", error), error
    assert hint.endswith(
        "the recipe and its patches stay written (mine/recipes/fast-hadamard-transform.yaml, "
        "mine/patches/fast-hadamard-transform/1.1.0/0001-honour-torch-cuda-arch-list.patch): "
        "fix them, then `wheelsmith build fast-hadamard-transform --recipes mine --check`")
    text = (tmp_path / "mine" / "recipes" / "fast-hadamard-transform.yaml").read_text()
    assert "# check: source check: build/temp.linux-x86_64-cpython-3" in text


@pytest.mark.slow
@pytest.mark.toolchain
def test_the_check_of_a_complete_sdist_compiles_a_sample_into_exactly_the_default_arch(
        tmp_path: Path, no_repo_variable: None, toolchain: Toolchain) -> None:
    """causal-conv1d 1.7.0 with the arch patch recipe new wrote: one host and one CUDA object
    compiled (make test's guard compiles the shipped recipe's the same way)."""
    complete = wheelsmith("recipe", "new", "causal-conv1d==1.7.0", "--recipes", "mine",
                          cwd=tmp_path)
    assert complete.returncode == 0, complete.stderr
    assert complete.stdout.splitlines()[-5:] == [
        "info: check: build.ninja targets causal_conv1d_cuda: SASS sm_120, compiled "
        "causal_conv1d.o and causal_conv1d_update.o",
        "9 findings: 2 to do by hand (todo), 2 fixed in the recipe or its patches, "
        "5 for information",
        "wrote mine/recipes/causal-conv1d.yaml",
        "wrote mine/patches/causal-conv1d/1.7.0/0001-honour-torch-cuda-arch-list.patch",
        "next: wheelsmith build causal-conv1d --recipes mine"]


@pytest.mark.slow
@pytest.mark.toolchain
def test_a_cuda_extension_of_globbed_cpp_sources_is_found_by_the_check_and_made_host_only(
        tmp_path: Path, no_repo_variable: None, toolchain: Toolchain) -> None:
    """torch-scatter 2.1.2 globs its sources at run time, so setup.py's reading calls
    `_version_cuda` (a CUDAExtension of csrc/version.cpp) CUDA; its build.ninja, read by the
    check (configure, then a host and a CUDA object of each extension), has only C++ rules,
    and the recipe gets its glob — the one the device-code gate names for
    `torch_scatter/_version_cuda.so`."""
    made = wheelsmith("recipe", "new", "torch-scatter==2.1.2", "--recipes", "mine", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    checked, host = made.stdout.splitlines()[-6:-4]
    objects = r"compiled \S+(?: and \S+)+"  # every host object and the cheapest CUDA one
    assert re.fullmatch(rf"info: check: build.ninja targets _segment_coo_cuda: SASS sm_120, "
                        rf"{objects}; _segment_csr_cuda: SASS sm_120, {objects}; "
                        rf"_scatter_cuda: SASS sm_120, {objects}", checked), checked
    assert host == ("fixed: check: _version_cuda compiles no CUDA (build.ninja has only C++ "
                    'rules): build.host_only "torch_scatter/_version_cuda*.so"')
    recipe = load_recipe(tmp_path / "mine" / "recipes" / "torch-scatter.yaml")
    assert recipe.host_only == ("torch_scatter/_*_cpu*.so", "torch_scatter/_version_cuda*.so")
