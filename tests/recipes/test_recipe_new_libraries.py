"""`recipe new` finds the host libraries an sdist's build needs (scaffold/libraries.py) in its
own sources, CMake files and build scripts, over generated trees: it writes the entry with the
file:line that needs it (the toolchain's copy where its profile pins the wheel, else the wheel
pinned by real pip), a finding where the CUDA toolkit has it or no wheel provides it, and
nothing for a header the sdist holds."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import REPO
from tests.recipes.test_setup_py_patterns import findings, recipe_body, tree_with
from wheelsmith.recipes.model import load_recipe
from wheelsmith.scaffold import render, report
from wheelsmith.scaffold.libraries import KNOWN, detect
from wheelsmith.scaffold.rebase import Base
from wheelsmith.toolchain.profile import load_profile

TORCH = load_profile(REPO / "toolchains" / "cu130-torch2.14.yaml")
CUDA_ONLY = load_profile(REPO / "toolchains" / "cu130.yaml")
NCCL_PIN = next(p for p in TORCH.requirements if p.startswith("nvidia-nccl-cu13=="))
DIRS = st.lists(st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True), max_size=2).filter(
    lambda parts: not {"test", "tests", "build", "deps", "extern", "external"} & set(parts))
BEFORE = st.integers(min_value=0, max_value=12)  # lines before the one that needs it
SUFFIX = st.sampled_from([".cu", ".cpp", ".cuh", ".h", ".cc"])
INCLUDE = st.sampled_from(['#include <{h}>', '#include "{h}"', '  #  include <{h}>'])


def source_tree(root: Path, path: str, before: int, line: str) -> Path:
    tree = tree_with(root, "from setuptools import setup\nsetup()\n")
    (tree / path).parent.mkdir(parents=True, exist_ok=True)
    (tree / path).write_text("// a comment\n" * before + line + "\nint x;\n")
    return tree


@settings(deadline=None)
@given(dirs=DIRS, before=BEFORE, suffix=SUFFIX, form=INCLUDE,
       known=st.sampled_from([k for k in KNOWN if k.name in ("NCCL", "cuDNN")]),
       which=st.data())
def test_an_include_of_a_library_the_toolchain_holds_writes_its_copy_with_the_line(
        tmp_path_factory: pytest.TempPathFactory, dirs: list[str], before: int, suffix: str,
        form: str, known: object, which: st.DataObject) -> None:
    header = which.draw(st.sampled_from(known.headers))  # type: ignore[attr-defined]
    path = "/".join([*dirs, f"k{suffix}"])
    tree = source_tree(tmp_path_factory.mktemp("t"), path, before, form.format(h=header))
    (needed,) = detect(tree, TORCH)
    wheel = known.wheel(13)  # type: ignore[attr-defined]
    assert (needed.where, needed.what, needed.wheel) == (
        f"{path}:{before + 1}", f"includes {header}", wheel)
    assert needed.finding() == (f"{path}:{before + 1}: it needs {known.name} "  # type: ignore[attr-defined]
                                f"(includes {header}): build.libraries {wheel}")
    assert needed.entry_line() == f'    - wheel: "{wheel}"  # {path}:{before + 1} includes {header}'


@settings(deadline=None)
@given(before=BEFORE, known=st.sampled_from([k for k in KNOWN if k.toolkit and k.name not in (
    "the CUDA profiler API",)]), which=st.data())
def test_a_library_of_the_toolchains_cuda_needs_no_entry(
        tmp_path_factory: pytest.TempPathFactory, before: int, known: object,
        which: st.DataObject) -> None:
    header = which.draw(st.sampled_from(known.headers))  # type: ignore[attr-defined]
    tree = source_tree(tmp_path_factory.mktemp("t"), "csrc/k.cu", before, f"#include <{header}>")
    (needed,) = detect(tree, TORCH)
    wheel = known.wheel(13)  # type: ignore[attr-defined]
    version = next(p.split("==")[1] for p in TORCH.requirements if p.startswith(f"{wheel}=="))
    assert needed.wheel is None
    assert needed.finding() == (
        f"csrc/k.cu:{before + 1}: it needs {known.name} (includes {header}): the toolchain "  # type: ignore[attr-defined]
        f"cu130-torch2.14's CUDA provides it ({wheel} {version})")


@settings(deadline=None, max_examples=15)
@given(before=BEFORE, spelling=st.sampled_from(["NCCL", "Nccl", "nccl"]),
       extra=st.sampled_from(["", " REQUIRED", " 2.18 QUIET", " 2.18 REQUIRED"]),
       cmake=st.sampled_from(["CMakeLists.txt", "cmake/deps.cmake", "csrc/CMakeLists.txt"]))
def test_find_package_or_find_library_in_a_cmake_file_is_found(
        tmp_path_factory: pytest.TempPathFactory, before: int, spelling: str, extra: str,
        cmake: str) -> None:
    """A find_package without REQUIRED is optional (the build goes on without it): a note, no
    entry, whose wheel would become every wheel's requirement."""
    tree = source_tree(tmp_path_factory.mktemp("t"), cmake, before,
                       f"find_package({spelling}{extra})")
    (needed,) = detect(tree, TORCH)
    required = "REQUIRED" in extra
    assert (needed.where, needed.what, needed.wheel) == (
        f"{cmake}:{before + 1}", f"find_package({spelling}{extra})",
        "nvidia-nccl-cu13" if required else None)
    tree = source_tree(tmp_path_factory.mktemp("t"), cmake, before,
                       "find_library(NCCL_LIB\n  NAMES nccl\n  HINTS $ENV{NCCL_HOME})")
    (needed,) = detect(tree, TORCH)
    assert (needed.where, needed.what) == (
        f"{cmake}:{before + 1}", "find_library(NCCL_LIB NAMES nccl HINTS $ENV{NCCL_HOME})")


