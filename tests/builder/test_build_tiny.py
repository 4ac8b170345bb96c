"""Real builds of a tiny torch CUDA extension with the pinned toolchain, checked with cuobjdump.

Each build takes 15-30 s on 2 cores (the first run also creates the toolchain venv).
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
from pathlib import Path

import pytest
from packaging.version import Version

from tests.builder.test_audit import copy_of_site
from tests.conftest import (
    SMALL_FS,
    add_variant,
    assert_platform_tagged,
    wheelsmith,
    wheelsmith_on_small_fs,
)
from wheelsmith import locations, wheelfile
from wheelsmith.builder import pathview
from wheelsmith.builder.smoke import IMPORT_HINT
from wheelsmith.builder.verify import CARRIED_RELEASE_HINT, VERSION_HINT
from wheelsmith.recipes import simple
from wheelsmith.toolchain.env import Toolchain
from wheelsmith.untrusted.linkage import linkage
from wheelsmith.wheelfile import WheelName

pytestmark = pytest.mark.toolchain



def error_lines(stderr: str) -> list[str]:
    """What the user sees from the error on (stage lines come before it)."""
    lines = stderr.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("error: "))
    return lines[start:]


C10_SINGLETON = "_ZN3c1019UndefinedTensorImpl10_singletonE"


def torch_lacking(toolchain: Toolchain, folder: Path, symbol: str) -> Path:
    """The Python of a venv whose site-packages holds the toolchain's torch libraries and CUDA
    libraries, but a libc10.so that no longer exports `symbol`."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    site = next(folder.glob("lib/python3*/site-packages"))
    assert toolchain.site is not None
    site.rmdir()
    copy_of_site(toolchain.site, site, without=symbol)
    return folder / "bin" / "python"


def build_json(project: Path, *args: str) -> dict[str, object]:
    result = wheelsmith("build", *args, "--json", cwd=project, check=True)
    data: dict[str, object] = json.loads(result.stdout)
    return data


def test_builds_exactly_sm_120(project: Path, toolchain: Toolchain) -> None:
    add_variant(project, "tiny-ext")
    data = build_json(project, "tiny-ext", "--arch", "12.0")
    wheel = Path(str(data["wheel"]))
    assert wheel.parent == project / "wheelhouse"
    provenance = data["provenance"]
    assert isinstance(provenance, dict)
    assert_platform_tagged(wheel, provenance, "tiny_ext-0.1.0+cu.13.0.torch.2.14.sm.120")
    assert provenance["device_code"] == [
        {"path": "tiny_ext/_C.cpython-311-x86_64-linux-gnu.so", "sass": ["sm_120"], "ptx": []}]
    assert provenance["toolchain"]["channel"] == "cu130-torch2.14"
    run = data["run"]
    assert isinstance(run, dict)
    assert run["smoke"][:2] == [  # the recipe's import, then each compiled module
        "imported tiny_ext", "imported tiny_ext._C (tiny_ext/_C.cpython-311-x86_64-linux-gnu.so)"]
    assert [(c["extension"], c["sass"]) for c in run["prebuild_check"]] == [("_C", ["sm_120"])]
    assert (provenance["archs_requested"], provenance["host_only"]) == ("12.0", [])

    ok = wheelsmith("verify", str(wheel), "--arch", "12.0", cwd=project)
    assert ok.returncode == 0, ok.stderr
    so = "tiny_ext/_C.cpython-311-x86_64-linux-gnu.so"
    assert ok.stdout.splitlines()[:7] == [
        f"ok: {wheel.name} carries exactly 12.0",
        "  the release its provenance records: tiny-ext 0.1.0",
        f"  {so}: SASS sm_120; PTX -",
        "  CUDA runtime: 13 (libcudart.so.13)",
        "  oldest driver: 580.65.06 (set by cubins of CUDA 13.0 (any CUDA 13 driver runs them))",
        f"  manylinux: manylinux_2_34_x86_64, set by GLIBC_2.32 (__libc_single_threaded in "
        f"{so}): manylinux_2_31_x86_64 does not list it",
        "  symbols: 26 resolved against torch 2.14.1's libraries and its CUDA libraries, "
        "0 undefined"]
    assert provenance["audit"]["symbols"]["resolved"] == 26
    with zipfile.ZipFile(wheel) as zf:
        assert f"{wheel.name.split('-cp')[0]}.dist-info/sboms/tiny-ext.cdx.json" in zf.namelist()
    refused = wheelsmith("verify", str(wheel), "--python", str(torch_lacking(
        toolchain, project.parent / "lacking", C10_SINGLETON)), cwd=project)
    assert refused.returncode == 10, refused.stderr
    assert error_lines(refused.stderr)[:2] == [
        f"error: {wheel.name} does not load against torch 2.14.1: 1 symbol(s) undefined, 0 "
        "library(ies) missing",
        f"  {so}: c10::UndefinedTensorImpl::_singleton (from libc10.so or libtorch_cpu.so) is "
        "not defined"]
    recorded = wheelsmith("verify", str(wheel), cwd=project)  # no flags: its provenance's
    assert recorded.stdout.splitlines()[0] == f"ok: {wheel.name} carries exactly 12.0"

    wrong = wheelsmith("verify", str(wheel), "--arch", "9.0;12.0", cwd=project)
    assert wrong.returncode == 10
    assert error_lines(wrong.stderr)[:2] == [
        f"error: {wheel.name} does not contain exactly the device code for 9.0;12.0",
        "  tiny_ext/_C.cpython-311-x86_64-linux-gnu.so: missing SASS for sm_90"]


