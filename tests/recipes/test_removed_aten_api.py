"""`recipe new` patches the ATen spellings every toolchain's torch removed (auto-gptq 0.7.1's
sample compile: `no suitable conversion function from "const at::DeprecatedTypeProperties" to
"c10::ScalarType"`): generated dispatch calls and AT_CHECKs in generated source trees, the patch
applied by wheelsmith's exact patcher. The real compile of a patched source is in
tests/recipes/test_recipe_new_check.py."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.recipes.test_setup_py_patterns import findings, tree_with
from wheelsmith.recipes.patch import apply_one, read_exactly, write_exactly
from wheelsmith.scaffold import aten_api, patches, report
from wheelsmith.toolchain.env import Toolchain

CUDA_EXT = ("from torch.utils.cpp_extension import CUDAExtension\n"
            "e = CUDAExtension('demo._C', ['csrc/k.cu'])\n")

SPACE = st.sampled_from(["", " ", "\n    ", "\t", " \\\n  "])
NAME = st.from_regex(r"[a-z_][a-z0-9_]{0,6}", fullmatch=True)


@st.composite
def expressions(draw: st.DrawFn, depth: int = 0) -> str:
    """A tensor expression as C++ writes one: a name, a member, an index, a call whose
    arguments hold commas inside their parentheses or braces."""
    base = draw(st.one_of(NAME, NAME.map(lambda n: f"self->{n}"), NAME.map(lambda n: f"{n}[0]")))
    for _ in range(draw(st.integers(0, 2 if depth < 2 else 0))):
        inner = draw(st.lists(expressions(depth + 1), max_size=2))
        call = draw(st.sampled_from(["contiguous", "view", "to", "select"]))
        listed = ", ".join(inner)
        base += f".{call}({'{' + listed + '}' if draw(st.booleans()) else listed})"
    return base


# the dispatch macros and the scalar types some of them take before the dispatched type
MACROS = st.sampled_from([
    ("AT_DISPATCH_FLOATING_TYPES", ()), ("AT_DISPATCH_FLOATING_TYPES_AND_HALF", ()),
    ("AT_DISPATCH_ALL_TYPES", ()), ("AT_DISPATCH_INTEGRAL_TYPES", ()),
    ("AT_DISPATCH_FLOATING_TYPES_AND", ("at::ScalarType::Half",)),
    ("AT_DISPATCH_FLOATING_TYPES_AND2", ("at::kHalf", "at::kBFloat16")),
    ("AT_DISPATCH_ALL_TYPES_AND3", ("at::kBool", "at::kHalf", "at::kBFloat16"))])


@st.composite
def dispatches(draw: st.DrawFn) -> tuple[str, str]:
    """A dispatch call as a removed spelling (`x.type()`) or a current one, and what the patch
    makes of it: the lambda's own `.type()` calls and commas are the body's, left as they
    are."""
    macro, extra = draw(MACROS)
    tensor = draw(expressions())
    old = draw(st.booleans())
    spelled = draw(st.sampled_from([".type()", ".type ( )", ". type()"])) if old else \
        draw(st.sampled_from([".scalar_type()", ".type().scalarType()"]))
    body = f"[&] {{ run<scalar_t>({tensor}.type(), \"a,b\", ','); }}"
    before = f"{draw(SPACE)}".join([f"{macro}(", *[f"{e}, " for e in extra],
                                    f"{tensor}\0, \"{draw(NAME)}\", {body})"])
    return before.replace("\0", spelled), before.replace(
        "\0", ".scalar_type()" if old else spelled)


@given(calls=st.lists(dispatches(), min_size=1, max_size=4), gap=st.sampled_from(
    ["\n", ";\n", "\n// AT_DISPATCH_FLOATING_TYPES(x.type(), \"in a comment\", f)\n"]))
def test_a_dispatch_of_tensor_type_takes_its_scalar_type_and_nothing_else_changes(
        calls: list[tuple[str, str]], gap: str) -> None:
    assert aten_api.current(gap.join(c[0] for c in calls)) == \
        gap.replace("x.type()", "x.scalar_type()").join(c[1] for c in calls)


@given(before=st.sampled_from(["", " ", "(", ";", "\n  ", "!"]),
       neighbour=st.sampled_from(["MY_AT_CHECK(", "AT_CHECKED(", "#define AT_CHECK_X(",
                                  "x.AT_CHECK_Y(", "TORCH_CHECK("]),
       space=st.sampled_from(["", " ", "\n"]))
def test_at_check_becomes_torch_check_and_names_that_only_contain_it_stay(
        before: str, neighbour: str, space: str) -> None:
    text = f"{before}AT_CHECK{space}(x.dim() == 2, \"2-d\"); {neighbour}1);\n"
    assert aten_api.current(text) == \
        f"{before}TORCH_CHECK{space}(x.dim() == 2, \"2-d\"); {neighbour}1);\n"


def test_a_tree_that_defines_at_check_itself_keeps_it(tmp_path: Path) -> None:
    """deepspeed's compat.h: `#define AT_CHECK TORCH_CHECK` where torch has none."""
    tree = tree_with(tmp_path, CUDA_EXT, "csrc/k.cu")
    (tree / "csrc" / "compat.h").write_text("#ifndef AT_CHECK\n#define AT_CHECK TORCH_CHECK\n"
                                           "#endif\n")
    (tree / "csrc" / "k.cu").write_text('#include "compat.h"\nAT_CHECK(ok, "ok");\n')
    assert aten_api.diff(tree) == ""


