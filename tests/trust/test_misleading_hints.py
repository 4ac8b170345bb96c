"""Hints that mislead: an error whose "what to do" sends the user to the wrong place (issue 32,
class 10). Each is fixed at its cause and its exact text tested: `verify` of a wheel built
elsewhere or of no file, doctor's verdict and fix lines, the cross build's pre-flight, and the
hint for a program that is installed but not on the PATH a command runs with."""

from __future__ import annotations

import io
import os
import shutil
import stat
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import Served
from tests.doctor.test_doctor_runs import probe_info
from tests.hostile import assert_orderly, run_bounded
from tests.trust.test_rebuild_provenance import provenance, wheel_with
from wheelsmith import cmd
from wheelsmith.arch import ArchSet, parse_arch
from wheelsmith.builder.compile import offline_prefix
from wheelsmith.builder.verify import check, findings
from wheelsmith.cli import doctor_view
from wheelsmith.doctor.examine import examine
from wheelsmith.doctor.fastpath import ModelView
from wheelsmith.doctor.judge import knowledge
from wheelsmith.errors import CommandError, ToolchainError, VerifyError
from wheelsmith.inventory import DeviceCode
from wheelsmith.toolchain.env import Toolchain
from wheelsmith.toolchain.platform import host_machine
from wheelsmith.toolchain.preflight import cross_root

# --- verify ---------------------------------------------------------------------------------


@pytest.mark.parametrize("rebuild", [(), ("--rebuild",)])
def test_verify_of_a_missing_file_says_there_is_no_such_file(tmp_path: Path,
                                                            rebuild: tuple[str, ...]) -> None:
    outcome = run_bounded("verify", *rebuild, "missing.whl", cwd=tmp_path)
    assert_orderly(outcome)
    assert outcome.returncode == 2
    assert outcome.stderr.splitlines()[-1] == (
        "Error: Invalid value for 'WHEELS...': File 'missing.whl' does not exist.")


SMS = st.sampled_from(["sm_75", "sm_80", "sm_86", "sm_90", "sm_90a", "sm_100", "sm_120"])


@given(sass=st.frozensets(SMS, min_size=1, max_size=3), ptx_share=st.booleans(),
       requested=st.sampled_from(["8.0", "9.0", "12.0", "9.0;12.0", "12.0+PTX", "10.0"]))
def test_verify_of_a_wheel_built_elsewhere_says_what_it_was_built_for_and_that_fits(
        sass: frozenset[str], ptx_share: bool, requested: str) -> None:
    """The hint's --arch is the wheel's own: verifying with it finds nothing wrong."""
    ptx = frozenset(sorted(sass)[:1]) if ptx_share else frozenset()
    inventory = [DeviceCode("pkg/_C.so", sass, ptx)]
    archs = ArchSet.parse([requested])
    if not findings(inventory, archs):
        return
    with pytest.raises(VerifyError) as refused:
        check("x.whl", inventory, archs, built_here=False)
    hint = refused.value.hint or ""
    assert "recipe" not in hint
    prefix = "x.whl was built for "
    assert hint.startswith(prefix)
    built, _, rest = hint.removeprefix(prefix).partition(", not the requested ")
    assert rest == f"{archs}: verify it with --arch '{built}', or build one for {archs}"
    assert findings(inventory, ArchSet.parse([built])) == []


@pytest.mark.toolchain
def test_verify_of_someone_elses_wheel_for_other_archs_names_them(tmp_path: Path,
                                                                  toolchain: Toolchain) -> None:
    """A real shared object with device code (the toolchain's libcufftw: SASS sm_75 only), in
    a wheel without provenance; and in one whose provenance names other archs than it has."""
    so = next(toolchain.cuda_home.glob("lib/libcufftw.so.*")).read_bytes()
    wheel = wheel_with(tmp_path / "plain", provenance(), files={"causal_conv1d/_C.so": so})
    outcome = run_bounded("verify", str(wheel), cwd=tmp_path, seconds=120)
    assert_orderly(outcome, seconds=120)
    assert outcome.returncode == 10
    assert outcome.stderr.splitlines() == [
        f"error: {wheel.name} does not contain exactly the device code for 12.0",
        "  causal_conv1d/_C.so: missing SASS for sm_120",
        "  causal_conv1d/_C.so: SASS for sm_75 was not requested",
        f"hint: {wheel.name} was built for 7.5, not the requested 12.0: verify it with --arch "
        "'7.5', or build one for 12.0"]
    assert run_bounded("verify", str(wheel), "--arch", "7.5", cwd=tmp_path).returncode == 0