def test_a_builds_own_warnings_go_to_its_log_not_to_the_users_output(
        project: Path, toolchain: Toolchain) -> None:
    """torch warns at import in the toolchain (no NumPy there); the build frontend re-raises
    the package's build's warnings in wheelsmith's process. Without -v the output is the
    stages, the progress and the result; the log holds the warning."""
    add_variant(project, "tiny-ext")
    result = wheelsmith("build", "tiny-ext", "--arch", "12.0", cwd=project)
    assert result.returncode == 0, result.stderr[-3000:]
    stray = [line for line in result.stderr.splitlines()  # the stages, the progress, the result
             if not line.startswith(("==> [", "    compile [")) and
             not re.fullmatch(r"  \S+\.so: SASS .*", line)]
    assert stray == []
    log = next((project / "build" / "wheelsmith").glob("tiny-ext-*/build.log")).read_text()
    assert "BuildBackendWarning: Failed to initialize NumPy" in log


def test_builds_sm_90_and_sm_120_with_ptx(project: Path, toolchain: Toolchain) -> None:
    add_variant(project, "tiny-ext")
    data = build_json(project, "tiny-ext", "--arch", "9.0;12.0+PTX")
    provenance = data["provenance"]
    assert isinstance(provenance, dict)
    assert provenance["device_code"][0]["sass"] == ["sm_90", "sm_120"]
    assert provenance["device_code"][0]["ptx"] == ["sm_120"]
    assert Path(str(data["wheel"])).name.startswith("tiny_ext-0.1.0+cu.13.0.torch.2.14.sm.90.120"
                                                    ".ptx.120-")


def test_a_build_after_one_for_another_arch_compiles_longest_first_by_its_times(
        project: Path, toolchain: Toolchain) -> None:
    add_variant(project, "tiny-ext")
    first = build_json(project, "tiny-ext", "--arch", "12.0")
    run = first["run"]
    assert isinstance(run, dict)
    timed = run["build"]["object_seconds"]
    assert sorted(timed) == ["csrc/add.o", "csrc/add_kernel.o"]
    assert all(isinstance(seconds, float) and seconds >= 0 for seconds in timed.values())
    second = wheelsmith("build", "tiny-ext", "--arch", "9.0", cwd=project)
    assert second.returncode == 0, second.stderr
    assert re.search(r"^==> \[\s*\d+s\] compile: plan from _C's build.ninja: 1 CUDA \+ 1 C\+\+ "
                     r"file\(s\): .*; longest first by an earlier run \(2 of 2 objects timed\); "
                     r"about 1 min on \d+ jobs by those times$",
                     second.stderr, re.MULTILINE), second.stderr


def test_second_build_is_up_to_date_and_rebuild_replaces(project: Path,
                                                         toolchain: Toolchain) -> None:
    add_variant(project, "tiny-ext")
    first = build_json(project, "tiny-ext")
    second = build_json(project, "tiny-ext")
    assert (second["up_to_date"], second["wheel"]) == (True, first["wheel"])
    third = build_json(project, "tiny-ext", "--rebuild")
    assert (third["up_to_date"], third["wheel"]) == (False, first["wheel"])
    assert sorted(p.name for p in (project / "wheelhouse").iterdir()) == [
        Path(str(first["wheel"])).name]
    published = build_json(project, "tiny-ext", "--publish", "--index", "idx")
    assert published["published"] == {
        "filename": Path(str(first["wheel"])).name, "channel": "cu130-torch2.14",
        "status": "published", "page": "cu130-torch2.14/simple/tiny-ext/"}
    assert wheelsmith("index", "check", "--index", "idx", cwd=project).returncode == 0


@SMALL_FS
def test_a_full_disk_is_named_with_the_file_and_leaves_no_partial_wheel(
        project: Path, toolchain: Toolchain) -> None:
    add_variant(project, "tiny-ext")
    out = project / "wheelhouse"
    result = wheelsmith_on_small_fs(out, "16k", "build", "tiny-ext", "--arch", "12.0",
                                    cwd=project)
    assert result.returncode == 19, result.stderr
    message, hint = error_lines(result.stderr)[:2]
    written = Path(message.removeprefix("error: no space left on the device writing "))
    assert (written.parent.parent, written.suffix) == (out, ".whl"), message  # the stamped wheel
    assert hint == (f"hint: free space where it was writing (df -h {written.parent}); "
                    f"wheelsmith's caches are in {locations.cache_dir()} (its toolchains/ are "
                    "made again when needed); then run the same command again: "
                    "a build resumes from the objects it had finished")
    assert "Traceback" not in result.stderr
    assert (project / "wheelhouse.left").read_text() == ""  # no partial wheel, no scratch


