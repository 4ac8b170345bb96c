"""One serialisation of a BuildRequest, read by both sides of a container build, and one place
(a field) that a build flag lives in: a field added later and forgotten fails these tests."""

from __future__ import annotations

import dataclasses
import inspect
import json
import typing
from pathlib import Path
from typing import Any

import pytest

from tests.builder.test_buildenv import plan
from wheelsmith.arch import ArchSet
from wheelsmith.builder import container, reproducible
from wheelsmith.builder.request import BuildRequest, from_json, to_json
from wheelsmith.builder.runner import inner_request, timings_for_image
from wheelsmith.cli import main

# Fields the build command fills from what it parses or checks first (and from which option);
# every other field is an option of its own name that goes into the request as it is.
CONVERTED = {
    "recipe": "RECIPE[==VERSION]",
    "version": "RECIPE[==VERSION]",
    "archs": "--arch, parsed into an ArchSet",
    "python": "--python PATH",
    "target": "--python PATH",
    "python_version": "--python X.Y",
    "split_compile": "--split-compile, checked",
    "env": "--env KEY=VALUE, parsed",
    "wait": "--no-wait",
    "prepared_source": "set by the container runner, in the request file",
    "earlier_object_seconds": "set by the container runner, in the request file",
}
# Fields the container runner sets for the build inside the image; every other field is carried.
SET_FOR_THE_CONTAINER = {"recipe", "version", "archs", "toolchain", "python", "target",
                         "python_version", "out_dir", "work_dir", "prepared_source", "rebuild",
                         "compile_cache", "runner", "keep_container",
                         "earlier_object_seconds"}


def _other_value(name: str, hint: Any, default: object) -> object:
    """A value of the field's type that is not its default."""
    base = next(a for a in typing.get_args(hint) if a is not type(None)) \
        if type(None) in typing.get_args(hint) else hint
    candidates: dict[Any, object] = {
        str: f"value-of-{name}", bool: not default, int: 7, Path: Path(f"/elsewhere/{name}"),
        ArchSet: ArchSet.parse(["9.0;12.0+PTX"]),
        tuple[tuple[str, str], ...]: (("NVCC_APPEND_FLAGS", "-lineinfo"), ("K", "V")),
    }
    if base not in candidates:
        pytest.fail(f"BuildRequest.{name} has a type ({hint}) this test does not know: add a "
                    "sample value here and check to_json/from_json handle it")
    return candidates[base]


def a_request_with_every_field_changed() -> BuildRequest:
    defaults = BuildRequest(recipe="tiny-ext")
    hints = typing.get_type_hints(BuildRequest)
    values: dict[str, Any] = {
        f.name: _other_value(f.name, hints[f.name], getattr(defaults, f.name))
        for f in dataclasses.fields(BuildRequest)}
    request = BuildRequest(**values)
    unchanged = [f.name for f in dataclasses.fields(BuildRequest)
                 if getattr(request, f.name) == getattr(defaults, f.name)]
    assert unchanged == []  # else the round trip below could pass without carrying them
    return request


def test_every_build_request_field_survives_the_json_round_trip() -> None:
    request = a_request_with_every_field_changed()
    assert from_json(to_json(request)) == request


def test_a_request_with_defaults_survives_the_json_round_trip() -> None:
    request = BuildRequest(recipe="causal-conv1d")
    assert from_json(to_json(request)) == request


def test_a_request_file_with_a_field_this_wheelsmith_does_not_know_is_refused() -> None:
    data = json.loads(to_json(BuildRequest(recipe="tiny-ext")))
    data["turbo"] = True
    with pytest.raises(ValueError, match=r"^unknown build request field\(s\): turbo$"):
        from_json(json.dumps(data))


def test_a_request_file_with_a_value_of_the_wrong_type_is_refused() -> None:
    data = json.loads(to_json(BuildRequest(recipe="tiny-ext")))
    data["jobs"] = "many"
    with pytest.raises(ValueError, match=r"^a build request field holds 'many', not a int$"):
        from_json(json.dumps(data))


def test_the_container_build_carries_every_field_it_does_not_set() -> None:
    request = a_request_with_every_field_changed()
    inner = inner_request(plan("9.0;12.0"), request, ccache=None)
    carried = {f.name for f in dataclasses.fields(BuildRequest)} - SET_FOR_THE_CONTAINER
    assert {name: getattr(inner, name) for name in carried} == {
        name: getattr(request, name) for name in carried}
    assert (inner.recipe, inner.version, str(inner.archs), inner.runner) == (
        "causal-conv1d", plan().release.version, "9.0;12.0", "host")
    assert (inner.prepared_source, inner.out_dir, inner.work_dir, inner.compile_cache) == (
        Path(container.SOURCE_IN_IMAGE), Path(container.OUT_IN_IMAGE),
        Path(container.WORK_IN_IMAGE), "off")
    assert from_json(to_json(inner)) == inner


def test_every_build_request_field_is_a_build_option_of_its_name_or_listed_here() -> None:
    """The build command passes the options it does not name in its signature straight into
    BuildRequest: each must be a field, and each field must be one of them or in CONVERTED."""
    command = main.commands["build"]
    assert command.callback is not None
    options = {p.name for p in command.params if p.expose_value}
    named = set(inspect.signature(command.callback).parameters) - {"same_named"}
    passed_through = options - named
    fields = {f.name for f in dataclasses.fields(BuildRequest)}
    assert sorted(passed_through - fields) == []
    assert sorted(fields - passed_through) == sorted(CONVERTED)


def test_the_build_in_the_image_gets_the_times_of_the_hosts_earlier_run(tmp_path: Path) -> None:
    earlier = tmp_path / "work" / "causal-conv1d-1.7.0-aaaaaaaaaaaa"
    earlier.mkdir(parents=True)
    reproducible.write_run(earlier, {"build": {"object_seconds": {"csrc/bwd.o": 170.0}}})
    this = tmp_path / "work" / "causal-conv1d-1.7.0-bbbbbbbbbbbb"
    inside = tmp_path / "container-work"
    inside.mkdir()
    timed = timings_for_image(this, inside)
    assert timed == Path(container.WORK_IN_IMAGE) / "earlier-object-seconds.json"
    assert json.loads((inside / "earlier-object-seconds.json").read_text()) == {
        "csrc/bwd.o": 170.0}
    inner = inner_request(plan("12.0"), BuildRequest(recipe="causal-conv1d"), None,
                                 timed=timed)
    assert inner.earlier_object_seconds == timed


def test_a_first_build_in_the_image_gets_no_times(tmp_path: Path) -> None:
    inside = tmp_path / "container-work"
    inside.mkdir()
    assert timings_for_image(tmp_path / "causal-conv1d-1.7.0-aaaaaaaaaaaa",
                                          inside) is None
    assert list(inside.iterdir()) == []
