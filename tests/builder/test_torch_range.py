"""The torch range by evidence (builder/torchrange.py, builder/torchexports.py) on real ELF: an
extension compiled against the toolchain's libc10 checked against real torch export lists (the
toolchain's torch, a copy of it whose libc10.so no longer exports one of the symbols it needs,
and the torch wheels pip gives), then imported under each torch where all resolve; what
`wheelsmith verify --torch-range` prints."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from packaging.utils import canonicalize_name

from tests.builder.test_audit import demote
from tests.conftest import add_variant, wheelsmith
from tests.wheels import compile_shared, extension_wheel
from wheelsmith.arch import ArchSet
from wheelsmith.builder import torchexports, torchpins, torchrange
from wheelsmith.builder.linking import TorchEnv
from wheelsmith.files import sha256_file
from wheelsmith.inventory import shared_objects
from wheelsmith.toolchain.env import Toolchain
from wheelsmith.untrusted.linkage import demangle
from wheelsmith.wheelfile import WheelName, read_metadata

MEMBER = f"rangeprobe/_native{sysconfig.get_config_var('EXT_SUFFIX')}"


def module_source(symbols: list[str]) -> str:
    """A Python extension module `_native` that takes the address of each of `symbols`."""
    declared = "".join(f"extern char {s};\n" for s in symbols)
    used = "".join(f'    PyModule_AddObject(m, "s{i}", PyLong_FromVoidPtr(&{s}));\n'
                   for i, s in enumerate(symbols))
    return ("#include <Python.h>\n" + declared +
            'static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "_native", 0, -1, 0};\n'
            "PyMODINIT_FUNC PyInit__native(void) {\n"
            "    PyObject* m = PyModule_Create(&def);\n" + used + "    return m;\n}\n")


def site_of(toolchain: Toolchain) -> Path:
    assert toolchain.site is not None
    return toolchain.site


def c10_symbols(toolchain: Toolchain, count: int, seed: int) -> list[str]:
    """`count` C++ symbols libc10.so exports, drawn at random (functions and data alike)."""
    exported = sorted(s for s in torchexports.exports_of_libraries(
        site_of(toolchain) / "torch" / "lib", "x").libraries["libc10.so"]
        if s.startswith("_ZN3c10"))
    return random.Random(seed).sample(exported, count)


def probe_wheel(folder: Path, toolchain: Toolchain, symbols: list[str]) -> Path:
    made = compile_shared(folder / "so", module_source(symbols), links=(
        site_of(toolchain) / "torch" / "lib" / "libc10.so",),
        flags=(f"-I{sysconfig.get_paths()['include']}",))
    (folder / "wheel").mkdir()
    return extension_wheel(folder / "wheel", "rangeprobe", made)


def without(lib: Path, into: Path, symbol: str) -> Path:
    """A copy of the torch libraries `lib` whose libc10.so no longer exports `symbol`."""
    into.mkdir(parents=True)
    for found in lib.iterdir():
        (into / found.name).symlink_to(found)
    (into / "libc10.so").unlink()
    shutil.copyfile(lib / "libc10.so", into / "libc10.so")
    demote(into / "libc10.so", symbol)
    return into


@pytest.mark.toolchain
@pytest.mark.parametrize("seed", range(3))
def test_a_torch_whose_exports_lack_one_symbol_is_excluded_naming_it_demangled(
        tmp_path: Path, toolchain: Toolchain, seed: int) -> None:
    symbols = c10_symbols(toolchain, 4, seed)
    wheel = probe_wheel(tmp_path, toolchain, symbols)
    env = TorchEnv(site_of(toolchain), toolchain.python)
    with shared_objects(wheel) as objects:
        needs = torchrange.torch_needs(objects, env)
    assert needs == (torchrange.ObjectNeeds(MEMBER, ("libc10.so",), tuple(sorted(symbols))),)
    lib = site_of(toolchain) / "torch" / "lib"
    version = str(toolchain.torch_version)
    assert torchrange.check_exports(needs, torchexports.exports_of_libraries(
        lib, version)).describe() == f"torch {version}: all symbols resolve (import not run)"
    gone = symbols[seed]
    other = torchexports.exports_of_libraries(without(lib, tmp_path / "lib", gone), "2.99.0")
    trial = torchrange.check_exports(needs, other)
    shown = demangle([gone])[gone]
    assert shown != gone
    assert trial.describe() == (f"torch 2.99.0: excluded: {MEMBER} needs {shown}, which it "
                                "does not export")
    assert trial.missing == ((MEMBER, gone, shown),)


@pytest.mark.toolchain
def test_a_torch_without_a_library_the_object_links_is_excluded_naming_it(
        tmp_path: Path, toolchain: Toolchain) -> None:
    wheel = probe_wheel(tmp_path, toolchain, c10_symbols(toolchain, 1, 0))
    with shared_objects(wheel) as objects:
        needs = torchrange.torch_needs(objects, TorchEnv(site_of(toolchain), toolchain.python))
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "libtorch.so").symlink_to(site_of(toolchain) / "torch" / "lib" / "libtorch.so")
    trial = torchrange.check_exports(needs, torchexports.exports_of_libraries(lib, "2.98.0"))
    assert trial.describe() == (f"torch 2.98.0: excluded: {MEMBER} links libc10.so, which it "
                                "does not have")


@pytest.mark.toolchain
def test_a_torch_wheels_export_list_is_read_once_and_kept_by_its_sha256(
        tmp_path: Path, toolchain: Toolchain) -> None:
    wheel = torchexports.download(toolchain.python, "2.13", tmp_path)
    found = torchexports.exports_of_wheel(wheel, tmp_path)
    kept = tmp_path / "torch-exports" / f"{sha256_file(wheel)}.json"
    assert (found.sha256, found.wheel) == (kept.stem, wheel.name)
    assert {"libc10.so", "libtorch_cpu.so", "libtorch_python.so"} <= set(found.libraries)
    marked = json.loads(kept.read_text())
    marked["libraries"]["libc10.so"] = ["wheelsmith_marker"]  # what the cache says is used
    kept.write_text(json.dumps(marked))
    assert torchexports.exports_of_wheel(wheel, tmp_path).libraries["libc10.so"] == \
        frozenset({"wheelsmith_marker"})


@given(st.sets(st.integers(0, 30), min_size=1), st.sets(st.integers(0, 30)))
def test_candidates_are_the_profiles_minors_the_newer_ones_pip_sees_and_one_older(
        pinned: set[int], seen: set[int]) -> None:
    minors = torchexports.candidate_minors([f"2.{m}" for m in pinned], [f"2.{m}" for m in seen])
    older = [m for m in seen if m < min(pinned)]
    expected = pinned | {m for m in seen if m > max(pinned)} | set(older and [max(older)])
    assert minors == [f"2.{m}" for m in sorted(expected)]


@pytest.mark.slow  # the same trials as verify's test below, through prove() itself
@pytest.mark.toolchain
def test_the_range_is_what_imports_under_each_torch_pip_gives(
        tmp_path: Path, toolchain: Toolchain) -> None:
    symbols = c10_symbols(toolchain, 3, 7)
    wheel = probe_wheel(tmp_path, toolchain, symbols)
    env = TorchEnv(site_of(toolchain), toolchain.python)
    candidates = torchexports.torch_wheels(toolchain.python, ["2.13", "2.14", "0.1"])
    runner = torchrange.smoke_runner(
        wheel, toolchain.python, imports=("rangeprobe._native",), gpu_code="import torch",
        archs=ArchSet.parse(["12.0"]), cuda_home=toolchain.cuda_home, log_path=tmp_path / "log")
    found = torchrange.prove(wheel, env, candidates, tmp_path / "scratch", runner)
    proven = [t.torch for t in found.trials if t.proven]
    assert proven == [Path(w).name.split("-")[1] for _, w in candidates[:2]], found.describe()
    not_run = ("the recipe's GPU op needs a GPU of its archs and was not run: skipped "
               "(no GPU)")
    pins = [beside(toolchain.python, Path(w)) for _, w in candidates[:2]]
    assert found.describe()[:3] == [
        f"torch range: {proven[0]} to {proven[1]} (proven by symbols, import and smoke test "
        f"under {proven[0]}, {proven[1]})",
        f"  torch {proven[0]}: proven (symbols, import, smoke test; {not_run}){pins[0]}",
        f"  torch {proven[1]}: proven (symbols, import, smoke test; {not_run}){pins[1]}"]
    assert found.describe()[3].startswith("  torch 0.1: not checked (pip gave no torch 0.1 "
                                          "wheel for this Python: ")


CUDA_MODULE = """#include <Python.h>
extern char {symbol};
__global__ void k(float* x) {{ x[0] = 1; }}
static struct PyModuleDef def = {{PyModuleDef_HEAD_INIT, "_native", 0, -1, 0}};
PyMODINIT_FUNC PyInit__native(void) {{
    PyObject* m = PyModule_Create(&def);
    PyModule_AddObject(m, "p", PyLong_FromVoidPtr(&{symbol}));
    if (0) k<<<1, 1>>>(0);
    return m;
}}
"""


def cuda_probe_wheel(tmp_path: Path, toolchain: Toolchain, version: str = "1.0.0") -> Path:
    """A wheel of one CUDA module (SASS sm_120) that takes one symbol of torch's libc10."""
    symbol = c10_symbols(toolchain, 1, 3)[0]
    source = tmp_path / "k.cu"
    source.write_text(CUDA_MODULE.format(symbol=symbol))
    made = tmp_path / "_native.so"
    lib = site_of(toolchain) / "torch" / "lib"
    subprocess.run([str(toolchain.nvcc), "-shared", "-Xcompiler", "-fPIC", "-cudart=shared",
                    "-gencode", "arch=compute_120,code=sm_120",
                    f"-I{sysconfig.get_paths()['include']}", str(source), "-o", str(made),
                    f"-L{lib}", "-lc10"], check=True, capture_output=True)
    (tmp_path / "w").mkdir()
    return extension_wheel(tmp_path / "w", "rangeprobe", made, version)


