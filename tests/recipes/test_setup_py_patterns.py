"""`recipe new` reads the patterns real CUDA packages' setup.py files use (issue 22 item 1),
statically: each small setup.py below is the shape of a real package, and the test asserts the
exact lines printed (with their setup.py line numbers), the recipe written, and that the
patches it writes apply with wheelsmith's own exact patcher."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wheelsmith.builder.compilesetup import ninja_switched_off
from wheelsmith.recipes.patch import apply_one
from wheelsmith.scaffold import patches, render, report, setup_py
from wheelsmith.scaffold.findings import Findings
from wheelsmith.scaffold.sdist import Metadata, Sdist

SDIST = Sdist("demo", "1.0", "demo-1.0.tar.gz", "0" * 64)
SDIST_LINE = f"sdist: demo-1.0.tar.gz sha256 {'0' * 64}"

# torch-scatter 2.1.2 and the other PyG packages: CUDA only with FORCE_CUDA=1 where no GPU is
# visible, a CppExtension twin of each CUDA extension, and ninja turned off
PYG = '''import glob
import os
from itertools import product
import torch
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension

suffices = ['cpu', 'cuda'] if torch.cuda.is_available() else ['cpu']
if os.getenv('FORCE_CUDA', '0') == '1':
    suffices = ['cuda', 'cpu']

def get_extensions():
    extensions = []
    for main, suffix in product(glob.glob('csrc/*.cpp'), suffices):
        name = main.split(os.sep)[-1][:-4]
        Extension = CppExtension if suffix == 'cpu' else CUDAExtension
        extensions += [Extension(f'demo._{name}_{suffix}', [main])]
    return extensions

setup(
    name='demo',
    ext_modules=get_extensions(),
    cmdclass={
        'build_ext':
        BuildExtension.with_options(no_python_abi_suffix=True, use_ninja=False)
    },
)
'''

# causal-conv1d, mamba-ssm, fast-hadamard-transform: a force-build variable compared with
# "TRUE", a -gencode list appended flag by flag, the bare_metal_version probe, a download
DAO = '''import os
import urllib.request
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CUDAExtension

FORCE_BUILD = os.getenv("DEMO_FORCE_BUILD", "FALSE") == "TRUE"
cc_flag = []
if CUDA_HOME is not None:
    bare_metal_version = get_version(CUDA_HOME)
cc_flag.append("-DBUILD_PYTHON_PACKAGE")
cc_flag.append("-gencode")
cc_flag.append("arch=compute_90,code=sm_90")
if bare_metal_version >= 12:
    cc_flag.append("-gencode")
    cc_flag.append("arch=compute_120,code=sm_120")
ext = CUDAExtension(name="demo_cuda", sources=["csrc/demo.cpp", "csrc/demo_kernel.cu"],
                    extra_compile_args={"nvcc": ["-O3"] + cc_flag})
if not FORCE_BUILD:
    urllib.request.urlretrieve("wheel-url", "demo.whl")
'''


def tree_with(tmp_path: Path, setup: str, *files: str) -> Path:
    tree = tmp_path / "demo-1.0"
    for name in files:
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_text("// source\n")
    tree.mkdir(exist_ok=True)
    (tree / "setup.py").write_text(setup)
    return tree


def findings(tree: Path, packages: tuple[str, ...] = (), *, cxx20: bool = True
             ) -> Findings:
    """What `recipe new` finds, for a toolchain whose torch needs C++20 unless `cxx20` says
    otherwise."""
    setup = setup_py.read_setup(tree)
    return Findings(SDIST, Metadata("", None, packages), setup,
                           patches.written(tree, setup, cxx20=cxx20))


def recipe_body(found: Findings) -> str:
    """The recipe without its comment header."""
    return render.render(found).split("package: demo\n")[1]


def applied(tree: Path, found: Findings, tmp_path: Path) -> str:
    """setup.py after the written patches, applied by wheelsmith's exact patcher."""
    copy = tmp_path / "patched"
    shutil.copytree(tree, copy)
    for patch in found.written:
        (tmp_path / patch.file).write_text(patch.text)
        apply_one(tmp_path / patch.file, copy)
    return (copy / "setup.py").read_text()


