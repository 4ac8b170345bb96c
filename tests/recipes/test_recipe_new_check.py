"""`recipe new`'s check compiles (issue 33 item 2): on sdists made here from the tiny CUDA
extension and served as a file:// simple index, `recipe new` writes the patches the mechanical
classes need and its check (configure, then one host and one CUDA object compiled for real)
passes; what no patch can fix — a C++20 name clash — ends the command with the compiler's first
error and its file:line, a non-zero exit, and the files it wrote."""

from __future__ import annotations

import hashlib
import json
import shutil
import tarfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, wheelsmith
from wheelsmith.recipes.model import load_recipe
from wheelsmith.toolchain.env import Toolchain

pytestmark = pytest.mark.toolchain

# Every class a setup.py outside the corpus showed that a patch can fix: pkg_resources (the
# toolchain's setuptools has none), a stop without a GPU, -std=c++17 under torch 2.14, and
# setup_requires; and two that need none in their context: psutil inside try/except, a
# download in the ROCm branch. Its sources are globbed: 1 host file and 4 CUDA ones.
EVERY_CLASS = '''import glob
import os
import pkg_resources
import torch
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

try:
    import psutil
except ImportError:
    psutil = None

if not torch.cuda.is_available():
    raise RuntimeError("this package needs a GPU to build")

assert pkg_resources.parse_version(torch.__version__) >= pkg_resources.parse_version("2.0")
IS_ROCM = torch.version.hip is not None
if IS_ROCM:
    import urllib.request
    urllib.request.urlretrieve("https://example.invalid/ck.tar.gz", "ck.tar.gz")

setup(
    name="PROJECT",
    version="0.1.0",
    packages=["tiny_ext"],
    ext_modules=[
        CUDAExtension(
            name="tiny_ext._C",
            sources=["csrc/add.cpp"] + sorted(glob.glob("csrc/kernels/*.cu")),
            extra_compile_args={"cxx": ["-O2", "-std=c++17"], "nvcc": ["-O2", "-std=c++17"]},
        )
    ],
    cmdclass={"build_ext": BuildExtension},
    setup_requires=["psutil"],
)
'''

# A float lerp of the package's own in a CUDA header, used there: C++20's std::lerp (from
# <cmath>, found by `using namespace std`) makes the call ambiguous
LERP = """#pragma once
#include <cmath>
using namespace std;

__host__ __device__ inline float lerp(float a, float b, float t) { return a + t * (b - a); }
__device__ inline float midway(float a, float b) { return lerp(a, b, 0.5f); }
"""


def make_tree(tmp_path: Path, project: str, setup: str) -> Path:
    """The tiny extension with `setup` as its setup.py and its kernel among others in
    csrc/kernels/ (the one that is chosen the smallest), as an unpacked sdist."""
    tree = tmp_path / "sdist" / f"{project}-0.1.0"
    shutil.copytree(FIXTURES / "tiny-ext", tree)
    (tree / "setup.py").write_text(setup.replace("PROJECT", project))
    (tree / "PKG-INFO").write_text(f"Metadata-Version: 2.1\nName: {project}\nVersion: 0.1.0\n"
                                   "Summary: a tiny CUDA extension\n")
    kernels = tree / "csrc" / "kernels"
    kernels.mkdir()
    (tree / "csrc" / "add_kernel.cu").rename(kernels / "add_kernel.cu")
    for index in range(3):
        (kernels / f"scale_{index}.cu").write_text(
            "#include <cstdint>\n" + "// a comment that makes it larger\n" * 40 +
            f"__global__ void scale_{index}(float* y, int64_t n) {{ if (n) y[0] *= 2.0f; }}\n")
    return tree


def serve(tmp_path: Path, tree: Path) -> str:
    """`tree` as NAME-VERSION.tar.gz on a file:// simple index (PEP 691 JSON, as `wheelsmith
    index` writes it); the index's URL."""
    project = tree.name.rpartition("-")[0]
    sdist = tmp_path / "dist" / f"{tree.name}.tar.gz"
    sdist.parent.mkdir()
    with tarfile.open(sdist, "w:gz") as tar:
        tar.add(tree, arcname=tree.name)
    page = tmp_path / "index" / project
    page.mkdir(parents=True)
    file = {"filename": sdist.name, "url": sdist.as_uri(),
            "hashes": {"sha256": hashlib.sha256(sdist.read_bytes()).hexdigest()}}
    (page / "index.json").write_text(json.dumps({"meta": {"api-version": "1.0"},
                                                 "name": project, "files": [file]}))
    return (tmp_path / "index").as_uri()


