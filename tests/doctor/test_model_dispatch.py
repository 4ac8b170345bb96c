"""doctor's model view is what transformers' dispatch does, seen by running it: the needs read
from generated modeling sources; every way a fallback wrapper can go (the kernel, the torch
code, neither) on a module of its own; and the real transformers, the oldest doctor supports and
the newest on the index, with and without the fast-path packages."""

from __future__ import annotations

import importlib.util
import itertools
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from packaging.version import Version

from tests.doctor.envs import (
    OLDEST_TRANSFORMERS,
    examined,
    newest_of_each_minor,
    resolved_site,
    stand_in_site,
    transformers_releases,
    user_env,
)
from wheelsmith import locations
from wheelsmith.doctor import fastpath


def _script(name: str) -> ModuleType:
    """A script of resources/ as a module (each is standard library only, run by other Pythons)."""
    spec = importlib.util.spec_from_file_location(name, locations.RESOURCES / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


modeling_source = _script("modeling_source")

# --- the needs, read from generated modeling sources -----------------------------------------

NAMES = st.from_regex(r"[a-z][a-z0-9_]{0,11}", fullmatch=True).filter(
    lambda n: n not in {"def", "if", "in", "is", "or", "and", "not", "for", "as", "from",
                        "import", "None", "getattr", "lazy_load_kernel", "return", "pass"})


@st.composite
def modeling_sources(draw: st.DrawFn) -> tuple[str, dict[tuple[str, str], Any]]:
    """A modeling module using fast-path functions in each of transformers' ways, and the needs
    it has: (package, function) -> Need."""
    functions = draw(st.lists(NAMES, min_size=1, max_size=6, unique=True))
    lines, expected = ["import torch"], {}
    for index, function in enumerate(functions):
        package = draw(st.sampled_from(modeling_source.FAST_PATH))
        way = draw(st.sampled_from(["wrapped", "imported", "lazy", "getattr"]))
        if way == "wrapped":
            required, optional = draw(st.integers(0, 5)), draw(st.integers(0, 3))
            params = [f"a{i}" for i in range(required)] + [f"o{i}=None" for i in range(optional)]
            hub = package.replace("_", "-") if draw(st.booleans()) else package
            lines += [f'@use_kernel_func_from_hub_with_fallback("{function}", "{hub}")',
                      f"def torch_{index}({', '.join(params)}):", "    return None"]
            need = modeling_source.Need(f"torch_{index}", package, function, "wrapped", None,
                                        required)
        elif way == "imported":
            lines.append(f"from {package}.ops.sub{index} import {function} as alias_{index}")
            need = modeling_source.Need(f"alias_{index}", package, function, "imported",
                                    f"{package}.ops.sub{index}")
        else:
            kernel = package.replace("_", "-")
            read = (f"kernel_{index}.{function}" if way == "lazy"
                    else f'getattr(kernel_{index}, "{function}", None)')
            lines += [f"def layer_{index}():",
                      f'    kernel_{index} = lazy_load_kernel("{kernel}")',
                      f"    return {read}"]
            need = modeling_source.Need(function, package, function, "lazy", kernel)
        expected[(package, function)] = need
    return "\n".join(lines) + "\n", expected


@given(modeling_sources())
def test_the_needs_of_a_modeling_module_are_read_in_every_way_it_reaches_them(
        generated: tuple[str, dict[tuple[str, str], Any]]) -> None:
    source, expected = generated
    found = {(n.package, n.function): n for n in modeling_source.needs_in(source)}
    assert found == expected


# --- every way a fallback wrapper can go, on a module of its own ----------------------------

WRAPPER = '''
import functools, importlib
import torch

def use_kernel_func_from_hub_with_fallback(name, package, devices=("cuda",), mode="take"):
    """transformers' way: the package's function where it imports, else the torch code; the
    package only for inputs on the devices it runs on."""
    def decorator(torch_function):
        try:
            found = getattr(importlib.import_module(package), name)
        except Exception:
            found = None
        @functools.wraps(torch_function)
        def wrapped(*args, **kwargs):
            if mode == "silent":
                return None
            device = next((a.device.type for a in args if isinstance(a, torch.Tensor)), None)
            if found is None or mode == "never" or (device is not None and
                                                    device not in devices):
                return torch_function(*args, **kwargs)
            return found(*args, **kwargs)
        return wrapped
    return decorator
'''
CASES = list(itertools.product(("present", "absent"), ("has", "lacks"),
                               ("take", "never", "silent"), (("cuda",), ("xpu",))))


def _case_name(case: tuple[Any, ...]) -> str:
    presence, function, mode, devices = case
    return f"{presence}_{function}_{mode}_{devices[0]}"


def _expected(case: tuple[Any, ...]) -> dict[str, Any]:
    """What doctor must say, without a GPU (the dispatch sees CUDA inputs without storage)."""
    presence, function, mode, devices = case
    name = _case_name(case)
    package = f"wsfast_{presence}"
    if mode == "silent":
        return {"available": None, "reason": "undecided",
                "message": f"torch_{name} returned without reaching {package} or torch"}
    if presence == "absent":
        return {"available": False, "reason": "not-installed",
                "message": f"No module named '{package}'"}
    if function == "lacks":
        return {"available": False, "reason": "missing",
                "message": f"{package} has no fn_{name}"}
    if mode == "take" and "cuda" in devices:
        return {"available": True, "reason": None, "message": None}
    return {"available": None, "reason": "undecided", "message": (
        f"transformers runs its torch code with no GPU visible, though {package} imports and "
        f"has fn_{name}; run doctor where the GPU is")}


def _write_cases(root: Path) -> None:
    (root / "wsfast_present").mkdir()
    (root / "wsfast_present" / "__init__.py").write_text("".join(
        f"def fn_{_case_name(c)}(x, y, scale=1.0):\n    return x\n"
        for c in CASES if c[1] == "has"))
    lines = [WRAPPER]
    for case in CASES:
        name, devices, mode = _case_name(case), case[3], case[2]
        lines.append(textwrap.dedent(f'''
            @use_kernel_func_from_hub_with_fallback("fn_{name}", "wsfast_{case[0]}",
                                                    devices={devices!r}, mode="{mode}")
            def torch_{name}(x, y, scale=1.0):
                return x * scale
            '''))
    (root / "ws_modeling.py").write_text("".join(lines))


def test_every_way_a_fallback_wrapper_goes_is_the_verdict_doctor_gives(tmp_path: Path) -> None:
    _write_cases(tmp_path)
    [answer] = examined(user_env(), "module", "ws_modeling", path=(tmp_path,))
    assert answer["device"] == "fake-cuda"
    said = {n["function"]: {k: n[k] for k in ("available", "reason", "message")}
            for n in answer["needs"]}
    assert said == {f"fn_{_case_name(c)}": _expected(c) for c in CASES}


# --- the real transformers: the newest on the index and the oldest doctor supports ----------

FAST_PATH_PACKAGES = ("flash-linear-attention", "einops", "triton")


def _transformers(which: str) -> Version:
    releases = transformers_releases(user_env())
    minors = newest_of_each_minor(releases)
    return minors[-1] if which == "newest" else minors[0]


def _judged_types(version: Version, *, with_packages: bool) -> dict[str, dict[str, Any]]:
    wanted = (f"transformers=={version}", *(FAST_PATH_PACKAGES if with_packages else ()))
    directory, pins = resolved_site(user_env(), *wanted)
    conv1d = stand_in_site("causal_conv1d", "causal-conv1d", "1.7.0")
    path = (directory, conv1d) if with_packages else (directory,)
    answers = examined(user_env(), "types", *fastpath.FAST_PATH_MODEL_TYPES, path=path)
    judged = {a["model_type"]: a for a in answers if a["known"]}
    assert judged, f"transformers {version} knows none of doctor's model types"
    assert {a["transformers"] for a in judged.values()} == {str(version)}
    assert not [a for a in judged.values() if a["error"]], pins
    return judged


def _needs(judged: dict[str, dict[str, Any]], module: str) -> list[dict[str, Any]]:
    return [n for a in judged.values() for n in a["needs"] if n["module"] == module]


def _seen_as_it_must_be(need: dict[str, Any]) -> bool:
    """causal_conv1d's stand-in has both functions: a wrapped entry point (transformers 5's
    use_kernel_func_from_hub_with_fallback) is run on CUDA inputs without storage and takes it;
    an imported or lazily loaded one (4.x, early 5.x: imported only where CUDA is available)
    cannot be told without a GPU, and doctor says so instead of 'falls back'."""
    if need["kind"] == "wrapped":
        return need["available"] is True
    return (need["available"], need["reason"]) == (None, "undecided")


@pytest.mark.parametrize("which", ["newest", "oldest"])
def test_with_causal_conv1d_installed_no_model_is_said_to_fall_back_without_it(
        which: str) -> None:
    version = _transformers(which)
    judged = _judged_types(version, with_packages=True)
    conv1d = _needs(judged, "causal_conv1d")
    assert conv1d
    assert [n for n in conv1d if not _seen_as_it_must_be(n)] == []
    assert not [n for a in judged.values() for n in a["needs"] if n["reason"] == "not-taken"]
    if version.major >= 5:
        assert {n["kind"] for n in conv1d} == {"wrapped"}


def test_the_newest_transformers_takes_fla_for_qwen3_5_and_falls_back_without_it() -> None:
    version = _transformers("newest")
    with_fla = _judged_types(version, with_packages=True)
    assert {(n["function"], n["available"]) for n in with_fla["qwen3_5"]["needs"]} == {
        ("causal_conv1d_fn", True), ("causal_conv1d_update", True),
        ("chunk_gated_delta_rule", True), ("fused_recurrent_gated_delta_rule", True)}
    without = _judged_types(version, with_packages=False)
    assert {(n["module"], n["available"], n["reason"]) for n in without["qwen3_5"]["needs"]} == {
        ("causal_conv1d", False, "not-installed"), ("fla", False, "not-installed")}


@pytest.mark.slow
@pytest.mark.transformers
def test_no_transformers_minor_is_said_to_fall_back_with_the_packages_installed() -> None:
    """Every transformers minor from the oldest doctor supports to the newest on the index
    (`make test-transformers`): with causal_conv1d and fla installed (fla as pip resolves it
    beside that transformers), no need of a package that imports is said to fall back."""
    failures = []
    minors = newest_of_each_minor(transformers_releases(user_env()), OLDEST_TRANSFORMERS)
    for version in minors:
        for model_type, answer in _judged_types(version, with_packages=True).items():
            wrong = [n for n in answer["needs"] if n["module"] == "causal_conv1d" and
                     not _seen_as_it_must_be(n)]
            wrong += [n for n in answer["needs"] if n["reason"] == "not-taken"]
            failures += [f"transformers {version} {model_type}: {n}" for n in wrong]
    assert not failures, "\n".join(failures)