@given(latin1=st.booleans(), crlf=st.booleans(), newline_at_end=st.booleans())
def test_the_patch_applies_exactly_and_leaves_third_party_sources_alone(
        tmp_path_factory: pytest.TempPathFactory, latin1: bool, crlf: bool,
        newline_at_end: bool) -> None:
    """auto-gptq's shape, in files a byte-exact patch must keep: CRLF line ends, a Latin-1
    comment, no newline at the end."""
    end = "\r\n" if crlf else "\n"
    kernel = end.join(["// (c) J\udce9r\udcf4me" if latin1 else "// kernels",
                       "AT_DISPATCH_FLOATING_TYPES(", "    vec.type(), \"vecquant2\", ([&] {",
                       "      f<scalar_t>(vec); }));",
                       "AT_CHECK(vec.dim() == 1, \"1-d\");"]) + (end if newline_at_end else "")
    tree = tree_with(tmp_path_factory.mktemp("t"), CUDA_EXT, "csrc/k.cu")
    write_exactly(tree / "csrc" / "k.cu", kernel)
    (tree / "third_party" / "cutlass").mkdir(parents=True)
    write_exactly(tree / "third_party" / "cutlass" / "old.h", kernel)
    found = findings(tree)
    assert [w.file for w in found.written] == ["0001-current-aten-api.patch"]
    copy = tree.parent / "patched"
    shutil.copytree(tree, copy)
    patch = tree.parent / found.written[0].file
    patch.write_bytes(found.written[0].data)
    apply_one(patch, copy)
    assert read_exactly(copy / "csrc" / "k.cu") == kernel.replace(
        "vec.type()", "vec.scalar_type()").replace("AT_CHECK(", "TORCH_CHECK(")
    assert read_exactly(copy / "third_party" / "cutlass" / "old.h") == kernel
    shutil.rmtree(copy)


