"""Known failure signatures are recognised in real log lines."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wheelsmith.builder.diagnose import CXX20_NAMES, diagnose

LINES = {
    "bare-metal-version": "    NameError: name 'bare_metal_version' is not defined",
    "unsupported-arch": "nvcc fatal   : Unsupported gpu architecture 'compute_53'",
    "cuda-major-mismatch": "RuntimeError: ('The detected CUDA version (%s) mismatches the "
                           "version that was used to compilePyTorch (%s). Please make sure to "
                           "use the same CUDA versions.', '12.8', '13.0')",
    "oom-killed": "Killed\nninja: build stopped: subcommand failed.",
    "download-attempt": "error: <urlopen error [Errno -3] Temporary failure in name resolution>",
    "no-torch": "ModuleNotFoundError: No module named 'torch'",
    # a hatchling package without build.requires; vllm 0.34.0's setup.py:21
    "build-import-missing": "the build of tiny-pure 0.1.0 failed: Backend 'hatchling.build' "
                            "is not available.\nModuleNotFoundError: No module named "
                            "'setuptools_rust'",
    # chamferdist 1.0.3 and spatial-correlation-sampler 0.5.0 against torch 2.14 (issue 22)
    "cxx-standard": "torch/include/torch/csrc/api/include/torch/all.h:5:2: error: #error C++20 "
                    "or later compatible compiler is required to use PyTorch.",
    # a float lerp of the package's own against C++20's std::lerp (issue 33): nvcc, g++
    "cxx20-name-clash": 'csrc/k.cuh(9): error: more than one instance of overloaded function '
                        '"lerp" matches the argument list:',
    # sccache's own lines, seen with a real sccache-dist farm (tests/builder/test_compile_farm.py)
    # fast-hadamard-transform 1.1.0's sdist (no csrc/), and the pre-build check's line for it
    "sources-missing": "ninja: error: '/w/fast_hadamard_transform-1.1.0/csrc/fast_hadamard_"
                       "transform.cpp', needed by '/w/fast_hadamard_transform-1.1.0/build/temp."
                       "linux-x86_64-cpython-311/csrc/fast_hadamard_transform.o', missing and "
                       "no known rule to make it",
    "farm-job-failed": "sccache: Job failed on server 127.0.0.1:10503:\nsandbox broken on this "
                       "server",
    "farm-token-refused": '["add.o"] http error status: Error 401: Fixed token mismatch',
    # auto-gptq 0.7.1's sdist (no marlin_repack.cuh), gcc's words; transformer-engine-torch
    # 2.20.2's nccl.h, EDG's (cudafe++)
    "own-header-missing": "autogptq_extension/marlin/marlin_repack.cu:6:10: fatal error: "
                          "marlin_repack.cuh: No such file or directory\n    6 | #include "
                          '"marlin_repack.cuh"\n      |          ^~~~~~~~~~~~~~~~~~~',
    "library-header-missing": 'csrc/extensions.h(10): catastrophic error: cannot open source '
                              'file "nccl.h"\n  #include <nccl.h>\n           ^',
    # vllm 0.34.0's cutlass, fetched by CMake's configure
    "download-offline": "CMake Error at cutlass-subbuild/cutlass-populate-prefix/tmp/"
                        "cutlass-populate-gitclone.cmake:55 (message):\n  Failed to clone "
                        "repository: 'https://example.invalid/cutlass.git'",
}


@pytest.mark.parametrize(("name", "log"), LINES.items(), ids=list(LINES))
def test_signature_is_recognised(name: str, log: str) -> None:
    assert [s.name for s in diagnose(log)] == [name]


def test_clean_failure_has_no_diagnosis() -> None:
    assert diagnose("error: command 'gcc' failed: No such file or directory") == []


def test_a_cxx20_name_clash_is_recognised_in_gcc_s_words_too() -> None:
    log = "csrc/k.h:12:21: error: call of overloaded 'lerp(float&, float&, float)' is ambiguous"
    assert [s.name for s in diagnose(log)] == ["cxx20-name-clash"]


@given(header=st.from_regex(r"[A-Za-z_][A-Za-z0-9_/.-]{0,16}\.(h|cuh|hpp|inl)", fullmatch=True),
       own=st.booleans(), gcc=st.booleans(), line=st.integers(1, 99999),
       space=st.sampled_from(["", " ", "  "]))
def test_a_header_not_found_is_the_sdist_s_omission_or_a_library_off_the_include_path(
        header: str, own: bool, gcc: bool, line: int, space: str) -> None:
    """Either compiler's words, a header of the package's own ("x.cuh") or a library's
    (<nccl.h>)."""
    include = f"#{space}include{space}" + (f'"{header}"' if own else f"<{header}>")
    log = (f"csrc/k.cu:{line}:10: fatal error: {header}: No such file or directory\n"
           f"{line:5d} | {include}\n      |          ^~~~\ncompilation terminated.") if gcc \
        else (f'csrc/k.cu({line}): catastrophic error: cannot open source file "{header}"\n'
              f"  {include}\n           ^\n")
    assert [s.name for s in diagnose(log)] == \
        ["own-header-missing" if own else "library-header-missing"]


@given(form=st.sampled_from([
    "CMake Error at x-gitclone.cmake:31 (message):\n  Failed to clone repository: '{u}'",
    "CMake Error at download-eigen.cmake:170 (message):\n  Each download failed!",
    "-- Downloading...\n   dst='/b/e.tar.gz'\nerror: downloading '{u}' failed\n  status_code: 7",
    "requests.exceptions.ProxyError: HTTPSConnectionPool(host='h', port=443): Max retries "
    "exceeded with url: {u}"]), url=st.from_regex(r"https://[a-z]{1,8}\.invalid/[a-z./]{0,12}",
                                                  fullmatch=True))
def test_a_download_the_offline_build_could_not_make_is_named(form: str, url: str) -> None:
    assert [s.name for s in diagnose(form.format(u=url))] == ["download-offline"]


CLASH_WORDINGS = (  # nvcc's front end (EDG), g++'s call and g++'s reference
    'k.cu(12): error: more than one instance of overloaded function "{name}" matches the '
    "argument list:",
    "k.cpp:12:5: error: call of overloaded '{name}(float&, float&, float&)' is ambiguous",
    "k.cpp:3:10: error: reference to '{name}' is ambiguous")


@given(st.sampled_from(CXX20_NAMES), st.sampled_from(CLASH_WORDINGS), st.booleans(),
       st.from_regex(r"[a-z_]{3,12}", fullmatch=True))
def test_a_cxx20_name_clash_is_named_in_nvccs_and_gccs_words(
        name: str, wording: str, qualified: bool, other: str) -> None:
    said = wording.format(name=f"std::{name}" if qualified else name)
    assert "cxx20-name-clash" in [s.name for s in diagnose(said)]
    if other not in CXX20_NAMES:
        assert "cxx20-name-clash" not in [s.name for s in diagnose(wording.format(name=other))]