def test_a_wheel_for_another_python_in_out_is_not_this_builds(project: Path,
                                                                 toolchain: Toolchain) -> None:
    """One wheelhouse for several Pythons: the cp312 wheel of the same package and label is
    another build's, neither "up to date" for cp311 nor "built from different inputs"."""
    add_variant(project, "tiny-ext")
    first = Path(str(build_json(project, "tiny-ext")["wheel"]))
    other = first.with_name(first.name.replace("-cp311-cp311-", "-cp312-cp312-"))
    first.rename(other)
    again = build_json(project, "tiny-ext")
    assert (again["up_to_date"], again["wheel"]) == (False, str(first))
    assert sorted(p.name for p in (project / "wheelhouse").iterdir()) == sorted(
        [first.name, other.name])


HARD_CODED = ('"nvcc": ["-O2"]', '"nvcc": ["-O2", "-gencode", "arch=compute_90,code=sm_90"]')


def test_package_that_ignores_the_arch_list_is_stopped_before_compiling(
    project: Path, toolchain: Toolchain
) -> None:
    add_variant(project, "ignores-arch", HARD_CODED)
    result = wheelsmith("build", "ignores-arch", "--arch", "12.0", cwd=project)
    assert result.returncode == 10
    first = error_lines(result.stderr)[0]
    assert re.fullmatch(  # the build.ninja's path in the source tree, relative to it
        r"error: pre-build check: build/temp\.linux-x86_64-cpython-3\d+/build\.ninja compiles "
        r"SASS sm_90 and PTX -, but SASS sm_120 and PTX - were requested; stopping before "
        r"compiling", first), first
    assert "compile [" not in result.stderr  # ninja never started a compile step
    assert "hint: a package that ignores the arch list" in result.stderr
    assert not any((project / "wheelhouse").glob("*.whl"))


def test_arch_rewrite_puts_the_requested_targets_in_place_of_the_packages_own(
        project: Path, toolchain: Toolchain) -> None:
    """The same package with `arch.rewrite: true`: its sm_90 flags are replaced in the build
    file by the requested targets, said, and the wheel carries exactly them."""
    add_variant(project, "ignores-arch", HARD_CODED)
    recipe = project / "recipes" / "ignores-arch.yaml"
    recipe.write_text(recipe.read_text().replace('arch:\n', 'arch:\n  rewrite: true\n'))
    result = wheelsmith("build", "ignores-arch", "--arch", "12.0+PTX", "--json", cwd=project)
    assert result.returncode == 0, result.stderr
    said = [line for line in result.stderr.splitlines() if "] targets: " in line]
    assert len(said) == 1, result.stderr
    assert said[0].endswith("build.ninja compiled SASS sm_90 and PTX - of its own; it compiles "
                            "the requested targets instead (arch.rewrite)"), said
    wheel = json.loads(result.stdout)["wheel"]
    checked = wheelsmith("verify", wheel, cwd=project)
    assert checked.stdout.splitlines()[0].endswith("carries exactly 12.0+PTX"), checked.stdout


DRIVER_CALL = ("#include <cuda.h>\n"
               "extern \"C\" int tiny_driver_version() { int v = 0; cuDriverGetVersion(&v); "
               "return v; }\n")


def test_an_extension_that_links_the_driver_api_builds_and_imports_without_a_driver(
        project: Path, toolchain: Toolchain) -> None:
    """torch-lap-cuda links `-lcuda`: the link finds the toolkit's stub (LIBRARY_PATH), the
    module needs libcuda.so.1, which the machine's driver gives at run time; where there is
    no driver, the smoke test's import loads the stub, and its log says so."""
    source = add_variant(project, "links-driver", (
        'sources=["csrc/add.cpp", "csrc/add_kernel.cu"],',
        'sources=["csrc/add.cpp", "csrc/add_kernel.cu", "csrc/driver.cpp"], '
        'libraries=["cuda"],'))
    (source / "csrc" / "driver.cpp").write_text(DRIVER_CALL)
    result = wheelsmith("build", "links-driver", "--arch", "12.0", "--json", cwd=project)
    assert result.returncode == 0, result.stderr
    wheel = Path(json.loads(result.stdout)["wheel"])
    with zipfile.ZipFile(wheel) as zf, tempfile.TemporaryDirectory() as scratch:
        member = next(n for n in zf.namelist() if n.endswith(".so"))
        found = linkage(Path(zf.extract(member, scratch)))
    assert found is not None
    assert "libcuda.so.1" in found.needed
    log = Path(json.loads(result.stdout)["log"]).read_text()
    if not driver_loads():
        assert "links libcuda.so.1 and this machine has no driver: its import loads the " \
               "toolkit's stub" in log


def driver_loads() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def test_a_setup_py_that_turns_ninja_off_is_refused_with_its_line_before_compiling(
        project: Path, toolchain: Toolchain) -> None:
    """Without ninja torch compiles one file at a time: no build.ninja, so no pre-build check,
    MAX_JOBS or split-compile, and --configure-only could not stop it (issue 22)."""
    source = add_variant(project, "no-ninja")
    setup = source / "setup.py"
    without_ninja = '{"build_ext": BuildExtension.with_options(use_ninja=False)}'
    setup.write_text(setup.read_text().replace('{"build_ext": BuildExtension}', without_ninja))
    for extra in ((), ("--configure-only",)):
        result = wheelsmith("build", "no-ninja", "--arch", "12.0", *extra, cwd=project)
        assert result.returncode == 5
        assert error_lines(result.stderr)[:2] == [
            "error: setup.py:17 passes use_ninja=False: torch would compile one file at a "
            "time, with no build.ninja for the pre-build arch check, MAX_JOBS or split-compile "
            "(and --configure-only could not stop before compiling)",
            "hint: add the use-ninja patch to the recipe: `wheelsmith recipe new` writes it "
            "(patches/NAME/VERSION/0001-use-ninja.patch turns it into use_ninja=True)"]
        assert "compile:" not in result.stderr  # no compile stage line claims MAX_JOBS
    assert not any((project / "wheelhouse").glob("*.whl"))


