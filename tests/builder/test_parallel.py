"""The parallelism planner (jobs, nvcc threads, split-compile) and its pre-build refinement."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import wheelsmith
from wheelsmith.builder import parallel, prebuild

# what torch's BuildExtension writes (trimmed): one C++ and two CUDA translation units
BUILD_NINJA = """ninja_required_version = 1.3
cxx = c++
nvcc = /venv/nvidia/cu13/bin/nvcc
cuda_cflags = -gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_120,code=sm_120
rule compile
  command = $cxx -MMD -MF $out.d $cflags -c $in -o $out $post_cflags
rule cuda_compile
  command = $nvcc $cuda_cflags -c $in -o $out $cuda_post_cflags
build /src/build/temp/csrc/conv.o: compile /src/csrc/conv.cpp
build /src/build/temp/csrc/fwd.o: cuda_compile /src/csrc/fwd.cu
build /src/build/temp/csrc/bwd.o: cuda_compile /src/csrc/bwd.cu
"""


def test_two_cores_with_two_archs_build_as_before_the_planner() -> None:
    """The two arch passes of the last file already keep both cores busy: no split."""
    chosen = parallel.choose(2, 22.8, 3.0, 2)
    assert (chosen.jobs, chosen.nvcc_threads) == (2, 2)  # as before the planner
    assert chosen.describe() == ("MAX_JOBS=2 NVCC_THREADS=2 split-compile off (2 cores, 22.8 GB "
                                 "available)")
    refined = parallel.refine(chosen, 3, 1)
    assert refined.describe_units() == ("3 CUDA + 1 C++ file(s): MAX_JOBS=2 NVCC_THREADS=2 "
                                        "split-compile off")
    assert refined.split_flag() is None


def test_two_cores_with_one_arch_split_the_last_file_over_both() -> None:
    refined = parallel.refine(parallel.choose(2, 22.8, 3.0, 1), 3, 1)
    assert refined.describe_units() == ("3 CUDA + 1 C++ file(s): MAX_JOBS=2 NVCC_THREADS=1 "
                                        "split-compile=2")


def test_one_core_never_splits() -> None:
    assert parallel.refine(parallel.choose(1, 8.0, 3.0, 1), 1, 0).split_flag() is None


def test_sixteen_cores_split_the_last_heavy_file_over_every_core() -> None:
    chosen = parallel.choose(16, 120.0, 3.0, 2)  # causal-conv1d 9.0;12.0 on the H200 box
    assert chosen.describe() == ("MAX_JOBS=16 NVCC_THREADS=2 split-compile auto (up to 8) "
                                 "(16 cores, 120.0 GB available)")
    refined = parallel.refine(chosen, 3, 1)
    assert refined.split_flag() == "--ptxas-options=--split-compile=8"  # 2 x 8 = 16 cores


def test_many_cuda_files_split_less_while_they_compile_side_by_side() -> None:
    chosen = parallel.choose(16, 128.0, 4.5, 1)  # flash-attn 12.0: 73 files
    assert parallel.refine(chosen, 73, 1).split == 4  # 16 jobs x 4 workers = 4 per core


def test_memory_bounds_jobs_and_split_workers() -> None:
    chosen = parallel.choose(16, 20.0, 3.0, 2)  # 6 compilers fit: 3 jobs x 2 threads
    assert (chosen.jobs, chosen.nvcc_threads) == (3, 2)
    assert parallel.refine(chosen, 1, 0).split == 3  # the file alone: 2 threads x 3 workers


def test_no_split_without_cuda_files_or_with_a_farm() -> None:
    assert parallel.refine(parallel.choose(16, 120.0, 3.0, 1), 0, 4).split == 1
    farm = parallel.choose(2, 22.8, 3.0, 1, farm_cpus=8)
    assert (farm.jobs, farm.split) == (7, 1)  # the farm's CPUs, bounded by local memory
    assert farm.describe() == ("MAX_JOBS=7 NVCC_THREADS=1 split-compile off (2 cores, 22.8 GB "
                               "available, farm 8 CPUs)")


@pytest.mark.parametrize(("setting", "flag", "shown"), [
    ("off", None, "split-compile off"),
    ("0", "--ptxas-options=--split-compile=0", "split-compile=0"),
    ("6", "--ptxas-options=--split-compile=6", "split-compile=6"),
    ("fast", "--split-compile=0", "split-compile fast (nvcc's own: bytes not reproducible)"),
])
def test_split_compile_can_be_set(setting: str, flag: str | None, shown: str) -> None:
    chosen = parallel.refine(parallel.choose(16, 120.0, 3.0, 2, split=setting), 3, 1)
    assert (chosen.split_flag(), chosen.describe_split()) == (flag, shown)
    assert chosen.reproducible is (setting != "fast")


def test_a_wrong_split_setting_is_refused_by_name() -> None:
    with pytest.raises(parallel.SplitSettingError,
                       match="'quick' is not auto, off, fast or a number of workers"):
        parallel.parse_split("quick")


def test_build_refuses_a_wrong_split_compile_before_doing_anything(project: Path) -> None:
    result = wheelsmith("build", "tiny-ext", "--split-compile", "quick", cwd=project)
    assert result.returncode == 4
    assert result.stderr.splitlines()[:2] == [
        "error: --split-compile: 'quick' is not auto, off, fast or a number of workers (0-256)",
        "hint: auto (the default), off, fast (nvcc's own split: bytes not reproducible), or N "
        "workers (0: one per CPU)"]


def test_prebuild_counts_translation_units() -> None:
    assert prebuild.count_units(BUILD_NINJA) == (2, 1)


def test_prebuild_adds_the_split_flag_to_nvcc_append_flags() -> None:
    chosen = parallel.choose(16, 120.0, 3.0, 2)
    environ = {parallel.PLAN_ENV: chosen.to_json(), "NVCC_APPEND_FLAGS": "-lineinfo"}
    line = prebuild.apply_parallelism(BUILD_NINJA, environ)
    assert line == "2 CUDA + 1 C++ file(s): MAX_JOBS=16 NVCC_THREADS=2 split-compile=8"
    assert environ["NVCC_APPEND_FLAGS"] == "-lineinfo --ptxas-options=--split-compile=8"


def test_prebuild_keeps_a_split_the_build_sets_itself() -> None:
    chosen = parallel.choose(16, 120.0, 3.0, 2)
    environ = {parallel.PLAN_ENV: chosen.to_json(), "NVCC_APPEND_FLAGS": "--split-compile=0"}
    line = prebuild.apply_parallelism(BUILD_NINJA, environ)
    assert line == ("2 CUDA + 1 C++ file(s): MAX_JOBS=16 NVCC_THREADS=2 split-compile=0 (set by "
                    "the build's NVCC flags)")
    assert environ["NVCC_APPEND_FLAGS"] == "--split-compile=0"


def test_prebuild_leaves_builds_without_cuda_alone() -> None:
    environ = {parallel.PLAN_ENV: parallel.choose(16, 120.0, 3.0, 2).to_json()}
    cxx_only = "\n".join(line for line in BUILD_NINJA.splitlines() if "cuda" not in line) + "\n"
    assert "build /src/build/temp/csrc/conv.o: compile" in cxx_only
    assert prebuild.apply_parallelism(cxx_only, environ) is None
    assert "NVCC_APPEND_FLAGS" not in environ
