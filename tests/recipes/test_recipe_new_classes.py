"""`recipe new` on the classes of setup.py that went wrong on sdists outside its corpus (issue
33 item 2), read statically: each small setup.py has the pattern, the test asserts the exact
line printed, the patch written (applied with wheelsmith's exact patcher) or the finding left
out because its context makes it harmless. The builds these patches make possible are in
tests/recipes/test_recipe_new_check.py."""

from __future__ import annotations

import ast
import dataclasses
import os
import random
import re
import shutil
import subprocess
import sys
import types
from importlib import metadata
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from tests.conftest import REPO
from tests.recipes.test_setup_py_patterns import applied, findings, recipe_body, tree_with
from wheelsmith.errors import NoDeviceCodeError
from wheelsmith.recipes.patch import apply_one
from wheelsmith.scaffold import buildsystem, check, env_reads, patches, render, report, setup_py
from wheelsmith.toolchain.profile import load_profile
from wheelsmith.toolchain.venv import MARKER, venv_root

CUDA_EXT = ("from torch.utils.cpp_extension import CUDAExtension\n"
            "e = CUDAExtension('demo._C', ['k.cu'])\n")


def lines(tree: Path, *, cxx20: bool = True) -> list[str]:
    return report.report_lines(findings(tree, cxx20=cxx20))[1:]


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


@given(module=st.sampled_from(["demo/__init__.py", "demo/version.py", "demo/sub/ops.py"]),
       form=st.sampled_from([
           "from pkg_resources import get_distribution\n"
           "__version__ = get_distribution('packaging').version\n",
           "import pkg_resources\n__version__ = pkg_resources.get_distribution('packaging')"
           ".version\n",
           "from pkg_resources import get_distribution as gd, parse_version\n"
           "__version__ = str(parse_version(gd('packaging').version))\n"]))
def test_a_package_module_that_imports_pkg_resources_is_patched_to_import_without_it(
        tmp_path_factory: pytest.TempPathFactory, module: str, form: str) -> None:
    """warp-rnnt's __init__ imports pkg_resources: its wheel does not import where
    setuptools 81 or later is installed (its smoke test failed). The patch over the package's
    own modules makes it import with pkg_resources gone; tests/ keep theirs."""
    tmp_path = tmp_path_factory.mktemp("run-time")
    tree = tree_with(tmp_path, CUDA_EXT, "k.cu")
    for name, text in ((module, form), ("tests/test_demo.py", "import pkg_resources\n")):
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text(text)
    found = findings(tree)
    assert (
        "the package's modules import pkg_resources: wrote "
        "0001-no-pkg-resources-at-run-time.patch: importlib.metadata and packaging in place of "
        "pkg_resources in the package's own modules, which would not import where setuptools "
        "81 or later is installed") in lines(tree)
    applied(tree, found, tmp_path)
    patched = tmp_path / "patched"
    assert (patched / "tests/test_demo.py").read_text() == "import pkg_resources\n"
    ran = subprocess.run([sys.executable, "-c", "import sys; sys.modules['pkg_resources'] = "
                          f"None; ns = {{}}; exec(open({str(patched / module)!r}).read(), ns); "
                          "print(ns['__version__'])"], capture_output=True, text=True,
                         check=False)
    assert ran.returncode == 0, ran.stderr  # it never imports pkg_resources
    assert ran.stdout.strip() == metadata.version("packaging")


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

# where no GPU is visible, setup.py stops (a raise, an assert, an else that raises) or builds
# no CUDA (CUDAExtension only when torch.cuda.is_available()): DCNv4's shape among them
GPU_SHAPES = [
    "if not {gpu}:\n    raise RuntimeError('needs a GPU')\nbuilt = 'cuda'\n",
    "assert {gpu}, 'needs a GPU'\nbuilt = 'cuda'\n",
    "if {gpu}{also}:\n    built = 'cuda'\nelse:\n    raise NotImplementedError('no CUDA')\n",
    "built = 'cuda' if {gpu}{also} else 'cpu'\n",
    "if {gpu}{also}:\n    built = 'cuda'\nelse:\n    built = 'cpu'\n",
    "built = 'cpu'\nif {gpu}{also}:\n    built = 'cuda'\n",
    "def kind():\n    return 'cuda' if {gpu}{also} else 'cpu'\nbuilt = kind()\n",
]
GPU_CALLS = st.sampled_from([("import torch\n", "torch.cuda.is_available()"),
                             ("from torch import cuda\n", "cuda.is_available()")])
ALSO = st.sampled_from(["", " and CUDA_HOME is not None", " and os.name == 'posix'"])


def built_without_a_gpu(setup_text: str, env: dict[str, str]) -> str:
    """What setup.py's lines choose on a build machine, where torch sees no GPU (as the CPU
    torch of this machine does): `built`, or the exception's name."""
    cuda = types.ModuleType("torch.cuda")
    cuda.is_available = lambda: False  # type: ignore[attr-defined]
    torch = types.ModuleType("torch")
    torch.cuda = cuda  # type: ignore[attr-defined]
    namespace: dict[str, object] = {}
    with mock.patch.dict(sys.modules, {"torch": torch}), mock.patch.dict(os.environ, env):
        try:
            exec(compile(setup_text, "setup.py", "exec"), namespace)
        except Exception as exc:
            return type(exc).__name__
    return str(namespace["built"])