# --- doctor ---------------------------------------------------------------------------------


def test_doctor_with_a_model_type_it_cannot_examine_never_says_healthy() -> None:
    nonsense = ModelView("--model-type", "nonsense", error="unknown",
                         message="unknown model type 'nonsense'")
    info = probe_info(dists={"fla-core": "0.6.0", "triton": "3.7.1"})
    report = examine(info, parse_arch("12.0"), "--arch", Path("/no/cuobjdump"),
                     index_url="http://127.0.0.1:9", knowledge=knowledge(), model=nonsense)
    assert report.problems == []  # the environment itself is fine ...
    assert not report.healthy  # ... but the question asked was not examined
    assert report.as_dict()["healthy"] is False
    shown = io.StringIO()
    doctor_view.render_doctor(report, shown)
    assert "healthy" not in shown.getvalue()
    assert "model    not examined: unknown model type 'nonsense'\n" in shown.getvalue()


def test_doctor_builds_a_pure_package_without_arch_into_the_index_it_read(tmp_path: Path) -> None:
    """fla is pure Python (build refuses --arch for it); the line publishes into the index
    doctor was given, not ./index."""
    index = tmp_path / "my index"
    index.mkdir()
    info = probe_info(dists={}, fast=())
    report = examine(info, parse_arch("9.0"), "--arch", Path("/no/cuobjdump"),
                     index_url=index.as_uri(), knowledge=knowledge(),
                     need=("fla", "causal_conv1d"))
    where = f"--index '{index}'"
    assert report.fixes == [
        f"wheelsmith build flash-linear-attention --python /env/bin/python --publish {where}   "
        "# the index has no flash-linear-attention wheel for Python 3.12",
        f"wheelsmith build fla-core --python /env/bin/python --publish {where}   # the index has "
        "no fla-core wheel for Python 3.12",
        f"wheelsmith build causal-conv1d --arch 9.0 --python /env/bin/python --publish {where}  "
        " # the index has no causal-conv1d wheel for Python 3.12 with sm_90 kernels"]


def test_doctor_over_http_names_the_directory_to_publish_into(http_dir: Served) -> None:
    info = probe_info(dists={}, fast=("fla",))
    report = examine(info, parse_arch("12.0"), "--arch", Path("/no/cuobjdump"),
                     index_url=http_dir.url, knowledge=knowledge(), need=("fla", "causal_conv1d"))
    assert report.fixes == [
        "wheelsmith build causal-conv1d --arch 12.0 --python /env/bin/python --publish --index "
        "DIR   # the index has no causal-conv1d wheel for Python 3.12 with sm_120 kernels; DIR: "
        f"the index directory that `wheelsmith serve` serves as {http_dir.url}"]


# --- cross builds: what they need is checked before anything is fetched ----------------------

def tools(directory: Path, *names: str) -> Path:
    """A PATH of one `directory`: stand-ins for `names` (found there; never run here) and
    the harness's prlimit."""
    directory.mkdir(parents=True, exist_ok=True)
    prlimit = shutil.which("prlimit")
    assert prlimit is not None
    (directory / "prlimit").symlink_to(prlimit)
    for name in names:
        tool = directory / name
        tool.write_text("#!/bin/sh\nexit 1\n")
        tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    return directory


CROSS_HINT = ("hint: install what is missing, or build on a machine of that CPU; nothing was "
              "fetched for it")
pytestmark_cross = pytest.mark.skipif(host_machine() != "x86_64",
                                      reason="--platform aarch64 is a cross build on x86-64")


