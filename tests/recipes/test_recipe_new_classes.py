"""`recipe new` on the classes of setup.py that went wrong on sdists outside its corpus (issue
33 item 2), read statically: each small setup.py has the pattern, the test asserts the exact
line printed, the patch written (applied with wheelsmith's exact patcher) or the finding left
out because its context makes it harmless. The builds these patches make possible are in
tests/recipes/test_recipe_new_check.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import REPO
from tests.recipes.test_setup_py_patterns import applied, findings, recipe_body, tree_with
from wheelsmith.scaffold import check, render
from wheelsmith.toolchain.profile import load_profile
from wheelsmith.toolchain.venv import MARKER, venv_root

CUDA_EXT = ("from torch.utils.cpp_extension import CUDAExtension\n"
            "e = CUDAExtension('demo._C', ['k.cu'])\n")


def lines(tree: Path, *, cxx20: bool = True) -> list[str]:
    return render.report_lines(findings(tree, cxx20=cxx20))[1:]


# --- -std=c++17 under a torch that needs C++20 -----------------------------------------------

STANDARDS = st.sampled_from(["c++14", "c++17", "gnu++17", "c++1z", "gnu++14", "c++11"])


@given(cxx=STANDARDS, nvcc=STANDARDS, joined=st.booleans())
def test_an_older_cxx_standard_becomes_cxx20_where_torch_needs_it_and_rocm_keeps_its_own(
        tmp_path_factory: pytest.TempPathFactory, cxx: str, nvcc: str, joined: bool) -> None:
    """flash-attn's and mamba-ssm's shape: -std in the host and nvcc flag lists (or in one
    string with other flags), and a ROCm branch with its own."""
    nvcc_flags = f'["-O3 -std={nvcc}"]' if joined else f'["-O3", "-std={nvcc}"]'
    tree = tree_with(tmp_path_factory.mktemp("std"), (
        "import os\nfrom torch.utils.cpp_extension import CUDAExtension\n"
        'IS_ROCM = os.getenv("ROCM") == "1"\n'
        "if IS_ROCM:\n"
        '    args = {"cxx": ["-std=c++17"], "nvcc": ["-std=c++17", "--offload-arch=gfx90a"]}\n'
        "else:\n"
        f'    args = {{"cxx": ["-O3", "-std={cxx}"], "nvcc": {nvcc_flags}}}\n'
        "e = CUDAExtension('demo._C', ['k.cu'], extra_compile_args=args)\n"), "k.cu")
    found = findings(tree)
    assert lines(tree)[:1] == [
        "setup.py:7: an older C++ standard than torch's headers need: wrote "
        "0001-cxx20-for-newer-torch-headers.patch: -std=c++20, as the toolchain's torch headers "
        "need (setup.py asks for an older standard)"]
    patched = applied(tree, found, tmp_path_factory.mktemp("patched")).splitlines()
    def cxx20(std: str) -> str:
        return f"{std.partition('++')[0]}++20"

    assert patched[6] == (f'    args = {{"cxx": ["-O3", "-std={cxx20(cxx)}"], '
                          f'"nvcc": {nvcc_flags.replace(nvcc, cxx20(nvcc))}}}')
    assert patched[4] == ('    args = {"cxx": ["-std=c++17"], "nvcc": ["-std=c++17", '
                          '"--offload-arch=gfx90a"]}')  # the ROCm build's own


def test_under_a_torch_that_takes_cxx17_the_standard_is_left_alone(tmp_path: Path) -> None:
    tree = tree_with(tmp_path, CUDA_EXT.replace("['k.cu'])", "['k.cu'], extra_compile_args="
                                                "{'nvcc': ['-std=c++17']})"), "k.cu")
    assert findings(tree, cxx20=False).written == ()
    assert lines(tree, cxx20=False)[-1] == "patches: none of the standard ones is needed"


def test_which_torch_needs_cxx20_is_read_from_its_headers_else_its_release(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """torch 2.14's ATen.h refuses `__cplusplus < 202002L`; 2.11-2.13's only C++17 (read in
    their venvs here). Where no venv is made, the release decides the same way."""
    profiles = {p.stem: load_profile(p) for p in sorted((REPO / "toolchains").glob("cu*.yaml"))}
    monkeypatch.setenv("WHEELSMITH_CACHE", str(tmp_path))  # no venv made: the release decides
    assert {name: check.torch_needs_cxx20(p) for name, p in profiles.items()} == {
        "cu128-torch2.10": False, "cu128-torch2.9": False, "cu130-torch2.11": False,
        "cu130-torch2.12": False, "cu130-torch2.13": False, "cu130-torch2.14": True,
        "cu132-torch2.15": True, "cu130": False}  # the CUDA-only profile has no torch
    profile = profiles["cu130-torch2.11"]
    venv = venv_root(profile, f"{sys.version_info[0]}.{sys.version_info[1]}", tmp_path)
    header = venv / "lib" / "python3.11" / "site-packages" / "torch" / "include" / "ATen" / \
        "ATen.h"
    header.parent.mkdir(parents=True)
    (venv / MARKER).write_text("{}\n")
    header.write_text("#if !defined(_MSC_VER) && __cplusplus < 201703L\n#error C++17\n#endif\n")
    assert check.torch_needs_cxx20(profile) is False
    header.write_text("#if !defined(_MSC_VER) && __cplusplus < 202002L\n#error C++20\n#endif\n")
    assert check.torch_needs_cxx20(profile) is True  # the headers say, not the release


# --- pkg_resources, which setuptools 84 no longer has ----------------------------------------

PKG_RESOURCES = '''import pkg_resources
from pkg_resources import DistributionNotFound, parse_version as pv
from setuptools import setup
V = pkg_resources.get_distribution("packaging").version
assert pv(V) >= pkg_resources.parse_version("20")
try:
    pkg_resources.get_distribution("no-such-distribution-wheelsmith")
except DistributionNotFound:
    print("ok", V)
'''


def test_pkg_resources_is_replaced_by_importlib_metadata_and_packaging(tmp_path: Path) -> None:
    tree = tree_with(tmp_path, PKG_RESOURCES + CUDA_EXT, "k.cu")
    found = findings(tree)
    assert lines(tree)[0] == (
        "setup.py:1: import pkg_resources: wrote 0001-no-pkg-resources.patch: importlib.metadata "
        "and packaging in place of pkg_resources, which the toolchain's setuptools no longer has")
    patched = applied(tree, found, tmp_path)
    assert "pkg_resources import" not in patched
    script = tmp_path / "patched.py"
    script.write_text(patched.split("from torch")[0])
    ran = subprocess.run([sys.executable, "-c", "import sys; sys.modules['pkg_resources'] = "
                          f"None; exec(open({str(script)!r}).read())"],
                         capture_output=True, text=True, check=False)
    assert ran.returncode == 0, ran.stderr  # it never imports pkg_resources
    assert ran.stdout.startswith("ok ")


def test_a_pkg_resources_name_nothing_stands_in_for_is_named_for_a_hand_written_patch(
        tmp_path: Path) -> None:
    tree = tree_with(tmp_path, "import os\nimport pkg_resources\n"
                     "pkg_resources.require('torch>=2')\n" + CUDA_EXT, "k.cu")
    assert findings(tree).written == ()
    assert lines(tree)[-1] == (
        "setup.py:2: patch needed: no-pkg-resources: setup.py imports pkg_resources, which the "
        "toolchain's setuptools no longer has, and uses more of it than importlib.metadata and "
        "packaging stand in for here")


# --- a stop where no GPU is visible -----------------------------------------------------------

@pytest.mark.parametrize(("stop", "patched_stop"), [
    ("if not torch.cuda.is_available():\n    raise RuntimeError('needs a GPU')\n",
     "if not (torch.cuda.is_available() or os.environ.get(\"FORCE_CUDA\") == \"1\"):\n"),
    ("assert torch.cuda.is_available(), 'needs a GPU'\n",
     "assert (torch.cuda.is_available() or os.environ.get(\"FORCE_CUDA\") == \"1\"), "
     "'needs a GPU'\n"),
], ids=["raise", "assert"])
def test_a_stop_without_a_gpu_honours_force_cuda(tmp_path: Path, stop: str,
                                                 patched_stop: str) -> None:
    tree = tree_with(tmp_path, "import os\nimport torch\n" + stop + CUDA_EXT, "k.cu")
    found = findings(tree)
    assert lines(tree)[0] == (
        'setup.py:3: a stop without a GPU: build.env FORCE_CUDA: "1": wrote '
        "0001-honour-force-cuda.patch: FORCE_CUDA=1 stands in for the GPU build machines lack "
        "(setup.py stops unless torch.cuda.is_available())")
    assert 'build:\n  env:\n    FORCE_CUDA: "1"\n' in recipe_body(found)
    assert patched_stop in applied(tree, found, tmp_path)


# --- setup_requires, findings in their context, what setup.py globs ---------------------------

def test_setup_requires_on_a_line_it_shares_is_dropped(tmp_path: Path) -> None:
    tree = tree_with(tmp_path, "from setuptools import setup\n" + CUDA_EXT +
                     "setup(name='demo', setup_requires=['psutil'], ext_modules=[e])\n", "k.cu")
    found = findings(tree)
    assert applied(tree, found, tmp_path).splitlines()[-1] == "setup(name='demo', ext_modules=[e])"


def test_an_import_of_psutil_inside_try_except_needs_no_patch(tmp_path: Path) -> None:
    guarded = "try:\n    import psutil\nexcept ImportError:\n    psutil = None\n"
    assert lines(tree_with(tmp_path, guarded + CUDA_EXT, "k.cu"))[-1] == (
        "patches: none of the standard ones is needed")
    bare = tree_with(tmp_path / "bare", "import psutil\n" + CUDA_EXT, "k.cu")
    assert lines(bare)[-1].startswith("setup.py:1: patch needed: no-psutil-at-build-time: ")


@pytest.mark.parametrize("branch", [
    "if IS_ROCM:\n    {download}\n",
    "if not IS_ROCM:\n    pass\nelse:\n    {download}\n",
    "if BUILD_CPU_ONLY:\n    {download}\n",
], ids=["rocm", "not-rocm-else", "cpu-only"])
def test_a_download_in_a_branch_for_another_vendor_or_no_gpu_needs_no_patch(
        tmp_path: Path, branch: str) -> None:
    download = "urllib.request.urlretrieve('https://example.invalid/ck.tar.gz', 'ck.tar.gz')"
    head = "import urllib.request\nIS_ROCM = BUILD_CPU_ONLY = False\n"
    assert lines(tree_with(tmp_path, head + branch.format(download=download) + CUDA_EXT,
                           "k.cu"))[-1] == "patches: none of the standard ones is needed"
    cuda_path = tree_with(tmp_path / "cuda", head + download + "\n" + CUDA_EXT, "k.cu")
    assert lines(cuda_path)[-1].startswith(
        "setup.py:3: patch needed: never-download-prebuilt-wheel: ")


def test_the_sources_setup_py_globs_are_counted_as_the_files_they_match(tmp_path: Path) -> None:
    tree = tree_with(tmp_path, "import glob\nfrom torch.utils.cpp_extension import "
                     "CUDAExtension\ne = CUDAExtension('demo._C', ['csrc/api.cpp'] + "
                     "sorted(glob.glob('csrc/kernels/*.cu')))\n", "csrc/api.cpp",
                     *(f"csrc/kernels/k{i}.cu" for i in range(4)))
    assert "sources: the sdist holds all 5 the extensions compile" in lines(tree)


def test_a_sources_list_built_up_in_steps_is_counted_whole(tmp_path: Path) -> None:
    """chamferdist's shape: the list is assigned, prepended to and extended with the CUDA
    file under a condition; the CppExtension of the same list stays the CPU build's."""
    tree = tree_with(tmp_path, "import os\nfrom torch.utils.cpp_extension import CppExtension, "
                     "CUDAExtension\nsources = [os.path.join('demo', 'cpu.cpp')]\n"
                     "sources = [os.path.join('demo', 'ext.cpp')] + sources\n"
                     "extension = CppExtension\nif FORCE:\n    extension = CUDAExtension\n"
                     "    sources += [os.path.join('demo', 'knn.cu')]\n"
                     "e = extension('demo._C', sources)\n",
                     "demo/cpu.cpp", "demo/ext.cpp", "demo/knn.cu")
    assert "sources: the sdist holds all 3 the extensions compile" in lines(tree)