@given(shape=st.sampled_from(GPU_SHAPES), call=GPU_CALLS, also=ALSO)
def test_a_build_that_needs_a_visible_gpu_honours_force_cuda(
        tmp_path_factory: pytest.TempPathFactory, shape: str, call: tuple[str, str],
        also: str) -> None:
    """The written patch makes FORCE_CUDA=1 (set in the recipe's build.env) stand in for the
    GPU, and changes nothing without it."""
    imports, gpu = call
    setup = ("import os\n" + imports + "CUDA_HOME = '/usr/local/cuda'\n" +
             shape.format(gpu=gpu, also=also) + "if __name__ == 'setup':  # not run here\n" +
             "".join(f"    {line}\n" for line in CUDA_EXT.splitlines()))
    tree = tree_with(tmp_path_factory.mktemp("gpu"), setup, "k.cu")
    found = findings(tree)
    line = next(n for n, text in enumerate(setup.splitlines(), 1) if gpu in text)
    assert lines(tree)[0] == (
        f'setup.py:{line}: CUDA only with a GPU visible: build.env FORCE_CUDA: "1": wrote '
        "0001-honour-force-cuda.patch: FORCE_CUDA=1 stands in for the GPU build machines lack "
        "(setup.py builds CUDA only where torch.cuda.is_available())")
    assert ('build:\n  env:\n    FORCE_CUDA: "1"  # setup.py:'
            f'{line}: 0001-honour-force-cuda.patch makes it stand in for a GPU\n'
            ) in recipe_body(found)
    patched = applied(tree, found, tmp_path_factory.mktemp("patched"))
    assert built_without_a_gpu(patched, {"FORCE_CUDA": "1"}) == "cuda"
    assert built_without_a_gpu(patched, {"FORCE_CUDA": "0"}) == built_without_a_gpu(setup, {})
    assert built_without_a_gpu(setup, {"FORCE_CUDA": "1"}) != "cuda"  # the patch was needed


@pytest.mark.parametrize("setup", [
    "if torch.cuda.is_available() or os.getenv('FORCE_CUDA', '0') == '1':\n    built = 1\n",
    "kinds = ['cuda'] if torch.cuda.is_available() else ['cpu']\n"
    "if os.getenv('FORCE_CUDA', '0') == '1':\n    kinds = ['cuda']\n",
    "if os.getenv('USE_ROCM'):\n    if not torch.cuda.is_available():\n        raise "
    "RuntimeError('ROCm needs a GPU')\n",
    "if torch.backends.mps.is_available() or os.getenv('FORCE_MPS') == '1':\n    pass\n",
], ids=["joined-with-its-variable", "a-switch-of-its-own", "another-vendor", "not-cuda"])
def test_a_gpu_test_that_a_variable_already_overrides_needs_no_patch(
        tmp_path: Path, setup: str) -> None:
    tree = tree_with(tmp_path, "import os\nimport torch\n" + setup + CUDA_EXT, "k.cu")
    assert not any("honour-force-cuda" in w.file for w in findings(tree).written)


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


VENDORS = st.sampled_from(["rocm", "hip", "xpu", "npu", "mlu", "musa", "mps", "hpu", "xla"])
# how setup.py asks whether it builds for `v`: a name, a call, an attribute, a variable read
ASKED = st.sampled_from(["IS_{V}", "_is_{v}()", "torch.is_{v}_available()", "torch.version.{v}",
                         "os.getenv('FORCE_{V}', '0') == '1'", "os.environ.get('USE_{V}')"])
# where the branch for it is: its body, or the else of its negation (also after `and`)
BRANCHES = st.sampled_from([
    "if {asked}:\n{body}", "if not {asked}:\n    pass\nelse:\n{body}",
    "if x == 1:\n    pass\nelif {asked}:\n{body}",
    "if SKIP_CUDA_BUILD is False and {asked}:\n{body}",
    "if BUILD_CPU_ONLY:\n{body}"])


