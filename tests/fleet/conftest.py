"""Nightly with everything real but the toolchain and the compile (`stand_in`): the matrix, the
recipes (copies of the tiny extension), the plans and their content keys, the output
directory, the build's own check for a wheel of the key in --out, and publish into a real
index and its ledger. The toolchain is a stand-in of the default profile (no venv: nothing is
probed or pre-flighted), and a compile writes a small wheel into --out, stamped by the real
`write_output` as a build stamps it (its plan's label, content key, channel and arch set)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from packaging.version import Version

from tests.wheels import make_wheel
from wheelsmith.builder import orchestrate
from wheelsmith.builder.finish import write_output
from wheelsmith.builder.plan import BuildPlan
from wheelsmith.builder.request import BuildRequest, BuildResult, Reporter
from wheelsmith.errors import CompileError
from wheelsmith.toolchain.env import Toolchain

PLATFORM = "manylinux_2_34_x86_64"  # the tag a stand-in build's wheel gets
STAND_IN = Toolchain(
    name="cu130-torch2.14", python=Path("/stand-in/venv/bin/python"), python_version="3.11",
    cuda_home=Path("/stand-in/cuda"), torch_version=Version("2.14.1"),
    torch_cuda=Version("13.0"), nvcc_version=Version("13.0.88"), cuobjdump=None,
    pins=("torch==2.14.1", "setuptools==80.9.0"))


@dataclass
class StandIn:
    """The builds nightly asked for: the slug of each compile, in order; a compile of a recipe
    in `failing` fails as a broken kernel's would."""

    compiles: list[str] = field(default_factory=list)
    failing: set[str] = field(default_factory=set)

    def build_plan(self, plan: BuildPlan, request: BuildRequest, report: Reporter
                   ) -> BuildResult:
        self.compiles.append(plan.slug())
        if plan.recipe.name in self.failing:
            raise CompileError(f"the build of {plan.recipe.name} {plan.release.version} failed "
                               "with exit code 1")
        report.stage("compile", f"{plan.recipe.name} (a stand-in)")
        provenance = {
            "schema": 1, "key": plan.key, "archs_requested": str(plan.archs),
            "recipe": {"package": plan.recipe.name, "version": plan.release.version},
            "toolchain": {**plan.toolchain.identity(), "channel": plan.toolchain.channel()},
            "platform": {"tag": PLATFORM}}
        with tempfile.TemporaryDirectory() as raw_dir:
            raw = make_wheel(Path(raw_dir), plan.recipe.name, plan.release.version,
                             tags="cp311-cp311-linux_x86_64")
            wheel = write_output(plan, raw, request, provenance, epoch=315532800)
        return BuildResult(wheel=wheel, provenance=provenance, up_to_date=False, log=None)


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> StandIn:
    builds = StandIn()
    monkeypatch.setattr(orchestrate, "resolve_toolchain", lambda *_a, **_k: STAND_IN)
    monkeypatch.setattr(orchestrate, "preflight", lambda *_a, **_k: None)
    monkeypatch.setattr(orchestrate, "build_plan", builds.build_plan)
    return builds
