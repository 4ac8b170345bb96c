"""Reading arch targets and compile inputs from generated build.ninja files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import ninja
import pytest

from tests.build.test_buildenv import plan
from wheelsmith.build import compilesetup
from wheelsmith.build.compile import drop_stand_ins
from wheelsmith.build.prebuild import (
    CONFIGURE_ONLY,
    EXPECT_PTX,
    EXPECT_SASS,
    MISSING,
    REPORT,
    STOOD_IN,
    check,
    gencode_targets,
    missing_sources,
    wrapper_script,
)
from wheelsmith.errors import ToolchainError

TORCH_EMITTED = ("cuda_post_cflags = -O2 -gencode=arch=compute_120,code=compute_120 "
                 "-gencode=arch=compute_120,code=sm_120 -gencode=arch=compute_90,code=sm_90 "
                 "-std=c++20\n")
HARD_CODED = ("cuda_post_cflags = -O3 --threads 4 -gencode arch=compute_75,code=sm_75 "
              "-gencode arch=compute_80,code=sm_80 -gencode arch=compute_103,code=sm_103\n")


@pytest.mark.parametrize(
    ("text", "sass", "ptx"),
    [
        (TORCH_EMITTED, {"sm_90", "sm_120"}, {"sm_120"}),
        (HARD_CODED, {"sm_75", "sm_80", "sm_103"}, set()),
        ("x = -gencode=arch=compute_90a,code=[sm_90a,compute_90a]\n", {"sm_90a"}, {"sm_90a"}),
        ("x = -arch=sm_90 -O3\n", {"sm_90"}, {"sm_90"}),
        ("x = -arch=compute_50 -O3\n", set(), {"sm_50"}),  # pytorch-fast-transformers 0.4.0
        ("x = -march=native -O3\n", set(), set()),
    ],
    ids=["torch-emitted", "hard-coded", "bracket-list", "short-arch", "ptx-arch", "host-march"],
)
def test_targets_are_read_like_cuobjdump_names(text: str, sass: set[str], ptx: set[str]) -> None:
    found = gencode_targets(text)
    assert (set(found.sass), set(found.ptx)) == (sass, ptx)


def test_sources_the_tree_does_not_hold_stop_the_build_before_the_arch_check(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "csrc").mkdir()
    (tmp_path / "csrc" / "held.cu").write_text("")
    ninja = tmp_path / "build.ninja"
    ninja.write_text(HARD_CODED + "rule cuda_compile\n  command = nvcc $in\n"
                     f"build {tmp_path}/b/held.o: cuda_compile {tmp_path}/csrc/held.cu\n"
                     f"build {tmp_path}/b/gone.o: compile {tmp_path}/csrc/gone$ file.cpp\n"
                     "build b/also.o: cuda_compile csrc/also.cu\n")
    assert missing_sources(ninja.read_text(), tmp_path) == [
        f"{tmp_path}/csrc/gone file.cpp", "csrc/also.cu"]
    assert check(["-C", str(tmp_path)]) == MISSING
    assert capsys.readouterr().err == (
        f"wheelsmith source check: {ninja} compiles 2 file(s) the source tree does not hold: "
        f"{tmp_path}/csrc/gone file.cpp, csrc/also.cu; stopping before compiling\n")


def test_configure_only_records_every_extension_and_compiles_none(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A C++-only extension first (torchsort's isotonic_cpu) no longer compiles, nor stops
    the build before the CUDA one: empty objects stand in, and only build.ninja stays."""
    build = tmp_path / "build" / "temp"
    (tmp_path / "csrc").mkdir()
    for name in ("cpu.cpp", "kernel.cu"):
        (tmp_path / "csrc" / name).write_text("")
    report = tmp_path / "prebuild.jsonl"
    for var, value in ((CONFIGURE_ONLY, "1"), (REPORT, str(report)), (EXPECT_SASS, "sm_120"),
                       (EXPECT_PTX, "")):
        monkeypatch.setenv(var, value)
    build.mkdir(parents=True)
    cxx_only = ("cflags = -DTORCH_EXTENSION_NAME=_cpu\nrule compile\n  command = c++ $in\n"
                f"build {build}/csrc/cpu.o: compile {tmp_path}/csrc/cpu.cpp\n")
    (build / "build.ninja").write_text(cxx_only)
    assert check(["-C", str(build)]) == STOOD_IN == 0
    assert (build / "csrc" / "cpu.o").read_bytes() == b""
    (build / "build.ninja").write_text(
        TORCH_EMITTED.replace("compute_120,code=compute_120 -gencode=", "").replace(
            "-gencode=arch=compute_90,code=sm_90 ", "") +
        "cuda_cflags = -DTORCH_EXTENSION_NAME=_cuda\nrule cuda_compile\n  command = nvcc $in\n"
        f"build {build}/csrc/kernel.o: cuda_compile {tmp_path}/csrc/kernel.cu\n")
    assert check(["-C", str(build)]) == STOOD_IN
    assert capsys.readouterr().err.splitlines() == [
        f"wheelsmith configure-only: {build}/build.ninja (_cpu) targets no CUDA; not compiled",
        f"wheelsmith configure-only: {build}/build.ninja (_cuda) targets sm_120; not compiled"]
    records = [json.loads(line) for line in report.read_text().splitlines()]
    assert [(r["extension"], r["cuda_units"], r["sass"]) for r in records] == [
        ("_cpu", 0, []), ("_cuda", 1, ["sm_120"])]  # the C++-only one too: host_only's source
    drop_stand_ins(tmp_path / "build")
    assert sorted(p.relative_to(tmp_path) for p in (tmp_path / "build").rglob("*")) == [
        Path("build/temp"), Path("build/temp/build.ninja")]


def test_the_ninja_launcher_answers_from_a_python_that_has_no_wheelsmith(tmp_path: Path) -> None:
    """wheelsmith run from a checkout (PYTHONPATH=src) by a Python without it installed, as on
    the GPU machine: a launcher doing `python -m wheelsmith.prebuild` failed `ninja --version`
    there, so torch compiled one file at a time, unchecked and without a word."""
    real = str(Path(ninja.BIN_DIR) / "ninja")
    bare = Path("/usr/bin/python3")
    check_bare = subprocess.run([bare, "-c", "import wheelsmith"], capture_output=True, check=False)
    assert check_bare.returncode != 0, f"{bare} has wheelsmith: the test needs one without"
    launcher = tmp_path / "ninja"
    launcher.write_text(wrapper_script(str(bare), real))
    launcher.chmod(0o755)
    done = subprocess.run([launcher, "--version"], env={"PATH": "/usr/bin:/bin"}, cwd=tmp_path,
                          capture_output=True, text=True, check=False)
    assert (done.returncode, done.stdout.strip()) == (0, subprocess.check_output(
        [real, "--version"], text=True).strip()), done.stderr


def test_a_ninja_launcher_that_does_not_answer_stops_the_build_before_compiling(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", f"{ninja.BIN_DIR}:/usr/bin:/bin")
    monkeypatch.setattr(sys, "executable", "/bin/false")  # a Python that cannot run
    with pytest.raises(ToolchainError) as raised:
        compilesetup.install_guard(plan(), tmp_path, tmp_path / "bin", configure_only=False)
    assert str(raised.value) == (f"the pre-build check's ninja launcher ({tmp_path}/bin/ninja) "
                                 "failed with exit code 1")
    assert raised.value.hint == ("its output above says why; it runs /bin/false (the Python "
                                 "running wheelsmith), which must start with -I and import the "
                                 "standard library")