@given(vendor=VENDORS, asked=ASKED, branch=BRANCHES)
def test_what_another_vendors_branch_downloads_or_globs_needs_no_patch_and_is_not_missing(
        tmp_path_factory: pytest.TempPathFactory, vendor: str, asked: str, branch: str) -> None:
    """mmcv's MLU branch downloads mlu-ops and globs its sources; the CUDA build never goes
    there, so neither is a finding; the same lines outside such a branch are."""
    download = "urllib.request.urlretrieve('https://example.invalid/ops.zip', 'ops.zip')"
    glob_them = f"sources += glob.glob('./{vendor}-ops/kernels/**/*.cpp', recursive=True)"
    body = f"    {download}\n    {glob_them}\n"
    head = ("import glob\nimport os\nimport urllib.request\nimport torch\n"
            "from torch.utils.cpp_extension import CUDAExtension\nsources = ['k.cu']\n"
            "x = 0\nSKIP_CUDA_BUILD = BUILD_CPU_ONLY = False\n")
    tail = "e = CUDAExtension('demo._C', sources)\n"
    test = asked.format(v=vendor, V=vendor.upper())
    theirs = tree_with(tmp_path_factory.mktemp("v"), head + branch.format(
        asked=test, body=body) + tail, "k.cu")
    assert lines(theirs)[-2:] == ["sources: the sdist holds all 1 the extensions compile",
                                  "patches: none of the standard ones is needed"]
    ours = tree_with(tmp_path_factory.mktemp("c"), head + body.replace("    ", "") + tail,
                     "k.cu")
    assert findings(ours).setup.missing == (f"./{vendor}-ops/kernels/**/*.cpp",)
    assert lines(ours)[-1].startswith("setup.py:9: patch needed: never-download-prebuilt-wheel")


@given(vendor=VENDORS)
def test_a_branch_that_cuda_enters_too_is_the_cuda_builds(
        tmp_path_factory: pytest.TempPathFactory, vendor: str) -> None:
    """mmcv's and vllm's `is_rocm_pytorch or torch.cuda.is_available() or FORCE_CUDA`: the CUDA
    extension it makes is read."""
    tree = tree_with(tmp_path_factory.mktemp("or"), (
        f"import os\nimport torch\nIS_{vendor.upper()} = False\n"
        f"if IS_{vendor.upper()} or torch.cuda.is_available() or "
        "os.getenv('FORCE_CUDA', '0') == '1':\n"
        "    from torch.utils.cpp_extension import CUDAExtension\n"
        "    e = CUDAExtension('demo._C', ['k.cu'])\n"), "k.cu")
    assert [e.name for e in findings(tree).setup.extensions] == ["demo._C"]


SWITCH = st.tuples(st.sampled_from(["", "TLA_", "MY_PKG_"]),
                   st.permutations(["BUILD", "LEGACY", "CUDA"]).map("_".join))


@given(name=SWITCH, compare=st.sampled_from(['!= "1"', '== "1"', '== "0"', '!= "0"', "",
                                             '== "TRUE"']),
       off=st.sampled_from(["", "SKIP_", "NO_", "ONLY_", "DISABLE_"]))
def test_a_variable_that_switches_the_cuda_build_on_is_set_to_its_on_value(
        tmp_path: Path, name: tuple[str, str], compare: str, off: str) -> None:
    """torch-linear-assignment builds its CUDA extension only with TLA_BUILD_LEGACY_CUDA=1:
    a variable whose words say it builds or forces CUDA is set to the value that turns it on
    (never an off word); one that skips, drops or disables something is left alone."""
    variable = f"{name[0]}{off}{name[1]}"
    test = f'os.environ.get("{variable}") {compare}'.strip()
    tree = tree_with(tmp_path / "sw", f"import os\nif {test}:\n    pass\n" + CUDA_EXT, "k.cu")
    env = {v: value for v, value, _ in findings(tree).setup.env}
    if off:
        assert variable not in env
    else:
        assert env[variable] == ("TRUE" if "TRUE" in compare else "1")


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


# --- a glob that matches nothing ----------------------------------------------------------------

GLOBBED = st.lists(st.tuples(st.sampled_from(["src", "src/cpu", "csrc/ops", "kernels"]),
                             st.sampled_from(["*.cpp", "*.cu"]), st.booleans()),
                   min_size=1, max_size=4, unique_by=lambda g: g[:2])


@given(globbed=GLOBBED, literal_cpp=st.booleans(), empty_dirs=st.booleans())
def test_a_glob_that_matches_nothing_is_missing_only_where_nothing_of_its_kind_is_there(
        tmp_path_factory: pytest.TempPathFactory, globbed: list[tuple[str, str, bool]],
        literal_cpp: bool, empty_dirs: bool) -> None:
    """DCNv4 globs src/*.cpp, src/cpu/*.cpp and src/cuda/*.cu, and ships no src/cpu: a glob
    is how setup.py gathers what may be absent. Only where no host source (or no device
    source) is there at all does a glob that matches nothing mean the sdist lacks it."""
    files = [f"{d}/a{i}{suffix[1:]}" for i, (d, suffix, there) in enumerate(globbed) if there]
    if literal_cpp:
        files.append("main.cpp")
    tree = tree_with(tmp_path_factory.mktemp("g"), (
        "import glob\nfrom torch.utils.cpp_extension import CUDAExtension\n"
        f"sources = {['main.cpp'] if literal_cpp else []}\n"
        + "".join(f"sources += glob.glob('{d}/{suffix}')\n" for d, suffix, _ in globbed)
        + "e = CUDAExtension('demo._C', sources)\n"), *files)
    if empty_dirs:
        for directory, _, _ in globbed:
            (tree / directory).mkdir(parents=True, exist_ok=True)
    host_there = literal_cpp or any(there for _, s, there in globbed if s == "*.cpp")
    device_there = any(there for _, s, there in globbed if s == "*.cu")
    lacking = tuple(f"{d}/{s}" for d, s, there in globbed if not there and not (
        host_there if s == "*.cpp" else device_there))
    assert findings(tree).setup.missing == lacking


