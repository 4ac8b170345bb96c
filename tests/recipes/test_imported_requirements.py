"""What setup.py imports that no build requirement names (numpy for its headers, on a package
without pyproject.toml's build-system table) becomes a pinned build requirement, as
pyproject.toml's do: wheelsmith builds with the toolchain's packages and build.requires only.
Read from setup.py and the modules of its own it runs (their imports at import time), never
one a `try:` catches the ImportError of, the standard library's, the sdist's own or the
toolchain's. numpy.distutils, which NumPy 2 removed, is named and gets no pin. Generated
trees; the real check of such a package is in tests/recipes/test_recipe_new_check.py."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.conftest import REPO
from tests.recipes.test_setup_py_patterns import findings, tree_with
from wheelsmith.scaffold import buildsystem, report
from wheelsmith.scaffold.buildsystem import Imported, Pinned, requires_lines
from wheelsmith.toolchain.profile import load_profile

PROFILE = load_profile(REPO / "toolchains" / "cu130-torch2.14.yaml")
OUTSIDE = st.from_regex(r"ws[a-z][a-z0-9]{2,8}", fullmatch=True)
# modules no pin is asked for: the standard library's, the toolchain's (and what their
# projects provide)
NOT_PINNED = st.sampled_from(["json", "os.path", "collections.abc", "torch", "setuptools",
                              "nvidia.cublas", "cuda.bindings", "jinja2", "typing_extensions",
                              "pkg_resources", "distutils.core"])
# modules whose project has another name; the CMake backends among them, which the torch
# profiles do not hold
ALIASED = st.sampled_from([("yaml", "pyyaml"), ("PIL", "pillow"), ("sklearn", "scikit-learn"),
                           ("skbuild", "scikit-build"),
                           ("scikit_build_core", "scikit-build-core")])
FORMS = st.sampled_from(["import {m}", "import {m}.sub as alias", "from {m} import thing",
                         "from {m}.sub import thing, other"])
# where the import is, and whether it runs when setup.py builds CUDA
PLACES = st.sampled_from([("setup", True), ("setup-function", True), ("setup-caught", False),
                          ("setup-other-try", True), ("setup-rocm", False), ("own", True),
                          ("own-function", False), ("own-caught", False), ("unimported", False)])
KINDS = st.one_of(OUTSIDE.map(lambda m: ("outside", m, m)), ALIASED.map(lambda a: ("outside", *a)),
                  NOT_PINNED.map(lambda m: ("held", m, "")),
                  OUTSIDE.map(lambda m: ("named", m, m)), st.just(("own", "ownmod", "")))


def statement(form: str, module: str, place: str) -> str:
    line = form.format(m=module)
    if place.endswith("function"):
        return f"def f():\n    {line}\n"
    if place.endswith("caught"):
        return f"try:\n    {line}\nexcept ImportError:\n    pass\n"
    if place.endswith("rocm"):  # another vendor's branch: not the CUDA build's
        return f"if IS_ROCM:\n    {line}\n"
    if place.endswith("other-try"):
        return f"try:\n    {line}\nexcept ValueError:\n    pass\n"
    return f"{line}\n"


@given(imports=st.lists(st.tuples(KINDS, FORMS, PLACES), min_size=1, max_size=8,
                        unique_by=lambda i: i[0][1]))
def test_what_setup_py_runs_imports_of_is_pinned_unless_something_else_holds_it(
        tmp_path_factory: pytest.TempPathFactory,
        imports: list[tuple[tuple[str, str, str], str, tuple[str, bool]]]) -> None:
    tree = tmp_path_factory.mktemp("imports") / "demo-1.0"
    (tree / "ownpkg").mkdir(parents=True)
    (tree / "ownmod.py").write_text("X = 1\n")
    texts = {"setup.py": "import ownpkg.config\n", "ownpkg/__init__.py": "",
             "ownpkg/config.py": "import os\n", "unimported.py": ""}
    files = {"setup": "setup.py", "own": "ownpkg/config.py", "unimported": "unimported.py"}
    named, expected = [], []
    for (kind, module, project), form, (place, runs) in imports:
        file = files[place.split("-")[0]]
        line = texts[file].count("\n") + 1 + ("-" in place)  # under a def or a try
        texts[file] += statement(form, module, place)
        named += [project] if kind == "named" else []
        if kind == "outside" and runs:
            expected.append(Imported(module, canonicalize_name(project), f"{file}:{line}"))
    for file, text in texts.items():
        (tree / file).write_text(text)
    (tree / "pyproject.toml").write_text(
        "[build-system]\nrequires = [" + ", ".join(f'"{n}>=1"' for n in named) + "]\n")
    expected.sort(key=lambda i: (not i.where.startswith("setup.py"),
                                 int(i.where.rpartition(":")[2])))  # the order setup.py runs
    assert buildsystem.imported(tree, PROFILE) == (tuple(expected), "")


@given(how=st.sampled_from(["from numpy.distutils.core import setup",
                            "import numpy.distutils.misc_util", "from numpy import distutils"]),
       also=st.booleans())
def test_numpy_distutils_is_named_and_no_numpy_is_pinned_for_it(
        tmp_path_factory: pytest.TempPathFactory, how: str, also: bool) -> None:
    tree = tmp_path_factory.mktemp("distutils")
    (tree / "setup.py").write_text(("import numpy as np\n" if also else "") + how + "\n")
    where = f"setup.py:{1 + also}"
    assert buildsystem.imported(tree, PROFILE) == ((), where)
    pinned = buildsystem.pinned(tree, PROFILE)  # nothing left to ask pip for
    assert pinned == Pinned(distutils=where)
    assert requires_lines(pinned, PROFILE.name) == [
        f"{where}: patch needed: it imports numpy.distutils, which NumPy 2 removed (no NumPy has "
        "it for Python 3.12 or later), so no numpy is pinned for it: port setup.py to "
        "setuptools (numpy.get_include() gives NumPy's headers) in a patch"]


def test_a_module_pip_cannot_pin_leaves_pyproject_tomls_requirements_pinned(
        tmp_path: Path) -> None:
    """A module's project may have another name than the module (or none on the index): what
    pyproject.toml asks for is pinned alone, and what setup.py imports is named as not
    pinned, with pip's reason."""
    (tmp_path / "pyproject.toml").write_text('[build-system]\nrequires = ["six"]\n')
    (tmp_path / "setup.py").write_text("import six\nimport wheelsmith_no_such_project\n")
    pinned = buildsystem.pinned(tmp_path, PROFILE)
    assert [pin.split("==")[0] for pin in pinned.pins] == ["six"]
    assert pinned.imported == (Imported("wheelsmith_no_such_project",
                                        "wheelsmith-no-such-project", "setup.py:2"),)
    assert pinned.unpinned.startswith("six, wheelsmith-no-such-project: pip's resolution of "
                                      "the build requirements failed"), pinned.unpinned
    lines = requires_lines(pinned, PROFILE.name)
    assert lines[0] == (f"build.requires: {pinned.pins[0]}: the build requirements the toolchain "
                        f"{PROFILE.name} lacks, with what they need (pyproject.toml, "
                        "setup_requires), installed beside it for each build")
    assert lines[1].startswith("build.requires: pip could not pin what setup.py imports "
                               "(wheelsmith_no_such_project at setup.py:2): six, "
                               "wheelsmith-no-such-project: pip's resolution")
    assert lines[1].endswith("; add each module's project to build.requires (NAME==VERSION), "
                             "or patch setup.py to build without it")
    assert len(lines) == 2