def test_force_cuda_a_cpp_twin_and_no_ninja_give_env_host_only_and_the_ninja_patch(
        tmp_path: Path) -> None:
    tree = tree_with(tmp_path, PYG, "csrc/scatter.cpp", "csrc/cuda/scatter_cuda.cu")
    found = findings(tree, ("demo",))
    assert report.report_lines(found) == [
        SDIST_LINE,
        'setup.py:9: FORCE_CUDA == "1" builds its CUDA extensions where no GPU is visible: '
        'build.env FORCE_CUDA: "1"',
        "setup.py:25: use_ninja=False: wrote 0001-use-ninja.patch: torch's BuildExtension with "
        "ninja (setup.py turned it off), so the pre-build arch check, MAX_JOBS and "
        "split-compile apply",
        "setup.py:17: extension demo._*_* (CppExtension if suffix == 'cpu' else CUDAExtension): "
        'its CppExtension demo._*_cpu compiles no CUDA: build.host_only "demo/_*_cpu*.so"',
        "sources: setup.py computes them; check the sdist holds them"]
    body = recipe_body(found)
    assert body.split("versions:")[0] == (
        'arch:\n  env: TORCH_CUDA_ARCH_LIST\n  format: torch\n  default: ["12.0"]\n'
        'build:\n  env:\n    FORCE_CUDA: "1"  # setup.py:9\n  host_only: ["demo/_*_cpu*.so"]\n'
        'smoke:\n  import: ["demo"]\n')
    assert "      - file: 0001-use-ninja.patch\n" in body
    patched = applied(tree, found, tmp_path)
    assert "BuildExtension.with_options(no_python_abi_suffix=True, use_ninja=True)" in patched
    assert ninja_switched_off(tree / "setup.py") == 25
    (tmp_path / "after.py").write_text(patched)
    assert ninja_switched_off(tmp_path / "after.py") is None


def test_a_dao_style_setup_gets_its_force_variable_and_an_arch_patch_that_applies(
        tmp_path: Path) -> None:
    tree = tree_with(tmp_path, DAO, "csrc/demo.cpp", "csrc/demo_kernel.cu")
    found = findings(tree)
    assert report.report_lines(found) == [
        SDIST_LINE,
        'setup.py:5: DEMO_FORCE_BUILD == "TRUE" builds from source instead of fetching a '
        'prebuilt wheel: build.env DEMO_FORCE_BUILD: "TRUE"',
        "setup.py:11: hard-coded -gencode family: 90, 120",
        "setup.py:11: hard-coded -gencode list: wrote 0001-honour-torch-cuda-arch-list.patch: "
        "keep the hard-coded -gencode list only when TORCH_CUDA_ARCH_LIST is unset, so torch "
        "emits exactly the requested archs",
        "setup.py:15: extension demo_cuda (CUDAExtension): CUDA",
        "sources: the sdist holds all 2 the extensions compile",
        "setup.py:12: patch needed: clear-error-without-nvcc: setup.py sets bare_metal_version "
        "only when it finds nvcc and uses it anyway (NameError without nvcc) (start from "
        "patches/mamba-ssm/2.3.1/0002-clear-error-without-nvcc.patch)",
        "setup.py:18: patch needed: never-download-prebuilt-wheel: setup.py downloads a "
        "prebuilt wheel unless forced to build (start from "
        "patches/mamba-ssm/2.3.1/0003-never-download-prebuilt-wheel.patch)"]
    patched = applied(tree, found, tmp_path).splitlines()
    guard = 'if not os.environ.get("TORCH_CUDA_ARCH_LIST"): '
    assert patched[8:14] == [
        'cc_flag.append("-DBUILD_PYTHON_PACKAGE")',  # its other flags stay
        f'{guard}cc_flag.append("-gencode")',
        f'{guard}cc_flag.append("arch=compute_90,code=sm_90")',
        "if bare_metal_version >= 12:",
        f'    {guard}cc_flag.append("-gencode")',
        f'    {guard}cc_flag.append("arch=compute_120,code=sm_120")']


