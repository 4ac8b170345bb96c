"""Same inputs, same bytes: prefix maps, the provenance split, and `verify --rebuild`.

The toolchain tests build the tiny extension for real (about 30-50 s each on 2 cores) with
the compile cache off; the real causal-conv1d proof is marked slow.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from tests.builder.test_buildenv import TOOLCHAIN
from tests.conftest import FIXTURES, REPO, add_variant, wheelsmith
from tests.wheels import make_wheel
from wheelsmith.builder import orchestrate, parallel, reproducible
from wheelsmith.builder.finish import source_epoch
from wheelsmith.builder.plan import BuildPlan
from wheelsmith.builder.rebuild import differences
from wheelsmith.builder.request import QuietReporter
from wheelsmith.files import sha256_file
from wheelsmith.recipes.model import load_recipe
from wheelsmith.toolchain.env import Toolchain
from wheelsmith.wheelfile import record_hash


def error_lines(stderr: str) -> list[str]:
    lines = stderr.splitlines()
    return lines[next(i for i, line in enumerate(lines) if line.startswith("error: ")):]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tampered(wheel: Path, member: str, directory: Path) -> Path:
    """`wheel` with `member` changed and RECORD made to match, as a careful attacker would:
    the wheel stays valid, only a rebuild can tell."""
    directory.mkdir()
    out = directory / wheel.name
    with zipfile.ZipFile(wheel) as zin, zipfile.ZipFile(out, "w") as zout:
        record = next(n for n in zin.namelist() if n.endswith(".dist-info/RECORD"))
        changed = zin.read(member) + b"import os  # planted\n"
        rows = [f"{member},{record_hash(changed)},{len(changed)}" if row.startswith(member + ",")
                else row for row in zin.read(record).decode().splitlines()]
        for info in zin.infolist():
            data = {member: changed, record: ("\n".join(rows) + "\n").encode()}.get(
                info.filename, zin.read(info))
            zout.writestr(info, data)
    return out


def build_paths_in(wheel: Path, paths: list[Path]) -> list[str]:
    """Which of `paths` (as given or resolved) appear in the bytes of the wheel's `.so`s."""
    with zipfile.ZipFile(wheel) as archive:
        blobs = [archive.read(n) for n in archive.namelist() if n.endswith(".so")]
    assert blobs
    names = ({str(p) for p in paths} | {os.path.realpath(p) for p in paths}
             ) - reproducible.SYSTEM_PREFIXES
    return sorted(n for n in names if any(n.encode() in blob for blob in blobs))


# 16 kernels: enough functions for a split compile to divide
MULTI_KERNEL = "\n".join([
    "template <int N, typename T> __global__ void k(const T* x, T* y, long n) {",
    "  long i = blockIdx.x * (long)blockDim.x + threadIdx.x; if (i >= n) return;",
    "  T acc = x[i];",
    "  #pragma unroll",
    "  for (int j = 0; j < N; ++j) { acc = acc * (T)1.0001 + x[(i + j * 17) % n] * (T)(j + 1);",
    "    if (acc > (T)100) acc -= x[(i * j) % n]; }",
    "  y[i] = acc; }",
    *(f"template __global__ void k<{n}, {t}>(const {t}*, {t}*, long);"
      for n in (4, 8, 12, 16, 20, 24, 32, 40) for t in ("float", "double"))]) + "\n"


# --- no toolchain -------------------------------------------------------------------------