def test_dcnv4s_absent_cpu_directory_is_not_what_the_sdist_lacks(tmp_path: Path) -> None:
    tree = tree_with(tmp_path, (
        "import glob, os\nfrom torch.utils.cpp_extension import CUDAExtension\n"
        "extensions_dir = 'src'\n"
        "main_file = glob.glob(os.path.join(extensions_dir, '*.cpp'))\n"
        "source_cpu = glob.glob(os.path.join(extensions_dir, 'cpu', '*.cpp'))\n"
        "source_cuda = glob.glob(os.path.join(extensions_dir, 'cuda', '*.cu'))\n"
        "sources = main_file + source_cpu\nsources += source_cuda\n"
        "e = CUDAExtension('DCNv4.ext', sources)\n"), "src/vision.cpp", "src/cuda/dcnv4_cuda.cu")
    assert findings(tree).setup.missing == ()
    assert "sources: the sdist holds all 2 the extensions compile" in lines(tree)


# --- a CMake project's hard-coded CUDA_ARCHITECTURES -------------------------------------------

ARCH_VALUES = st.lists(st.sampled_from(["50-real", "50-virtual", "70", "80-real", "90a",
                                        "native", "all-major"]), min_size=1, max_size=3)
HARD_CODED = st.sampled_from([
    "set_property(TARGET {t} PROPERTY CUDA_ARCHITECTURES {v})",
    "set_property( TARGET {t} APPEND PROPERTY CUDA_ARCHITECTURES {v} )",
    'set_target_properties({t} PROPERTIES CUDA_ARCHITECTURES "{q}")',
    "set_target_properties({t} PROPERTIES POSITION_INDEPENDENT_CODE ON CUDA_ARCHITECTURES {one}"
    " CUDA_SEPARABLE_COMPILATION ON)",
    "set(CMAKE_CUDA_ARCHITECTURES {v})", "  set(CMAKE_CUDA_ARCHITECTURES \"{q}\")"])
HONOURED = st.sampled_from([
    "set_property(TARGET {t} PROPERTY CUDA_ARCHITECTURES ${{MY_ARCHS}})",
    'set_target_properties({t} PROPERTIES CUDA_ARCHITECTURES "$ENV{{ARCHS}}")',
    "set(CMAKE_CUDA_ARCHITECTURES ${{ARCHS}})"])


@given(hard=st.lists(st.tuples(HARD_CODED, ARCH_VALUES), min_size=1, max_size=3),
       kept=st.lists(HONOURED, max_size=2), torch=st.booleans(),
       where=st.sampled_from(["CMakeLists.txt", "csrc/CMakeLists.txt", "cmake/cuda.cmake"]))
def test_a_hard_coded_cmake_arch_list_takes_the_builds_and_one_that_reads_a_variable_stays(
        tmp_path_factory: pytest.TempPathFactory, hard: list[tuple[str, list[str]]],
        kept: list[str], torch: bool, where: str) -> None:
    """torch-kdtree sets its targets' CUDA_ARCHITECTURES to 50-real 50-virtual: whatever
    form a hard-coded list takes, the patch makes it the build's (OFF where torch's CMake
    config passes TORCH_CUDA_ARCH_LIST's flags), and a list that reads a variable already
    honours it and is left alone. Applied with wheelsmith's own patcher."""
    lines = [form.format(t=f"t{i}", v=" ".join(values), q=";".join(values), one=values[0])
             for i, (form, values) in enumerate(hard)]
    lines += [form.format(t="k") for form in kept]
    tree = tmp_path_factory.mktemp("cm") / "pkg"
    (tree / where).parent.mkdir(parents=True, exist_ok=True)
    (tree / where).write_text("project(p LANGUAGES CXX CUDA)\n" + "\n".join(lines) + "\n")
    (tree / "third_party" / "cutlass").mkdir(parents=True)
    vendored = "set(CMAKE_CUDA_ARCHITECTURES 80)\n"
    (tree / "third_party" / "cutlass" / "CMakeLists.txt").write_text(vendored)
    made = patches.cmake_arch_list(tree, 3, torch=torch)
    assert made is not None
    assert made.file == "0003-honour-cmake-cuda-architectures.patch"
    patched = tree.parent / "patched"
    shutil.copytree(tree, patched)
    (tree.parent / made.file).write_text(made.text)
    apply_one(tree.parent / made.file, patched)
    text = (patched / where).read_text()
    value = "OFF" if torch else "${CMAKE_CUDA_ARCHITECTURES}"
    properties = re.findall(r"PROPERTY\s+CUDA_ARCHITECTURES\s+([^)\s]+)|PROPERTIES[^)]*?"
                            r"CUDA_ARCHITECTURES\s+(\"[^\"]*\"|[^\s)]+)", text)
    assert sorted({a or b for a, b in properties} - {value, '"$ENV{ARCHS}"', "${MY_ARCHS}"}) == []
    for line in text.splitlines():
        if re.match(r"\s*set\s*\(\s*CMAKE_CUDA_ARCHITECTURES\s+[^$]", line):
            before = text.splitlines()[text.splitlines().index(line) - 1]
            assert before.strip() == ("if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES AND NOT DEFINED "
                                      "ENV{CUDAARCHS})")
    assert (patched / "third_party" / "cutlass" / "CMakeLists.txt").read_text() == vendored
    assert all(form.format(t="k") in text for form in kept)
    assert " APPEND PROPERTY CUDA_ARCHITECTURES" not in text