@settings(deadline=None, max_examples=10)
@given(before=BEFORE, name=st.from_regex(r"Find[A-Z][A-Za-z]{0,8}\.cmake", fullmatch=True))
def test_a_find_module_says_how_to_find_a_library_not_that_the_build_needs_it(
        tmp_path_factory: pytest.TempPathFactory, before: int, name: str) -> None:
    tree = source_tree(tmp_path_factory.mktemp("t"), f"cmake/{name}", before,
                       "find_library(NCCL_LIBRARY NAMES nccl HINTS ${NCCL_ROOT})")
    assert detect(tree, TORCH) == ()


@settings(deadline=None, max_examples=20)
@given(before=BEFORE, macro=st.from_regex(r"[A-Z][A-Z0-9_]{2,12}", fullmatch=True),
       opening=st.sampled_from(["#ifdef {m}", "#if defined({m})", "# if {m} > 1",
                                "#ifndef {m}\n#include <cstdio>"]),
       guarded=st.booleans())
def test_an_include_under_a_preprocessor_condition_is_a_note_not_an_entry(
        tmp_path_factory: pytest.TempPathFactory, before: int, macro: str, opening: str,
        guarded: bool) -> None:
    """`#ifdef GGML_USE_NCCL` / `#include <nccl.h>`: the default build does not include it. An
    include guard around the whole header is no condition."""
    guard = "#ifndef K_H_\n#define K_H_\n" if guarded else ""
    end = "\n#endif" if guarded else ""
    head = opening.format(m=macro)
    tree = source_tree(tmp_path_factory.mktemp("t"), "csrc/k.h", before,
                       f"{guard}{head}\n#include <nccl.h>\n#endif{end}")
    (needed,) = detect(tree, TORCH)
    line = before + 1 + guard.count("\n") + head.count("\n") + 1
    condition = head.splitlines()[0].replace("# if", "#if")
    assert (needed.where, needed.wheel) == (f"csrc/k.h:{line}", None)
    assert needed.finding() == (
        f"csrc/k.h:{line}: it needs NCCL (includes nccl.h under {condition}): the build goes "
        "on without it (a condition or an optional find_package): no entry; where the recipe "
        "turns it on, add build.libraries for NCCL")
    tree = source_tree(tmp_path_factory.mktemp("t"), "csrc/k.h", before,
                       f"{guard}#include <nccl.h>{end}")
    (needed,) = detect(tree, TORCH)
    assert needed.wheel == "nvidia-nccl-cu13"


@settings(deadline=None, max_examples=10)
@given(before=BEFORE, how=st.sampled_from([
    ("CMakeLists.txt", "find_package(HDF5 REQUIRED COMPONENTS C)",
     "find_package(HDF5 REQUIRED COMPONENTS C)"),
    ("src/io.cpp", "#include <hdf5.h>", "includes hdf5.h"),
    ("src/io.cpp", "#include <H5Cpp.h>", "includes H5Cpp.h"),
    ("setup.py", "ext = dict(libraries=['hdf5', 'm'])", "links it (libraries=)")]))
def test_hdf5_is_named_as_no_wheel_with_what_to_do(
        tmp_path_factory: pytest.TempPathFactory, before: int,
        how: tuple[str, str, str]) -> None:
    tree = source_tree(tmp_path_factory.mktemp("t"), how[0], before, how[1])
    (needed,) = detect(tree, TORCH)
    assert needed.finding() == (
        f"{how[0]}:{before + 1}: it needs HDF5 ({how[2]}): no wheel provides it (it is no "
        "NVIDIA wheel): give build.libraries an archive of its install prefix (archive: "
        "{url, sha256}, name: hdf5), or patch the package to build without it")
    assert needed.wheel is None