def test_prefix_maps_put_the_most_specific_last_and_skip_system_prefixes(
        tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to("/usr/bin/python3")  # base prefix /usr: not mapped,
    cuda = venv / "lib" / "nvidia" / "cu13"
    toolchain = Toolchain(name="p", python=venv / "bin" / "python", python_version="3.11",
                          cuda_home=cuda, torch_version=None, torch_cuda=None,  # type: ignore[arg-type]
                          nvcc_version=None, cuobjdump=None, pins=())  # type: ignore[arg-type]
    source = tmp_path / "work" / "src" / "pkg"
    assert reproducible.path_maps(toolchain, source) == [
        ("/usr/include/python3.11", "/wheelsmith/python/include/python3.11"),  # but its headers
        (str(venv), "/wheelsmith/toolchain"), (str(source), "/wheelsmith/src"),
        (str(cuda), "/wheelsmith/cuda")]  # inside the venv: after it


def test_compiler_flags_come_before_what_the_build_sets_itself() -> None:
    env = reproducible.compiler_env([("/w/src", "/wheelsmith/src")],
                                    {"CPPFLAGS": "-DX", "NVCC_PREPEND_FLAGS": "-lineinfo"})
    assert env == {
        "CPPFLAGS": "-ffile-prefix-map=/w/src=/wheelsmith/src -DX",
        "NVCC_PREPEND_FLAGS": "-objtemp -frandom-seed=wheelsmith "
                              "-Xcompiler -ffile-prefix-map=/w/src=/wheelsmith/src "
                              "-lineinfo",
        "CFLAGS": "-Wsign-compare -DNDEBUG -fwrapv -O3 -Wall",
        "CXXFLAGS": "-Wsign-compare -DNDEBUG -fwrapv -O3 -Wall",
        "LDSHARED": "gcc -shared", "LDCXXSHARED": "g++ -shared"}


def test_flags_the_package_build_sets_replace_the_fixed_python_flags() -> None:
    """A recipe's CFLAGS (or a cross build's compilers) are kept; the rest stay fixed."""
    env = reproducible.python_flags({"CFLAGS": "-O1", "CC": "aarch64-linux-gnu-gcc",
                                     "CXX": "aarch64-linux-gnu-g++"})
    assert env == {"CFLAGS": "-O1", "CXXFLAGS": reproducible.PYTHON_CFLAGS,
                   "LDSHARED": "aarch64-linux-gnu-gcc -shared",
                   "LDCXXSHARED": "aarch64-linux-gnu-g++ -shared"}


SDIST_TIME = 1_700_000_000
PATCH = """--- a/setup.py
+++ b/setup.py
@@ -1 +1,2 @@
 \"\"\"A tiny torch CUDA extension: honours TORCH_CUDA_ARCH_LIST like a well-behaved package.\"\"\"
+# patched
"""


def test_a_patched_source_keeps_the_sdists_time(tmp_path: Path) -> None:
    """SOURCE_DATE_EPOCH is the source's newest file: the patch's write must not make it the
    time of the build (causal-conv1d's two cold builds differed in every zip entry's time)."""
    source = tmp_path / "sources" / "tiny-ext"
    shutil.copytree(FIXTURES / "tiny-ext", source)
    for path in source.rglob("*"):
        os.utime(path, (SDIST_TIME, SDIST_TIME))
    patches = tmp_path / "patches" / "tiny-ext" / "0.1.0"
    patches.mkdir(parents=True)
    (patches / "0001-mark.patch").write_text(PATCH)
    recipe = (FIXTURES / "tiny-ext.recipe.yaml").read_text().replace("PATH", str(source))
    recipe += (f"    patches:\n      - file: 0001-mark.patch\n"
               f"        sha256: {sha256_file(patches / '0001-mark.patch')}\n")
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "tiny-ext.yaml").write_text(recipe)
    loaded = load_recipe(tmp_path / "recipes" / "tiny-ext.yaml")
    plan = BuildPlan(recipe=loaded, release=loaded.latest, archs=loaded.arch.default,
                     toolchain=TOOLCHAIN)
    patched = orchestrate.fetch_and_patch(plan, tmp_path / "work", QuietReporter())
    assert (patched / "setup.py").read_text().splitlines()[1] == "# patched"
    assert source_epoch(patched) == SDIST_TIME


def test_run_facts_leave_the_provenance() -> None:
    defining, run = reproducible.split_record(
        {"key": "k", "device_code": [], "build": {"seconds": 3.0}, "smoke": ["ok"],
         "runner": {"engine": "host"}, "compile_cache": None})
    assert defining == {"key": "k", "device_code": []}
    assert run == {"build": {"seconds": 3.0}, "smoke": ["ok"], "runner": {"engine": "host"},
                   "compile_cache": None}


