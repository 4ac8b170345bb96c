"""What a package needs at run time that the toolchain lacks keeps its own modules out of the
smoke test, which imports its extension modules alone (megablocks 0.10.0: `import megablocks`
needs stanford-stk, and the smoke test of its built wheel failed on `No module named 'stk'`).
Generated Requires-Dist lists against the default profile's real pins."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.recipes.test_removed_aten_api import CUDA_EXT
from tests.recipes.test_setup_py_patterns import findings, tree_with
from wheelsmith.scaffold import buildsystem, report
from wheelsmith.scaffold.findings import Findings
from wheelsmith.toolchain import select

PROFILE = select.profile_named(None)
HELD = sorted(buildsystem.held(PROFILE))
ABSENT = st.from_regex(r"zz[a-z]{1,6}(-[a-z]{1,4})?", fullmatch=True)  # no toolchain holds
SPECIFIER = st.sampled_from(["", "==0.7.1", ">=1.0,<2", "~=2.1"])
NEVER = st.sampled_from(['; extra == "dev"', '; python_version < "3"',
                         '; sys_platform == "win32"'])


def with_requires(tmp_path: Path, requires: list[str]) -> Findings:
    found = findings(tree_with(tmp_path, CUDA_EXT, "csrc/k.cu"), ("demo",))
    metadata = dataclasses.replace(found.metadata, requires=tuple(requires))
    return dataclasses.replace(found, metadata=metadata, toolchain=PROFILE.name,
                               runtime_lacks=buildsystem.runtime_lacking(tuple(requires),
                                                                         PROFILE))


@settings(max_examples=30)
@given(held=st.lists(st.sampled_from(HELD), max_size=4),
       absent=st.lists(ABSENT, min_size=1, max_size=3, unique=True), spec=SPECIFIER)
def test_a_package_that_needs_what_the_toolchain_lacks_is_smoke_tested_by_its_extensions(
        tmp_path_factory: pytest.TempPathFactory, held: list[str], absent: list[str],
        spec: str) -> None:
    found = with_requires(tmp_path_factory.mktemp("t"),
                          [f"{n}{spec}" for n in [*held, *absent]])
    assert found.imports == ("demo._C",)
    assert report.report_lines(found)[-1] == (
        "smoke: demo left out of smoke.import, which imports its extension modules alone: it "
        f"needs {', '.join(absent)} at run time (Requires-Dist), which the toolchain "
        f"{PROFILE.name} lacks")


@settings(max_examples=30)
@given(held=st.lists(st.sampled_from(HELD), max_size=4), spec=SPECIFIER,
       never=st.lists(st.tuples(ABSENT, NEVER), max_size=3),
       broken=st.lists(st.sampled_from(["bad req ;;", "x; os_name ==", "(("]), max_size=2))
def test_a_package_whose_run_time_needs_the_toolchain_holds_is_imported_whole(
        tmp_path_factory: pytest.TempPathFactory, held: list[str], spec: str,
        never: list[tuple[str, str]], broken: list[str]) -> None:
    """Held requirements, ones only an extra or another platform asks for, and lines no
    installer reads either leave the smoke test as it was."""
    found = with_requires(tmp_path_factory.mktemp("t"), [
        *(f"{n}{spec}" for n in held), *(f"{n}{marker}" for n, marker in never), *broken])
    assert found.runtime_lacks == ()
    assert found.imports == ("demo", "demo._C")
    assert not any(line.startswith("smoke: ") for line in report.report_lines(found))
