"""CUDA 13.0's math headers against glibc 2.42: the backport of CUDA 13.2's rsqrt declarations
(a toolchain venv gets it only where the machine's glibc is 2.42 or newer). The build that
needs it, cp314 with torch 2.14 in the forky image, is tests/builder/test_new_pythons.py."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from wheelsmith.builder.reproducible import RANDOM_SEED
from wheelsmith.errors import ToolchainError
from wheelsmith.toolchain import glibc_headers
from wheelsmith.toolchain.env import Toolchain

pytestmark = pytest.mark.toolchain

KERNEL = r"""
#include <cmath>
__global__ void inv_sqrt(float* y, const double* x) { y[0] = rsqrtf(y[0]) + float(rsqrt(x[0])); }
"""

DECLARATION = r"\b(double\s+rsqrt\((const )?double|float\s+rsqrtf\((const )?float) [ax]\)"


@pytest.fixture
def cuda_13_0_include(toolchain: Toolchain, tmp_path: Path) -> Path:
    """A copy of the toolchain's CUDA 13.0 include/ (its crt/ as shipped)."""
    include = tmp_path / "include"
    shutil.copytree(toolchain.cuda_home / "include", include, symlinks=True)
    return include


def rsqrt_declarations(crt: Path) -> list[str]:
    return [line.strip() for name in ("math_functions.h", "math_functions.hpp")
            for line in (crt / name).read_text().splitlines()
            if re.search(DECLARATION, line)]


def test_cuda_13_0_headers_get_the_noexcept_only_where_glibc_is_2_42_or_newer(
        cuda_13_0_include: Path) -> None:
    crt = cuda_13_0_include / "crt"
    assert glibc_headers.needs_fix(crt, (2, 42))
    assert glibc_headers.needs_fix(crt, (2, 43))
    assert not glibc_headers.needs_fix(crt, (2, 41))
    assert not glibc_headers.needs_fix(crt, None)


def test_the_backport_gives_cuda_13_2s_rsqrt_declarations_and_still_compiles(
        cuda_13_0_include: Path, toolchain: Toolchain, tmp_path: Path) -> None:
    crt = cuda_13_0_include / "crt"
    assert rsqrt_declarations(crt) == [
        "extern __DEVICE_FUNCTIONS_DECL__ __device_builtin__ double                 "
        "rsqrt(double x);",
        "extern __DEVICE_FUNCTIONS_DECL__ __device_builtin__ float                  "
        "rsqrtf(float x);",
        "__func__(double rsqrt(double a));",
        "__func__(float rsqrtf(float a));",
        "__func__(double rsqrt(const double a))",
        "__func__(float rsqrtf(const float a))",
    ]
    glibc_headers.apply(crt)
    # CUDA 13.2's lines (nvidia-cuda-crt 13.2.86), read there
    assert rsqrt_declarations(crt) == [
        "extern __DEVICE_FUNCTIONS_DECL__ __device_builtin__ double                 "
        "rsqrt(double x) _NV_RSQRT_SPECIFIER;",
        "extern __DEVICE_FUNCTIONS_DECL__ __device_builtin__ float                  "
        "rsqrtf(float x) _NV_RSQRT_SPECIFIER;",
        "__func__(double rsqrt(double a) _NV_RSQRT_SPECIFIER);",
        "__func__(float rsqrtf(float a) _NV_RSQRT_SPECIFIER);",
        "__func__(double rsqrt(const double a)) _NV_RSQRT_SPECIFIER",
        "__func__(float rsqrtf(const float a) _NV_RSQRT_SPECIFIER)",
    ]
    assert not glibc_headers.needs_fix(crt, (2, 42))  # once is enough
    source = tmp_path / "inv_sqrt.cu"
    source.write_text(KERNEL)
    def compile_with(include: Path) -> bytes:  # one output path: nvcc's temp names follow it
        subprocess.run([str(toolchain.cuda_home / "bin" / "nvcc"), "-I", str(include),
                        "-objtemp", f"-frandom-seed={RANDOM_SEED}", "-arch", "sm_120", "-c",
                        str(source), "-o", str(tmp_path / "a.o")],
                       check=True, capture_output=True)
        return (tmp_path / "a.o").read_bytes()

    # below glibc 2.42 the macro is empty: the same object as with the headers as shipped
    assert compile_with(cuda_13_0_include) == compile_with(toolchain.cuda_home / "include")


def test_headers_of_another_layout_are_refused_by_name(cuda_13_0_include: Path) -> None:
    crt = cuda_13_0_include / "crt"
    hpp = crt / "math_functions.hpp"
    hpp.write_text(hpp.read_text().replace("__func__(float rsqrtf(const float a))\n",
                                           "__func__(float rsqrtf(float a))\n"))
    with pytest.raises(ToolchainError) as raised:
        glibc_headers.apply(crt)
    assert raised.value.message == (
        f"{hpp} is not laid out as CUDA 13.0's: cannot add glibc 2.42's noexcept to its rsqrt "
        "declarations (looked for '__func__(float rsqrtf(const float a))')")
    assert raised.value.hint == ("on glibc 2.42 or newer use a profile with CUDA 13.2 or newer, "
                                 "whose headers carry the fix (wheelsmith toolchain list)")
    assert glibc_headers.needs_fix(crt, (2, 42))  # nothing was written