@pytest.mark.slow  # 70 s; make test proves a range by the build test below, and its verify
@pytest.mark.toolchain
def test_verify_prints_the_torch_range_proven_under_each_torch(
        tmp_path: Path, toolchain: Toolchain) -> None:
    wheel = cuda_probe_wheel(tmp_path, toolchain)
    env = dict(os.environ, WHEELSMITH_CACHE=str(tmp_path / "cache"))
    said = subprocess.run(
        [sys.executable, "-m", "wheelsmith", "verify", "--arch", "12.0", "--python",
         str(toolchain.python), "--torch-range", "--torch", "2.13", "--torch", "2.14",
         "--work-dir", str(tmp_path / "work"), str(wheel)],
        capture_output=True, text=True, env=env, check=False)
    assert said.returncode == 0, said.stderr
    lines = said.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if "torch range:" in line)
    ran = "symbols, import, smoke test"  # no recipe, so no GPU op to run
    # the torch releases the project's index serves (no +cpu a wheel folder adds), each with
    # what it pins and the toolchain's venv lacks installed beside it
    wheels = sorted((tmp_path / "cache" / "torch-wheels").glob("torch-*.whl"))
    assert [w.name.split("-")[1] for w in wheels] == ["2.13.0", "2.14.1"]
    pins = [beside(toolchain.python, w) for w in wheels]
    assert lines[start:start + 3] == [
        "  torch range: 2.13.0 to 2.14.1 (proven by symbols, import and smoke test under "
        "2.13.0, 2.14.1)",
        f"    torch 2.13.0: proven ({ran}){pins[0]}", f"    torch 2.14.1: proven ({ran}){pins[1]}"]