def test_a_cmake_project_that_reads_its_arch_list_gets_no_patch(tmp_path: Path) -> None:
    tree = tmp_path / "pkg"
    tree.mkdir()
    (tree / "CMakeLists.txt").write_text(
        "project(p LANGUAGES CUDA)\nset_target_properties(t PROPERTIES CUDA_ARCHITECTURES "
        '"${TINY_ARCHS}")\n'  # llama.cpp's: a default under its test, and no arch flags
        "if (NOT DEFINED CMAKE_CUDA_ARCHITECTURES)\n  if (GGML_NATIVE)\n"
        '    set(CMAKE_CUDA_ARCHITECTURES "native")\n  endif()\nendif()\n'
        "set_target_properties(mtmd PROPERTIES CUDA_ARCHITECTURES OFF)\n")
    assert patches.cmake_arch_list(tree, 1, torch=False) is None


# --- a build requirement the toolchain lacks ---------------------------------------------------

HELD = ["setuptools", "wheel", "torch", "ninja", "packaging", "cmake", "jinja2"]
LACKED = ["setuptools-rust", "setuptools_scm", "Cython", "pybind11", "build"]
SPELLINGS = st.sampled_from(["{n}", "{n}>=1.0", "{n}[extra]>=2", "{n} ; python_version >= {q}3{q}",
                             "{n}; python_version < {q}3{q}"])


@given(listed=st.lists(st.tuples(st.sampled_from(HELD + LACKED), SPELLINGS,
                                 st.sampled_from(["none", "import", "from", "caught"])),
                       min_size=1, max_size=6, unique_by=lambda x: x[0]),
       quote=st.sampled_from(['"', "'"]), multiline=st.booleans())
def test_a_build_requirement_the_toolchain_lacks_is_named_where_setup_py_imports_it(
        tmp_path_factory: pytest.TempPathFactory, listed: list[tuple[str, str, str]],
        quote: str, multiline: bool) -> None:
    """vllm lists setuptools-rust and setuptools-scm in build-system.requires and imports
    both at setup.py's top: the build fails there, as wheelsmith builds with the toolchain's
    packages. Named with setup.py's line where it imports one the toolchain lacks, outside a
    try that catches the ImportError; a requirement it never imports (natten's `build`) or
    whose marker excludes this Python is no finding."""
    tree = tmp_path_factory.mktemp("req") / "pkg"
    tree.mkdir()
    sep = ",\n    " if multiline else ", "
    inner = "'" if quote == '"' else '"'  # a marker's quotes inside the TOML string's
    items = sep.join(f"{quote}{form.format(n=name, q=inner)}{quote}" for name, form, _ in listed)
    (tree / "pyproject.toml").write_text(f'[project]\nname = "x"\n\n[build-system]\n'
                                         f"requires = [{items}]\n"
                                         'build-backend = "setuptools.build_meta"\n')
    lines, expected = ["import os"], []
    for name, form, how in listed:
        module = name.replace("-", "_").lower()
        if how == "import":
            lines.append(f"import {module}")
        elif how == "from":
            lines.append(f"from {module}.sub import thing")
        elif how == "caught":
            lines += ["try:", f"    import {module}", "except ImportError:", "    pass"]
        if how in ("import", "from") and name in LACKED and "<" not in form:
            expected.append((module, name, len(lines)))
    (tree / "setup.py").write_text("\n".join(lines) + "\n")
    profile = load_profile(REPO / "toolchains" / "cu130-torch2.14.yaml")
    assert buildsystem.unheld_imports(tree, profile) == tuple(expected)


def test_vllms_missing_build_requirements_are_patch_needed_lines(tmp_path: Path) -> None:
    tree = tree_with(tmp_path, "import torch\nfrom setuptools_rust.build import build_rust\n"
                               "from setuptools_scm import get_version\n")
    (tree / "pyproject.toml").write_text(
        '[build-system]\nrequires = [\n  "setuptools-scm>=8.0",\n  "setuptools-rust>=1.9.0",\n'
        '  "torch == 2.14.0",\n]\n')
    profile = load_profile(REPO / "toolchains" / "cu130-torch2.14.yaml")
    found = dataclasses.replace(findings(tree), unheld=buildsystem.unheld_imports(tree, profile),
                                toolchain=profile.name)
    said = [line for line in report.report_lines(found) if "build requirement" in line]
    assert said == [
        f"setup.py:{line}: patch needed: it imports {module}, a build requirement "
        f"({requirement}) the toolchain cu130-torch2.14 does not hold: wheelsmith builds with "
        "the toolchain's packages only, never an environment it downloads; patch setup.py to "
        "build without it, else wheelsmith cannot build this package"
        for module, requirement, line in [("setuptools_rust", "setuptools-rust", 2),
                                          ("setuptools_scm", "setuptools-scm", 3)]]


