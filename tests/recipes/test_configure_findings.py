"""What `recipe new`'s check reads back goes into the recipe (issue 22): an
extension whose build.ninja has only C++ rules — torch-scatter's `_version_cuda`, a
CUDAExtension whose .cpp sources setup.py globs at run time, so the static reading calls it
CUDA — gets its host_only glob, one the device-code gate accepts for the module's wheel path,
and a findings line that says why."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tests.recipes.test_setup_py_patterns import PYG, findings, recipe_body, tree_with
from wheelsmith.arch import ArchSet
from wheelsmith.builder.verify import findings as gate_findings
from wheelsmith.inventory import DeviceCode
from wheelsmith.recipes.model import load_recipe
from wheelsmith.scaffold import render, report
from wheelsmith.scaffold.check import Checked
from wheelsmith.scaffold.sdist import Sdist

CHECK_LINE = ("check: build.ninja targets _scatter_cuda: SASS sm_120, compiled scatter.o and "
              "scatter_cuda.o")


def module(path: str, *sass: str) -> DeviceCode:
    return DeviceCode(path, frozenset(sass), frozenset())


def test_a_cuda_extension_whose_build_ninja_has_only_cpp_rules_becomes_host_only(
        tmp_path: Path) -> None:
    read = findings(tree_with(tmp_path, PYG, "csrc/scatter.cpp", "csrc/version.cpp"), ("demo",))
    checked = Checked(CHECK_LINE, ("_scatter_cpu", "_version_cpu", "_version_cuda"))
    read = dataclasses.replace(read, sdist=Sdist("demo", "1.0", "demo-1.0.tar.gz", "ab" * 32))
    found = dataclasses.replace(read, checked=checked)
    assert report.report_lines(found)[-2:] == [
        CHECK_LINE,  # the _cpu twins were host_only from setup.py already: no line of their own
        'check: _version_cuda compiles no CUDA (build.ninja has only C++ rules): '
        'build.host_only "demo/_version_cuda*.so"']
    assert 'host_only: ["demo/_*_cpu*.so", "demo/_version_cuda*.so"]\n' in recipe_body(found)
    render.write(read, tmp_path / "repo")  # as `recipe new` does: before the check, then again
    render.rewrite(found, tmp_path / "repo")
    recipe = load_recipe(tmp_path / "repo" / "recipes" / "demo.yaml")
    wheel = [module("demo/_scatter_cuda.so", "sm_120"), module("demo/_scatter_cpu.so"),
             module("demo/_version_cpu.so"), module("demo/_version_cuda.so")]
    assert gate_findings(wheel, ArchSet.parse(["12.0"]), recipe.host_only) == []
    assert gate_findings(wheel, ArchSet.parse(["12.0"]), read.host_only) == [
        "demo/_version_cuda.so: no device code at all (neither SASS nor PTX)"]


def test_a_cpp_only_extension_no_setup_py_name_places_is_named_without_a_glob(
        tmp_path: Path) -> None:
    read = findings(tree_with(tmp_path, "from torch.utils.cpp_extension import CUDAExtension\n"
                              "a = CUDAExtension(name=ext_name(), sources=computed())\n"))
    found = dataclasses.replace(read, checked=Checked(CHECK_LINE, ("_helpers",)))
    assert report.report_lines(found)[-1] == (
        "check: _helpers compiles no CUDA (build.ninja has only C++ rules), but no "
        "extension name in setup.py says where it lies in the wheel: add its path to "
        "build.host_only")
    assert found.host_only == read.host_only == ()


def test_without_the_check_the_findings_and_recipe_are_setup_py_s_alone(tmp_path: Path) -> None:
    read = findings(tree_with(tmp_path, PYG, "csrc/scatter.cpp"), ("demo",))
    assert report.report_lines(read)[-1] == (
        "sources: setup.py computes them; check the sdist holds them")
    assert read.host_only == ("demo/_*_cpu*.so",)


SWITCHED = '''from setuptools import setup
from torch.utils.cpp_extension import CppExtension, CUDAExtension
import os
if os.environ.get("FORCE_CUDA"):
    ext = CUDAExtension("demo._C", ["csrc/ops.cu"])
else:
    ext = CppExtension("demo._C_cpu", ["csrc/ops.cpp"])
setup(name="demo", ext_modules=[ext])
'''


def test_an_extension_the_checks_build_did_not_configure_leaves_smoke_import(
        tmp_path: Path) -> None:
    """setup.py names `_C` and `_C_cpu` (one or the other, by a switch); the check's build
    configured `_C`: the smoke test imports what the build makes, not the other branch's."""
    read = findings(tree_with(tmp_path, SWITCHED, "csrc/ops.cu", "csrc/ops.cpp"), ("demo",))
    read = dataclasses.replace(read, sdist=Sdist("demo", "1.0", "demo-1.0.tar.gz", "ab" * 32))
    assert read.imports == ("demo", "demo._C", "demo._C_cpu")  # setup.py's, before the check
    line = "check: build.ninja targets _C: SASS sm_120, compiled ops.o"
    found = dataclasses.replace(read, checked=Checked(line, extensions=("_C",)))
    assert found.imports == ("demo", "demo._C")
    assert report.report_lines(found)[-1] == (
        "check: its build configured _C, not demo._C_cpu (built under other switches): left out "
        "of smoke.import")
    assert '  import: ["demo", "demo._C"]\n' in recipe_body(found)
    unnamed = dataclasses.replace(read, checked=Checked(line, extensions=()))
    assert unnamed.imports == read.imports  # a build file naming no extension prunes nothing