def beside(python: Path, torch_wheel: Path) -> str:
    """What a trial line says was installed beside that torch ("" for nothing)."""
    pins = torchpins.unmet(python, torch_wheel)
    shown = ", ".join(pins[:3]) + (f" and {len(pins) - 3} more" if len(pins) > 3 else "")
    return f" (with {shown} beside it)" if pins else ""


@pytest.mark.slow  # 85 s and torch 2.13's CUDA wheel with its pins; the span's labels, publishing
@pytest.mark.toolchain  # and install are tests/index/test_torch_span.py's, in make test
def test_a_build_asked_for_its_torch_range_records_it_with_its_run(
        project: Path, toolchain: Toolchain) -> None:
    add_variant(project, "tiny-ext")
    built = wheelsmith("build", "tiny-ext", "--arch", "12.0", "--torch-range", "2.13,2.14",
                       "--publish", "--index", "idx", "--json", cwd=project, check=True)
    data = json.loads(built.stdout)
    ranged = data["run"]["torch_range"]
    assert "torch_range" not in data["provenance"]  # the trials are a run's facts
    assert data["provenance"]["torch_range_request"] == "2.13,2.14"  # the request defines it
    # built against 2.14.1, it needs nothing 2.13's CPU build lacks, and imports under it
    assert ranged["proven"] == ["2.13.0", "2.14.1"]
    wheel = Path(data["wheel"])  # its span, 2.13 to 2.14, in its label and torch requirement
    assert WheelName.parse(wheel.name).version.local == "cu.13.0.torch.2.14.range.2.13.2.14.sm.120"
    assert "Requires-Dist: torch>=2.13,<2.15" in read_metadata(wheel).decode().splitlines()
    assert data["published"]["also_channels"] == ["cu130-torch2.13"]
    assert (project / "idx" / "cu130-torch2.13" / "simple" / "tiny-ext" / "index.html").exists()
    assert [(t["torch"], t["import_and_smoke"], t["missing_symbols"], t["gpu_op"])
            for t in ranged["trials"]] == [
        (torch, "passed", [], "the recipe's GPU op needs a GPU of its archs and was not run: "
         "skipped (no GPU)") for torch in ("2.13.0", "2.14.1")]
    # verify checks the span the label states: tried under 2.14 alone, 2.13 is not proven
    said = wheelsmith("verify", data["wheel"], "--torch-range", "--torch", "2.14", cwd=project)
    assert said.returncode == 10, said.stderr
    assert said.stderr.splitlines()[:2] == [
        f"error: {wheel.name}: its label states the torch span 2.13 to 2.14 (range.2.13.2.14), "
        "but torch 2.13 was not proven here: not tried (--torch names the minors to try)",
        "  torch range: 2.14.1 (proven by symbols, import and smoke test under 2.14.1)"]