def test_configure_only_reports_the_targets_and_builds_nothing(project: Path,
                                                               toolchain: Toolchain) -> None:
    add_variant(project, "tiny-ext")
    result = wheelsmith("build", "tiny-ext", "--arch", "9.0;12.0+PTX", "--configure-only",
                        "--json", cwd=project)
    assert result.returncode == 0, result.stderr
    configured = json.loads(result.stdout)["configured"]
    assert [(c["sass"], c["ptx"]) for c in configured] == [(["sm_120", "sm_90"], ["sm_120"])]
    assert not (project / "wheelhouse").exists()


def test_a_configure_only_build_that_fails_after_its_objects_were_stood_in_fails(
        project: Path, toolchain: Toolchain) -> None:
    """Only the check's own stop of CMake's build is a configure-only result: a torch build
    that fails for a reason of its own after its objects were stood in for is an error (it
    was taken for a clean stop whenever the log held a configure-only line)."""
    source = add_variant(project, "fails-after-build", (
        'cmdclass={"build_ext": BuildExtension}', 'cmdclass={"build_ext": StubsAfter}'))
    setup = source / "setup.py"
    setup.write_text(setup.read_text().replace("\nsetup(", (
        "\nclass StubsAfter(BuildExtension):\n    def run(self):\n        super().run()\n"
        "        raise SystemExit('generating the type stubs failed')\n\n\nsetup("), 1))
    result = wheelsmith("build", "fails-after-build", "--arch", "12.0", "--configure-only",
                        cwd=project)
    assert result.returncode == 9, result.stderr[-3000:]
    assert error_lines(result.stderr)[0] == (
        "error: the build of fails-after-build 0.1.0 failed with exit code 1")
    assert "generating the type stubs failed" in result.stderr
    log_line = next(line for line in result.stderr.splitlines() if "full log:" in line)
    assert "wheelsmith configure-only: " in Path(log_line.split("full log: ")[1]).read_text()


def test_configure_only_names_an_extension_whose_build_ninja_has_only_cpp_rules(
        project: Path, toolchain: Toolchain) -> None:
    add_variant(project, "with-host-module", ("        )\n    ],", (
        '        ),\n        CUDAExtension(name="tiny_ext._host", sources=["csrc/add.cpp"]),\n'
        "    ],")))
    result = wheelsmith("build", "with-host-module", "--arch", "12.0", "--configure-only",
                        "--json", cwd=project)
    assert result.returncode == 0, result.stderr
    done = json.loads(result.stdout)
    assert [(c["extension"], c["sass"]) for c in done["configured"]] == [("_C", ["sm_120"])]
    assert done["host_modules"] == ["_host"]


def test_a_binary_the_sdist_ships_prebuilt_never_reaches_the_wheel(
        project: Path, toolchain: Toolchain) -> None:
    """bitsandbytes 0.42.0's sdist ships libbitsandbytes_cuda*.so and its setup.py packs them:
    the extension is built from source, the prebuilt library passes through untouched (its
    recipe's host_only lets it past the device-code gate)."""
    source = add_variant(project, "ships-prebuilt", (
        'packages=["tiny_ext"],', 'packages=["tiny_ext"], package_data={"tiny_ext": ["*.so"]},'))
    recipe = project / "recipes" / "ships-prebuilt.yaml"
    recipe.write_text(recipe.read_text().replace(
        "versions:", 'build:\n  host_only: ["tiny_ext/libfast.so"]\nversions:'))
    (source / "prebuilt.c").write_text("int prebuilt(void) { return 1; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(source / "tiny_ext" / "libfast.so"),
                    str(source / "prebuilt.c")], check=True)
    result = wheelsmith("build", "ships-prebuilt", "--arch", "12.0", cwd=project)
    assert result.returncode == 10, result.stderr[-3000:]
    assert error_lines(result.stderr)[:2] == [
        "error: ships_prebuilt-0.1.0-cp311-cp311-linux_x86_64.whl holds 1 binary file(s) the "
        "sdist ships prebuilt, byte for byte: tiny_ext/libfast.so; nothing in this build "
        "compiled them",
        "hint: wheelsmith builds from source: the recipe needs a patch that deletes the "
        "prebuilt files and builds them (the package's Makefile or CMake build), or the "
        "package has no source build to offer"]
    assert not any((project / "wheelhouse").glob("*.whl"))


