"""A command whose answer wheelsmith reads has a deadline and a byte cap (`cmd.run(bounds=...)`,
`untrusted.tool_bounds`), a tool named by a variable too: a `$WHEELSMITH_CUOBJDUMP` that never
ends, or never stops printing, ends `verify` at its bound in one line naming it by the
variable (exit 21), its
whole tree stopped. (tests/trust/test_call_sites.py holds every other call site to the same.)"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.hostile import assert_orderly, run_bounded, stand_in_python
from tests.leftovers import left_after, new_env
from tests.wheels import make_wheel
from wheelsmith.untrusted import TOOL_HINT

TOOLS = {  # what the stand-in cuobjdump does, and what verify says of it
    "never ends": ("sleep 600 & wait", "did not finish within 2 s"),
    "never stops printing": ("exec yes", "printed more than 64 MiB"),
}


@pytest.mark.parametrize("name", sorted(TOOLS))
def test_a_cuobjdump_named_by_the_environment_ends_verify_at_its_bound(tmp_path: Path,
                                                                       name: str) -> None:
    script, said = TOOLS[name]
    tool = stand_in_python(tmp_path / "bin" / "cuobjdump", script)
    wheel = make_wheel(tmp_path, "demo", files={"demo/__init__.py": b"",
                                                "demo/_C.so": b"\x7fELF not really"})
    mark, env = new_env(WHEELSMITH_CUOBJDUMP=str(tool), WHEELSMITH_TOOL_TIMEOUT="2")
    outcome = run_bounded("verify", str(wheel), "--arch", "12.0", cwd=tmp_path, env=env,
                          seconds=60, address_space=4 << 30)
    assert_orderly(outcome, seconds=15)
    assert outcome.returncode == 21, outcome.describe()
    assert outcome.stderr.splitlines() == [
        f"error: cuobjdump ($WHEELSMITH_CUOBJDUMP={tool}): {said}", f"hint: {TOOL_HINT}"], \
        outcome.describe()
    assert left_after(mark, 10) == []


def test_the_tools_timeout_is_read_as_a_number_of_seconds(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "demo", files={"demo/_C.so": b"\x7fELF"})
    env = {**os.environ, "WHEELSMITH_CUOBJDUMP": "/bin/true", "WHEELSMITH_TOOL_TIMEOUT": "soon"}
    outcome = run_bounded("verify", str(wheel), "--arch", "12.0", cwd=tmp_path, env=env)
    assert_orderly(outcome, seconds=30)
    assert outcome.returncode == 4, outcome.describe()
    assert outcome.stderr.splitlines()[0] == (
        "error: $WHEELSMITH_TOOL_TIMEOUT: 'soon' is not a number of seconds")