@given(st.lists(st.sampled_from(["proven", "excluded", "failed", "absent"]), min_size=1,
                max_size=8))
def test_the_range_runs_from_the_oldest_to_the_newest_proven_naming_each_gap(
        outcomes: list[str]) -> None:
    trials = []
    for minor, outcome in enumerate(outcomes):
        torch = f"2.{minor}"
        trials.append(torchrange.Trial(
            torch, f"torch-{torch}.whl", "ab",
            missing=((MEMBER, "_Zx", "x()"),) if outcome == "excluded" else (),
            ran={"proven": "passed", "failed": "its import failed"}.get(outcome),
            unavailable="none" if outcome == "absent" else None))
    summary = torchrange.TorchRange(tuple(trials)).summary()
    proven = [f"2.{m}" for m, o in enumerate(outcomes) if o == "proven"]
    if not proven:
        assert summary == "torch range: none proven (no torch tried passed)"
        return
    inside = [f"2.{m}" for m, o in enumerate(outcomes)
              if o in ("excluded", "failed") and proven[0] <= f"2.{m}" <= proven[-1]]
    span = f"{proven[0]} to {proven[-1]}" if len(proven) > 1 else proven[0]
    assert summary == (f"torch range: {span} (proven by symbols, import and smoke test under "
                       f"{', '.join(proven)}" + (f"; not {', '.join(inside)}" if inside else "")
                       + ")")


def test_torch_without_torch_range_is_refused(tmp_path: Path) -> None:
    wheel = tmp_path / "x-1.0-cp311-cp311-linux_x86_64.whl"
    wheel.write_bytes(b"")
    said = subprocess.run([sys.executable, "-m", "wheelsmith", "verify", "--torch", "2.13",
                           "--arch", "12.0", str(wheel)], capture_output=True, text=True,
                          check=False)
    assert said.returncode == 2
    assert "--torch goes with --torch-range: it names a torch to try" in said.stderr