def test_a_wheel_whose_version_is_not_the_recipes_is_refused_and_nothing_is_placed(
        project: Path, toolchain: Toolchain) -> None:
    """A generated patch dropped setuptools-scm, the build requirement that set the version:
    setuptools wrote 0.0.0 for a recipe of 1.1.0, and the wheel passed verify."""
    add_variant(project, "unversioned", ('    version="0.1.0",\n', ""))
    result = wheelsmith("build", "unversioned", "--arch", "12.0", "--publish", "--index", "idx",
                        cwd=project)
    assert result.returncode == 10, result.stderr[-3000:]
    assert error_lines(result.stderr)[:2] == [
        "error: unversioned-0.0.0-cp311-cp311-linux_x86_64.whl is version 0.0.0, but the recipe "
        "builds unversioned 0.1.0",
        f"hint: {VERSION_HINT}"]
    assert "smoke:" not in result.stderr  # refused before its smoke test
    assert not (project / "wheelhouse").exists() or not any((project / "wheelhouse").iterdir())
    assert not (project / "idx").exists()


def test_verify_refuses_a_wheel_that_is_not_the_release_its_provenance_records(
        project: Path, toolchain: Toolchain, tmp_path: Path) -> None:
    """What a wheelsmith that did not check the version wrote: a 0.0.0 wheel whose provenance
    records the recipe's 0.1.0, in every other way valid."""
    add_variant(project, "tiny-ext")
    built = Path(str(build_json(project, "tiny-ext", "--arch", "12.0")["wheel"]))
    name = WheelName.parse(built.name)
    unversioned = WheelName(name.name, Version("0.0.0+" + str(name.version.local)), name.build,
                            name.tags)
    old = tmp_path / unversioned.filename()
    wheelfile.rewrite(built, old, name=unversioned, edits={"METADATA": lambda text: re.sub(
        r"(?m)^Version: .*$", f"Version: {unversioned.version}", text)}, extra={}, epoch=0)
    result = wheelsmith("verify", str(old), cwd=project)
    assert result.returncode == 10, result.stderr
    assert error_lines(result.stderr) == [
        f"error: {old.name} is version 0.0.0+cu.13.0.torch.2.14.sm.120, but its provenance "
        "records tiny-ext 0.1.0", f"hint: {CARRIED_RELEASE_HINT}"]
    again = wheelsmith("verify", str(built), "--json", cwd=project)  # the build's own passes
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["wheels"][0]["release"] == {"package": "tiny-ext",
                                                                "version": "0.1.0"}


LAZY_MODULES = {  # compiled modules tiny_ext/__init__.py never imports: only when used
    "unlinked.cpp": "#include <Python.h>\nextern \"C\" int not_defined_anywhere(void);\n"
                  "static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, \"_unlinked\"};\n"
                  "PyMODINIT_FUNC PyInit__unlinked(void) {\n"
                  "  if (not_defined_anywhere()) return NULL;\n"
                  "  return PyModule_Create(&def);\n}\n",
    "refuses.cpp": "#include <Python.h>\nPyMODINIT_FUNC PyInit__refuses(void) {\n"
                 "  PyErr_SetString(PyExc_RuntimeError, \"no device was chosen\");\n"
                 "  return NULL;\n}\n",
    "lazy.cpp": "#include <Python.h>\n"
              "static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, \"_lazy\"};\n"
              "PyMODINIT_FUNC PyInit__lazy(void) { return PyModule_Create(&def); }\n",
    "helper.c": "int tiny_helper(void) { return 7; }\n",  # a library: no PyInit_
}


def lazy_variant(project: Path, names: tuple[str, ...]) -> None:
    """lazy-ext: the tiny extension with compiled modules its package never imports (`names`
    of LAZY_MODULES) and a library built with it."""
    modules = "".join(f'        Extension("tiny_ext._{name}", ["csrc/{name}.cpp"]),\n'
                      for name in names)
    source = add_variant(project, "lazy-ext", ("        )\n    ],", f"        ),\n{modules}    ],"))
    for file, text in LAZY_MODULES.items():
        (source / "csrc" / file).write_text(text)
    setup = source / "setup.py"  # the library is built with the package, not shipped in it
    setup.write_text(setup.read_text().replace("from setuptools import setup\n", (
        "import subprocess\nfrom setuptools import Extension, setup\n"
        "subprocess.run(['gcc', '-shared', '-fPIC', '-o', 'tiny_ext/libhelper.so', "
        "'csrc/helper.c'], check=True)\n")).replace(
        'packages=["tiny_ext"],', 'packages=["tiny_ext"], package_data={"tiny_ext": ["*.so"]},'))
    recipe = project / "recipes" / "lazy-ext.yaml"
    globs = ", ".join(f'"tiny_ext/_{name}*.so"' for name in names)
    recipe.write_text(recipe.read_text().replace("versions:", (
        f'build:\n  host_only: [{globs}, "tiny_ext/libhelper.so"]\nversions:')))


def test_a_compiled_module_that_does_not_import_fails_the_smoke_test_naming_it(
        project: Path, toolchain: Toolchain) -> None:
    """A package that imports its compiled modules only when they are used passed its smoke
    test (it imported the package) with modules that do not load: each is imported now."""
    lazy_variant(project, ("refuses", "lazy"))
    result = wheelsmith("build", "lazy-ext", "--arch", "12.0", cwd=project)
    assert result.returncode == 10, result.stderr[-3000:]
    message, *findings, log_line, hint = error_lines(result.stderr)
    assert (message, findings, hint) == (  # libhelper.so, no module, is not among them
        "error: the smoke test of lazy_ext-0.1.0-cp311-cp311-linux_x86_64.whl: 1 of 3 compiled "
        "extension module(s) do not import",
        ["  tiny_ext._refuses: RuntimeError: no device was chosen"],
        f"hint: {IMPORT_HINT}")
    said = Path(log_line.split("--- full log: ")[1]).read_text()
    assert "imported tiny_ext._lazy (tiny_ext/_lazy.cpython-311-x86_64-linux-gnu.so)" in said
    assert not (project / "wheelhouse").exists() or not any((project / "wheelhouse").iterdir())


