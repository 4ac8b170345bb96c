"""`wheelsmith recipe new` on real sdists from the index pip uses: one that holds its sources
(causal-conv1d 1.7.0, which the project already pins), one that does not
(fast-hadamard-transform 1.1.0, no csrc/); its findings, the recipe it writes, and bad input in
one line each (issue 13 item 4)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import REPO, wheelsmith
from wheelsmith import scaffold
from wheelsmith.recipes import fetch, repos
from wheelsmith.recipes.model import load_recipe
from wheelsmith.toolchain.env import Toolchain

ARCH_PATCH = ("patch needed: honour-torch-cuda-arch-list: setup.py passes its own -gencode list "
              "and ignores TORCH_CUDA_ARCH_LIST (start from "
              "patches/mamba-ssm/2.3.1/0001-honour-torch-cuda-arch-list.patch)")
NVCC_PATCH = ("patch needed: clear-error-without-nvcc: setup.py sets bare_metal_version only "
              "when it finds nvcc and uses it anyway (NameError without nvcc) (start from "
              "patches/mamba-ssm/2.3.1/0002-clear-error-without-nvcc.patch)")
DOWNLOAD_PATCH = ("patch needed: never-download-prebuilt-wheel: setup.py downloads a prebuilt "
                  "wheel unless forced to build (start from "
                  "patches/mamba-ssm/2.3.1/0003-never-download-prebuilt-wheel.patch)")
GENCODE = "hard-coded -gencode family: 75, 80, 87, 90, 100, 103, 110, 120, 121"


@pytest.fixture
def no_repo_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(repos.ENV, raising=False)


def test_a_complete_sdist_gives_the_recipe_the_project_ships(tmp_path: Path,
                                                             no_repo_variable: None) -> None:
    result = wheelsmith("recipe", "new", "causal-conv1d==1.7.0", "--recipes", "mine",
                        "--no-configure", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "sdist: causal_conv1d-1.7.0.tar.gz sha256 "
        "3202758494eaa7b597ce1c282dfa188889506bfcb92cad3c407d26736bfcd32b",
        "force-build variable: CAUSAL_CONV1D_FORCE_BUILD (set to TRUE in build.env)",
        GENCODE,
        "sources: the sdist holds all 4 the extensions compile",
        ARCH_PATCH, NVCC_PATCH, DOWNLOAD_PATCH,
        "wrote mine/recipes/causal-conv1d.yaml",
        "next: wheelsmith build causal-conv1d --recipes mine --configure-only"]
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
        "sdist: fast_hadamard_transform-1.1.0.tar.gz sha256 "
        "7c03daf825dc74c7200605a5b758f2d5a3bc47ef3b817bf02e97b24076a83906",
        "force-build variable: FAST_HADAMARD_TRANSFORM_FORCE_BUILD (set to TRUE in build.env)",
        GENCODE,
        "the sdist lacks the sources its extensions compile: csrc/fast_hadamard_transform.cpp, "
        "csrc/fast_hadamard_transform_cuda.cu; build from the repository instead:",
        "  source:",
        "    git: https://github.com/Dao-AILab/fast-hadamard-transform",
        "    commit: COMMIT  # the full 40-digit commit of the v1.1.0 tag",
        "    tag: v1.1.0",
        ARCH_PATCH, NVCC_PATCH, DOWNLOAD_PATCH,
        "wrote mine/recipes/fast-hadamard-transform.yaml",
        "next: wheelsmith build fast-hadamard-transform --recipes mine --configure-only"]
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
    assert result.stderr.splitlines() == [
        f"error: {tmp_path}/mine/recipes/causal-conv1d.yaml exists already",
        "hint: add version 1.7.0 to it by hand, or remove it first"]
    assert (tmp_path / "mine" / "recipes" / "causal-conv1d.yaml").read_text() == "mine\n"


def test_a_version_without_an_sdist_lists_the_ones_there(tmp_path: Path,
                                                         no_repo_variable: None) -> None:
    result = wheelsmith("recipe", "new", "fast-hadamard-transform==9.9", "--recipes", "mine",
                        cwd=tmp_path)
    assert result.returncode == 4
    lines = result.stderr.splitlines()
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
    assert result.stderr.splitlines() == [
        f"error: {fetch.index_url()} has no project 'no-such-project-wheelsmith-13'",
        "hint: check the name (the index's own spelling), or the index pip uses "
        "(`pip config list`)"]


@pytest.mark.toolchain
def test_the_configure_only_check_names_missing_sources_and_the_ignored_arch_list(
        tmp_path: Path, no_repo_variable: None, toolchain: Toolchain) -> None:
    """With the toolchain here the check is cheap (setup.py up to build.ninja), so it runs: the
    sdist without csrc/ stops at the source check, the complete one at the arch check."""
    lacking = wheelsmith("recipe", "new", "fast-hadamard-transform==1.1.0", "--recipes", "mine",
                         cwd=tmp_path)
    assert lacking.returncode == 0, lacking.stderr
    line = lacking.stdout.splitlines()[-3]
    assert line.startswith("configure-only check: source check: /"), lacking.stdout
    assert line.endswith("/build.ninja compiles 2 file(s) the source tree does not hold: "
                         f"{Path(line.split()[4]).parents[2]}/csrc/fast_hadamard_transform.cpp, "
                         f"{Path(line.split()[4]).parents[2]}/csrc/fast_hadamard_transform_cuda"
                         ".cu; stopping before compiling"), line
    complete = wheelsmith("recipe", "new", "causal-conv1d==1.7.0", "--recipes", "mine",
                          cwd=tmp_path)
    line = complete.stdout.splitlines()[-3]
    assert line.startswith("configure-only check: pre-build check: /"), complete.stdout
    assert line.endswith("/build.ninja compiles SASS sm_100, sm_103, sm_110, sm_120, sm_121, "
                         "sm_75, sm_80, sm_87, sm_90 and PTX -, but SASS sm_120 and PTX - were "
                         "requested; stopping before compiling"), line


def test_a_package_s_own_arch_variable_becomes_the_recipe_s_arch_knob(tmp_path: Path) -> None:
    """flash-attn's shape: its own FLASH_ATTN_CUDA_ARCHS picks from a -gencode family, so no
    arch patch is needed and the recipe bridges to it in numbers."""
    (tmp_path / "csrc").mkdir()
    (tmp_path / "csrc" / "demo.cu").write_text("")
    (tmp_path / "setup.py").write_text(
        "import os\n"
        "from torch.utils.cpp_extension import CUDAExtension\n"
        "def cuda_archs():\n"
        '    return os.getenv("DEMO_CUDA_ARCHS", "80;90").split(";")\n'
        "cc_flag = []\n"
        'if "80" in cuda_archs():\n'
        '    cc_flag += ["-gencode", "arch=compute_80,code=sm_80"]\n'
        'if "90" in cuda_archs():\n'
        '    cc_flag += ["-gencode", "arch=compute_90a,code=sm_90a"]\n'
        'ext = CUDAExtension(name="demo_cuda", sources=[os.path.join("csrc", "demo.cu")])\n')
    findings = scaffold.analyse(tmp_path)
    assert (findings.arch_knob, findings.gencode, findings.sources, findings.missing,
            findings.patches) == ("DEMO_CUDA_ARCHS", ("80", "90a"), ("csrc/demo.cu",), (), ())
    sdist = scaffold.Sdist("demo", "1.0", "demo-1.0.tar.gz", "0" * 64)
    text = scaffold.render(sdist, scaffold.Metadata("", None, ()), findings)
    assert text.split("package: demo\n")[1].split("versions:")[0] == (
        'arch:\n  env: DEMO_CUDA_ARCHS\n  format: numbers\n  default: ["9.0a"]\n'
        '  supported: ["8.0", "9.0a"]\nsmoke:\n  import: [demo_cuda]\n')