@pytestmark_cross
@pytest.mark.parametrize(("recipe", "missing"), [
    ("causal-conv1d", "no aarch64-linux-gnu-g++ (Debian: apt install g++-aarch64-linux-gnu); "
                      "no aarch64-linux-gnu-gcc (Debian: apt install gcc-aarch64-linux-gnu); "),
    ("fla-core", ""),  # pure Python: no compiler asked for
])
def test_a_cross_build_names_every_missing_tool_before_fetching(tmp_path: Path, recipe: str,
                                                                missing: str) -> None:
    cache = tmp_path / "cache"
    env = {**os.environ, "PATH": str(tools(tmp_path / "bin")), "WHEELSMITH_CACHE": str(cache)}
    outcome = run_bounded("build", recipe, "--platform", "aarch64", cwd=tmp_path, env=env)
    assert_orderly(outcome)
    assert outcome.returncode == 7
    assert outcome.stderr.splitlines()[-2:] == [
        f"error: cannot build for aarch64 here: {missing}no qemu-aarch64-static to import-test "
        "the wheel under (Debian: apt install qemu-user-static)", CROSS_HINT]
    assert not cache.exists()


@pytestmark_cross
@pytest.mark.toolchain
def test_a_cross_build_without_the_tools_for_its_import_root_stops_before_its_pins(
        tmp_path: Path, toolchain: Toolchain) -> None:
    """Compilers and qemu found (stand-ins), the profile's own venv ready, but nothing here
    makes the aarch64 root: refused before the several GB of aarch64 pins are fetched."""
    found = tools(tmp_path / "bin", "aarch64-linux-gnu-g++", "aarch64-linux-gnu-gcc",
                  "qemu-aarch64-static")
    sites = toolchain.python.parents[2] / "target-sites"
    before = sorted(sites.iterdir()) if sites.is_dir() else []
    env = {**os.environ, "PATH": str(found)}
    outcome = run_bounded("build", "causal-conv1d", "--platform", "aarch64",
                          "--python", toolchain.python_version, cwd=tmp_path, env=env,
                          seconds=120)
    assert_orderly(outcome, seconds=120)
    assert outcome.returncode == 7
    assert outcome.stderr.splitlines()[-2] in (
        "error: cannot build for aarch64 here: no debootstrap to make the aarch64 root to "
        "import-test in (Debian: apt install debootstrap; it runs as root); no dpkg-deb to make "
        "the aarch64 root to import-test in (Debian: apt install dpkg; it runs as root)",
        "error: cannot build for aarch64 here: no Debian archive in /etc/apt/sources.list.d/"
        "*.sources to make the aarch64 root from")
    assert (sorted(sites.iterdir()) if sites.is_dir() else []) == before


def test_a_python_without_a_debian_root_is_a_pre_flight_problem(tmp_path: Path) -> None:
    with pytest.raises(ToolchainError) as refused:
        cross_root("aarch64", "3.12", tmp_path)
    assert refused.value.message == (
        "cannot build for aarch64 here: no Debian root with Python 3.12 for aarch64 to "
        "import-test in")
    assert refused.value.hint == ("a cross build imports its wheel under qemu-user with Python "
                                  "3.11 or 3.13; use one of those")


# --- a program installed, but not on the PATH a command runs with ------------------------------

def test_a_program_off_the_commands_path_is_not_said_to_be_missing(tmp_path: Path) -> None:
    with pytest.raises(CommandError) as refused:
        cmd.run([Path(sys.executable).name, "--version"], env={"PATH": str(tmp_path)},
                stream=False)
    here = shutil.which(Path(sys.executable).name)
    assert refused.value.hint == (f"{Path(sys.executable).name} is {here}, but not on the PATH "
                                  f"this command runs with ({tmp_path})")
    with pytest.raises(CommandError) as absent:
        cmd.run(["no-such-program-here"], env={"PATH": str(tmp_path)}, stream=False)
    assert absent.value.hint == "install no-such-program-here or put it on PATH"


def test_the_builds_own_unshare_is_found_on_wheelsmiths_path_not_the_builds() -> None:
    prefix = offline_prefix()
    if not prefix:
        pytest.skip("no network namespace here")
    assert Path(prefix[0]).is_absolute()
    assert prefix[1:] == ("-rn",)