def test_a_compiled_module_with_an_undefined_symbol_is_refused_before_it_is_imported(
        project: Path, toolchain: Toolchain) -> None:
    """The binary audit resolves every module's symbols against the toolchain's torch: one
    no library defines is refused by name before the smoke test imports anything."""
    lazy_variant(project, ("unlinked", "refuses", "lazy"))
    result = wheelsmith("build", "lazy-ext", "--arch", "12.0", cwd=project)
    assert result.returncode == 10, result.stderr[-3000:]
    assert error_lines(result.stderr) == [
        "error: lazy_ext-0.1.0-cp311-cp311-linux_x86_64.whl does not load against torch "
        "2.14.1: 1 symbol(s) undefined, 0 library(ies) missing",
        "  tiny_ext/_unlinked.cpython-311-x86_64-linux-gnu.so: not_defined_anywhere (from the "
        "libraries it links) is not defined",
        "hint: no library it links should define it: the package's build left it undefined (a "
        "source file or a -l library missing from that extension); patch its build, or leave "
        "the module out of the wheel"]
    assert not (project / "wheelhouse").exists() or not any((project / "wheelhouse").iterdir())


def test_wheel_without_device_code_fails(project: Path, toolchain: Toolchain) -> None:
    source = add_variant(project, "no-device-code", (
        'sources=["csrc/add.cpp", "csrc/add_kernel.cu"]', 'sources=["csrc/add.cpp"]'))
    (source / "csrc" / "add.cpp").write_text((source / "csrc" / "add.cpp").read_text().replace(
        "  launch_add_one(", "  (void)0; // launch_add_one("))
    result = wheelsmith("build", "no-device-code", "--arch", "12.0", cwd=project)
    assert result.returncode == 10, result.stderr
    assert "no device code at all (neither SASS nor PTX)" in result.stderr
    assert not any((project / "wheelhouse").glob("*.whl"))


def test_compile_error_shows_tail_log_and_keeps_source(project: Path,
                                                       toolchain: Toolchain) -> None:
    source = add_variant(project, "broken-ext")
    kernel = source / "csrc" / "add_kernel.cu"
    kernel.write_text(kernel.read_text().replace("y[i] = x[i] + 1.0f;", "y[i] = x[i] +;"))
    result = wheelsmith("build", "broken-ext", "--arch", "12.0", cwd=project)
    assert result.returncode == 9
    assert error_lines(result.stderr)[0] == (  # the compiler saw the view's path: named in-tree
        "error: the build of broken-ext 0.1.0 failed with exit code 1; the compiler's first "
        "error: csrc/add_kernel.cu:6: error: expected an expression")
    assert "error: expected an expression" in result.stderr
    log_line = next(line for line in result.stderr.splitlines() if "full log:" in line)
    log = Path(log_line.split("full log: ")[1])
    assert "add_kernel.cu" in log.read_text()
    kept = log.parent / "src" / "broken-ext"
    assert (kept / "csrc" / "add_kernel.cu").is_file()
    assert (f"hint: read the full log; the patched source is kept in {kept} "  # the compiler
            f"(the log's {pathview.ROOT / 'source'} is {kept})"  # saw the view
            ) in error_lines(result.stderr)


def test_a_setup_py_that_raises_before_compiling_is_named_by_its_exception_and_line(
        project: Path, toolchain: Toolchain) -> None:
    """vllm's setup.py imports setuptools_rust, marlin-kernels' reads a file its sdist lacks:
    each said only 'failed with exit code 1'."""
    add_variant(project, "raising-ext", ("from setuptools import setup\n",
                                         "from setuptools import setup\n"
                                         "import no_such_build_dependency\n"))
    result = wheelsmith("build", "raising-ext", "--arch", "12.0", cwd=project)
    assert result.returncode == 9
    assert error_lines(result.stderr)[0] == (
        "error: the build of raising-ext 0.1.0 failed with exit code 1: setup.py:4: "
        "ModuleNotFoundError: No module named 'no_such_build_dependency'")


def test_a_wheel_that_does_not_import_is_named_by_its_exception_and_line(
        project: Path, toolchain: Toolchain) -> None:
    """warp-rnnt's __init__ imports pkg_resources, which the toolchain's setuptools no longer
    has (nor a user's): its smoke test said only 'failed with exit code 1'."""
    source = add_variant(project, "unimportable-ext")
    init = source / "tiny_ext" / "__init__.py"
    init.write_text(init.read_text().replace("import torch\n",
                                             "import torch\nimport pkg_resources\n"))
    result = wheelsmith("build", "unimportable-ext", "--arch", "12.0", cwd=project)
    assert result.returncode == 10, result.stderr
    said = error_lines(result.stderr)[0]
    assert said.startswith("error: the smoke test of unimportable_ext-0.1.0-"), said
    assert said.endswith(" failed with exit code 1: tiny_ext/__init__.py:4: "
                         "ModuleNotFoundError: No module named 'pkg_resources'"), said


