"""The sample compile's choices and its reading of a compiler's output, on generated inputs:
which objects stand for a configured build (the cheapest host and CUDA object: an earlier run's
seconds, else the source with the local headers it includes), and the first error a compiler
printed, with its file:line, among any other output (sample.py, diagnose.first_error)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wheelsmith.builder.diagnose import CXX20_NAMES, first_error, in_tree
from wheelsmith.builder.ninjafile import Unit
from wheelsmith.builder.sample import choose, own_files, weight

NAMES = st.from_regex(r"[a-z][a-z0-9_]{0,11}", fullmatch=True)
MESSAGES = st.from_regex(r"[A-Za-z#\"'][ -~]{0,60}", fullmatch=True).map(str.strip).filter(bool)
# what a build log holds besides errors: progress, warnings, notes, command lines
NOISE = st.sampled_from([
    "[1/2] c++ -MMD -MF x.o.d -Werror=format -c x.cpp -o x.o",
    "In file included from csrc/a.cpp:3:",
    "csrc/a.h:12:7: warning: unused variable 'n' [-Wunused-variable]",
    "csrc/k.cuh(40): warning #177-D: variable \"t\" was declared but never referenced",
    "ptxas info    : Used 32 registers, used 1 barriers",
    "      |  ^~~~~",
    "note: candidate: 'float lerp(float, float, float)'",
    "ninja: build stopped: subcommand failed.",
])


def gcc_error(path: str, line: int, col: int, what: str) -> tuple[str, str]:
    return f"{path}:{line}:{col}: error: {what}", f"{path}:{line}:{col}: error: {what}"


def nvcc_error(path: str, line: int, _col: int, what: str) -> tuple[str, str]:
    return f"{path}({line}): error: {what}", f"{path}:{line}: error: {what}"


def edg_numbered(path: str, line: int, _col: int, what: str) -> tuple[str, str]:
    return f"{path}({line}): error #20014-D: {what}", f"{path}:{line}: error: {what}"


def gcc_fatal(path: str, line: int, col: int, what: str) -> tuple[str, str]:
    return f"{path}:{line}:{col}: fatal error: {what}", f"{path}:{line}:{col}: error: {what}"


def cmake_at(path: str, line: int, _col: int, what: str) -> tuple[str, str]:
    """CMake's configure error: its message on indented lines (wrapped), then a blank line."""
    words = what.split()
    wrapped = "\n".join(f"  {' '.join(words[i:i + 4])}" for i in range(0, len(words), 4))
    return (f"CMake Error at {path}:{line} (message):\n{wrapped}\n",
            f"{path}:{line}: error: {' '.join(words)}")


def cmake_in(path: str, _line: int, _col: int, what: str) -> tuple[str, str]:
    """CMake's generate-step error names a file and no line."""
    return f"CMake Error in {path}:\n  {what}\n", f"{path}: error: {' '.join(what.split())}"


ERRORS = st.builds(lambda form, path, line, col, what: form(path, line, col, what),
                   st.sampled_from([gcc_error, nvcc_error, edg_numbered, gcc_fatal, cmake_at,
                                    cmake_in]),
                   st.lists(NAMES, min_size=1, max_size=4).map(
                       lambda parts: "/".join(parts) + ".cuh"),
                   st.integers(1, 99999), st.integers(1, 300), MESSAGES)


@given(before=st.lists(NOISE, max_size=6), errors=st.lists(ERRORS, min_size=1, max_size=4),
       after=st.lists(NOISE, max_size=6))
def test_the_first_error_with_its_place_is_found_among_any_output(
        before: list[str], errors: list[tuple[str, str]], after: list[str]) -> None:
    printed = [line for line, _ in errors]
    output = "\n".join([*before, *printed, *after]) + "\n"
    assert first_error(output) == errors[0][1]


