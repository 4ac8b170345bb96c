"""The compile's progress line: ninja's count, never going back within one count (a step ninja
counted that then failed), and, once objects finish, the time left at their pace."""

from __future__ import annotations

import io
import itertools
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wheelsmith.cli import console


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(time, "monotonic", fake)
    return fake


def counts(stream: io.StringIO) -> list[str]:
    return [line.split("] ")[1].split(" ")[0] for line in stream.getvalue().splitlines()
            if line.startswith("    compile [")]


@given(st.lists(st.tuples(st.integers(0, 80), st.sampled_from([73, 12])), max_size=30))
def test_the_count_never_goes_back_within_one_total(steps: list[tuple[int, int]]) -> None:
    stream = io.StringIO()
    reporter = console.TerminalReporter(stream)
    reporter.stage_name = "compile"
    for done, total in steps:
        reporter.progress(min(done, total), total)
    shown = [tuple(map(int, c.split("/"))) for c in counts(stream)]
    for (before, of), (after, total) in itertools.pairwise(shown):
        assert after >= before or total != of


def test_the_time_left_is_the_pace_of_the_objects_done_so_far(clock: Clock) -> None:
    stream = io.StringIO()
    reporter = console.TerminalReporter(stream)
    reporter.stage("compile", "flash-attn 2.8.3.post2 for 12.0")
    reporter.progress(3, 73)  # resumed: 3 objects were there before this run
    clock.now += 600
    reporter.progress(5, 73)  # 2 objects in 10 minutes
    clock.now += 60
    reporter.progress(4, 73)  # ninja counted a step that then failed: not shown going back
    lines = [line for line in stream.getvalue().splitlines() if line.startswith("    compile [")]
    assert lines[0].endswith("3/73 0s")  # no pace yet: nothing done in this run
    assert lines[1].endswith("5/73 10m00s, about 5h40m left")  # 68 objects at 5 min each
    assert lines[2].endswith("5/73 11m00s, about 6h14m left")  # slower: a minute, no object