def test_psutil_build_requires_pins_needs_no_patch(tmp_path: Path) -> None:
    """flash-attn's setup.py imports psutil to size its jobs: pinned in build.requires, the
    import works, and the patch that takes it out is no longer named as needed."""
    tree = tree_with(tmp_path, "import psutil\nfrom torch.utils.cpp_extension import "
                               "CUDAExtension\ne = CUDAExtension('demo._C', ['k.cu'])\n", "k.cu")
    found = findings(tree)
    assert [patch.stem for patch, _ in found.needed] == ["no-psutil-at-build-time"]
    pinned = dataclasses.replace(found, toolchain=PROFILE.name, requires=Pinned(
        pins=("psutil==7.0.0",), imported=(Imported("psutil", "psutil", "setup.py:1"),)))
    assert pinned.needed == ()
    assert "setup.py:1: it imports psutil, which no build requirement names and the toolchain " \
           f"{PROFILE.name} lacks: build.requires psutil==7.0.0" in report.report_lines(pinned)


@given(extra=st.lists(st.sampled_from(["torch", "ninja", "setuptools>=40", "wheel"]),
                      max_size=3, unique=True),
       scm=st.sampled_from(["setuptools_scm", "setuptools-scm>=6", "setuptools_scm[toml]"]))
@settings(max_examples=4)  # each example asks pip for a resolution (about a second)
def test_setup_requires_that_the_patch_drops_are_pinned_into_build_requires(
        tmp_path_factory: pytest.TempPathFactory, extra: list[str], scm: str) -> None:
    """adam-atan2 0.0.3: `use_scm_version=True` with `setup_requires=['setuptools_scm']`; the
    standard patch drops setup_requires (setuptools would download it), so setuptools-scm is
    pinned into build.requires, else the wheel is version 0.0.0. Real pip resolution."""
    tree = tmp_path_factory.mktemp("scm") / "demo-1.0"
    tree.mkdir()
    listed = ", ".join(repr(r) for r in [scm, *extra])
    (tree / "setup.py").write_text("from setuptools import setup\n"
                                   f"setup(name='demo', use_scm_version=True, "
                                   f"setup_requires=[{listed}])\n")
    names = [p.split("==")[0] for p in buildsystem.pinned(tree, PROFILE).pins]
    assert "setuptools-scm" in names  # with what it needs (pip's resolution)
    assert not {"torch", "ninja", "setuptools", "wheel"} & set(names)  # the toolchain's


@given(line=st.sampled_from([
    "find_package(Python3 REQUIRED COMPONENTS Interpreter Development NumPy)",
    "find_package( Python COMPONENTS NumPy Interpreter )",
    "find_package(Python3 COMPONENTS Interpreter Development)",
    "# find_package(Python3 COMPONENTS NumPy)  (off)", "find_package(NumPyLike)"]),
    where=st.sampled_from(["CMakeLists.txt", "cmake/python.cmake", "third_party/x/CMakeLists.txt"]))
def test_numpy_is_pinned_where_the_projects_cmake_asks_python_for_it(
        tmp_path_factory: pytest.TempPathFactory, line: str, where: str) -> None:
    """cuda-float-compress 0.2.3: `Python3::NumPy ... the target was not found`: CMake finds
    NumPy with the toolchain's Python, which holds none, so it is a build requirement."""
    tree = tmp_path_factory.mktemp("np") / "demo-1.0"
    (tree / where).parent.mkdir(parents=True, exist_ok=True)
    (tree / where).write_text(f"project(p LANGUAGES CXX CUDA)\n{line}\n")
    asks = "NumPy" in line and not line.startswith("#") and "NumPyLike" not in line \
        and not where.startswith("third_party")
    assert buildsystem.cmake_numpy(tree) == ((Requirement("numpy"),) if asks else ())
