"""A real build with a host library (`build.libraries`): a tiny CMake-built CUDA library that
includes <nccl.h>, calls ncclGetVersion and links -lnccl, built for 12.0 with the CUDA-only
toolchain (which holds no NCCL), given NVIDIA's NCCL wheel. The wheel verifies, requires the
NCCL wheel, holds no copy of libnccl; the same build without the entry stops at the missing
header."""

from __future__ import annotations

import json
import re
import shutil
import zipfile
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, REPO, wheelsmith
from wheelsmith.toolchain.env import Toolchain
from wheelsmith.toolchain.profile import load_profile

pytestmark = [pytest.mark.toolchain, pytest.mark.build]

NCCL_SOURCE = """#include <nccl.h>
extern "C" int tiny_nccl_version() {
  int version = 0;
  return ncclGetVersion(&version) == ncclSuccess ? version : -1;
}
"""


def nccl_variant(project: Path, libraries: str | None, *, copies: bool = False) -> Path:
    """tiny-cmake (kind: cuda) with a source that calls NCCL, linked by -lnccl; its
    recipe with `libraries` as build.libraries (None: no entry). `copies`: its setup.py copies
    the libnccl it linked into the wheel."""
    source = project.parent / "sources" / "tiny-nccl"
    shutil.copytree(FIXTURES / "tiny-cmake", source)
    (source / "csrc" / "nccl_version.cu").write_text(NCCL_SOURCE)
    lists = source / "csrc" / "CMakeLists.txt"
    lists.write_text(lists.read_text().replace("add_kernel.cu version.cpp",
                                               "add_kernel.cu version.cpp nccl_version.cu")
                     + "set(CMAKE_SKIP_BUILD_RPATH ON)\n"
                       "target_link_libraries(tinycmake PRIVATE nccl)\n")  # -lnccl
    setup = source / "setup.py"
    text = setup.read_text().replace('name="tiny-cmake"', 'name="tiny-nccl"')
    if copies:
        text = text.replace("        shutil.copy(build / \"libtinycmake.so\", target)\n",
                            "        shutil.copy(build / \"libtinycmake.so\", target)\n"
                            "        nccl = next(p for p in os.environ['LIBRARY_PATH'].split(':')"
                            " if Path(p, 'libnccl.so.2').exists())\n"
                            "        shutil.copy(Path(nccl, 'libnccl.so.2'), target.parent)\n")
    setup.write_text(text)
    recipe = (FIXTURES / "tiny-cmake.recipe.yaml").read_text().replace("PATH", str(source))
    recipe = recipe.replace("package: tiny-cmake\n", "package: tiny-nccl\nkind: cuda\n")
    if libraries is not None:
        recipe = recipe.replace("build:\n", f"build:\n  libraries:\n    - wheel: {libraries}\n")
    (project / "recipes" / "tiny-nccl.yaml").write_text(recipe)
    return source


def nccl_pin() -> str:
    """The NCCL wheel of the CUDA 13 torch profile: a release the index has for CUDA 13."""
    pins = load_profile(REPO / "toolchains" / "cu130-torch2.14.yaml").requirements
    return next(pin for pin in pins if pin.startswith("nvidia-nccl-cu13=="))


def test_a_build_given_the_nccl_wheel_compiles_against_it_and_its_wheel_requires_it(
        project: Path, toolchain: Toolchain) -> None:
    pin = nccl_pin()
    version = pin.split("==")[1]
    nccl_variant(project, None)
    missing = wheelsmith("build", "tiny-nccl", "--arch", "12.0", cwd=project)
    assert missing.returncode != 0
    assert re.search(r"nccl_version\.cu:1:10: fatal error: nccl\.h: No such file or directory",
                     missing.stderr), missing.stderr[-3000:]
    assert "build.libraries" in missing.stderr  # the diagnosis names the key

    shutil.rmtree(project.parent / "sources")
    nccl_variant(project, pin)
    result = wheelsmith("build", "tiny-nccl", "--arch", "12.0", "--json", cwd=project)
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(rf"libraries: nvidia-nccl-cu13 {re.escape(version)} \(installed beside "
                     r"the toolchain: nvidia/nccl\)", result.stderr), result.stderr
    data = json.loads(result.stdout)
    wheel = Path(data["wheel"])
    assert wheel.name.startswith("tiny_nccl-0.1.0+cu.13.0.sm.120-")
    provenance = data["provenance"]
    assert provenance["device_code"][0]["sass"] == ["sm_120"]
    requirement = f"nvidia-nccl-cu13>={version},=={version.split('.')[0]}.*"
    assert provenance["libraries"] == [{
        "library": pin, "from": "installed", "project": "nvidia-nccl-cu13", "version": version,
        "requires": requirement, "prefixes": ["nvidia/nccl"],
        "variables": ["NCCL_DIR", "NCCL_HOME", "NCCL_INCLUDE_DIR", "NCCL_LIB_DIR",
                      "NCCL_PATH", "NCCL_ROOT", "NCCL_ROOT_DIR"]}]
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        metadata = zf.read(next(n for n in names if n.endswith("/METADATA"))).decode()
        sbom = json.loads(zf.read(next(n for n in names if n.endswith(".cdx.json"))))
    assert f"Requires-Dist: {requirement}" in metadata.splitlines()
    assert not any("libnccl" in name for name in names)
    assert [c["purl"] for c in sbom["components"] if c["name"] == "nvidia-nccl-cu13"] == [
        f"pkg:pypi/nvidia-nccl-cu13@{version}"]
    audited = provenance["audit"]["objects"][0]
    assert "libnccl.so.2" in audited["needed"]
    assert provenance["audit"]["symbols"]["missing_libraries"] == []
    verified = wheelsmith("verify", str(wheel), cwd=project)
    assert verified.returncode == 0, verified.stderr


def test_a_wheel_that_carries_a_copy_of_its_host_library_is_refused(
        project: Path, toolchain: Toolchain) -> None:
    nccl_variant(project, nccl_pin(), copies=True)
    result = wheelsmith("build", "tiny-nccl", "--arch", "12.0", cwd=project)
    assert result.returncode == 10, result.stderr[-3000:]
    lines = result.stderr.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("error: "))
    version = nccl_pin().split("==")[1]
    assert re.fullmatch(
        rf"error: tiny_nccl-0\.1\.0-\S+\.whl holds tiny_cmake/libnccl\.so\.2, libnccl\.so\.2 of "
        rf"the host library nvidia-nccl-cu13 {re.escape(version)} \(build\.libraries\[0\]\): a "
        r"wheel does not carry a library the build was given", lines[at]), lines[at]
    assert lines[at + 1] == (
        f"hint: the wheel requires nvidia-nccl-cu13>={version},=={version.split('.')[0]}.* "
        "instead: a user's pip installs it; patch the package's build so that it does not copy "
        "the library into the wheel (package_data, a CMake install() of it)")
