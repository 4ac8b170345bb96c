"""A wheel's provenance (`<dist-info>/wheelsmith.json`) is data whoever built the wheel wrote
(verify, verify --rebuild, publish): it is read within a cap and parsed into a typed
Provenance whose names are plain and whose environment is a mapping of names to strings; any
other record is one error naming the wheel, before anything runs."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.hostile import assert_orderly, returned_or_raised, run_bounded, sentinel
from tests.wheels import make_wheel
from wheelsmith.errors import UntrustedDataError
from wheelsmith.untrusted import ENV_NAME_RE, channel_problem, name_problem
from wheelsmith.untrusted.provenance import read_provenance

RECORD: dict[str, Any] = {  # what a build records, in short
    "schema": 1, "key": "ab" * 32,
    "recipe": {"package": "demo-ext", "version": "1.0.0", "file": "demo-ext.yaml"},
    "toolchain": {"name": "cu130-torch2.14", "python": "3.11", "channel": "cu130-torch2.14"},
    "archs_requested": "12.0", "host_only": [], "extra_env": {"DEMO_FORCE_BUILD": "TRUE"},
    "libraries": [{"library": "nvidia-nccl-cu13==2.30.7", "from": "installed",
                   "project": "nvidia-nccl-cu13", "version": "2.30.7"}]}


def stamped(directory: Path, provenance: bytes, name: str = "demo-ext") -> Path:
    """A valid wheel whose dist-info holds `provenance` as its wheelsmith.json."""
    directory.mkdir(parents=True, exist_ok=True)
    dist = name.replace("-", "_")
    return make_wheel(directory, name, "1.0.0", files={
        f"{dist}/__init__.py": b"", f"{dist}-1.0.0.dist-info/wheelsmith.json": provenance})


def edited(**changes: Any) -> bytes:
    record = json.loads(json.dumps(RECORD))
    for dotted, value in changes.items():
        *parents, last = dotted.split("__")
        target = record
        for part in parents:
            target = target[part]
        target[last] = value
    return json.dumps(record).encode()


REFUSED = {  # a record, and what is said of it
    "a recipe name that is a path": (
        edited(recipe__package="../../etc/x"),
        "recipe.package: '../../etc/x' is not a plain file name (it holds a path separator)"),
    "a toolchain name that is a path": (
        edited(toolchain__name="/tmp/evil"),
        "toolchain.name: '/tmp/evil' is not a plain file name (it holds a path separator)"),
    "a channel that leaves the index": (edited(toolchain__channel="../x"),
                                        "toolchain.channel: '../x' is not a channel name"),
    "an environment of lists": (edited(extra_env={"CC": ["gcc", "-x"]}),
                                "extra_env.CC: expected a string, found a list"),
    "an environment name with a space": (edited(extra_env={"A B": "1"}),
                                         "extra_env: 'A B' is not a variable name"),
    "a host library whose project is a path": (
        edited(libraries=[{"from": "installed", "project": "../x", "version": "1"}]),
        "libraries[0].project: '../x' is not a plain file name (it holds a path separator)"),
    "a host library installed without its version": (
        edited(libraries=[{"from": "installed", "project": "nvidia-nccl-cu13"}]),
        "libraries[0]: a library installed for the build names no project and version"),
    "not JSON": (b"{not json", "not valid JSON (Expecting property name enclosed in double "
                               "quotes: line 1 column 2 (char 1))"),
    "JSON nested too deeply": (b"[" * 100_000 + b"]" * 100_000, "its JSON nests too deeply"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
@pytest.mark.parametrize("command", ["verify", "verify --rebuild", "publish"])
def test_a_hostile_provenance_is_refused_naming_the_wheel_before_anything_runs(
        tmp_path: Path, case: str, command: str) -> None:
    record, said = REFUSED[case]
    wheel = stamped(tmp_path / "wheels", record)
    with sentinel(tmp_path / "outside"):
        outcome = run_bounded(*command.split(), str(wheel), "--index" if command == "publish"
                              else "--work-dir", str(tmp_path / "out"), cwd=tmp_path,
                              seconds=60)
    assert_orderly(outcome, seconds=30)
    assert outcome.returncode == 21
    assert outcome.stderr.splitlines()[-1] == f"error: the provenance of {wheel.name}: {said}"
    assert not (tmp_path / "out").exists()  # nothing was built, published or written


def test_a_provenance_that_unpacks_past_its_cap_is_refused_unread(tmp_path: Path) -> None:
    """A zip bomb's wheelsmith.json: 64 MiB of spaces from a few hundred KB."""
    wheel = stamped(tmp_path, b"{}")
    bomb = tmp_path / "bomb" / wheel.name
    bomb.parent.mkdir()
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith("wheelsmith.json"):
                data = b"{" + b" " * (64 << 20) + b"}"
            dst.writestr(info.filename, data)
    with pytest.raises(UntrustedDataError) as caught:
        read_provenance(bomb)
    assert caught.value.message == f"the provenance of {wheel.name}: is larger than 16 MiB"


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                               max_size=3),
    max_leaves=10)
HOSTILE = st.sampled_from(["../../etc/x", "/tmp/evil", "..", "x\0y", "", "a b", "PATH",
                           "LD_PRELOAD", "touch X; nvcc", "$(id)", "12.0", "3.11",
                           "cu130-torch2.14", "not a version"])


def records() -> st.SearchStrategy[Any]:
    """The real record with each field (and each field inside its parts) kept, made hostile
    or replaced by any JSON value; or any JSON at all."""
    def part(value: Any) -> st.SearchStrategy[Any]:
        if isinstance(value, dict):
            inner = {k: part(v) for k, v in value.items()}
            return st.fixed_dictionaries({}, optional=inner) | JSON | st.dictionaries(
                HOSTILE | st.text(max_size=6), HOSTILE | JSON, max_size=3)
        return st.just(value) | HOSTILE | JSON
    return part(RECORD)


@given(records())
def test_any_record_is_a_typed_provenance_with_plain_names_or_one_error_naming_the_wheel(
        tmp_path_factory: pytest.TempPathFactory, record: Any) -> None:
    wheel = stamped(tmp_path_factory.mktemp("wheels"), json.dumps(record).encode())
    read = returned_or_raised(lambda: read_provenance(wheel), UntrustedDataError)
    if isinstance(read, UntrustedDataError):
        assert read.message.startswith(f"the provenance of {wheel.name}: ")
        return
    assert read is not None
    for name in (read.recipe, read.toolchain):
        assert name is None or name_problem(name) is None
    assert read.channel is None or channel_problem(read.channel) is None
    assert all(ENV_NAME_RE.fullmatch(k) and isinstance(v, str)
               for k, v in read.extra_env.items())
    assert all(isinstance(glob, str) for glob in read.host_only)
    assert all(name_problem(name) is None for name, _ in read.libraries)


def test_a_wheel_without_provenance_has_none(tmp_path: Path) -> None:
    assert read_provenance(make_wheel(tmp_path, "demo-ext")) is None
