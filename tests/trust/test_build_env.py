"""`build --env` (the user's own command line) adds variables to a package's build; it never
overrides what wheelsmith sets, nor what changes where code comes from (buildenv.protection).
Every variable build_env sets, in every kind of build, is in that protected set, so the two
cannot drift; and what a recipe sets is refused too, before anything is fetched."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from packaging.version import Version

from tests.conftest import REPO
from tests.hostile import assert_orderly, run_bounded
from wheelsmith.arch import ArchSet
from wheelsmith.builder.buildenv import (
    EXTENDED,
    Guard,
    build_env,
    check_extra_env,
    choose_parallelism,
    recipe_sets,
)
from wheelsmith.builder.compilecache import CompileCache
from wheelsmith.builder.compilefarm import CompileFarm, Session
from wheelsmith.builder.plan import BuildPlan, archs_for
from wheelsmith.cli._common import parse_env
from wheelsmith.errors import RecipeError, UsageError
from wheelsmith.recipes.envnames import protection
from wheelsmith.recipes.model import load_recipe
from wheelsmith.toolchain.env import Toolchain

# The families the protected set must cover, written here from the threat model (not read
# from the code): what wheelsmith sets, what picks programs, paths, archs or the network.
EXACT = ("PATH", "PYTORCH_NVCC", "CUDA_HOME", "CUDA_PATH", "LD_PRELOAD", "LD_LIBRARY_PATH",
         "CC", "CXX", "CUDAHOSTCXX", "TORCH_CUDA_ARCH_LIST", "FLASH_ATTN_CUDA_ARCHS",
         "PYTHONPATH", "PYTHONHOME", "HTTP_PROXY", "https_proxy", "all_proxy", "NO_PROXY",
         "PIP_INDEX_URL", "PIP_NO_INDEX", "WHEELSMITH_HOME", "MAX_JOBS", "NVCC_THREADS",
         "SOURCE_DATE_EPOCH", "CCACHE_DIR", "SCCACHE_SERVER_UDS", "LDSHARED", "BASH_ENV",
         "HOME", "TMPDIR", "_PYTHON_HOST_PLATFORM", "SETUPTOOLS_EXT_SUFFIX", "GIT_SSH_COMMAND")
FAMILIES = ("{}_HOME", "{}_ROOT", "{}PATH", "LD_{}", "WHEELSMITH_{}", "PIP_{}", "PYTHON{}",
            "TORCH_{}", "PYTORCH_{}", "CUDA{}", "{}_PROXY", "{}_CUDA_ARCH_LIST", "CCACHE_{}")
SUFFIX = st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,11}", fullmatch=True)
SHELL_TEXT = st.text(alphabet=st.sampled_from(list(";|&$`()<>'\"\\\n *?~#!{}=") +
                                              list("abcXYZ/._-0123")), max_size=40)


def any_case(name: str) -> st.SearchStrategy[str]:
    """`name` with each letter in a case chosen by hypothesis (`Path`, `ld_PRELOAD`)."""
    return st.lists(st.booleans(), min_size=len(name), max_size=len(name)).map(
        lambda ups: "".join(c.upper() if up else c.lower() for c, up in zip(name, ups,
                                                                           strict=True)))


PROTECTED = st.one_of(
    st.sampled_from(EXACT).flatmap(any_case),
    st.tuples(st.sampled_from(FAMILIES), SUFFIX).map(lambda f: f[0].format(f[1]))
    .flatmap(any_case))
# Names a package's build may be given: its own knobs (none of the families above)
KNOB = st.from_regex(r"(MYPKG|FLASH_ATTENTION|MAMBA|NVCC)_(FORCE_BUILD|SKIP_CUDA_BUILD|"
                     r"APPEND_FLAGS|PREPEND_FLAGS|USE_FAST_MATH|NUM_KERNELS)", fullmatch=True)


@given(name=PROTECTED, value=SHELL_TEXT)
def test_build_env_refuses_every_protected_name_in_any_case_naming_it_and_why(
        name: str, value: str) -> None:
    with pytest.raises(UsageError) as refused:
        parse_env((f"{name}={value}",))
    assert refused.value.message.startswith(f"--env {name}: ")
    assert refused.value.message.endswith("; a build's --env cannot override it")
    assert refused.value.hint is not None
    assert "--env is for a package's own knobs" in refused.value.hint


@given(name=KNOB, value=SHELL_TEXT)
def test_build_env_passes_a_packages_own_knobs_as_they_are(name: str, value: str) -> None:
    assert parse_env((f"{name}={value}",)) == ((name, value),)


def _recipe_setting(path: Path, build: dict[str, str], release: dict[str, str]) -> Path:
    """A recipe whose build.env and whose release's env are `build` and `release`; one
    variable a line, so that each name's line is its index + 7 (build) or + 12 (release)."""
    def lines(env: dict[str, str], indent: str) -> list[str]:
        return [f"{indent}{name}: {json.dumps(value)}" for name, value in env.items()]
    path.write_text("\n".join([
        "package: demo", "arch:", "  env: TORCH_CUDA_ARCH_LIST", "build:",
        "  memory_per_job_gb: 1", "  env:", *lines(build or {"DEMO_KNOB": "1"}, "    "),
        "versions:", '  - version: "1.0"', "    source: {path: .}", "    env:",
        *lines(release or {"DEMO_KNOB": "1"}, "      "), ""]))
    return path


