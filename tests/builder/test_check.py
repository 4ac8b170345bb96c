"""`wheelsmith build --check`: configure, then compile the cheapest host and CUDA object of each
extension for real with the generated build.ninja's flags, check the CUDA one's device code with
cuobjdump, and stop (sample.py). Real builds of the tiny extension (seconds each)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import add_variant, wheelsmith
from wheelsmith.toolchain.env import Toolchain

pytestmark = pytest.mark.toolchain


def error_lines(stderr: str) -> list[str]:
    lines = stderr.splitlines()
    return lines[next(i for i, line in enumerate(lines) if line.startswith("error: ")):]


def test_check_compiles_one_host_and_one_cuda_object_into_exactly_the_requested_arch(
        project: Path, toolchain: Toolchain) -> None:
    source = add_variant(project, "tiny-ext")
    result = wheelsmith("build", "tiny-ext", "--arch", "12.0", "--check", "--json",
                        "--compile-cache", "off", cwd=project)
    assert result.returncode == 0, result.stderr
    (configured,) = json.loads(result.stdout)["configured"]
    assert [(s["object"], s["rule"], s.get("sass"), s.get("ptx"))
            for s in configured["samples"]] == [
        ("csrc/add.o", "compile", None, None),
        ("csrc/add_kernel.o", "cuda_compile", ["sm_120"], [])]
    assert "configured: _C: SASS sm_120, compiled add.o and add_kernel.o" in result.stderr
    assert not (project / "wheelhouse").exists()
    work = next((project / "build" / "wheelsmith").glob("tiny-ext-0.1.0-*/src/tiny-ext/build"))
    assert [p.name for p in work.rglob("*") if p.is_file()] == ["build.ninja"]  # nothing kept
    assert not (source / "build").exists()  # the recipe's own directory is never built in


def test_a_sample_that_fails_names_the_object_and_the_compilers_first_error(
        project: Path, toolchain: Toolchain) -> None:
    source = add_variant(project, "broken-ext")
    kernel = source / "csrc" / "add_kernel.cu"
    kernel.write_text(kernel.read_text().replace("y[i] = x[i] + 1.0f;", "y[i] = x[i] +;"))
    result = wheelsmith("build", "broken-ext", "--arch", "12.0", "--check",
                        "--compile-cache", "off", cwd=project)
    assert result.returncode == 9, result.stderr
    assert error_lines(result.stderr)[0] == (
        "error: the sample compile of broken-ext 0.1.0 failed: csrc/add_kernel.o "
        "(csrc/add_kernel.cu): csrc/add_kernel.cu:6: error: expected an expression")


def test_a_cxx20_name_clash_in_a_cuda_file_the_sample_would_not_pick_is_compiled_and_named(
        project: Path, toolchain: Toolchain) -> None:
    """A kernel file heavier than the cheapest, whose own header defines `lerp` and which calls
    it beside `using namespace std`: as C++20 (torch's headers need it) the call also finds
    std::lerp. The check compiles it because of that definition, and fails naming the clash,
    where compiling only the cheapest CUDA object said OK."""
    source = add_variant(project, "clash-ext", (
        'sources=["csrc/add.cpp", "csrc/add_kernel.cu"]',
        'sources=["csrc/add.cpp", "csrc/add_kernel.cu", "csrc/blend_kernel.cu"]'))
    (source / "csrc" / "blend.cuh").write_text(
        "#pragma once\n"
        "__host__ __device__ inline float lerp(float a, float b, float t) {\n"
        "  return a + t * (b - a);\n}\n")
    (source / "csrc" / "blend_kernel.cu").write_text(
        "#include <cmath>\n#include \"blend.cuh\"\nusing namespace std;\n"
        "// a kernel file heavier than add_kernel.cu" + " ." * 400 + "\n"
        "float blend_host(float a, float b) { return lerp(a, b, 0.5f); }\n")
    result = wheelsmith("build", "clash-ext", "--arch", "12.0", "--check", "--compile-cache",
                        "off", cwd=project)
    assert result.returncode == 9, result.stderr
    first = error_lines(result.stderr)[0]
    assert first.startswith("error: the sample compile of clash-ext 0.1.0 failed: csrc/"
                            "blend_kernel.o (csrc/blend_kernel.cu): csrc/blend_kernel.cu:"), first
    assert "lerp" in first
    assert ("a function of the package has the name of one C++20 added to the standard library"
            in result.stderr)


def test_device_code_other_than_the_request_fails_the_check(project: Path,
                                                            toolchain: Toolchain) -> None:
    """build.ninja asks for sm_120 alone (the pre-build check passes); flags nvcc gets from
    elsewhere add sm_90, which only the sample's cuobjdump can see."""
    add_variant(project, "tiny-ext")
    result = wheelsmith("build", "tiny-ext", "--arch", "12.0", "--check", "--compile-cache",
                        "off", "--env", "NVCC_APPEND_FLAGS=-gencode=arch=compute_90,code=sm_90",
                        cwd=project)
    assert result.returncode == 10, result.stderr
    assert error_lines(result.stderr)[:2] == [
        "error: the sample compile of tiny-ext 0.1.0 does not contain exactly the device code "
        "for 12.0", "  csrc/add_kernel.o: SASS for sm_90 was not requested"]