def test_setup_py_cannot_reach_the_network(project: Path, toolchain: Toolchain) -> None:
    url = simple.index_url() + "/"  # the index this machine's pip uses
    try:
        urllib.request.urlopen(url, timeout=20).close()
    except OSError as exc:
        pytest.skip(f"{url} is not reachable from this machine, so the cut cannot be shown: {exc}")
    probe = (f"import urllib.request\ntry:\n    urllib.request.urlopen({url!r}, timeout=20)\n"
             "except OSError as exc:\n    print('offline as expected:', exc)\nelse:\n"
             "    raise SystemExit('NETWORK REACHABLE FROM setup.py')\n")
    add_variant(project, "phones-home", ("from setuptools import setup\n",
                                         "from setuptools import setup\n" + probe))
    result = wheelsmith("build", "phones-home", "--arch", "12.0", "--json", cwd=project)
    assert result.returncode == 0, result.stderr
    log = Path(json.loads(result.stdout)["log"]).read_text()
    assert "offline as expected" in log


@pytest.mark.parametrize(("arch", "said"), [
    ("9.0f", "error: --arch: '9.0f': family 'f' targets exist only from 10.0 on\n"
             "hint: use '9.0'\n"),
    ("120", "error: --arch: '120' is not a compute capability\nhint: write MAJOR.MINOR as "
            "TORCH_CUDA_ARCH_LIST does: did you mean '12.0'?\n"),
    ("12.0x", "error: --arch: '12.0x': unknown suffix 'x'\nhint: write '12.0', '12.0a' "
              "(arch-specific) or '12.0f' (family)\n"),
])
def test_bad_arch_on_the_command_line(project: Path, arch: str, said: str) -> None:
    result = wheelsmith("build", "tiny-ext", "--arch", arch, cwd=project)
    assert result.returncode == 4
    assert "\n".join(error_lines(result.stderr)) + "\n" == said


# what `nvcc --list-gpu-code` of the default profile's nvcc 13.0 lists, in order
NVCC_13_0_LISTS = ("(it generates sm_75, sm_80, sm_86, sm_87, sm_88, sm_89, sm_90, sm_100, "
                   "sm_103, sm_110, sm_120, sm_121)")


@pytest.mark.parametrize(("arch", "error"), [
    ("7.0", "error: the cu130-torch2.14 toolchain cannot build 7.0: arch 7.0 was removed in CUDA "
            f"13.0, the toolchain has 13.0; nvcc 13.0.88 cannot generate sm_70 {NVCC_13_0_LISTS}"),
    # Jetson Thor is 10.1 to CUDA 12 and 11.0 to CUDA 13: the refusal says which to write
    ("10.1", "error: the cu130-torch2.14 toolchain cannot build 10.1: arch 10.1 was removed in "
             "CUDA 13.0, the toolchain has 13.0 (CUDA 13 calls Jetson Thor 11.0: write 11.0); "
             f"nvcc 13.0.88 cannot generate sm_101 {NVCC_13_0_LISTS}; torch 2.14.1 refuses the "
             "arch list: Unknown CUDA arch (10.1) or GPU not supported"),
])
def test_preflight_refuses_an_arch_the_toolchain_cannot_build(
        project: Path, toolchain: Toolchain, arch: str, error: str) -> None:
    add_variant(project, "tiny-ext")
    result = wheelsmith("build", "tiny-ext", "--arch", arch, cwd=project)
    assert result.returncode == 7
    assert error_lines(result.stderr)[:2] == [
        error, "hint: pick other archs (--arch) or another toolchain (--toolchain)"]


@pytest.mark.parametrize(("arch", "sass"), [("12.1", "sm_121"), ("12.0a", "sm_120a"),
                                            ("11.0", "sm_110"), ("10.3", "sm_103")])
def test_the_newest_archs_build_exactly_their_sass(project: Path, toolchain: Toolchain,
                                                   arch: str, sass: str) -> None:
    """DGX Spark (12.1), the RTX 50 arch-specific target (12.0a: its cubin is named sm_120a),
    Jetson Thor (11.0) and GB300 (10.3), each checked by cuobjdump."""
    add_variant(project, "tiny-ext")
    data = build_json(project, "tiny-ext", "--arch", arch)
    provenance = data["provenance"]
    assert isinstance(provenance, dict)
    assert provenance["device_code"] == [
        {"path": "tiny_ext/_C.cpython-311-x86_64-linux-gnu.so", "sass": [sass], "ptx": []}]