@given(name=PROTECTED, knob=KNOB, value=SHELL_TEXT, in_release=st.booleans())
def test_a_recipe_env_setting_a_protected_name_is_refused_at_its_line(
        tmp_path_factory: pytest.TempPathFactory, name: str, knob: str, value: str,
        in_release: bool) -> None:
    """A recipe's env is applied after what wheelsmith sets: PATH, LD_PRELOAD or PYTHONPATH
    there replaced the toolchain's, and check-recipes said nothing."""
    env = {knob: "TRUE", name: value}
    file = _recipe_setting(tmp_path_factory.mktemp("r") / "demo.yaml",
                           {} if in_release else env, env if in_release else {})
    with pytest.raises(RecipeError) as refused:
        load_recipe(file)
    why = protection(name)
    assert why is not None
    assert [(p.line, p.message) for p in refused.value.problems] == [
        (13 if in_release else 8, f"{name}: {why.why}; a recipe's env cannot set it")]


@given(knob=KNOB, value=SHELL_TEXT)
def test_a_recipe_env_passes_a_packages_own_knobs(
        tmp_path_factory: pytest.TempPathFactory, knob: str, value: str) -> None:
    file = _recipe_setting(tmp_path_factory.mktemp("r") / "demo.yaml", {knob: value},
                           {knob: value})
    loaded = load_recipe(file)
    assert (loaded.env, loaded.releases[0].env) == (((knob, value),), ((knob, value),))


def test_check_recipes_names_each_protected_variable_a_recipe_sets_by_file_and_line(
        tmp_path: Path) -> None:
    file = _recipe_setting(tmp_path / "demo.yaml", {"DEMO_FORCE_BUILD": "TRUE",
                                                    "LD_PRELOAD": "/tmp/x.so"},
                           {"PYTHONPATH": "/tmp/site"})
    outcome = run_bounded("check-recipes", str(file), cwd=tmp_path, seconds=60)
    assert_orderly(outcome, seconds=30)
    paths = ("it changes where programs, libraries, headers or modules come from; a recipe's "
             "env cannot set it")
    hint = ("    hint: the toolchain profile provides the compilers, CUDA and Python "
            "(--toolchain, --python, --platform); a library the build needs goes in "
            "build.libraries (wheelsmith sets its *_ROOT, *_HOME and *_DIR); another path "
            "comes from a recipe patch. A recipe's env is for the package's own knobs, e.g. "
            "FLASH_ATTENTION_FORCE_BUILD: \"TRUE\" (docs/cli.md, 'The build's environment')")
    shown = file.name  # check-recipes names a file under the current directory relative
    assert (outcome.returncode, outcome.stderr.splitlines()) == (3, [
        f"error: 2 problems in {shown}", f"  {shown}:8:5: LD_PRELOAD: {paths}", hint,
        f"  {shown}:13:7: PYTHONPATH: {paths}", hint,
        "hint: the schema is printed by `wheelsmith schema`"]), outcome.describe()