# The ATen spellings torch removed, in the host file the check compiles: without the patch
# its compile fails (`no suitable conversion function from "const
# at::DeprecatedTypeProperties" to "c10::ScalarType"`, `AT_CHECK` undeclared)
REMOVED_ATEN = ("#include <ATen/Dispatch.h>\n", """
  AT_CHECK(x.dim() == 1, "1-d only");
  AT_DISPATCH_FLOATING_TYPES(
      x.type(), "add_one_out", [&] { TORCH_CHECK(sizeof(scalar_t) == 4, "float32 only"); });
""")


def test_every_mechanical_class_is_patched_and_the_check_compiles(
        tmp_path: Path, toolchain: Toolchain, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = make_tree(tmp_path, "every-class", EVERY_CLASS)
    host = (tree / "csrc" / "add.cpp").read_text()
    include, body = REMOVED_ATEN
    (tree / "csrc" / "add.cpp").write_text(host.replace(
        "#include <torch/library.h>\n", f"#include <torch/library.h>\n{include}").replace(
        '"bad shapes");\n', f'"bad shapes");{body}'))
    monkeypatch.setenv("WHEELSMITH_INDEX_URL", serve(tmp_path, tree))
    made = wheelsmith("recipe", "new", "every-class==0.1.0", "--recipes", "mine", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    found = made.stdout.splitlines()
    written = ["0001-no-setup-requires.patch", "0002-cxx20-for-newer-torch-headers.patch",
               "0003-no-pkg-resources.patch", "0004-honour-force-cuda.patch",
               "0005-current-aten-api.patch"]
    assert [line.split(": wrote ")[1].split(":")[0] for line in found
            if ": wrote 000" in line] == written
    assert "info: sources: the sdist holds all 5 the extensions compile" in found
    assert [line for line in found if "patch needed" in line] == []  # psutil, ROCm's download
    assert found[-9:] == [
        "info: check: build.ninja targets _C: SASS sm_120, compiled add.o and add_kernel.o",
        "10 findings: 0 to do by hand (todo), 6 fixed in the recipe or its patches, "
        "4 for information",
        "wrote mine/recipes/every-class.yaml",
        *[f"wrote mine/patches/every-class/0.1.0/{name}" for name in written],
        "next: wheelsmith build every-class --recipes mine"]
    recipe = load_recipe(tmp_path / "mine" / "recipes" / "every-class.yaml")
    assert recipe.env == (("FORCE_CUDA", "1"),)
    # what setup_requires named, which the patch drops, is pinned for the build instead
    assert [pin.split("==")[0] for pin in recipe.build_requires] == ["psutil"]


def test_two_checks_of_one_sdist_at_once_take_turns_and_both_pass(
        tmp_path: Path, toolchain: Toolchain, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check's work directory is one per sdist in the cache: a second `recipe new` of the
    same release waits for the first (it removed the first's build tree, which then failed)."""
    tree = make_tree(tmp_path, "two-at-once", EVERY_CLASS)
    monkeypatch.setenv("WHEELSMITH_INDEX_URL", serve(tmp_path, tree))
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda repo: wheelsmith(
            "recipe", "new", "two-at-once==0.1.0", "--recipes", repo, cwd=tmp_path),
            ["first", "second"]))
    assert [run.returncode for run in runs] == [0, 0], [run.stderr[-2000:] for run in runs]
    waited = [run for run in runs if "waiting: another check of two-at-once 0.1.0 is running (" in
              run.stderr and "this one starts when it ends" in run.stderr]
    assert len(waited) == 1
    assert all(run.stdout.splitlines()[-1] == "next: wheelsmith build two-at-once --recipes "
               f"{repo}" for run, repo in zip(runs, ["first", "second"], strict=True))


def test_a_cxx20_name_clash_is_named_with_its_file_and_line_and_the_recipe_stays_written(
        tmp_path: Path, toolchain: Toolchain, monkeypatch: pytest.MonkeyPatch) -> None:
    setup = "import glob\n" + (FIXTURES / "tiny-ext" / "setup.py").read_text().replace(
        'name="tiny-ext"', 'name="PROJECT"').replace(
        '"csrc/add_kernel.cu"', '*glob.glob("csrc/kernels/*.cu")').replace(
        '"nvcc": ["-O2"]', '"nvcc": ["-O2", "-std=c++17"]')
    tree = make_tree(tmp_path, "lerp-clash", setup)
    kernel = tree / "csrc" / "kernels" / "add_kernel.cu"
    kernel.write_text('#include "lerp.cuh"\n' + kernel.read_text())
    (kernel.parent / "lerp.cuh").write_text(LERP)
    monkeypatch.setenv("WHEELSMITH_INDEX_URL", serve(tmp_path, tree))
    made = wheelsmith("recipe", "new", "lerp-clash==0.1.0", "--recipes", "mine", cwd=tmp_path)
    assert made.returncode == 9, made.stderr
    assert made.stdout.splitlines()[-2:] == [
        "wrote mine/recipes/lerp-clash.yaml",
        "wrote mine/patches/lerp-clash/0.1.0/0001-cxx20-for-newer-torch-headers.patch"]
    error = next(line for line in made.stderr.splitlines() if line.startswith("error: "))
    assert error == (
        "error: the check of the new recipe failed: the sample compile of lerp-clash 0.1.0 "
        "failed: csrc/kernels/add_kernel.o (csrc/kernels/add_kernel.cu): csrc/kernels/"
        'lerp.cuh:6: error: more than one instance of overloaded function "lerp" matches the '
        "argument list:")
    hint = next(line for line in made.stderr.splitlines() if line.startswith("hint: "))
    assert hint.startswith("hint: a function of the package has the name of one C++20 added "
                           "to the standard library"), hint
    assert hint.endswith("fix them, then `wheelsmith build lerp-clash --recipes mine --check`")
    assert (tmp_path / "mine" / "recipes" / "lerp-clash.yaml").is_file()


@pytest.mark.slow  # a toolchain venv made from nothing: minutes and 5.5 GB
def test_a_machine_without_the_toolchain_makes_it_and_the_check_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check is what makes a recipe right the first time, so it never depends on what
    this machine happens to hold: with an empty cache `recipe new` makes the default toolchain,
    says so, and checks (it once skipped the check, and a package that builds 12.0a itself got
    a recipe for 12.0 that its first build refused)."""
    setup = "import glob\n" + (FIXTURES / "tiny-ext" / "setup.py").read_text().replace(
        'name="tiny-ext"', 'name="PROJECT"').replace(
        '"csrc/add_kernel.cu"', '*glob.glob("csrc/kernels/*.cu")')
    monkeypatch.setenv("WHEELSMITH_INDEX_URL",
                       serve(tmp_path, make_tree(tmp_path, "fresh-check", setup)))
    monkeypatch.setenv("WHEELSMITH_CACHE", str(tmp_path / "empty-cache"))
    made = wheelsmith("recipe", "new", "fresh-check==0.1.0", "--recipes", "mine", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert "check: the cu130-torch2.14 toolchain is made first (once on this machine, a few " \
           "minutes)" in made.stderr
    assert "check: build.ninja targets _C: SASS sm_120, compiled add.o and " in made.stdout
    assert made.stdout.splitlines()[-1] == "next: wheelsmith build fresh-check --recipes mine"


def test_a_check_that_compiles_nothing_for_the_gpu_fails_and_says_why(
        tmp_path: Path, toolchain: Toolchain, monkeypatch: pytest.MonkeyPatch) -> None:
    """A package that builds CUDA only when a switch of its own says so, with a value no
    reading of it tells (compared only with other devices' names): the check once printed `no
    build.ninja with CUDA rules`, exited 0 and left a recipe whose wheel would hold no device
    code. recipe new says it could not tell the value, and the check's hint names the
    variable."""
    setup = (FIXTURES / "tiny-ext" / "setup.py").read_text().replace(
        'name="tiny-ext"', 'name="PROJECT"').replace(
        "ext_modules=[", 'ext_modules=[] if os.environ.get("TINY_DEVICE", "cpu") in ("cpu", '
                         '"tpu") else [')
    assert "TINY_DEVICE" in setup
    setup = "import os\n" + setup
    monkeypatch.setenv("WHEELSMITH_INDEX_URL",
                       serve(tmp_path, make_tree(tmp_path, "no-gpu-ops", setup)))
    made = wheelsmith("recipe", "new", "no-gpu-ops==0.1.0", "--recipes", "mine", cwd=tmp_path)
    assert made.returncode == 9, made.stderr
    said = [line for line in made.stderr.splitlines() if line.startswith(("error", "hint"))]
    assert said[0] == (
        "error: the check of the new recipe failed: the check of no-gpu-ops 0.1.0 found "
        "nothing to compile for the GPU: its build generated no build.ninja with CUDA rules, "
        "so its wheel would hold no device code")
    line = 1 + next(i for i, text in enumerate(setup.splitlines()) if "TINY_DEVICE" in text)
    assert f'todo: setup.py:{line}: TINY_DEVICE may decide whether its CUDA build is made ' \
           '(compared with "cpu", "tpu"), but which value turns it on cannot be told from how it ' \
           "is read: set it in build.env if the check finds nothing to compile for the GPU" in \
           made.stdout.splitlines()
    assert said[1].startswith(
        f"hint: its build reads TINY_DEVICE (setup.py:{line}): set the ones that turn its CUDA "
        "build on in the recipe's build.env (a value such as 1 or cuda); the package decides "
        "while it builds whether to compile CUDA: set the switch it reads (FORCE_CUDA, "
        "<PKG>_TARGET_DEVICE, ...) in the recipe's build.env;"), said[1]
    assert (tmp_path / "mine" / "recipes" / "no-gpu-ops.yaml").is_file()


CONFIG = """import os

KNOWN = ["cpu", "cuda", "xpu"]


def accelerator():
    name = os.environ.get("TINY_ACCELERATOR", "cpu")
    if name not in KNOWN:
        raise ValueError(name)
    return name
"""


def test_switches_a_module_of_its_own_reads_are_set_before_the_check(
        tmp_path: Path, toolchain: Toolchain, monkeypatch: pytest.MonkeyPatch) -> None:
    """deepspeed's shape: its CUDA ops are built only with the accelerator a module of its own
    reads chosen as cuda (DS_ACCELERATOR) and its ops switch read as int() on (DS_BUILD_OPS):
    recipe new writes both into build.env, each with the file:line that reads it, before the
    check, which then compiles the sample."""
    setup = "import os\nimport sys\nsys.path.insert(0, os.path.dirname(__file__))\n" + \
        "from tiny_build.config import accelerator\n" + \
        'BUILD_OPS = int(os.environ.get("TINY_BUILD_OPS", 0))\nimport glob\n' + \
        (FIXTURES / "tiny-ext" / "setup.py").read_text().replace(
            'name="tiny-ext"', 'name="PROJECT"').replace(
            "ext_modules=[", 'ext_modules=[] if not BUILD_OPS or accelerator() != "cuda" else ['
        ).replace('"csrc/add_kernel.cu"', '*glob.glob("csrc/kernels/*.cu")')
    tree = make_tree(tmp_path, "own-switches", setup)
    (tree / "tiny_build").mkdir()
    (tree / "tiny_build" / "__init__.py").write_text("")
    (tree / "tiny_build" / "config.py").write_text(CONFIG)
    monkeypatch.setenv("WHEELSMITH_INDEX_URL", serve(tmp_path, tree))
    made = wheelsmith("recipe", "new", "own-switches==0.1.0", "--recipes", "mine", cwd=tmp_path)
    assert made.returncode == 0, made.stdout + made.stderr
    said = made.stdout.splitlines()
    assert 'fixed: tiny_build/config.py:7: TINY_ACCELERATOR (compared with "cuda") turns its ' \
           'CUDA build on: build.env TINY_ACCELERATOR: "cuda"' in said
    assert 'fixed: setup.py:5: TINY_BUILD_OPS == "1" builds its CUDA extensions where no ' \
           'GPU is visible: build.env TINY_BUILD_OPS: "1"' in said
    assert any(line.startswith("info: check: build.ninja targets _C: SASS sm_120, compiled ")
               for line in said), said
    recipe = tmp_path / "mine" / "recipes" / "own-switches.yaml"
    assert dict(load_recipe(recipe).env) == {"TINY_ACCELERATOR": "cuda", "TINY_BUILD_OPS": "1"}
    assert '    TINY_BUILD_OPS: "1"  # setup.py:5: read as int()\n' in recipe.read_text()
    assert '    TINY_ACCELERATOR: "cuda"  # tiny_build/config.py:7: compared with "cuda"\n' in \
        recipe.read_text()


def test_numpy_that_setup_py_imports_unrequired_is_pinned_and_the_check_builds_with_it(
        tmp_path: Path, toolchain: Toolchain, monkeypatch: pytest.MonkeyPatch) -> None:
    """An older package's setup.py imports numpy for its headers and no build requirement
    names it: the build, with the toolchain's packages only, stopped at `import numpy`. recipe
    new pins it in build.requires (with pip, as pyproject.toml's are), and the check builds
    with it and compiles the sample against its headers."""
    setup = "import glob\nimport numpy\n" + (FIXTURES / "tiny-ext" / "setup.py").read_text(
        ).replace('name="tiny-ext"', 'name="PROJECT"').replace(
        '"csrc/add_kernel.cu"', '*glob.glob("csrc/kernels/*.cu")').replace(
        "extra_compile_args=", "include_dirs=[numpy.get_include()],\n            "
                               "extra_compile_args=")
    tree = make_tree(tmp_path, "numpy-headers", setup)
    host = tree / "csrc" / "add.cpp"  # the host sample compiles only with numpy's headers
    host.write_text('#include "numpy/numpyconfig.h"\nstatic_assert(NPY_ABI_VERSION > 0, "np");\n'
                    + host.read_text())
    monkeypatch.setenv("WHEELSMITH_INDEX_URL", serve(tmp_path, tree))
    made = wheelsmith("recipe", "new", "numpy-headers==0.1.0", "--recipes", "mine", cwd=tmp_path)
    assert made.returncode == 0, made.stdout + made.stderr
    recipe = load_recipe(tmp_path / "mine" / "recipes" / "numpy-headers.yaml")
    [numpy] = [pin for pin in recipe.build_requires if pin.startswith("numpy==")]
    said = made.stdout.splitlines()
    assert "fixed: setup.py:2: it imports numpy, which no build requirement names and the " \
           f"toolchain {toolchain.name} lacks: build.requires {numpy}" in said
    assert any(line.startswith("info: check: build.ninja targets _C: SASS sm_120, compiled add.o")
               for line in said), said


def test_headers_of_the_libraries_torch_s_wheels_bring_are_on_the_include_path(
        tmp_path: Path, toolchain: Toolchain, monkeypatch: pytest.MonkeyPatch) -> None:
    """cuDNN's and NCCL's headers come with torch's wheels (site-packages/nvidia/), not with
    the CUDA toolkit: a package that includes them (transformer-engine-torch's `<nccl.h>`)
    once failed its first compile with `nccl.h: No such file or directory`."""
    assert [p.parent.name for p in toolchain.library_includes] == [
        "cudnn", "cusparselt", "nccl", "nvshmem"]
    setup = "import glob\n" + (FIXTURES / "tiny-ext" / "setup.py").read_text().replace(
        'name="tiny-ext"', 'name="PROJECT"').replace(
        '"csrc/add_kernel.cu"', '*glob.glob("csrc/kernels/*.cu")')
    tree = make_tree(tmp_path, "nvidia-headers", setup)
    kernel = tree / "csrc" / "kernels" / "add_kernel.cu"
    kernel.write_text("#include <nccl.h>\nstatic_assert(NCCL_MAJOR >= 2, \"nccl\");\n" +
                      kernel.read_text())
    host = tree / "csrc" / "add.cpp"
    host.write_text("#include <cudnn.h>\nstatic_assert(CUDNN_MAJOR >= 9, \"cudnn\");\n" +
                    host.read_text())
    monkeypatch.setenv("WHEELSMITH_INDEX_URL", serve(tmp_path, tree))
    made = wheelsmith("recipe", "new", "nvidia-headers==0.1.0", "--recipes", "mine",
                      cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert "info: check: build.ninja targets _C: SASS sm_120, compiled add.o and add_kernel.o" \
        in made.stdout.splitlines()