def test_a_gencode_list_literal_is_left_to_a_hand_written_patch(tmp_path: Path) -> None:
    tree = tree_with(tmp_path, 'import os\nfrom torch.utils.cpp_extension import CUDAExtension\n'
                     'flags = ["-gencode", "arch=compute_80,code=sm_80"]\n'
                     'CUDAExtension("demo_cuda", ["k.cu"], extra_compile_args={"nvcc": flags})\n',
                     "k.cu")
    found = findings(tree)
    assert found.written == ()
    assert report.report_lines(found)[-1] == (
        "setup.py:3: patch needed: honour-torch-cuda-arch-list: setup.py passes its own "
        "-gencode list and ignores TORCH_CUDA_ARCH_LIST (start from "
        "patches/mamba-ssm/2.3.1/0001-honour-torch-cuda-arch-list.patch)")


@pytest.mark.parametrize(("condition", "expected"), [
    ("if os.environ.get('WITH_CUDA', 'no').lower() in ('yes', 'on'):\n",
     'setup.py:3: WITH_CUDA == "yes" builds its CUDA extensions where no GPU is visible: '
     'build.env WITH_CUDA: "yes"'),
    # torch-harmonics 0.8.1 builds its CUDA extensions without a GPU only with it
    ('FORCE = os.getenv("FORCE_CUDA_EXTENSION", "0") == "1"\nif FORCE:\n',
     'setup.py:3: FORCE_CUDA_EXTENSION == "1" builds its CUDA extensions where no GPU is '
     'visible: build.env FORCE_CUDA_EXTENSION: "1"'),
])
def test_a_cuda_switch_read_from_the_environment_is_set_to_what_it_is_compared_with(
        tmp_path: Path, condition: str, expected: str) -> None:
    tree = tree_with(tmp_path, "import os\nfrom torch.utils.cpp_extension import CUDAExtension\n"
                     f"{condition}    ext = CUDAExtension('demo._C', ['a.cu'])\n", "a.cu")
    assert report.report_lines(findings(tree))[1] == expected


def test_setup_requires_is_dropped_by_a_written_patch(tmp_path: Path) -> None:
    tree = tree_with(tmp_path, "from setuptools import setup\n"
                     "from torch.utils.cpp_extension import CUDAExtension\n"
                     "setup(\n    name='demo',\n"
                     "    setup_requires=['psutil', 'ninja'],\n"
                     "    ext_modules=[CUDAExtension('demo._C', ['a.cu'])],\n)\n", "a.cu")
    found = findings(tree)
    assert report.report_lines(found)[1] == (
        "setup.py:5: setup_requires: wrote 0001-no-setup-requires.patch: setup_requires would "
        "make setuptools download in the offline build; the toolchain provides the build's "
        "dependencies")
    assert "setup_requires" not in applied(tree, found, tmp_path)


def test_an_include_directory_missing_from_the_sdist_asks_for_the_git_source(
        tmp_path: Path) -> None:
    """grouped_gemm's shape: cutlass is a git submodule the sdist may leave out."""
    tree = tree_with(tmp_path, "from pathlib import Path\n"
                     "from torch.utils.cpp_extension import CUDAExtension\n"
                     "cwd = Path(__file__).parent\n"
                     'CUDAExtension("gg", ["csrc/ops.cu"],\n'
                     '              include_dirs=[f"{cwd}/third_party/cutlass/include/"])\n',
                     "csrc/ops.cu")
    (tree / "third_party" / "cutlass").mkdir(parents=True)  # the empty submodule directory
    assert report.report_lines(findings(tree))[2:4] == [
        "the sdist lacks what its extensions compile: third_party/cutlass/include/; build from "
        "the repository instead:", "  source:"]


def test_a_cuda_extension_of_cpp_sources_only_is_host_only(tmp_path: Path) -> None:
    tree = tree_with(tmp_path, "from torch.utils.cpp_extension import CUDAExtension\n"
                     "a = CUDAExtension('demo._cublas_ops', ['ops.cpp'])\n"
                     "b = CUDAExtension('demo._kernels', ['k.cu'])\n", "ops.cpp", "k.cu")
    found = findings(tree)
    assert report.report_lines(found)[1:3] == [
        'setup.py:2: extension demo._cublas_ops (CUDAExtension) compiles no CUDA sources: '
        'build.host_only "demo/_cublas_ops*.so"',
        "setup.py:3: extension demo._kernels (CUDAExtension): CUDA"]
    assert found.host_only == ("demo/_cublas_ops*.so",)