@given(before=st.lists(NOISE, max_size=6))
def test_an_error_without_a_place_is_given_only_when_none_has_one(before: list[str]) -> None:
    fatal = "nvcc fatal   : Unsupported gpu architecture 'compute_53'"
    assert first_error("\n".join([*before, fatal])) == fatal
    assert first_error("\n".join([*before, fatal, "a.cu(3): error: x"])) == "a.cu:3: error: x"
    assert first_error("\n".join(before)) is None
    cmake = "CMake Error: Could not find CMAKE_ROOT !!!"
    assert first_error("\n".join([*before, cmake])) == cmake


def ninja_text(build: Path, units: list[tuple[str, str]]) -> str:
    """A build.ninja as torch writes it (absolute paths, one -I of the tree)."""
    lines = [f"cflags = -I{build.parent.parent}/include -I/opt/torch/include -c",
             "rule compile", "  command = c++ $in", "rule cuda_compile", "  command = nvcc $in"]
    for source, rule in units:
        stem = Path(source).with_suffix(".o")
        lines.append(f"build {build}/{stem}: {rule} {build.parent.parent}/{source}")
    return "\n".join(lines) + "\n"


SOURCES = st.lists(st.tuples(NAMES, st.sampled_from(["compile", "cuda_compile"]),
                             st.integers(0, 400), st.sampled_from(["", "small.h", "big.h"])),
                   min_size=1, max_size=8, unique_by=lambda item: item[0])


@given(sources=SOURCES)
def test_the_cheapest_object_of_each_rule_is_chosen_with_the_headers_it_includes(
        tmp_path_factory: pytest.TempPathFactory, sources: list[tuple[str, str, int, str]]
) -> None:
    root = tmp_path_factory.mktemp("tree")
    (root / "include").mkdir()
    (root / "include" / "small.h").write_text("// s\n")
    (root / "include" / "big.h").write_text('#include "small.h"\n' + "//" * 5000 + "\n")
    build = root / "build" / "temp.linux-x86_64-cpython-311"
    units = []
    for name, rule, size, header in sources:
        suffix = ".cu" if rule == "cuda_compile" else ".cpp"
        include = f'#include "{header}"\n' if header else ""
        (root / "csrc").mkdir(exist_ok=True)
        (root / "csrc" / f"{name}{suffix}").write_text(include + "x" * size)
        units.append((f"csrc/{name}{suffix}", rule))
    text = ninja_text(build, units)
    chosen = choose(text, build, {})
    hosts = [s for s, r in units if r == "compile"]
    assert sorted(str(Path(u.source).relative_to(root)) for u in chosen
                  if u.rule == "compile") == sorted(hosts)  # every host object: cheap
    of_cuda = [s for s, r in units if r == "cuda_compile"]
    picked = [u for u in chosen if u.rule == "cuda_compile"]
    assert len(picked) == (1 if of_cuda else 0)
    if of_cuda:
        weights = {s: weight(root / s, [root / "include"]) for s in of_cuda}
        assert weights[str(Path(picked[0].source).relative_to(root))] == min(weights.values())


def test_an_earlier_runs_seconds_choose_over_sizes(tmp_path: Path) -> None:
    build = tmp_path / "build" / "temp.linux-x86_64-cpython-311"
    (tmp_path / "csrc").mkdir()
    for name, size in [("fwd.cu", 10), ("bwd.cu", 5), ("api.cpp", 3), ("ops.cpp", 9)]:
        (tmp_path / "csrc" / name).write_text("x" * size)
    text = ninja_text(build, [("csrc/fwd.cu", "cuda_compile"), ("csrc/bwd.cu", "cuda_compile"),
                              ("csrc/api.cpp", "compile"), ("csrc/ops.cpp", "compile")])
    by_size = choose(text, build, {})
    assert [Path(u.source).name for u in by_size] == ["api.cpp", "ops.cpp", "bwd.cu"]
    timed = choose(text, build, {"csrc/fwd.o": 40.0, "csrc/bwd.o": 300.0, "csrc/ops.o": 2.0})
    assert [Path(u.source).name for u in timed] == ["api.cpp", "ops.cpp", "fwd.cu"]
    assert timed[2] == Unit(f"{build}/csrc/fwd.o", f"{tmp_path}/csrc/fwd.cu", "cuda_compile")