OPERATORS = st.sampled_from(["==", "!=", "<", "<=", ">", ">=", "~="])


@given(name=st.sampled_from(["setuptools", "torch", "ninja", "Wheel"]),
       clauses=st.lists(st.tuples(OPERATORS, st.sampled_from(["1", "2.7", "2.14.0", "2.14.1",
                                                             "77.0.3", "81", "84.2.1", "90"])),
                        max_size=2))
def test_a_build_requirement_that_excludes_the_toolchains_version_is_named(
        tmp_path_factory: pytest.TempPathFactory, name: str,
        clauses: list[tuple[str, str]]) -> None:
    """vllm asks for setuptools<81 and torch == 2.14.0 where the toolchain holds 84.2.1 and
    2.14.1: each requirement whose specifier excludes what the toolchain holds is named with
    that version; one that admits it, or names no version, is not."""
    tree = tmp_path_factory.mktemp("ex") / "pkg"
    tree.mkdir()
    written = name + ",".join(f"{op}{version}" for op, version in clauses
                              if not (op == "~=" and "." not in version))
    (tree / "pyproject.toml").write_text(f'[build-system]\nrequires = ["{written}"]\n')
    profile = load_profile(REPO / "toolchains" / "cu130-torch2.14.yaml")
    version = buildsystem.held(profile)[name.lower()]
    admits = SpecifierSet(written[len(name):]).contains(version, prereleases=True)
    assert buildsystem.excluded(tree, profile) == (
        () if admits else ((str(Requirement(written)), version),))


# --- the variables a build reads, named when it compiles nothing for the GPU --------------

READS = st.sampled_from([
    'os.getenv("{v}")', 'os.environ.get("{v}", "0")', 'os.environ["{v}"]',
    '"{v}" in os.environ', '"{v}" not in os.environ.keys()', 'environ.get("{v}").lower()',
    'get_env_if_set("{v}", 0)', 'is_env_set("{v}")', 'helpers.env_flag("{v}")'])
SWITCH_NAME = st.from_regex(r"[A-Z][A-Z0-9]{1,6}_(OPS|ACCELERATOR|TARGET|KERNELS)", fullmatch=True)


@given(reads=st.lists(st.tuples(SWITCH_NAME, READS,
                                st.sampled_from(["setup.py", "own.py", "pkg/sub/mod.py",
                                                 "unimported.py", "pkg/tests/t.py"])),
                      min_size=1, max_size=5, unique_by=lambda r: r[0]))
def test_the_variables_the_build_reads_are_named_with_where_it_reads_them(
        tmp_path_factory: pytest.TempPathFactory, reads: list[tuple[str, str, str]]) -> None:
    """deepspeed's build compiles CUDA only with DS_ACCELERATOR=cuda (read in
    accelerator/real_accelerator.py, a module setup.py imports, as `"X" in os.environ.keys()`)
    and DS_BUILD_OPS=1 (read through its own get_env_if_set): each variable setup.py or a
    module of its own it imports reads is named with its first file:line; a module it does not
    import, tests, and what wheelsmith sets itself (MAX_JOBS) are not."""
    tree = tmp_path_factory.mktemp("switches")
    texts = {"setup.py": "import os\nimport own\nfrom pkg.sub import mod\n"
                         'jobs = os.environ.get("MAX_JOBS")\n',
             "pkg/__init__.py": "", "pkg/sub/__init__.py": "", "pkg/tests/__init__.py": ""}
    expected = []
    for name, form, where in reads:
        texts.setdefault(where, "import os\n")
        texts[where] += f"value = {form.format(v=name)}\n"
        if where not in ("unimported.py", "pkg/tests/t.py"):
            expected.append((name, f"{where}:{texts[where].count(chr(10))}"))
    for where, text in texts.items():
        (tree / where).parent.mkdir(parents=True, exist_ok=True)
        (tree / where).write_text(text)
    order = ["setup.py", "own.py", "pkg/sub/mod.py"]
    expected.sort(key=lambda e: order.index(e[1].split(":")[0]))
    assert env_reads.build_switches(tree) == tuple(expected)


@given(value=st.sampled_from(["False", "use_ninja", "bool(os.getenv('X_NINJA'))",
                              "not is_env_set('DS_NO_NINJA')", "0", "True"]),
       form=st.sampled_from(["BuildExtension.with_options(use_ninja={v})",
                             "BuildExtension.with_options(no_python_abi_suffix=True, "
                             "use_ninja={v}, x=1)"]))