@given(header=st.sampled_from(["nccl.h", "cudnn.h", "hdf5.h"]),
       where=st.sampled_from(["include/{h}", "third/{h}", "{h}"]))
def test_a_header_the_sdist_holds_is_its_own(tmp_path_factory: pytest.TempPathFactory,
                                             header: str, where: str) -> None:
    tree = source_tree(tmp_path_factory.mktemp("t"), "csrc/k.cu", 0, f'#include "{header}"')
    (tree / where.format(h=header)).parent.mkdir(parents=True, exist_ok=True)
    (tree / where.format(h=header)).write_text("// its own\n")
    assert detect(tree, TORCH) == ()


def test_the_first_place_that_needs_a_library_is_the_one_named(tmp_path: Path) -> None:
    tree = source_tree(tmp_path, "csrc/b.cu", 2, "#include <nccl.h>")
    (tree / "csrc" / "a.cu").write_text("#include <nccl.h>\n")
    (tree / "CMakeLists.txt").write_text("find_package(NCCL)\n")
    (needed,) = detect(tree, TORCH)
    assert (needed.where, needed.what) == ("csrc/a.cu:1", "includes nccl.h")


def test_a_library_the_toolchain_lacks_is_pinned_by_pip(tmp_path: Path) -> None:
    """Real pip against the index the machine's pip uses: NCCL for the CUDA-only profile (no
    torch, no NCCL), the profiler API's header within the toolchain's CUDA minor."""
    tree = source_tree(tmp_path, "csrc/k.cu", 0, "#include <nccl.h>")
    (tree / "csrc" / "p.cu").write_text("#include <cuda_profiler_api.h>\n")
    nccl, profiler = detect(tree, CUDA_ONLY)
    assert str(nccl.wheel).startswith("nvidia-nccl-cu13==")
    assert str(profiler.wheel).startswith("nvidia-cuda-profiler-api==13.0.")


def test_recipe_new_writes_the_entry_and_the_finding(tmp_path: Path) -> None:
    tree = tree_with(tmp_path, "from setuptools import setup\nsetup()\n")
    (tree / "csrc").mkdir()
    (tree / "csrc" / "comm.cu").write_text("// x\n#include <nccl.h>\n")
    (tree / "csrc" / "io.cpp").write_text("#include <hdf5.h>\n")
    found = dataclasses.replace(findings(tree), libraries=detect(tree, TORCH))
    assert [line for line in report.report_lines(found) if "it needs" in line] == [
        "csrc/comm.cu:2: it needs NCCL (includes nccl.h): build.libraries nvidia-nccl-cu13",
        "csrc/io.cpp:1: it needs HDF5 (includes hdf5.h): no wheel provides it (it is no NVIDIA "
        "wheel): give build.libraries an archive of its install prefix (archive: {url, "
        "sha256}, name: hdf5), or patch the package to build without it"]
    body = recipe_body(found)
    assert '  libraries:\n    - wheel: "nvidia-nccl-cu13"  # csrc/comm.cu:2 includes nccl.h\n' \
        in body
    assert yaml.safe_load("package: demo\n" + body)["build"]["libraries"] == [
        {"wheel": "nvidia-nccl-cu13"}]
    assert NCCL_PIN.startswith("nvidia-nccl-cu13==")


@given(entries=st.lists(st.sampled_from([
    {"wheel": "nvidia-nccl-cu13==2.30.7", "cuda": "13"},
    {"wheel": "nvidia-nccl-cu12==2.27.5", "cuda": "12"},
    {"archive": {"url": "https://example.invalid/hdf5.tgz", "sha256": "2" * 64},
     "name": "hdf5"}]), min_size=1, max_size=3, unique_by=json.dumps))
def test_a_newer_version_keeps_the_base_recipes_libraries(
        tmp_path_factory: pytest.TempPathFactory, entries: list[dict[str, Any]]) -> None:
    """recipe new for a newer version of a shipped recipe writes its build.libraries again,
    entries that load back as the same libraries."""
    file = tmp_path_factory.mktemp("r") / "tiny-ext.yaml"
    file.write_text(f"package: tiny-ext\nbuild:\n  libraries: {json.dumps(entries)}\n"
                    'versions:\n  - version: "0.1.0"\n    source:\n      pypi: tiny-ext\n'
                    f'      sha256: "{"0" * 64}"\n')
    base = load_recipe(file)
    lines = render.base_recipe_lines(Base(base, base.releases[0]), {}, ())
    file.write_text("\n".join(lines) + '\nversions:\n  - version: "0.2.0"\n    source:\n'
                    f'      pypi: tiny-ext\n      sha256: "{"1" * 64}"\n')
    assert load_recipe(file).libraries == base.libraries