def test_an_extension_built_only_for_rocm_is_left_out(tmp_path: Path) -> None:
    tree = tree_with(tmp_path, "from torch.utils.cpp_extension import CUDAExtension\n"
                     "IS_ROCM = False\n"
                     "if not IS_ROCM:\n    e = CUDAExtension('demo_cuda', ['k.cu'])\n"
                     "elif IS_ROCM:\n    e = CUDAExtension('demo_cuda', ['ck/absent.cu'])\n",
                     "k.cu")
    assert report.report_lines(findings(tree))[1:] == [
        "setup.py:4: extension demo_cuda (CUDAExtension): CUDA",
        "sources: the sdist holds all 1 the extensions compile",
        "patches: none of the standard ones is needed"]


def test_never_pure_while_the_sdist_holds_a_cu_file(tmp_path: Path) -> None:
    tree = tree_with(tmp_path, "from setuptools import setup\nsetup(ext_modules=make())\n",
                     "csrc/k.cu")
    found = findings(tree)
    assert not found.pure
    assert report.report_lines(found)[1] == (
        "kind: extension: setup.py declares no extension wheelsmith can read, but the sdist "
        "holds 1 .cu file(s)")
    assert "kind: pure" not in recipe_body(found)


def test_a_package_with_no_extension_and_no_cu_file_is_pure(tmp_path: Path) -> None:
    found = findings(tree_with(tmp_path, "from setuptools import setup\nsetup(name='demo')\n"))
    assert report.report_lines(found)[1] == (
        "kind: pure: setup.py declares no extension and the sdist holds no .cu file")
    assert recipe_body(found).startswith("kind: pure\nversions:")


def test_a_package_s_own_arch_variable_becomes_the_recipe_s_arch_knob(tmp_path: Path) -> None:
    """flash-attn's shape: its own FLASH_ATTN_CUDA_ARCHS picks from a -gencode family, so no
    arch patch is needed and the recipe bridges to it in numbers."""
    tree = tree_with(tmp_path, (
        "import os\n"
        "from torch.utils.cpp_extension import CUDAExtension\n"
        "def cuda_archs():\n"
        '    return os.getenv("DEMO_CUDA_ARCHS", "80;90").split(";")\n'
        "cc_flag = []\n"
        'if "80" in cuda_archs():\n'
        '    cc_flag += ["-gencode", "arch=compute_80,code=sm_80"]\n'
        'if "90" in cuda_archs():\n'
        '    cc_flag += ["-gencode", "arch=compute_90a,code=sm_90a"]\n'
        'ext = CUDAExtension(name="demo_cuda", sources=[os.path.join("csrc", "demo.cu")])\n'),
        "csrc/demo.cu")
    found = findings(tree)
    assert report.report_lines(found)[1:4] == [
        "setup.py:7: hard-coded -gencode family: 80, 90a",
        "setup.py:4: arch variable DEMO_CUDA_ARCHS: the package's own; arch.env, format "
        "numbers, supported: its -gencode family",
        "setup.py:10: extension demo_cuda (CUDAExtension): CUDA"]
    assert found.written == ()
    assert recipe_body(found).split("versions:")[0] == (
        'arch:\n  env: DEMO_CUDA_ARCHS\n  format: numbers\n  default: ["9.0a"]\n'
        '  supported: ["8.0", "9.0a"]\nsmoke:\n  import: ["demo_cuda"]\n')