def test_thc_is_named_with_its_file_and_line_for_a_hand_made_patch(tmp_path: Path) -> None:
    tree = tree_with(tmp_path, CUDA_EXT, "csrc/k.cu", "csrc/ops.cpp", "tests/t.cu")
    for name in ("csrc/k.cu", "csrc/ops.cpp", "tests/t.cu"):
        (tree / name).write_text("#include <torch/extension.h>\n  #  include <THC/THC.h>\n")
    found = dataclasses.replace(findings(tree), thc=aten_api.thc_includes(tree))
    assert report.report_lines(found)[-2:] == [
        "csrc/k.cu:2: patch needed: it includes THC/THC.h, which torch removed in 1.11: port "
        "what it uses by hand (THCudaCheck -> C10_CUDA_CHECK, the THCState stream -> "
        "at::cuda::getCurrentCUDAStream() from ATen/cuda/CUDAContext.h)",
        "THC/THC.h: included by 1 more file(s) of the sdist"]


@given(name=st.sampled_from(sorted(aten_api.CUB_FUNCTORS)), space=SPACE,
       prefix=st.sampled_from(["", "::"]),
       use=st.sampled_from(["r = {f}();", "BlockReduce<float, 128>(s).Reduce(v, {f}());",
                            "using Op = {f};", "Scan<int, {f}>(x);"]),
       neighbour=st.sampled_from(["cub::{n}imum()", "mycub::{n}()", "cub::{n}::value",
                                  "cub::Block{n}()", "hipcub::{n}()"]))
def test_cubs_removed_functors_become_the_ones_cccl_kept_and_their_neighbours_stay(
        name: str, space: str, prefix: str, use: str, neighbour: str) -> None:
    kept = neighbour.format(n=name)
    text = use.format(f=f"{prefix}cub::{name}") + space + kept + ";\n"
    assert aten_api.current(text) == \
        use.format(f=aten_api.CUB_FUNCTORS[name]) + space + kept + ";\n"


CUB_DEVICE_CALLS = st.sampled_from(["cub::DeviceScan::ExclusiveSum",
                                    "::cub::DeviceScan::InclusiveSum",
                                    "cub::DeviceRadixSort::SortPairs<int, float>",
                                    "cub::DeviceReduce::Sum", "cub::DeviceSelect::Flagged"])
DEBUG_ARGUMENTS = st.sampled_from(["debug_synchronous", "false", "true", "kDebugSync",
                                   "opts.debug"])
ARGUMENTS = st.lists(st.one_of(expressions(), st.sampled_from(["0", "n * 2", "f(a, b)"])),
                     min_size=2, max_size=7)


@given(call=CUB_DEVICE_CALLS, arguments=ARGUMENTS, debug=DEBUG_ARGUMENTS, space=SPACE,
       stream=st.sampled_from(["stream", "0", "at::cuda::getCurrentCUDAStream()"]))
def test_the_debug_argument_cub_removed_is_dropped_from_its_device_calls(
        call: str, arguments: list[str], debug: str, space: str, stream: str) -> None:
    """megablocks 0.10.0's `cub::DeviceScan::ExclusiveSum(..., stream, debug_synchronous)`:
    CCCL 3 has no overload that takes it."""
    listed = f",{space}".join([*arguments, stream])
    assert aten_api.current(f"CUDA_CALL({call}({listed},{space}{debug}));\n") == \
        f"CUDA_CALL({call}({listed}));\n"


@given(arguments=ARGUMENTS, debug=DEBUG_ARGUMENTS,
       neighbour=st.sampled_from(["hipcub::DeviceScan::ExclusiveSum", "mycub::DeviceScan::Sum",
                                  "cub::BlockScan<int, 128>(s).ExclusiveSum",
                                  "thrust::DeviceScan::ExclusiveSum", "cub::DeviceScan"]))
def test_calls_that_are_no_cub_device_algorithm_keep_their_last_argument(
        arguments: list[str], debug: str, neighbour: str) -> None:
    text = f"{neighbour}({', '.join(arguments)}, stream, {debug});\n"
    assert aten_api.current(text) == text


@given(arguments=st.lists(st.sampled_from(["a", "b", "stream"]), max_size=1),
       debug=DEBUG_ARGUMENTS, cut=st.booleans())