def test_paths_in_a_compilers_error_are_given_in_the_source_tree(tmp_path: Path) -> None:
    """Absolute ones, and the ones ccache's base_dir made relative to the build directory
    (what nvcc then prints); a path outside the tree stays as it is."""
    source = tmp_path / "src" / "demo-1.0"
    (source / "build" / "temp.linux-x86_64-cpython-311").mkdir(parents=True)
    (source / "csrc" / "kernels").mkdir(parents=True)
    (source / "csrc" / "kernels" / "lerp.cuh").write_text("// x\n")
    assert in_tree("../../csrc/kernels/lerp.cuh:6: error: x", source, None) == (
        "csrc/kernels/lerp.cuh:6: error: x")
    assert in_tree(f"{source}/csrc/kernels/lerp.cuh(6): error: x", source, None) == (
        "csrc/kernels/lerp.cuh(6): error: x")
    assert in_tree("../../../elsewhere.h:1: error: y", source, None) == (
        "../../../elsewhere.h:1: error: y")


DEFINITIONS = st.sampled_from([
    "__device__ inline float {name}(float a, float b, float t) {{ return a + t * (b - a); }}",
    "template <typename T>\n__host__ __device__ T {name}(T a, T b) {{\n  return a;\n}}",
    "static int {name}(int x)\n{{\n  return x;\n}}",
])
MENTIONS = st.sampled_from([  # not definitions: a call, a declaration, a comment's words
    "float y = {name}(a, b, t);", "float {name}(float, float, float);",
    "// {name}(a, b) is not defined here", "auto f = &{name};"])


@given(st.lists(st.tuples(st.sampled_from(sorted(CXX20_NAMES)), st.booleans(),
                          st.sampled_from(["", "shared.cuh", "own.cuh"])),
                min_size=1, max_size=6),
       DEFINITIONS, MENTIONS)
def test_every_own_file_that_defines_a_cxx20_std_name_gets_a_cuda_object_compiled(
        tmp_path_factory: pytest.TempPathFactory, kernels: list[tuple[str, bool, str]],
        definition: str, mention: str) -> None:
    """A function of the package with a name C++20 gave std (std::lerp, ...) clashes where a
    call also finds std's: the check compiles the cheapest CUDA object that reads each file
    defining one (the source or a header of its own), as well as the cheapest of all."""
    root = tmp_path_factory.mktemp("tree")
    (root / "csrc").mkdir()
    (root / "include").mkdir()
    defining: dict[str, str] = {}
    units = []
    for index, (name, defines, header) in enumerate(kernels):
        body = (definition if defines else mention).format(name=name)
        if header and defines:
            (root / "include" / header).write_text(body + "\n")
            defining.setdefault(f"include/{header}", f"csrc/k{index}.cu")
            text = f'#include "{header}"\n'
        else:
            text = body + "\n"
            if defines:
                defining[f"csrc/k{index}.cu"] = f"csrc/k{index}.cu"
        (root / "csrc" / f"k{index}.cu").write_text(text + "x" * (100 + index))
        units.append((f"csrc/k{index}.cu", "cuda_compile"))
    build = root / "build" / "temp.linux-x86_64-cpython-311"
    chosen = {str(Path(u.source).relative_to(root)) for u in choose(
        ninja_text(build, units), build, {})}
    cheapest = min((s for s, _ in units), key=lambda s: weight(root / s, [root / "include"]))
    for own in defining:
        readers = [s for s, _ in units if root / own in own_files(root / s, [root / "include"])]
        assert any(r in chosen for r in readers), (own, chosen)
    assert cheapest in chosen
    assert len(chosen) <= 1 + len(defining)