def test_an_extension_class_chosen_in_a_branch_counts_as_cuda(tmp_path: Path) -> None:
    """chamferdist's and spatial-correlation-sampler's shape: `extension = CppExtension`, then
    `extension = CUDAExtension` under a condition; the sources list is extended with the .cu
    file there."""
    tree = tree_with(tmp_path, "import os\n"
                     "from torch.utils.cpp_extension import CppExtension, CUDAExtension\n"
                     "sources = ['csrc/ext.cpp']\nextension = CppExtension\n"
                     "if os.getenv('FORCE_CUDA', '0') == '1':\n"
                     "    extension = CUDAExtension\n    sources.append('csrc/kernel.cu')\n"
                     "ext = extension('demo._C', sources)\n", "csrc/ext.cpp", "csrc/kernel.cu")
    found = findings(tree)
    assert report.report_lines(found)[2] == (
        "setup.py:8: extension demo._C (extension: CUDAExtension or CppExtension): CUDA")
    assert found.host_only == ()


def test_a_cpu_fallback_of_a_cuda_module_is_not_host_only(tmp_path: Path) -> None:
    """torch-harmonics' shape: the same module is a CUDAExtension or, without CUDA, a
    CppExtension; globbing the CPU one would exempt the CUDA one from the check."""
    tree = tree_with(tmp_path, "from torch.utils.cpp_extension import CppExtension, "
                     "CUDAExtension\nsources = ['a.cpp']\nif CUDA:\n"
                     "    sources += ['a.cu']\n    ext = CUDAExtension('demo._C', sources)\n"
                     "else:\n    ext = CppExtension('demo._C', sources)\n", "a.cpp", "a.cu")
    found = findings(tree)
    assert [e.name for e in found.setup.extensions] == ["demo._C"]
    assert found.host_only == ()


def test_an_arch_flag_in_a_list_literal_is_kept_only_without_the_arch_list(
        tmp_path: Path) -> None:
    """pytorch-fast-transformers 0.4.0: `extra_compile_args=["-arch=compute_50"]` on each
    CUDAExtension (torch then adds no arch flag of its own)."""
    tree = tree_with(tmp_path, "from os import path\n"  # and no `import os`
                     "from torch.utils.cpp_extension import CUDAExtension\n"
                     "e = CUDAExtension('demo.k_cuda', ['k.cu'],\n"
                     "                  extra_compile_args=['-arch=compute_50'])\n", "k.cu")
    found = findings(tree)
    assert report.report_lines(found)[1:3] == [
        "setup.py:4: hard-coded -gencode family: 50",
        "setup.py:4: hard-coded -gencode list: wrote 0001-honour-torch-cuda-arch-list.patch: "
        "keep the hard-coded -gencode list only when TORCH_CUDA_ARCH_LIST is unset, so torch "
        "emits exactly the requested archs"]
    assert applied(tree, found, tmp_path).splitlines()[3] == (
        "                  extra_compile_args=[*([] if __import__(\"os\").environ.get("
        "\"TORCH_CUDA_ARCH_LIST\") else ['-arch=compute_50'])])")



@given(use=st.sampled_from([
    'cmake_args += ["-GNinja", f"-DCMAKE_MAKE_PROGRAM:FILEPATH={{os.path.join({n}, \'ninja\')}}"]',
    'path = os.path.join({n}, "ninja")', 'exe = {n} + "/ninja"']),
    also=st.sampled_from(["", "ninja.__version__", "myninja.BIN_DIR_X = 1"]))
def test_ninjas_own_binary_becomes_the_ninja_on_path_and_the_patch_applies(
        tmp_path_factory: pytest.TempPathFactory, use: str, also: str) -> None:
    """bmtrain 1.0.1 hands CMake the ninja module's own binary (`ninja.BIN_DIR`), past the
    ninja on the build's PATH that runs the pre-build check: the patch names that one."""
    setup = ("import os, shutil, ninja\nfrom setuptools import setup\n"
             + use.format(n="ninja.BIN_DIR") + f"\n{also}\nsetup(name='demo')\n")
    tree = tree_with(tmp_path_factory.mktemp("n"), setup)
    found = findings(tree)
    assert [w.file for w in found.written] == ["0001-ninja-on-path.patch"]
    patched = applied(tree, found, tree.parent)
    assert not re.search(r"\bninja\.BIN_DIR\b", patched)
    assert use.format(n='__import__("os").path.dirname(__import__("shutil").which("ninja"))') \
        in patched
    assert also in patched