def test_ninja_left_to_anything_but_true_is_turned_on(
        tmp_path_factory: pytest.TempPathFactory, value: str, form: str) -> None:
    """deepspeed passes `use_ninja=use_ninja`, off unless DS_ENABLE_NINJA is set: without
    ninja there is no build.ninja, so no pre-build check, no MAX_JOBS and no sample compile.
    Whatever setup.py gives use_ninja but True, the patch makes True; True stays as it is."""
    call = form.format(v=value)
    tree = tree_with(tmp_path_factory.mktemp("ninja"), (
        "import os\nuse_ninja = bool(os.getenv('DS_ENABLE_NINJA'))\n" + CUDA_EXT +
        f"b = {call}\n"), "k.cu")
    found = findings(tree)
    if value == "True":
        assert found.setup.no_ninja_line is None
        return
    assert found.setup.no_ninja_line == 5
    patched = applied(tree, found, tmp_path_factory.mktemp("patched"))
    assert f"b = {form.format(v='True')}\n" in patched
    assert f"setup.py:5: use_ninja={ast.unparse(ast.parse(value, mode='eval').body)}: wrote " \
           "0001-use-ninja.patch" in "\n".join(lines(tree))


# --- a package is pure only where nothing builds an extension -----------------------------

EXTENSION_BUILDS = st.sampled_from([
    "from torch.utils.cpp_extension import CUDAExtension\nx = CUDAExtension(*make())\n",
    "from torch.utils import cpp_extension\n",
    "ext = CppExtension(name, srcs)\n",
    "from pybind11.setup_helpers import Pybind11Extension\n",
    "kw = dict(ext_modules = exts)\n"])


@given(build=EXTENSION_BUILDS, where=st.sampled_from(["setup.py", "build_tools/torch.py",
                                                      "helpers.py"]))
def test_an_extension_built_through_a_module_of_its_own_is_no_pure_package(
        tmp_path_factory: pytest.TempPathFactory, build: str, where: str) -> None:
    """transformer-engine-torch's setup.py gets its CUDAExtension from build_tools/pytorch.py
    and its sdist holds no .cu file: read as pure, its check built all 33 host objects as a
    whole wheel instead of configuring it and compiling a sample."""
    tree = tmp_path_factory.mktemp("ext") / "demo-1.0"
    (tree / "build_tools").mkdir(parents=True)
    (tree / "build_tools" / "__init__.py").write_text("")
    setup = ("from setuptools import setup\nfrom build_tools.torch import make\n"
             "import helpers\nsetup(name='demo', packages=['demo'], ext_modules=[])\n")
    if where == "setup.py":
        setup += build
    else:
        (tree / where).write_text("import os\n" + build)
    (tree / "setup.py").write_text(setup)
    found = findings(tree)
    assert found.kind == "extension"
    assert found.setup.extension_build is not None
    assert found.setup.extension_build.split(":")[0] == where


def test_a_setup_py_without_extensions_is_pure(tmp_path: Path) -> None:
    tree = tree_with(tmp_path, "from setuptools import setup\nimport os\n"
                               "setup(name='demo', packages=['demo'], ext_modules=[])\n")
    assert findings(tree).kind == "pure"


@given(others=st.lists(st.from_regex(r"[A-Z]{2,5}_(RANK|FLAGS|HOME_DIR|LEVEL)", fullmatch=True),
                       min_size=8, max_size=14, unique=True),
       deciding=st.lists(st.from_regex(r"[A-Z]{2,5}_(ACCELERATOR|BUILD_OPS|TARGET_DEVICE)",
                                       fullmatch=True), min_size=1, max_size=3, unique=True))
def test_the_variables_that_may_decide_the_cuda_build_are_named_first(
        tmp_path_factory: pytest.TempPathFactory, others: list[str], deciding: list[str]) -> None:
    """deepspeed's build reads 16 variables; DS_ACCELERATOR, the one that decides, came 11th
    and was cut from the hint: those whose words may decide the CUDA build come first."""
    switches = tuple((name, f"setup.py:{i + 1}") for i, name in enumerate(others + deciding))
    found = dataclasses.replace(findings(tree_with(tmp_path_factory.mktemp("h"), "")),
                                switches=switches)
    error = render.explained(NoDeviceCodeError("nothing for the GPU", hint="why"), found)
    assert error.hint is not None
    named = error.hint.removeprefix("its build reads ").split(": set the ones")[0]
    assert named.split(", ")[:len(deciding)] == [f"{name} ({where})" for name, where in
                                                  switches[len(others):]]
    more = len(switches) - render.MAX_SWITCHES
    assert named.endswith(f" and {more} more") if more > 0 else " more" not in named
    assert error.hint.endswith("(a value such as 1 or cuda); why")


STANDARDS = st.sampled_from(["set(CMAKE_CXX_STANDARD 17)", 'set(CMAKE_CUDA_FLAGS_INIT "-std=c++17 '
                             '-allow-unsupported-compiler")', "set(CMAKE_CUDA_STANDARD 14)"])


