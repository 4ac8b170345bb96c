"""The Python axis of a build matrix: a build for Python 3.12 right after one for 3.11 (same
torch, CUDA and arch, one compile cache) takes its CUDA objects from the cache, because the
compile sees the toolchain and the source at paths that do not name the Python
(builder/pathview.py); the bindings, which include Python.h, compile again."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from packaging.version import Version

from tests.conftest import add_variant, find_python, wheelsmith
from wheelsmith.builder.compilecache import cache_identity
from wheelsmith.builder.pathview import PathView, mount_point_problem
from wheelsmith.toolchain.env import Toolchain


def build_for(project: Path, toolchain: Toolchain, version: str, cache: Path
              ) -> dict[str, object]:
    """A build for python`version` on PATH (import-tested against the toolchain's torch): its
    provenance with the run's compile cache outcome."""
    result = wheelsmith("build", "tiny-ext", "--arch", "12.0", "--toolchain", toolchain.name,
                        "--python", version, "--compile-cache", str(cache),
                        "--out", str(project / f"out-{version}"), "--json",
                        cwd=project, check=True)
    data = json.loads(result.stdout)
    found: dict[str, object] = {**data["provenance"], "compile_cache": data["run"]["compile_cache"]}
    return found


@pytest.mark.slow  # a second Python's build: 3 min
@pytest.mark.toolchain
@pytest.mark.skipif(shutil.which("ccache") is None, reason="needs ccache (.ci/run installs it)")
def test_second_python_takes_cuda_objects_from_the_cache_but_compiles_its_bindings(
        project: Path, tmp_path: Path, toolchain: Toolchain,
        monkeypatch: pytest.MonkeyPatch) -> None:
    pythons = [find_python("3.11"), find_python("3.12")]
    if None in pythons:
        pytest.skip("needs CPython 3.11 and 3.12 (on PATH or from pyenv) for two toolchain venvs")
    bins = {str(Path(str(p)).parent) for p in pythons}
    monkeypatch.setenv("PATH", os.pathsep.join([*sorted(bins), os.environ["PATH"]]))
    add_variant(project, "tiny-ext")
    cache = tmp_path / "ccache"
    first = build_for(project, toolchain, "3.11", cache)
    assert first["compile_cache"]["sources"] == {  # type: ignore[index]
        "csrc/add.cpp": "miss", "csrc/add_kernel.cu": "miss"}
    second = build_for(project, toolchain, "3.12", cache)
    assert second["toolchain"]["python"] == "3.12"  # type: ignore[index]
    assert second["compile_cache"]["sources"] == {  # type: ignore[index]
        "csrc/add.cpp": "miss",  # includes Python.h: 3.12's headers, another object
        "csrc/add_kernel.cu": "hit (preprocessed)"}
    assert second["device_code"] == [{"path": "tiny_ext/_C.cpython-312-x86_64-linux-gnu.so",
                                      "sass": ["sm_120"], "ptx": []}]


def test_view_names_the_fixed_paths_in_the_build_environment(tmp_path: Path) -> None:
    site = tmp_path / "venv-py3.12" / "lib" / "python3.12" / "site-packages"
    source = tmp_path / "work" / "pkg-1.0-key" / "src" / "pkg-1.0"
    view = PathView(tmp_path / "view", site, source)
    env = view.env({"CUDA_HOME": f"{site}/nvidia/cu13",
                    "PATH": f"/venv/bin:{site}/nvidia/cu13/bin:/usr/bin",
                    "PYTORCH_NVCC": f"/usr/bin/ccache {site}/nvidia/cu13/bin/nvcc",
                    "OTHER": f"{site}-packages-not/x", "PYTHONPATH": "/extra",
                    "CPPFLAGS": f"-ffile-prefix-map={source}=/wheelsmith/src"})
    assert env == {"CUDA_HOME": f"{tmp_path}/view/site/nvidia/cu13",
                   "PATH": f"/venv/bin:{tmp_path}/view/site/nvidia/cu13/bin:/usr/bin",
                   "PYTORCH_NVCC": f"/usr/bin/ccache {tmp_path}/view/site/nvidia/cu13/bin/nvcc",
                   "OTHER": f"{site}-packages-not/x",
                   "PYTHONPATH": f"{tmp_path}/view/site:/extra",
                   # the prefix map names the path the compiler sees
                   "CPPFLAGS": f"-ffile-prefix-map={tmp_path}/view/source=/wheelsmith/src"}
    assert view.inside(source) == tmp_path / "view" / "source"
    assert view.inside(source / "csrc" / "x.cu") == tmp_path / "view" / "source" / "csrc" / "x.cu"
    assert view.inside(tmp_path / "work") == tmp_path / "work"
    # and back: a path in build.ninja or a log, where it really is
    assert view.outside(tmp_path / "view" / "source" / "csrc" / "x.o") == source / "csrc" / "x.o"
    assert view.outside(tmp_path / "view" / "site" / "torch") == site / "torch"
    assert view.outside(tmp_path / "work") == tmp_path / "work"


def profile_toolchain(python: str, pins: tuple[str, ...]) -> Toolchain:
    return Toolchain(name="cu130-torch2.14", python=Path(f"/v{python}/bin/python"),
                     python_version=python, cuda_home=Path("/c"), torch_version=Version("2.14.1"),
                     torch_cuda=Version("13.0"), nvcc_version=Version("13.0.88"),
                     cuobjdump=None, pins=pins)


def test_cache_identity_is_one_for_every_python_of_a_profile_but_not_for_another_compiler(
        ) -> None:
    base = ("torch==2.14.1", "nvidia-cuda-nvcc==13.0.88", "nvidia_cuda_crt==13.0.88")
    # a pin that differs by Python (pure Python, seen by an object only through its headers)
    py311 = profile_toolchain("3.11", (*base, "networkx==3.6.1"))
    py312 = profile_toolchain("3.12", (*base, "networkx==3.7"))
    assert cache_identity(py311) == cache_identity(py312)
    assert cache_identity(py312)["pins"] == ["nvidia-cuda-nvcc==13.0.88",
                                             "nvidia_cuda_crt==13.0.88"]
    other_ptxas = profile_toolchain("3.12", ("torch==2.14.1", "nvidia-cuda-nvcc==13.0.96",
                                             "nvidia_cuda_crt==13.0.88"))
    assert cache_identity(other_ptxas) != cache_identity(py312)


def test_a_view_root_that_is_a_symlink_or_cannot_be_made_is_refused_by_name(
        tmp_path: Path) -> None:
    """The compile would see (and cudafe++ hash) where a link points: no view, and why."""
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "view").symlink_to(tmp_path / "elsewhere")
    assert mount_point_problem(tmp_path / "view") == f"{tmp_path}/view is a symbolic link"
    (tmp_path / "file").write_text("")
    assert mount_point_problem(tmp_path / "file" / "view") == (
        f"cannot make {tmp_path}/file/view (Not a directory)")
    if shutil.which("unshare"):
        assert mount_point_problem(tmp_path / "fine") == ""