@pytest.mark.toolchain
def test_the_default_candidates_hold_every_profiles_minor_and_what_pip_sees_beyond(
        toolchain: Toolchain) -> None:
    pinned = torchexports.profile_minors()
    seen = torchexports.visible_minors(toolchain.python)
    assert seen, "pip sees no torch"
    found = torchexports.candidate_minors(pinned, seen)
    assert set(pinned) <= set(found) <= set(pinned) | set(seen)
    assert str(toolchain.torch_version).rsplit(".", 1)[0] in found


@given(st.lists(st.tuples(
    st.sampled_from(["nvidia-cudnn-cu13", "Triton", "cuda_toolkit", "sympy", "nvidia.nccl"]),
    st.sampled_from(["==9.1.0", "==3.7.1", ">=1.13.3", "==2.*", "", "~=1.0", "===4.0"]),
    st.sampled_from(["", ' ; platform_system == "Linux"', ' ; platform_system == "Windows"',
                     ' ; extra == "opt"', ' ; python_version < "3.0"'])), max_size=8))
def test_only_exact_pins_whose_marker_holds_are_installed_beside_a_torch(
        requirements: list[tuple[str, str, str]]) -> None:
    metadata = "\n".join(["Metadata-Version: 2.1", "Name: torch", "Version: 2.15.0",
                          *(f"Requires-Dist: {n}{s}{m}" for n, s, m in requirements),
                          "", "Requires-Dist: not-a-header==1.0"])
    markers = {"platform_system": "Linux", "python_version": "3.11", "sys_platform": "linux"}
    found = torchpins.pins(metadata, markers)
    assert found == [(canonicalize_name(n), s.removeprefix("=="))
                     for n, s, m in requirements
                     if s.startswith("==") and "*" not in s and not s.startswith("===")
                     and m in ("", ' ; platform_system == "Linux"')]


@given(st.lists(st.sampled_from(["proven", "excluded", "failed", "absent", "untried"]),
                min_size=5, max_size=5), st.integers(0, 3), st.integers(1, 4))
def test_a_label_span_the_range_does_not_prove_is_named_at_its_first_gap(
        outcomes: list[str], low: int, width: int) -> None:
    high = min(low + width, 4)
    trials = tuple(torchrange.Trial(
        f"2.1{m}.1", f"torch-2.1{m}.1.whl", "ab",
        missing=((MEMBER, "_Zx", "x()"),) if outcome == "excluded" else (),
        ran={"proven": "passed", "failed": "its import failed"}.get(outcome),
        unavailable="none" if outcome == "absent" else None)
        for m, outcome in enumerate(outcomes) if outcome != "untried")
    name = f"x-1.0+cu.13.0.torch.2.1{high}.range.2.1{low}.2.1{high}.sm.120-py3-none-any.whl"
    said = torchrange.span_problem(name, torchrange.TorchRange(trials))
    gap = next((m for m in range(low, high + 1) if outcomes[m] != "proven"), None)
    if gap is None or low == high:
        assert said is None
        return
    trial = next((t for t in trials if t.torch == f"2.1{gap}.1"), None)
    why = trial.describe().split(": ", 1)[1] if trial else \
        "not tried (--torch names the minors to try)"
    assert said == (f"its label states the torch span 2.1{low} to 2.1{high} (range.2.1{low}."
                    f"2.1{high}), but torch 2.1{gap} was not proven here: {why}")


@pytest.mark.slow  # a torch installed and imported (a minute); the check itself is above
@pytest.mark.toolchain
def test_verify_refuses_a_wheel_whose_label_claims_a_torch_it_does_not_prove(
        tmp_path: Path, toolchain: Toolchain) -> None:
    wheel = cuda_probe_wheel(tmp_path, toolchain, "1.0.0+cu.13.0.torch.2.14.range.2.13.2.14.sm.120")
    said = wheelsmith("verify", str(wheel), "--arch", "12.0", "--python", str(toolchain.python),
                      "--torch-range", "--torch", "2.14", "--work-dir", str(tmp_path / "work"),
                      cwd=tmp_path)
    assert said.returncode == 10, said.stderr
    assert said.stderr.splitlines()[0] == (
        f"error: {wheel.name}: its label states the torch span 2.13 to 2.14 (range.2.13.2.14), "
        "but torch 2.13 was not proven here: not tried (--torch names the minors to try)")