@pytest.mark.parametrize(("name", "why", "instead"), [
    ("PYTORCH_NVCC", "wheelsmith sets torch's build settings (torch writes PYTORCH_NVCC into "
                     "build.ninja, where a shell runs it)",
     "use --arch, --toolchain or --compile-cache"),
    ("PATH", "it changes where programs, libraries, headers or modules come from",
     "the toolchain profile provides the compilers, CUDA and Python (--toolchain, --python, "
     "--platform); a library the build needs goes in build.libraries (wheelsmith sets its "
     "*_ROOT, *_HOME and *_DIR); another path comes from a recipe patch"),
    ("CUDA_HOME", "the CUDA toolkit is the toolchain's (CUDA_HOME is always set from it)",
     "use --toolchain"),
    ("LD_PRELOAD", "it changes where programs, libraries, headers or modules come from",
     "the toolchain profile provides the compilers, CUDA and Python (--toolchain, --python, "
     "--platform); a library the build needs goes in build.libraries (wheelsmith sets its "
     "*_ROOT, *_HOME and *_DIR); another path comes from a recipe patch"),
])
def test_build_with_a_protected_env_stops_before_anything_is_fetched_or_run(
        tmp_path: Path, name: str, why: str, instead: str) -> None:
    cache, marker = tmp_path / "cache", tmp_path / "X"
    env = {**os.environ, "WHEELSMITH_CACHE": str(cache)}
    outcome = run_bounded("build", "causal-conv1d", "--env", f"{name}=touch {marker}; nvcc",
                          "--out", str(tmp_path / "out"), "--work-dir", str(tmp_path / "work"),
                          cwd=tmp_path, env=env, seconds=60)
    assert_orderly(outcome, seconds=60)
    assert outcome.returncode == 4
    assert outcome.stderr == (
        f"error: --env {name}: {why}; a build's --env cannot override it\n"
        f"hint: {instead}. --env is for a package's own knobs, e.g. "
        "NVCC_APPEND_FLAGS=--split-compile=0 (docs/cli.md, 'The build's environment')\n")
    assert not marker.exists()
    assert not cache.exists()  # nothing fetched, no toolchain made
    assert not (tmp_path / "work").exists()


def test_env_that_is_not_a_name_is_refused_escaped(tmp_path: Path) -> None:
    outcome = run_bounded("build", "causal-conv1d", "--env", "\x1b[2J=x", cwd=tmp_path)
    assert outcome.returncode == 4
    assert outcome.stderr.splitlines()[0] == r'error: --env: "\u001b[2J=x" is not KEY=VALUE'


# --- the protected set covers everything build_env sets ---------------------------------------