FILLER = st.lists(st.sampled_from(["# a comment\n", "\n", "\x0c\n", "# naïve — ünïcode\n",
                                   "x = 'é' * 3  # é\n", "if False:\n    pass\n"]), max_size=6)


@given(before=FILLER, stop=st.booleans())
def test_written_edits_land_on_the_lines_ast_names_whatever_comes_before(
        tmp_path_factory: pytest.TempPathFactory, before: list[str], stop: bool) -> None:
    """ast counts lines at \\n only and columns in UTF-8 bytes; a form feed or a non-ASCII
    character before an edit must not move it (str.splitlines, str columns would): the arch
    list guards, -std=c++20, FORCE_CUDA and use_ninja=True, each where ast says."""
    tree = tree_with(tmp_path_factory.mktemp("filler"), (
        "import os\nimport torch\n" + "".join(before) +
        ("if not torch.cuda.is_available():\n    raise RuntimeError('é needs a GPU')\n"
         if stop else "") +
        "from torch.utils.cpp_extension import BuildExtension, CUDAExtension\n"
        "cc_flag = ['-é']\n" + "".join(before) + "cc_flag.append('-gencode')\n"
        "e = CUDAExtension('demo._C', ['k.cu'], extra_compile_args={'nvcc': ['-é', "
        "'-std=c++17', '-arch=sm_90']})\n" + "".join(before) +
        "b = BuildExtension.with_options(use_ninja=False)\n"), "k.cu")
    found = findings(tree)
    patched = applied(tree, found, tmp_path_factory.mktemp("patched"))
    assert "if not os.environ.get(\"TORCH_CUDA_ARCH_LIST\"): cc_flag.append('-gencode')\n" \
        in patched
    assert "e = CUDAExtension('demo._C', ['k.cu'], extra_compile_args={'nvcc': ['-é', " \
           "'-std=c++20', *([] if os.environ.get(\"TORCH_CUDA_ARCH_LIST\") else " \
           "['-arch=sm_90'])]})\n" in patched
    assert "b = BuildExtension.with_options(use_ninja=True)\n" in patched
    assert ("if not (torch.cuda.is_available() or os.environ.get(\"FORCE_CUDA\") == \"1\"):\n"
            in patched) is stop