def test_a_family_target_builds_exactly_its_family_cubins_and_serves_the_family(
        project: Path, toolchain: Toolchain, tmp_path: Path) -> None:
    """12.0f: torch is told 12.0, the pre-build check makes the build file's targets the
    family's, and the wheel's cubin is the family's (cuobjdump lists it as sm_120; the fat
    binary's entry says family). A 12.0f wheel serves 12.1 (doctor, install's offers); a
    plain 12.0 wheel is not a 12.0f one, nor the other way round."""
    add_variant(project, "tiny-ext")
    data = build_json(project, "tiny-ext", "--arch", "12.0f")
    wheel = Path(str(data["wheel"]))
    assert wheel.name.startswith("tiny_ext-0.1.0+cu.13.0.torch.2.14.sm.120f-")
    provenance = data["provenance"]
    assert isinstance(provenance, dict)
    assert provenance["device_code"] == [
        {"path": "tiny_ext/_C.cpython-311-x86_64-linux-gnu.so", "sass": ["sm_120f"], "ptx": []}]
    run = data["run"]
    assert isinstance(run, dict)
    assert [c["sass"] for c in run["prebuild_check"]] == [["sm_120f"]]
    ok = wheelsmith("verify", str(wheel), "--arch", "12.0f", cwd=project)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.splitlines()[0] == f"ok: {wheel.name} carries exactly 12.0f"
    plain = wheelsmith("verify", str(wheel), "--arch", "12.0", cwd=project)
    assert plain.returncode == 10, plain.stdout + plain.stderr
    site = tmp_path / "site"
    subprocess.run([str(toolchain.python), "-m", "pip", "install", "-q", "--no-deps",
                    "--no-index", "--target", str(site), str(wheel)], check=True)
    for arch, said in (("12.1", "SASS (native)"), ("12.0", "SASS (native)"), ("10.0", "NONE")):
        doctor = subprocess.run(
            [sys.executable, "-m", "wheelsmith", "doctor", "--python", str(toolchain.python),
             "--arch", arch, "--index", "http://127.0.0.1:9"], capture_output=True, text=True,
            cwd=project, env={**os.environ, "PYTHONPATH": str(site)}, check=False)
        line = next(x for x in doctor.stdout.splitlines() if x.startswith("tiny-ext"))
        assert line.endswith(said), (arch, doctor.stdout)
    older = build_json(project, "tiny-ext", "--arch", "12.0")
    family = wheelsmith("verify", str(older["wheel"]), "--arch", "12.0f", cwd=project)
    assert family.returncode == 10, family.stdout + family.stderr


def test_system_toolchain_builds_with_an_installed_cuda(project: Path, toolchain: Toolchain,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    system_cuda = Path("/usr/local/cuda")
    if not (system_cuda / "bin" / "nvcc").is_file():
        pytest.skip("no CUDA toolkit installed in /usr/local/cuda on this machine")
    monkeypatch.setenv("CUDA_HOME", str(system_cuda))
    add_variant(project, "tiny-ext")
    data = build_json(project, "tiny-ext", "--toolchain", "system", "--python",
                      str(toolchain.python))
    provenance = data["provenance"]
    assert isinstance(provenance, dict)
    assert provenance["toolchain"]["name"] == "system"
    assert provenance["device_code"][0]["sass"] == ["sm_120"]


def test_cuda_build_without_ninja_is_refused_before_compiling(
        project: Path, toolchain: Toolchain, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A torch environment without ninja (the H200 machine's) would compile one file at a
    time, MAX_JOBS unused, and leave no build.ninja for the pre-build check."""
    env = tmp_path / "torch-env"  # torch importable, no ninja anywhere on its PATH
    subprocess.run([str(toolchain.python), "-m", "venv", "--without-pip", str(env)], check=True)
    site = next(toolchain.python.parent.parent.glob("lib/python3*/site-packages"))
    (next(env.glob("lib/python3*/site-packages")) / "toolchain.pth").write_text(f"{site}\n")
    (tmp_path / "empty-bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setenv("CUDA_HOME", str(toolchain.cuda_home))
    add_variant(project, "tiny-ext")
    python = env / "bin" / "python"
    result = wheelsmith("build", "tiny-ext", "--arch", "12.0", "--toolchain", "system",
                        "--python", str(python), cwd=project)
    assert result.returncode == 7
    assert error_lines(result.stderr) == [
        f"error: ninja is not installed for {python}: torch would compile one file at a time "
        "(its slow fallback) and the pre-build arch check could not run",
        f"hint: install it into that environment: {python} -m pip install ninja"]
    assert "compile [" not in result.stderr
    assert not any((project / "wheelhouse").glob("*.whl"))


def test_a_build_out_of_time_exits_20_naming_what_it_kept_and_the_rerun_resumes(
        project: Path, toolchain: Toolchain) -> None:
    add_variant(project, "tiny-ext")
    args = ("build", "tiny-ext", "--arch", "12.0", "--compile-cache", "off", "--jobs", "1")
    stopped = wheelsmith(*args, "--time-limit", "6", cwd=project)
    assert stopped.returncode == 20, stopped.stderr
    message, hint = error_lines(stopped.stderr)[:2]
    work = project / "build" / "wheelsmith"
    assert re.fullmatch(rf"error: the time limit of 6 s ran out: partial \((\d/2 objects|stopped "
                        rf"before compiling)\), kept in {work}/tiny-ext-0\.1\.0-\w+", message)
    assert hint == "hint: run the same build again: it resumes from there (--fresh starts over)"
    assert not (project / "wheelhouse").exists() or not any((project / "wheelhouse").iterdir())

    again = wheelsmith(*args, cwd=project)
    assert again.returncode == 0, again.stderr
    assert "resuming: tiny-ext 0.1.0: the patched source and build tree an unfinished build " \
           "left in" in again.stderr