def test_a_short_or_unclosed_cub_call_is_left_as_it_is(arguments: list[str], debug: str,
                                                       cut: bool) -> None:
    """Two arguments cannot end in a debug flag after a stream; a call the text cuts off has
    no last argument to know."""
    text = f"cub::DeviceScan::ExclusiveSum({', '.join([*arguments, debug])}"
    text = text + ", x" if cut else text + ");"
    assert aten_api.current(text) == text


def test_a_tree_that_defines_cubs_functors_itself_keeps_them(tmp_path: Path) -> None:
    tree = tree_with(tmp_path, CUDA_EXT, "csrc/k.cu")
    (tree / "csrc" / "compat.cuh").write_text("namespace cub {\nstruct Max { };\n}\n")
    (tree / "csrc" / "k.cu").write_text('#include "compat.cuh"\nauto m = cub::Max();\n')
    assert aten_api.diff(tree) == ""


@pytest.mark.toolchain
def test_what_replaces_cubs_functors_compiles_with_the_toolchains_nvcc(
        tmp_path: Path, toolchain: Toolchain) -> None:
    """Each replacement, in the reduction and scan calls CUB takes functors in, compiled by
    the default profile's nvcc (CUDA 13), whose CUB has none of the old names."""
    calls = "\n".join([
        *(f"  cub::DeviceReduce::Reduce(nullptr, bytes, x, y, n, "
          f"{aten_api.current(f'cub::{f}()')}, 0);" for f in ("Sum", "Max", "Min")),
        aten_api.current("  cub::DeviceScan::ExclusiveSum(nullptr, bytes, x, y, n, 0, false);"),
        aten_api.current("  cub::DeviceScan::InclusiveSum(nullptr, bytes, x, y, n, 0, debug);")])
    source = tmp_path / "k.cu"
    source.write_text("#include <cub/cub.cuh>\nvoid f(const int* x, int* y, int n, bool debug) {\n"
                      f"  size_t bytes = 0;\n{calls}\n"
                      "  static_assert(::cuda::std::equal_to<>()(1, 1), \"\");\n}\n")
    olds = {"Sum": "auto o = cub::Sum();", "Max": "auto o = cub::Max();",  # gone from this CUB
            "debug": "void g(int* x) { size_t b = 0;\n"
                     "  cub::DeviceScan::ExclusiveSum(nullptr, b, x, x, 1, 0, false); }"}
    for name, spelled in olds.items():
        old = tmp_path / f"old_{name}.cu"
        old.write_text(f"#include <cub/cub.cuh>\n{spelled}\n")
        assert subprocess.run([str(toolchain.nvcc), "-c", str(old), "-o", str(tmp_path / "o.o")],
                              capture_output=True, check=False).returncode != 0
    done = subprocess.run([str(toolchain.nvcc), "-std=c++17", "-c", str(source), "-o",
                           str(tmp_path / "k.o"), "-gencode", "arch=compute_120,code=sm_120"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


@given(removed=st.sampled_from([
    "CUDA_CALL(cub::DeviceScan::ExclusiveSum(t, b, x, y, n, stream, debug_synchronous));",
    "auto op = cub::Max();", "AT_CHECK(x.dim() == 1, \"1-d\");"]))
def test_the_written_patch_is_named_for_what_it_fixes(
        tmp_path_factory: pytest.TempPathFactory, removed: str) -> None:
    """megablocks 0.10.0 has no hard-coded -gencode list: its line must not say it has."""
    tree = tree_with(tmp_path_factory.mktemp("t"), CUDA_EXT, "csrc/k.cu")
    (tree / "csrc" / "k.cu").write_text(f"void f() {{\n  {removed}\n}}\n")
    lines = [line for line in report.report_lines(findings(tree)) if "wrote " in line]
    written = patches.current_aten_api(tree, 1)
    assert written is not None
    assert lines == ["its C++ and CUDA sources use spellings torch or CUDA 13's CUB removed: "
                     f"wrote 0001-current-aten-api.patch: {written.description}"]
