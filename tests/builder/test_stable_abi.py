"""Stable-ABI builds (recipes/stableabi.py, builder/stableabi.py): the recipe setting, the
label and pin it gives, the build's flags, and on real builds of the stable-ext fixture (one
build shared by the module): the abi3 wheel and its stable-ABI audit, the same source with
one at:: call refused, and (slow) its torch range proven under three torch minors."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from packaging.version import Version

from tests.builder.test_buildenv import TOOLCHAIN
from tests.builder.test_torch_range import beside
from tests.conftest import FIXTURES, REPO
from tests.doctor.test_doctor_runs import probe_info
from wheelsmith import locations
from wheelsmith.arch import ArchSet, parse_arch
from wheelsmith.builder import stableabi, torchexports
from wheelsmith.builder.buildenv import build_env, choose_parallelism
from wheelsmith.builder.plan import BuildPlan
from wheelsmith.doctor import judge
from wheelsmith.doctor.abi import built_for_torch, explain
from wheelsmith.doctor.judge import Knowledge, knowledge
from wheelsmith.doctor.report import PackageReport, Report
from wheelsmith.errors import RecipeError
from wheelsmith.index.offers import serves
from wheelsmith.recipes.knownbad import TORCH_ABI
from wheelsmith.recipes.model import canonical, load_recipe
from wheelsmith.toolchain.env import Toolchain
from wheelsmith.toolchain.target import Target

RECIPE = (FIXTURES / "stable-ext.recipe.yaml").read_text()
SETTING = '  stable_abi: "2.10"\n'
LINE = RECIPE.splitlines().index(SETTING.rstrip("\n")) + 1  # where the recipe sets it
MINOR = st.tuples(st.integers(0, 9), st.integers(0, 40))


def recipe_file(folder: Path, setting: str = SETTING) -> Path:
    file = folder / "recipes" / "stable-ext.yaml"
    file.parent.mkdir(parents=True, exist_ok=True)
    text = RECIPE.replace(f"build:\n{SETTING}", f"build:\n{setting}" if setting else "")
    file.write_text(text.replace("PATH", str(folder)))
    return file


def problems(file: Path) -> list[str]:
    with pytest.raises(RecipeError) as caught:
        load_recipe(file, "stable-ext.yaml")
    return [p.render() for p in caught.value.problems]


@given(MINOR)
def test_the_setting_takes_a_minor_from_torchs_stable_abi_on_and_refuses_older_ones_at_its_line(
        tmp_path_factory: pytest.TempPathFactory, minor: tuple[int, int]) -> None:
    text = f"{minor[0]}.{minor[1]}"
    file = recipe_file(tmp_path_factory.mktemp("r"), f'  stable_abi: "{text}"\n')
    if Version(text) < Version("2.9"):
        assert problems(file) == [
            f"stable-ext.yaml:{LINE}:15: 'build.stable_abi' {text} is older than torch's stable "
            "ABI, which torch 2.9 introduced\n    hint: write 2.9 or a newer minor"]
        return
    stable = load_recipe(file).stable_abi
    assert stable is not None
    assert stable.floor == text
    assert stable.define() == f"-DTORCH_TARGET_VERSION=0x{minor[0]:02x}{minor[1]:02x}" + "0" * 12
    assert int(stable.target_version(), 16) == (minor[0] << 56) | (minor[1] << 48)


@given(st.text(st.sampled_from("0123456789.x- "), min_size=1, max_size=8))
def test_a_setting_that_is_no_torch_minor_is_refused_at_its_line(
        tmp_path_factory: pytest.TempPathFactory, text: str) -> None:
    assume(re.fullmatch(r"\d+\.\d+", text) is None)
    file = recipe_file(tmp_path_factory.mktemp("r"), f'  stable_abi: "{text}"\n')
    assert problems(file) == [
        f"stable-ext.yaml:{LINE}:15: 'build.stable_abi' is not a torch minor: '{text}'\n"
        "    hint: write the oldest torch it targets as a quoted MAJOR.MINOR, e.g. \"2.10\""]


@given(floor=st.integers(9, 20), torch=st.integers(5, 20))
def test_a_toolchain_whose_torch_cannot_target_the_floor_is_refused_naming_the_recipe_line(
        tmp_path_factory: pytest.TempPathFactory, floor: int, torch: int) -> None:
    file = recipe_file(tmp_path_factory.mktemp("r"), f'  stable_abi: "2.{floor}"\n')
    stable = load_recipe(file, "stable-ext.yaml").stable_abi
    assert stable is not None
    refused = stable.refusal(Version(f"2.{torch}.1"))
    if torch >= max(10, floor):
        assert refused is None
        return
    assert refused is not None
    why = (f"the toolchain's torch 2.{torch}.1 has no TORCH_TARGET_VERSION (torch 2.10 added "
           "it)" if torch < 10 else f"the toolchain's torch 2.{torch}.1 is older than the "
           f"floor 2.{floor}: its headers cannot target a newer torch")
    assert refused.details() == [
        f"stable-ext.yaml:{LINE}:15: 'build.stable_abi' 2.{floor} cannot be built: {why}\n"
        f"    hint: build it with a toolchain of torch 2.10 or newer, and not older than "
        f"2.{floor} (--toolchain)"]


def test_the_setting_is_in_the_content_key_and_gives_the_stable_label_pin_and_flags(
        tmp_path: Path) -> None:
    stable = load_recipe(recipe_file(tmp_path / "a"))
    plain = load_recipe(recipe_file(tmp_path / "b", ""))
    plans = [BuildPlan(recipe=r, release=r.latest, archs=ArchSet.parse(["12.0"]),
                       toolchain=TOOLCHAIN) for r in (stable, plain)]
    assert canonical(stable, stable.latest)["stable_abi"] == "2.10"
    assert plans[0].key != plans[1].key
    assert [(p.local_label(), p.torch_requirement()) for p in plans] == [
        ("cu.13.0.stable.2.10.sm.120", "torch>=2.10"),
        ("cu.13.0.torch.2.14.sm.120", "torch==2.14.*")]
    span = plans[0].torch_span(["2.12.1", "2.13.0", "2.14.1", "2.16.0"])  # a torch range's
    assert [(p.local_label(span), p.torch_requirement(span)) for p in plans] == [
        ("cu.13.0.stable.2.10.range.2.12.2.14.sm.120", "torch>=2.10"),  # the floor stays
        ("cu.13.0.torch.2.14.range.2.12.2.14.sm.120", "torch>=2.12,<2.15")]
    env = build_env(plans[0], choose_parallelism(2, 23.0, 3.0, 1), source_date_epoch=1,
                    base={"PATH": "/usr/bin"}, source=Path("/w/src/pkg"))
    define = "-DTORCH_TARGET_VERSION=0x020a000000000000"
    assert env["CPPFLAGS"].split()[-1] == define  # after the prefix maps
    assert env["NVCC_APPEND_FLAGS"] == define  # where the compile cache sees it
    assert "TORCH_TARGET_VERSION" not in json.dumps(build_env(
        plans[1], choose_parallelism(2, 23.0, 3.0, 1), source_date_epoch=1,
        base={"PATH": "/usr/bin"}, source=Path("/w/src/pkg")))


@given(floor=MINOR, archs=st.lists(st.sampled_from(["80", "90", "100", "120"]), min_size=1,
                                   unique=True))
def test_every_reader_of_the_label_reads_a_stable_one(floor: tuple[int, int],
                                                      archs: list[str]) -> None:
    label = f"cu.13.0.stable.{floor[0]}.{floor[1]}.sm.{'.'.join(archs)}"
    name = f"stable_ext-0.1.0+{label}-cp311-abi3-manylinux_2_34_x86_64.whl"
    assert stableabi.labelled_stable(name)
    assert not stableabi.labelled_stable(name.replace(".stable.", ".torch."))
    assert built_for_torch(f"0.1.0+{label}") is None  # it claims no single torch minor
    for code in ["80", "90", "100", "120"]:
        arch = parse_arch(f"{code[:-1]}.{code[-1]}")
        assert serves(name, arch) == (code in archs)
    assert stableabi.abi3_version(Path(name)) == (3, 11)
    assert stableabi.abi3_version(Path(name.replace("cp311-abi3", "cp311-cp311"))) is None


def test_the_limited_api_is_read_from_the_pythons_own_headers() -> None:
    limited, how = stableabi.limited_api(Path(sys.executable), (3, 11))
    assert {"PyModule_Create2", "PyLong_FromLong", "_Py_Dealloc"} <= limited
    assert not {"_PyObject_GetDictPtr", "PyFrame_New"} & limited
    assert how.startswith("the limited API of CPython 3.11 (")
    assert how.endswith("/Python.h)")
    older, _ = stableabi.limited_api(Path(sys.executable), (3, 2))
    assert older < limited  # what 3.11 added to the limited API is not 3.2's


@given(st.sampled_from(["c10::", "at::", "torch::", "caffe2::", "std::", "cudaX", "my::"]),
       st.sampled_from(["", "void ", "c10::Foo "]), st.sampled_from(["", "<c10::IValue>",
                                                                      "<at::Tensor, int>"]))
def test_a_symbol_is_torchs_by_its_own_name_never_its_template_arguments_or_parameters(
        namespace: str, returned: str, template: str) -> None:
    name = f"{returned}{namespace}thing{template}::call(c10::Device, at::Tensor const&) const"
    assert stableabi._in_torch(name) == (namespace in stableabi.TORCH_NAMESPACES)


# --- real builds -------------------------------------------------------------------------

AT_CALL = ("using torch::stable::Tensor;\n",
           "using torch::stable::Tensor;\n\nnamespace at { class Context; Context& "
           "globalContext(); }\n")
AT_USE = ("Tensor add_one_cpu(Tensor x) {\n", "Tensor add_one_cpu(Tensor x) {\n"
          "  at::globalContext();\n")


def stable_project(root: Path, name: str, edits: tuple[tuple[str, str], ...] = ()) -> Path:
    """A project (WHEELSMITH_HOME) with the stable-ext fixture as recipe `name`."""
    source = root / "sources" / name
    shutil.copytree(FIXTURES / "stable-ext", source)
    ops = source / "csrc" / "ops.cpp"
    for old, new in edits:
        assert old in ops.read_text()
        ops.write_text(ops.read_text().replace(old, new))
    setup = source / "setup.py"
    setup.write_text(setup.read_text().replace('name="stable-ext"', f'name="{name}"'))
    project = root / "project"
    (project / "recipes").mkdir(parents=True, exist_ok=True)
    (project / "patches").mkdir(exist_ok=True)
    if not (project / "toolchains").exists():
        shutil.copytree(REPO / "toolchains", project / "toolchains")
    (project / "recipes" / f"{name}.yaml").write_text(
        RECIPE.replace("package: stable-ext", f"package: {name}").replace("PATH", str(source)))
    return project


def run_cli(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wheelsmith", *args], cwd=project,
                          capture_output=True, text=True, check=False,
                          env=dict(os.environ, WHEELSMITH_HOME=str(project)))


@pytest.fixture(scope="module")
def stable_build(tmp_path_factory: pytest.TempPathFactory, toolchain: Toolchain
                 ) -> dict[str, Any]:
    """The stable-ext fixture built once for 12.0 with the default toolchain (--json)."""
    project = stable_project(tmp_path_factory.mktemp("stable"), "stable-ext")
    built = run_cli(project, "build", "stable-ext", "--arch", "12.0", "--json")
    assert built.returncode == 0, built.stderr
    data: dict[str, Any] = json.loads(built.stdout)
    data["project"] = project
    return data


@pytest.mark.toolchain
def test_a_stable_abi_build_is_one_abi3_wheel_of_exactly_sm_120_that_the_audit_calls_clean(
        stable_build: dict[str, Any]) -> None:
    wheel = Path(stable_build["wheel"])
    assert wheel.name == ("stable_ext-0.1.0+cu.13.0.stable.2.10.sm.120-cp311-abi3-"
                          "manylinux_2_34_x86_64.whl")
    provenance = stable_build["provenance"]
    assert provenance["device_code"] == [
        {"path": "stable_ext/_C.abi3.so", "sass": ["sm_120"], "ptx": []}]
    assert provenance["stable_abi"] == {"floor": "2.10",
                                        "torch_target_version": "0x020a000000000000"}
    audited = provenance["audit"]["stable_abi"]
    assert (audited["clean"], audited["findings"], audited["objects"]) == (True, [], 1)
    assert audited["shim_symbols"] > 0
    assert audited["python"].startswith("the limited API of CPython 3.11 (")
    assert stable_build["run"]["smoke"][:3] == [
        "imported stable_ext", "imported stable_ext.selfcheck",
        "imported stable_ext._C (stable_ext/_C.abi3.so)"]
    said = run_cli(stable_build["project"], "verify", str(wheel))
    assert said.returncode == 0, said.stderr
    assert f"  stable ABI: clean (1 object(s) take {audited['shim_symbols']} torch C shim " \
           f"symbol(s) and no C++ torch symbol; Python: {audited['python']})" in \
        said.stdout.splitlines()
    metadata = subprocess.run(["unzip", "-p", str(wheel), "*/METADATA"], capture_output=True,
                              text=True, check=True).stdout
    assert "Requires-Dist: torch>=2.10" in metadata.splitlines()


@pytest.mark.toolchain
def test_the_same_source_with_one_at_call_is_refused_naming_the_object_and_the_symbol(
        stable_build: dict[str, Any]) -> None:
    project = stable_project(Path(stable_build["project"]).parent, "unstable-ext",
                             (AT_CALL, AT_USE))
    refused = run_cli(project, "build", "unstable-ext", "--arch", "12.0")
    assert refused.returncode == 10, refused.stderr
    lines = refused.stderr.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("error: "))
    wheel = "unstable_ext-0.1.0-cp311-abi3-linux_x86_64.whl"
    assert lines[start:start + 3] == [
        f"error: {wheel} is not stable-ABI clean: 1 unstable use(s)",
        "  stable_ext/_C.abi3.so takes at::globalContext() (_ZN2at13globalContextEv) from torch",
        f"hint: {stableabi.HINT}"]
    assert not list((project / "wheelhouse").glob("unstable_ext-*.whl"))


@pytest.mark.slow
@pytest.mark.toolchain
def test_one_stable_wheel_is_proven_under_three_torch_minors(
        stable_build: dict[str, Any], toolchain: Toolchain, tmp_path: Path) -> None:
    """torch 2.12, 2.13 and 2.14 (CUDA 13), the releases pip lists with no local label (about
    3 GB, kept in ~/.cache/wheelsmith/torch-wheels), each with the CUDA libraries it pins that
    the toolchain lacks installed beside it."""
    said = run_cli(stable_build["project"], "verify", stable_build["wheel"], "--python",
                   str(toolchain.python), "--torch-range", "--torch", "2.12", "--torch", "2.13",
                   "--torch", "2.14", "--work-dir", str(tmp_path))
    assert said.returncode == 0, said.stderr
    lines = said.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if "torch range:" in line)
    ran = ("symbols, import, smoke test; the recipe's GPU op needs a GPU of its archs and was "
           "not run: skipped (no GPU)")
    wheels = {w.name.split("-")[1]: w for w in torch_wheels_here()}
    assert lines[start:start + 4] == [
        "  torch range: 2.12.1 to 2.14.1 (proven by symbols, import and smoke test under "
        "2.12.1, 2.13.0, 2.14.1)",
        *(f"    torch {v}: proven ({ran}){beside(toolchain.python, wheels[v])}"
          for v in ("2.12.1", "2.13.0", "2.14.1"))]


def torch_wheels_here() -> list[Path]:
    return sorted((locations.cache_dir() / torchexports.WHEELS).glob("torch-*.whl"))


@given(floor=st.integers(9, 30), here=st.integers(9, 30))
def test_doctor_reads_a_stable_label_as_its_floor_not_a_torch_it_was_built_for(
        floor: int, here: int) -> None:
    version = f"0.1.0+cu.13.0.stable.2.{floor}.sm.120"
    said = explain("ImportError: _C.abi3.so: undefined symbol: torch_new_shim", "stable-ext",
                   version, f"2.{here}.0", "/p")
    assert said == (f"stable-ext {version} does not import: torch_new_shim is undefined: it "
                    f"was built against torch's stable ABI for torch 2.{floor} and newer, and "
                    f"this environment has torch 2.{here}.0, whose libraries do not export it. "
                    f"Fix: install torch 2.{floor} or newer, or rebuild it for this torch: "
                    "wheelsmith build stable-ext --python /p")
    info = probe_info(dists={}, torch=f"2.{here}.1+cu130")
    report = Report(python="/env/bin/python", python_version="3.12", torch=f"2.{here}.1+cu130",
                    torch_cuda="13.0", gpu=None, arch=parse_arch("12.0"), arch_source="--arch",
                    packages=[PackageReport("stable-ext", version, "sass", ())])
    to_install: dict[str, None] = {}
    rules = [rule for rule in knowledge().rules if rule.when == TORCH_ABI]
    judge._judge_rules(report, info, Knowledge(rules=rules),
                       Target.from_probe(Path("/env/bin/python"), info), to_install)
    assert report.problems == ([
        f"stable-ext {version} needs torch 2.{floor} or newer (its stable-ABI floor), this "
        f"environment has torch 2.{here}.1+cu130"] if floor > here else [])
    assert list(to_install) == (["stable-ext"] if floor > here else [])
