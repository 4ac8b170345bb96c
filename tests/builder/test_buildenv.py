"""The build environment: CUDA_HOME from the toolchain, archs, parallelism, no network."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from packaging.version import Version

from tests.conftest import REPO
from wheelsmith.arch import ArchSet
from wheelsmith.builder import reproducible
from wheelsmith.builder.buildenv import DEAD_PROXY, build_env, choose_parallelism
from wheelsmith.builder.plan import BuildPlan
from wheelsmith.recipes.model import load_recipe
from wheelsmith.toolchain.env import Toolchain

TOOLCHAIN = Toolchain(
    name="cu130-torch2.14", python=Path("/venv/bin/python"), python_version="3.11",
    cuda_home=Path("/venv/site-packages/nvidia/cu13"), torch_version=Version("2.14.1"),
    torch_cuda=Version("13.0"), nvcc_version=Version("13.0.88"), cuobjdump=None,
    pins=("torch==2.14.1",))


def plan(archs: str = "12.0") -> BuildPlan:
    recipe = load_recipe(REPO / "recipes" / "causal-conv1d.yaml")
    return BuildPlan(recipe=recipe, release=recipe.latest, archs=ArchSet.parse([archs]),
                     toolchain=TOOLCHAIN)


@pytest.mark.parametrize(
    ("cores", "gb", "per_job", "archs", "jobs", "threads"),
    [
        (2, 23.0, 3.0, 1, 2, 1),     # this machine: both cores, one arch each
        (16, 128.0, 3.0, 2, 16, 2),  # the H200 box
        (16, 20.0, 9.0, 4, 2, 1),    # flash-attn sized jobs on little memory: 2 x 1 x 9 GB
        (64, 40.0, 9.0, 2, 2, 2),    # memory, not cores, bounds the jobs
        (8, 1.0, 3.0, 1, 1, 1),      # never below one job
    ],
)
def test_parallelism_fits_cores_and_memory(cores: int, gb: float, per_job: float, archs: int,
                                           jobs: int, threads: int) -> None:
    chosen = choose_parallelism(cores, gb, per_job, archs)
    assert (chosen.jobs, chosen.nvcc_threads) == (jobs, threads)


def test_env_sets_cuda_home_archs_and_package_knobs() -> None:
    parallelism = choose_parallelism(2, 23.0, 3.0, 1)
    env = build_env(plan(), parallelism, source_date_epoch=1234,
                    base={"PATH": "/usr/bin", "HOME": "/root", "CUDA_HOME": "/usr/local",
                          "TORCH_CUDA_ARCH_LIST": "7.0", "PIP_INDEX_URL": "http://x"})
    assert env["CUDA_HOME"] == "/venv/site-packages/nvidia/cu13"
    assert env["TORCH_CUDA_ARCH_LIST"] == "12.0"
    assert env["CAUSAL_CONV1D_FORCE_BUILD"] == "TRUE"
    assert env["PATH"] == "/venv/bin:/venv/site-packages/nvidia/cu13/bin:/usr/bin"
    assert (env["MAX_JOBS"], env["NVCC_THREADS"]) == ("2", "1")
    assert env["SOURCE_DATE_EPOCH"] == "1234"
    assert "PIP_INDEX_URL" not in env


def test_env_maps_build_paths_for_both_compilers_before_the_builds_own_flags() -> None:
    """The source tree and toolchain paths leave the binaries (reproducible.py); an
    NVCC_PREPEND_FLAGS the build sets (here through --env) keeps its place after ours."""
    built = BuildPlan(recipe=plan().recipe, release=plan().release, archs=ArchSet.parse(["12.0"]),
                      toolchain=TOOLCHAIN, extra_env=(("NVCC_PREPEND_FLAGS", "-lineinfo"),))
    env = build_env(built, choose_parallelism(2, 23.0, 3.0, 1), source_date_epoch=1,
                    base={"PATH": "/usr/bin"}, source=Path("/w/src/pkg"))
    maps = ("-ffile-prefix-map=/venv=/wheelsmith/toolchain "
            "-ffile-prefix-map=/w/src/pkg=/wheelsmith/src "
            "-ffile-prefix-map=/venv/site-packages/nvidia/cu13=/wheelsmith/cuda")
    assert env["CPPFLAGS"] == maps
    # CPython's own defaults, not those of the Python the build runs with (Debian's differ)
    assert (env["CFLAGS"], env["CXXFLAGS"]) == (reproducible.PYTHON_CFLAGS,) * 2
    assert (env["LDSHARED"], env["LDCXXSHARED"]) == ("gcc -shared", "g++ -shared")
    assert env["NVCC_PREPEND_FLAGS"] == "-objtemp -frandom-seed=wheelsmith " + " ".join(
        f"-Xcompiler {flag}" for flag in maps.split()) + " -lineinfo"


def test_env_points_every_proxy_at_a_dead_port() -> None:
    env = build_env(plan(), choose_parallelism(2, 23.0, 3.0, 1), source_date_epoch=0,
                    base={"https_proxy": "http://corp:3128"})
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        assert env[var] == DEAD_PROXY
    assert env["PIP_NO_INDEX"] == "1"


def test_content_key_changes_with_archs_and_toolchain() -> None:
    base = plan("12.0")
    assert plan("12.0").key == base.key
    assert plan("9.0;12.0").key != base.key
    other = BuildPlan(recipe=base.recipe, release=base.release, archs=base.archs,
                      toolchain=Toolchain(**{**{f: getattr(TOOLCHAIN, f) for f in
                                                TOOLCHAIN.__slots__}, "pins": ("torch==2.13",)}))
    assert other.key != base.key
    assert base.local_label() == "cu.13.0.torch.2.14.sm.120"
    assert base.torch_requirement() == "torch==2.14.*"


def test_two_profiles_of_one_torch_minor_never_share_a_filename_or_a_key() -> None:
    """torch 2.11 from the cu128 root and from PyPI (CUDA 13.0), on two Pythons: four cells,
    four labels x tags, four content keys."""
    def cell(cuda: str, python: str) -> BuildPlan:
        toolchain = Toolchain(**{**{f: getattr(TOOLCHAIN, f) for f in TOOLCHAIN.__slots__},
                                 "name": f"cu{cuda.replace('.', '')}-torch2.11",
                                 "torch_version": Version("2.11.0"), "torch_cuda": Version(cuda),
                                 "python_version": python})
        return BuildPlan(recipe=plan().recipe, release=plan().release, archs=plan().archs,
                         toolchain=toolchain)
    cells = [cell(cuda, python) for cuda in ("12.8", "13.0") for python in ("3.11", "3.12")]
    assert [c.local_label() for c in cells] == [
        "cu.12.8.torch.2.11.sm.120", "cu.12.8.torch.2.11.sm.120",
        "cu.13.0.torch.2.11.sm.120", "cu.13.0.torch.2.11.sm.120"]  # + the cp311/cp312 tag
    assert len({(c.local_label(), c.toolchain.python_version) for c in cells}) == 4
    assert len({c.key for c in cells}) == 4


def test_builds_of_other_keys_never_share_a_source_tree_or_a_lock() -> None:
    slugs = {plan(archs).slug() for archs in ("12.0", "9.0;12.0", "12.0+PTX", "10.0")}
    assert len(slugs) == 4  # the work dir and its lock are named after the key
    assert plan("12.0").slug() == f"causal-conv1d-1.7.0-{plan('12.0').key[:12]}"


PURE = load_recipe(REPO / "recipes" / "fla-core.yaml")
TOOLCHAINS = st.builds(
    lambda name, torch, cuda, python, platform, backend, other: Toolchain(**{
        **{f: getattr(TOOLCHAIN, f) for f in TOOLCHAIN.__slots__},
        "name": name, "torch_version": Version(torch), "torch_cuda": Version(cuda),
        "python_version": python, "platform": platform, "pins": (*backend, *other)}),
    st.sampled_from(["cu130-torch2.14", "cu130-torch2.11", "mine"]),
    st.sampled_from(["2.11.0", "2.14.1"]), st.sampled_from(["12.8", "13.0"]),
    st.sampled_from(["3.11", "3.12", "3.14"]), st.sampled_from(["x86_64", "aarch64"]),
    st.lists(st.sampled_from(["setuptools==81.0.0", "setuptools==84.2.1", "wheel==0.48.0"]),
             unique=True),
    st.lists(st.sampled_from(["filelock==4.1.0", "filelock==4.3.2", "networkx==3.7",
                              "cuda-bindings==13.5.0; python_version == '3.11'"]), unique=True))


def pure_plan(toolchain: Toolchain) -> BuildPlan:
    return BuildPlan(recipe=PURE, release=PURE.latest, archs=ArchSet(()), toolchain=toolchain)


@given(TOOLCHAINS, TOOLCHAINS)
def test_two_builds_of_a_pure_wheel_share_its_name_only_where_they_share_its_key(
        first: Toolchain, second: Toolchain) -> None:
    """A pure wheel (py3-none-any) is named after the toolchain that built it: a key of its
    own per channel (the setuptools and the provenance that are in its bytes), and one key
    whatever Python or CPU of that profile ran the build. So an output directory or an index
    holding one channel's never meets another's under its name (it was exit 11, 'built from
    different inputs', for the second profile of a nightly)."""
    a, b = pure_plan(first), pure_plan(second)
    same_name = a.local_label() == b.local_label()
    backend = {(t.name, t.torch_version, t.torch_cuda,
                tuple(p for p in t.pins if p.startswith(("setuptools", "wheel"))))
               for t in (first, second)}
    assert (a.key == b.key) == (len(backend) == 1)
    if a.key == b.key:
        assert same_name
    torch = first.torch_version
    assert torch is not None
    assert a.local_label() == f"cu.{first.torch_cuda}.torch.{torch.major}.{torch.minor}.pure"
