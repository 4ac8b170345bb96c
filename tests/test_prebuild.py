"""Reading arch targets from generated build.ninja files."""

from __future__ import annotations

import pytest

from wheelsmith.prebuild import gencode_targets

TORCH_EMITTED = ("cuda_post_cflags = -O2 -gencode=arch=compute_120,code=compute_120 "
                 "-gencode=arch=compute_120,code=sm_120 -gencode=arch=compute_90,code=sm_90 "
                 "-std=c++20\n")
HARD_CODED = ("cuda_post_cflags = -O3 --threads 4 -gencode arch=compute_75,code=sm_75 "
              "-gencode arch=compute_80,code=sm_80 -gencode arch=compute_103,code=sm_103\n")


@pytest.mark.parametrize(
    ("text", "sass", "ptx"),
    [
        (TORCH_EMITTED, {"sm_90", "sm_120"}, {"sm_120"}),
        (HARD_CODED, {"sm_75", "sm_80", "sm_103"}, set()),
        ("x = -gencode=arch=compute_90a,code=[sm_90a,compute_90a]\n", {"sm_90a"}, {"sm_90a"}),
        ("x = -arch=sm_90 -O3\n", {"sm_90"}, {"sm_90"}),
        ("x = -march=native -O3\n", set(), set()),
    ],
    ids=["torch-emitted", "hard-coded", "bracket-list", "short-arch", "host-march"],
)
def test_targets_are_read_like_cuobjdump_names(text: str, sass: set[str], ptx: set[str]) -> None:
    found = gencode_targets(text)
    assert (set(found.sass), set(found.ptx)) == (sass, ptx)
