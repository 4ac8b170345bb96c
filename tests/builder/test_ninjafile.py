"""build.ninja read the same way whichever generator wrote it (ninjafile.py): CMake's Ninja
generator's statements, generated here in its shape (per-target rules with a config part that
differs between CMake releases, objects relative to the build directory, escaped spaces),
give their objects, sources and kinds, the CUDA targets' name, and their arch targets; the
launcher gives CMake's ninja the plan's jobs and hands CMake's own runs (tools, configure
checks) straight to the real ninja."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from wheelsmith.builder import gencode, ninjafile, prebuild

TARGETS = st.lists(st.from_regex(r"[a-z][a-z0-9_-]{0,8}", fullmatch=True), min_size=1,
                   max_size=4, unique=True)
CONFIGS = st.sampled_from(["", "Release", "unscanned_Release", "unscanned_RelWithDebInfo"])
LANGS = st.lists(st.sampled_from(["CUDA", "CXX", "C"]), min_size=1, max_size=5)
SUFFIX = {"CUDA": "cu", "CXX": "cpp", "C": "c"}


def cmake_text(targets: list[str], config: str, langs: list[list[str]], arch: str) -> tuple[
        str, list[tuple[str, str, str]]]:
    """A build.ninja as CMake writes one, and its (object, source, kind) statements."""
    lines = ["# CMAKE generated file: DO NOT EDIT!", "ninja_required_version = 1.5",
             "include CMakeFiles/rules.ninja", ""]
    expected = []
    for target, kinds in zip(targets, langs, strict=False):
        for index, lang in enumerate(kinds):
            source = f"/src/my dir/{target}/f{index}.{SUFFIX[lang]}"
            output = f"src/{target}/CMakeFiles/{target}.dir/f{index}.{SUFFIX[lang]}.o"
            lines += [f"build {output}: {lang}_COMPILER__{target}_{config} "
                      f"{source.replace(' ', '$ ')} || cmake_object_order_depends_target_{target}",
                      f"  FLAGS = -O3 {arch if lang == 'CUDA' else '-fPIC'}",
                      f"  OBJECT_DIR = src/{target}/CMakeFiles/{target}.dir", ""]
            expected.append((output, source, "cuda_compile" if lang == "CUDA" else "compile"))
        lines += [f"build lib{target}.so: CXX_SHARED_LIBRARY_LINKER__{target}_{config} "
                  f"src/{target}/CMakeFiles/{target}.dir/f0.o", ""]
    return "\n".join(lines), expected


@given(targets=TARGETS, config=CONFIGS, data=st.data())
def test_cmakes_statements_give_their_objects_sources_and_kinds(
        targets: list[str], config: str, data: st.DataObject) -> None:
    langs = [data.draw(LANGS) for _ in targets]
    text, expected = cmake_text(targets, config, langs,
                                "--generate-code=arch=compute_120,code=[sm_120]")
    assert ninjafile.from_cmake(text)
    assert [(u.output, u.source, u.rule) for u in ninjafile.units(text)] == expected
    kinds = [kind for _, _, kind in expected]
    assert ninjafile.count_units(text) == (kinds.count("cuda_compile"), kinds.count("compile"))
    cuda = [t for t, ls in zip(targets, langs, strict=False) if "CUDA" in ls]
    assert ninjafile.extension_name(text) == (", ".join(cuda) or None)
    assert ninjafile.has_cuda(text) == bool(cuda)
    found = gencode.gencode_targets(text)
    assert (found.sass, found.ptx) == ((frozenset({"sm_120"}), frozenset()) if cuda else
                                       (frozenset(), frozenset()))


def test_cmakes_arch_forms_are_read_as_sass_and_ptx() -> None:
    """`120-real` is SASS alone, `120` SASS and PTX, `90a-real` the arch-specific SASS."""
    text, _ = cmake_text(["k"], "", [["CUDA"]], "--generate-code=arch=compute_90a,code=[sm_90a]"
                         " --generate-code=arch=compute_120,code=[compute_120,sm_120]")
    found = gencode.gencode_targets(text)
    assert (found.sass, found.ptx) == (frozenset({"sm_90a", "sm_120"}), frozenset({"sm_120"}))


def test_torchs_statements_are_read_as_before() -> None:
    text = ("rule compile\n  command = c++ $in\nrule cuda_compile\n  command = nvcc $in\n"
            "build /b/temp/csrc/a.o: compile /s/csrc/a.cpp\n"
            "build /b/temp/csrc/k.o: cuda_compile /s/csrc/k$ x.cu\n"
            "cuda_cflags = -DTORCH_EXTENSION_NAME=_C -gencode=arch=compute_120,code=sm_120\n")
    assert [(u.output, u.source, u.rule) for u in ninjafile.units(text)] == [
        ("/b/temp/csrc/a.o", "/s/csrc/a.cpp", "compile"),
        ("/b/temp/csrc/k.o", "/s/csrc/k x.cu", "cuda_compile")]
    assert (ninjafile.from_cmake(text), ninjafile.extension_name(text)) == (False, "_C")


OPTIONS = st.lists(st.sampled_from(["-v", "-k", "0", "-j", "7", "-j3", "-C", "build",
                                    "all", "-d", "stats"]), max_size=8)


@given(argv=OPTIONS, jobs=st.integers(1, 64))
def test_cmakes_ninja_gets_the_plans_jobs_and_torchs_keeps_its_own(
        argv: list[str], jobs: int) -> None:
    cmake, _ = cmake_text(["k"], "", [["CUDA"]], "")
    given_jobs = prebuild.planned_jobs(argv, cmake, {"MAX_JOBS": str(jobs)})
    assert given_jobs[:2] == ["-j", str(jobs)]
    rest = given_jobs[2:]
    assert "-j" not in rest
    assert not any(a.startswith("-j") and a[2:].isdigit() for a in rest)
    assert prebuild.planned_jobs(argv, "build a.o: compile a.cpp\n", {"MAX_JOBS": "2"}) == argv


def test_cmakes_own_runs_go_straight_to_the_real_ninja(tmp_path: Path) -> None:
    """`-t recompact` and `-t restat` at CMake's generate step, and the configure checks'
    projects, are not the package's build: no check, no report, no stop."""
    build = tmp_path / "build" / "CMakeFiles" / "CMakeScratch" / "TryCompile-x"
    build.mkdir(parents=True)
    text, _ = cmake_text(["cmTC_1"], "", [["CUDA"]], "-arch=sm_52")
    (build / "build.ninja").write_text(text)
    (tmp_path / "build" / "build.ninja").write_text(text)
    assert prebuild.check(["-C", str(build), "cmTC_1"]) is None
    assert prebuild.check(["-C", str(tmp_path / "build"), "-t", "recompact"]) is None
    assert prebuild.check(["-C", str(tmp_path / "build"), "-trestat", "build.ninja"]) is None