def toolchain(tmp_path: Path, **changes: object) -> Toolchain:
    base = Toolchain(name="cu130-torch2.14", python=tmp_path / "venv/bin/python",
                     python_version="3.11", cuda_home=tmp_path / "venv/cuda",
                     torch_version=Version("2.14.1"), torch_cuda=Version("13.0"),
                     nvcc_version=Version("13.0.88"), cuobjdump=None, pins=("torch==2.14.1",),
                     site=tmp_path / "venv/site")
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def fake_cross_compilers(directory: Path) -> None:
    """aarch64 compilers found on PATH (build_env only names them; nothing runs them)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("aarch64-linux-gnu-g++", "aarch64-linux-gnu-gcc"):
        tool = directory / name
        tool.write_text("#!/bin/sh\nexit 1\n")
        tool.chmod(tool.stat().st_mode | stat.S_IEXEC)


@pytest.mark.parametrize("recipe", ["causal-conv1d", "flash-attn", "fla-core"])
@pytest.mark.parametrize("kind", ["plain", "guarded-cache", "farm", "cross"])
def test_every_variable_build_env_sets_is_protected(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, recipe: str, kind: str) -> None:
    """Derivation by test: whatever build_env sets (less the flags it extends with the
    build's own, and what the recipe sets) is refused to --env by name."""
    loaded = load_recipe(REPO / "recipes" / f"{recipe}.yaml")
    chain = toolchain(tmp_path)
    compiler_env = None
    if kind == "cross":
        fake_cross_compilers(tmp_path / "bin")
        monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
        chain = toolchain(tmp_path, platform="aarch64", target_site=tmp_path / "site")
    elif kind == "guarded-cache":
        cache = CompileCache("ccache", tmp_path / "ccache", remote="redis://127.0.0.1:9")
        compiler_env = cache.env(chain, tmp_path)
    elif kind == "farm":
        farm = CompileFarm("http://127.0.0.1:9", "t", tmp_path / "sccache", tmp_path / "farm")
        compiler_env = Session(farm, tmp_path, "unix:x").compiler_env(chain)
    archs = archs_for(loaded, None if loaded.kind == "pure" else ArchSet.parse(["9.0;12.0"]))
    plan = BuildPlan(recipe=loaded, release=loaded.latest, archs=archs,
                     toolchain=chain, extra_env=(("NVCC_APPEND_FLAGS", "-lineinfo"),))
    guard = Guard(tmp_path / "report", configure_only=True, timings=tmp_path / "t.json")
    env = build_env(plan, choose_parallelism(2, 8.0, 3.0, 2), source_date_epoch=1,
                    base={**os.environ, "HOME": "/h", "LANG": "C", "TERM": "xterm"},
                    guard=guard if kind != "plain" else None, compile_cache=compiler_env,
                    launchers=tmp_path / "launchers", source=tmp_path / "src")
    recipe_vars = recipe_sets(plan.recipe, plan.release, plan.archs)
    unprotected = sorted(name for name in env if protection(name) is None
                         and name not in EXTENDED and name not in recipe_vars
                         and name != "NVCC_APPEND_FLAGS")
    assert unprotected == []
    if kind == "cross":
        assert ("CC" in env) == (loaded.kind != "pure")  # a pure build needs no compiler


def test_what_the_recipe_sets_is_refused_naming_the_recipe() -> None:
    recipe = load_recipe(REPO / "recipes" / "causal-conv1d.yaml")
    sets = recipe_sets(recipe, recipe.latest, ArchSet.parse(["12.0"]))
    assert sets == {"TORCH_CUDA_ARCH_LIST": "12.0", "CAUSAL_CONV1D_FORCE_BUILD": "TRUE"}
    with pytest.raises(UsageError) as refused:
        check_extra_env([("CAUSAL_CONV1D_FORCE_BUILD", "FALSE")], sets)
    assert refused.value.message == (
        "--env CAUSAL_CONV1D_FORCE_BUILD: the recipe sets it for this build (its build env, "
        "arch knob or a carried source); a build's --env cannot override it")
    check_extra_env([("NVCC_APPEND_FLAGS", "-lineinfo")], sets)  # a knob: no error
    with pytest.raises(UsageError, match="--env NEW_VAR: wheelsmith sets it for this build"):
        check_extra_env([("NEW_VAR", "1")], {}, {"NEW_VAR": "ours"})


def test_a_recipe_knob_in_build_env_is_refused_before_the_toolchain_or_a_fetch(
        tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    outcome = run_bounded("build", "causal-conv1d", "--env", "CAUSAL_CONV1D_FORCE_BUILD=FALSE",
                          "--work-dir", str(tmp_path / "work"), cwd=tmp_path,
                          env={**os.environ, "WHEELSMITH_CACHE": str(cache)}, seconds=60)
    assert_orderly(outcome, seconds=60)
    assert outcome.returncode == 4
    assert outcome.stderr.splitlines()[-2:] == [
        "error: --env CAUSAL_CONV1D_FORCE_BUILD: the recipe sets it for this build (its build "
        "env, arch knob or a carried source); a build's --env cannot override it",
        "hint: change it in the recipe (build.env). --env is for a package's own knobs, e.g. "
        "NVCC_APPEND_FLAGS=--split-compile=0 (docs/cli.md, 'The build's environment')"]
    assert not cache.exists()


def test_the_documented_protected_table_names_every_rule() -> None:
    """docs/cli.md lists the protected names and patterns; each rule's first one is there."""
    from wheelsmith.recipes import envnames  # noqa: PLC0415 - the rules table itself

    text = (REPO / "docs" / "cli.md").read_text()
    section = text.split("## The build's environment", 1)[1].split("\n## ", 1)[0]
    for patterns, _, _ in envnames._RULES:  # the table the docs mirror
        assert f"`{patterns[0]}`" in section, patterns[0]
