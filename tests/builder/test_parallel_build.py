"""The planner in a real build of the tiny extension: the plan from build.ninja is shown and
recorded, and parallelism is not part of the content key."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import add_variant, wheelsmith
from wheelsmith.builder import parallel
from wheelsmith.toolchain.env import Toolchain

pytestmark = pytest.mark.toolchain


def test_split_compile_is_planned_from_build_ninja_and_not_in_the_key(
        project: Path, toolchain: Toolchain) -> None:
    add_variant(project, "tiny-ext")
    first = wheelsmith("build", "tiny-ext", "--arch", "12.0", "--json", cwd=project)
    assert first.returncode == 0, first.stderr
    built = json.loads(first.stdout)["run"]["build"]
    cores = len(os.sched_getaffinity(0))
    split = parallel.refine(parallel.choose(cores, 1000.0, 1.0, 1), 1, 1).describe_split()
    (plan,) = built["plan"]
    assert plan.startswith("_C: 1 CUDA + 1 C++ file(s): MAX_JOBS=")  # the extension, named
    assert plan.endswith(f"NVCC_THREADS=1 {split}")
    assert f"compile: plan from _C's build.ninja: {plan.removeprefix('_C: ')}" in first.stderr

    again = wheelsmith("build", "tiny-ext", "--arch", "12.0", "--split-compile", "off",
                       "--jobs", "1", "--json", cwd=project)
    assert again.returncode == 0, again.stderr
    data = json.loads(again.stdout)
    assert (data["up_to_date"], data["wheel"]) == (True, json.loads(first.stdout)["wheel"])