@given(standards=st.lists(STANDARDS, min_size=1, max_size=3),
       archs=st.lists(st.tuples(HARD_CODED, ARCH_VALUES), min_size=1, max_size=3),
       order=st.randoms(use_true_random=False))
def test_patches_over_the_same_cmake_lines_each_apply_on_top_of_the_one_before(
        tmp_path_factory: pytest.TempPathFactory, standards: list[str],
        archs: list[tuple[str, list[str]]], order: random.Random) -> None:
    """cuda-float-compress 0.2.3: its C++ standard and its arch list a line apart, one patch
    for each: the second is made over what the first left, so both apply in turn."""
    lines = standards + [form.format(t=f"t{i}", v=" ".join(values), q=";".join(values),
                                     one=values[0]) for i, (form, values) in enumerate(archs)]
    order.shuffle(lines)
    tree = tmp_path_factory.mktemp("cm") / "pkg"
    tree.mkdir()
    original = "project(p LANGUAGES CXX CUDA)\n" + "\n".join(lines) + "\n"
    (tree / "CMakeLists.txt").write_text(original)
    (tree / "setup.py").write_text("from setuptools import setup\nsetup()\n")
    made = patches.written(tree, setup_py.read_setup(tree), cxx20=True, cmake_torch=True,
                           cmake_cuda=True)
    assert [w.file for w in made] == ["0001-cxx20-for-newer-torch-headers.patch",
                                      "0002-honour-cmake-cuda-architectures.patch"]
    assert (tree / "CMakeLists.txt").read_text() == original  # made over a copy of it
    patched = tree.parent / "patched"
    shutil.copytree(tree, patched)
    for patch in made:
        (tree.parent / patch.file).write_bytes(patch.data)
        apply_one(tree.parent / patch.file, patched)
    text = (patched / "CMakeLists.txt").read_text()
    assert not re.search(r"\b(?:11|14|17)\b", "\n".join(
        line for line in text.splitlines() if "STANDARD" in line or "-std=" in line))


FLAG_FORMS = st.sampled_from(["-gencode=arch=compute_{c},code=sm_{c}",
                              "-gencode arch=compute_{c},code=[compute_{c},sm_{c}]",
                              "--generate-code=arch=compute_{c},code=sm_{c}", "-arch=sm_{c}",
                              "--gpu-architecture=compute_{c}"])
OTHER_FLAGS = st.sampled_from(["--use_fast_math", "-lineinfo", "--expt-relaxed-constexpr",
                               "-Xptxas=-v"])
SETTERS = st.sampled_from(['set(CMAKE_CUDA_FLAGS "${{CMAKE_CUDA_FLAGS}} {f}")',
                           'string(APPEND CMAKE_CUDA_FLAGS " {f}")',
                           '  set(CMAKE_CUDA_FLAGS "{f}")'])


@given(lines=st.lists(st.tuples(SETTERS, st.lists(st.one_of(
    st.tuples(FLAG_FORMS, st.sampled_from(["61", "80", "90a"])), OTHER_FLAGS), min_size=1,
    max_size=5)), min_size=1, max_size=3), commented=st.booleans())
def test_target_flags_written_into_cmake_cuda_flags_are_taken_out_and_the_rest_stay(
        tmp_path_factory: pytest.TempPathFactory,
        lines: list[tuple[str, list[object]]], commented: bool) -> None:
    """bmtrain 1.0.1 appends `-gencode=arch=compute_61,code=sm_61` … to CMAKE_CUDA_FLAGS, which
    nvcc 13 refuses while CMake tests its compiler: the patch takes them out (the build's arch
    list gives the targets); every other flag, and a commented-out line, stays."""
    written, others = [], []
    for setter, flags in lines:
        words = [f[0].format(c=f[1]) if isinstance(f, tuple) else str(f) for f in flags]
        written.append(setter.format(f=" ".join(words)))
        others.append([str(f) for f in flags if not isinstance(f, tuple)])
    comment = '# set(CMAKE_CUDA_FLAGS "-gencode=arch=compute_50,code=sm_50")'
    tree = tmp_path_factory.mktemp("flags") / "pkg"
    tree.mkdir()
    text = "project(p LANGUAGES CXX CUDA)\n" + "\n".join(written) + (
        f"\n{comment}" if commented else "") + "\n"
    (tree / "CMakeLists.txt").write_text(text)
    made = patches.cmake_arch_list(tree, 1, torch=False)
    has_targets = any(isinstance(f, tuple) for _, flags in lines for f in flags)
    if not has_targets:
        assert made is None
        return
    assert made is not None
    (tree.parent / made.file).write_bytes(made.data)
    patched = tree.parent / "patched"
    shutil.copytree(tree, patched)
    apply_one(tree.parent / made.file, patched)
    after = (patched / "CMakeLists.txt").read_text().splitlines()[1:]
    assert (after[-1] == comment) == commented
    for line, kept in zip(after, others, strict=False):
        assert "compute_" not in line
        assert "sm_" not in line
        assert [w for w in re.findall(r"--?[\w=-]+", line) if w.startswith("-")] == kept