def test_differences_name_the_changed_missing_and_extra_members(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    ours = make_wheel(tmp_path / "a", files={"demo/__init__.py": b"x = 1\n",
                                             "demo/gone.py": b""})
    theirs = make_wheel(tmp_path / "b", files={"demo/__init__.py": b"x = 2\n",
                                               "demo/new.py": b""})
    assert [d.split(" (")[0] for d in differences(ours, theirs)] == [
        "demo-1.0.0.dist-info/RECORD: content differs",
        "demo/__init__.py: content differs",
        "demo/gone.py: only in the wheel, not in its rebuild",
        "demo/new.py: only in the rebuild, missing from the wheel"]


def test_verify_rebuild_refuses_a_wheel_without_provenance(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path)
    result = wheelsmith("verify", "--rebuild", str(wheel), cwd=tmp_path)
    assert result.returncode == 10
    assert error_lines(result.stderr) == [
        "error: demo-1.0.0-cp311-cp311-linux_x86_64.whl carries no wheelsmith provenance "
        "(<dist-info>/wheelsmith.json)",
        "hint: only a wheel wheelsmith built can be rebuilt from itself"]


# --- real builds of the tiny extension ----------------------------------------------------


def build_tiny(project: Path, work: str) -> dict[str, object]:
    result = wheelsmith("build", "tiny-ext", "--arch", "12.0", "--compile-cache", "off",
                        "--work-dir", work, "--out", f"out-{work}", "--json", cwd=project,
                        check=True)
    data: dict[str, object] = json.loads(result.stdout)
    return data


@pytest.mark.toolchain
def test_the_split_compile_wheelsmith_passes_gives_one_cubin_every_run(
        tmp_path: Path, toolchain: Toolchain) -> None:
    """nvcc's own `--split-compile=2` gave this file 3 different PTX in 6 runs (cicc's split
    optimisation); the split wheelsmith passes (ptxas only) gives one cubin."""
    source = tmp_path / "multi.cu"
    source.write_text(MULTI_KERNEL)
    flag = parallel.refine(parallel.choose(4, 22.8, 3.0, 1), 1, 0).split_flag()
    assert flag == "--ptxas-options=--split-compile=4"
    digests = set()
    for run in range(6):
        out = tmp_path / f"{run}.cubin"
        subprocess.run([str(toolchain.nvcc), "-O2", "-gencode=arch=compute_120,code=sm_120",
                        "-cubin", str(source), "-o", str(out)], check=True,
                       capture_output=True, env=dict(os.environ, NVCC_APPEND_FLAGS=flag))
        digests.add(sha256(out))
    assert len(digests) == 1


@pytest.mark.toolchain
def test_a_wheel_holds_no_build_path_and_its_rebuild_elsewhere_is_identical(
        project: Path, toolchain: Toolchain) -> None:
    add_variant(project, "tiny-ext")
    data = build_tiny(project, "work-a")
    wheel = Path(str(data["wheel"]))
    venv = toolchain.python.parent.parent
    assert build_paths_in(wheel, [project.parent, venv, toolchain.cuda_home, Path.home(),
                                  Path(os.path.realpath(toolchain.python)).parent.parent]) == []
    provenance = data["provenance"]
    assert isinstance(provenance, dict)
    assert not set(provenance) & set(reproducible.RUN_KEYS)
    run = data["run"]
    assert isinstance(run, dict)
    assert run["build"]["seconds"] > 0
    assert json.loads(next(project.glob("work-a/tiny-ext-*/run.json")).read_text()) == run

    result = wheelsmith("verify", "--rebuild", str(wheel), "--work-dir", "work-bb",
                        cwd=project)
    assert result.returncode == 0, result.stderr
    assert result.stdout == (f"identical: {wheel.name} rebuilt to the same sha256 "
                             f"{sha256(wheel)}\n")
    rebuilt = next(project.glob(f"work-bb/rebuilt/*/{wheel.name}"))
    assert sha256(rebuilt) == sha256(wheel)


@pytest.mark.toolchain
def test_verify_rebuild_of_a_tampered_wheel_names_the_member(
        project: Path, toolchain: Toolchain, tmp_path: Path) -> None:
    add_variant(project, "tiny-ext")
    wheel = Path(str(build_tiny(project, "work-a")["wheel"]))
    bad = tampered(wheel, "tiny_ext/__init__.py", tmp_path / "tampered")
    assert wheelsmith("verify", str(bad), "--arch", "12.0", cwd=project).returncode == 0
    result = wheelsmith("verify", "--rebuild", str(bad), "--work-dir", "work-b", cwd=project)
    assert result.returncode == 10, result.stderr
    info = "tiny_ext-0.1.0+cu.13.0.torch.2.14.sm.120.dist-info"
    lines = error_lines(result.stderr)
    assert lines[0] == (f"error: {wheel.name} differs from its rebuild (sha256 "
                        f"{sha256(bad)[:16]}, rebuilt {sha256(wheel)[:16]})")
    assert [line.split(" (")[0] for line in lines[1:3]] == [
        f"  {info}/RECORD: content differs", "  tiny_ext/__init__.py: content differs"]
    assert lines[3].startswith("hint: the rebuilt wheel is ")


@pytest.mark.toolchain
def test_verify_rebuild_refuses_when_the_recipe_changed(project: Path,
                                                        toolchain: Toolchain) -> None:
    source = add_variant(project, "tiny-ext")
    wheel = Path(str(build_tiny(project, "work-a")["wheel"]))
    recipe = project / "recipes" / "tiny-ext.yaml"
    recipe.write_text(recipe.read_text() + "build:\n  env:\n    EXTRA: \"1\"\n")
    assert source.is_dir()
    result = wheelsmith("verify", "--rebuild", str(wheel), "--work-dir", "work-b", cwd=project)
    assert result.returncode == 10, result.stderr
    assert error_lines(result.stderr)[0].startswith(
        f"error: cannot rebuild {wheel.name} as it was built: the recipe, patches and toolchain "
        "here give content key ")
    assert not (project / "work-b" / "rebuilt").exists()


# --- the real package ---------------------------------------------------------------------


@pytest.mark.slow
def test_two_cold_builds_of_causal_conv1d_have_one_sha256(tmp_path: Path,
                                                          toolchain: Toolchain) -> None:
    """About 11 minutes on 2 cores: two full builds, different work dirs, no compile cache."""
    wheels = []
    for work in ("a", "bb"):
        result = wheelsmith("build", "causal-conv1d", "--arch", "12.0", "--compile-cache", "off",
                            "--json", "--out", str(tmp_path / f"out-{work}"),
                            "--work-dir", str(tmp_path / f"work-{work}"), cwd=REPO, check=True)
        wheels.append(Path(json.loads(result.stdout)["wheel"]))
    assert wheels[0].name == wheels[1].name
    assert differences(wheels[0], wheels[1]) == []
    assert sha256(wheels[0]) == sha256(wheels[1])
