"""Reading arch targets and compile inputs from generated build.ninja files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import ninja
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.builder.test_buildenv import plan
from wheelsmith.arch import ArchSet
from wheelsmith.builder import compilesetup, gencode, ninjafile
from wheelsmith.builder.buildenv import Guard
from wheelsmith.builder.configured import drop_stand_ins, prebuild_outcome
from wheelsmith.builder.gencode import gencode_targets, to_family
from wheelsmith.builder.prebuild import (
    CONFIGURE_ONLY,
    EXPECT_PTX,
    EXPECT_SASS,
    MISSING,
    REPORT,
    STOOD_IN,
    TIMINGS,
    check,
    estimate,
    longest_first,
    missing_sources,
    order_by_earlier_run,
    wrapper_script,
)
from wheelsmith.errors import CompileError, ToolchainError

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



def test_the_times_a_runner_hands_in_are_the_guards_over_the_work_dirs_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside the image the work directory is fresh each run: the file of times the host
    wrote (the request's earlier_object_seconds) is the one the pre-build check reads."""
    monkeypatch.setenv("PATH", f"{ninja.BIN_DIR}:/usr/bin:/bin")
    work = tmp_path / "causal-conv1d-1.7.0-bbbbbbbbbbbb"
    work.mkdir()
    handed_in = tmp_path / "earlier-object-seconds.json"
    handed_in.write_text('{"csrc/bwd.o": 170.0}\n')
    guard = compilesetup.install_guard(plan(), work, tmp_path / "bin", configure_only=False,
                                       timed=handed_in)
    assert guard is not None
    assert guard.timings == handed_in
    assert json.loads(guard.timings.read_text()) == {"csrc/bwd.o": 170.0}
    # without one, and no earlier run in the work directory: nothing to order by
    untimed = compilesetup.install_guard(plan(), work, tmp_path / "bin2", configure_only=False)
    assert untimed is not None
    assert untimed.timings is None


# --- longest first by an earlier run's times ------------------------------------------------

def torch_like_ninja(build: Path, sources: list[str]) -> str:
    """build.ninja as torch writes it: variables, rules, a compile statement per source (one
    with a variable line of its own), blank lines after."""
    statements = "".join(
        f"build {build}/csrc/{Path(source).stem}.o: "
        f"{'compile' if source.endswith('.cpp') else 'cuda_compile'} /src/csrc/{source}\n"
        + ("  cuda_cflags = -DX\n" if source == "b.cu" else "") for source in sources)
    return ("ninja_required_version = 1.3\ncxx = c++\n\nrule compile\n  command = $cxx $in\n\n"
            "rule cuda_compile\n  command = nvcc $in\n\n" + statements + "\n\n\n")


def compile_order(text: str) -> list[str]:
    return [line.split(": ")[0].rsplit("/", 1)[-1] for line in text.splitlines()
            if line.startswith("build ")]


EARLIER = {"csrc/b.o": 170.0, "csrc/py.o": 55.0, "csrc/c.o": 42.5, "csrc/a.o": 20.0}


def test_compiles_are_written_longest_first_and_untimed_ones_go_first(tmp_path: Path) -> None:
    build = tmp_path / "build" / "temp.linux-x86_64-cpython-312"  # timed under cpython-311
    text = torch_like_ninja(build, ["py.cpp", "a.cu", "b.cu", "c.cu", "new.cu"])
    ordered, timed = longest_first(text, build.name, EARLIER)
    assert compile_order(ordered) == ["new.o", "b.o", "py.o", "c.o", "a.o"]
    assert timed == 4
    assert f"build {build}/csrc/b.o: cuda_compile /src/csrc/b.cu\n  cuda_cflags = -DX\n" in ordered
    assert sorted(ordered.splitlines()) == sorted(text.splitlines())  # only the order changes
    assert ordered.startswith("ninja_required_version = 1.3\ncxx = c++\n\nrule compile\n")
    assert longest_first(ordered, build.name, EARLIER)[0] == ordered
    assert longest_first(text, build.name, {}) == (text, 0)


def test_ninja_starts_the_longest_compile_first_through_the_launcher(tmp_path: Path) -> None:
    """The launcher rewrites build.ninja, and the real ninja (one job) runs it in that order;
    the plan line says how many objects were timed."""
    build = tmp_path / "build" / "temp.linux-x86_64-cpython-312"
    (build / "csrc").mkdir(parents=True)
    (tmp_path / "src" / "csrc").mkdir(parents=True)
    sources = ["py.cpp", "a.cu", "b.cu", "c.cu"]
    for source in sources:
        (tmp_path / "src" / "csrc" / source).write_text("x\n")
    ran = tmp_path / "ran.txt"
    text = torch_like_ninja(build, sources).replace("/src/", f"{tmp_path}/src/")
    (build / "build.ninja").write_text(text.replace(
        "command = $cxx $in", f"command = echo $out >> {ran} && touch $out").replace(
        "command = nvcc $in", f"command = echo $out >> {ran} && touch $out"))
    timings = tmp_path / "earlier-object-seconds.json"
    timings.write_text(json.dumps(EARLIER))
    launcher = tmp_path / "ninja"
    launcher.write_text(wrapper_script(sys.executable, str(Path(ninja.BIN_DIR) / "ninja")))
    launcher.chmod(0o755)
    done = subprocess.run([launcher, "-j", "1"], cwd=build, env={  # as torch runs it: no -C
        "PATH": "/usr/bin:/bin", TIMINGS: str(timings)}, capture_output=True, text=True,
        check=False)
    assert done.returncode == 0, done.stderr
    assert [Path(line).name for line in ran.read_text().splitlines()] == [
        "b.o", "py.o", "c.o", "a.o"]
    assert ("wheelsmith plan: temp.linux-x86_64-cpython-312: longest first by an earlier run "
            "(4 of 4 objects timed)"
            in done.stderr.splitlines())


OWN_LINES = st.sampled_from([
    "wheelsmith configure-only: /t/build/temp/build.ninja (_C) targets sm_120; not compiled",
    "wheelsmith configure-only: /t/build/temp/build.ninja (_cpu) targets no CUDA; not compiled",
    "FAILED: /t/build/temp/csrc/add.o", "CMake Error at CMakeLists.txt:12 (message):",
    "SystemExit: generating the type stubs failed", "error: command 'ninja' failed",
    "ninja: build stopped: subcommand failed.", "-- Generating done"])
STOP = "wheelsmith configure-only stop: /t/build/cmake/build.ninja: CMake's build stopped " \
       "after its generate step"


@given(before=st.lists(OWN_LINES | st.text(max_size=40), max_size=8),
       after=st.lists(OWN_LINES, max_size=4), stopped=st.booleans())
def test_a_failed_configure_only_build_is_a_result_only_where_the_check_stopped_cmake(
        tmp_path_factory: pytest.TempPathFactory, before: list[str], after: list[str],
        stopped: bool) -> None:
    """Whatever else the log holds (configure-only lines of stood-in torch objects, a later
    failure of the package's own), only the check's own stop of CMake's build makes the
    failed build a configure-only result."""
    work = tmp_path_factory.mktemp("work")
    log = work / "build.log"
    log.write_text("\n".join([*before, *([STOP] if stopped else []), *after]) + "\n")
    report = work / "prebuild.jsonl"
    report.write_text(json.dumps({"extension": "_C", "sass": ["sm_120"]}) + "\n")
    failed = CompileError("the build of x 1 failed with exit code 1")
    guard = Guard(report=report, configure_only=True)

    def outcome(guard: Guard) -> tuple[dict[str, object], ...]:
        return prebuild_outcome(guard, log, failed, ArchSet.parse(["12.0"]), tree=str)

    if stopped:
        assert outcome(guard) == ({"extension": "_C", "sass": ["sm_120"]},)
    else:
        with pytest.raises(CompileError) as raised:
            outcome(guard)
        assert raised.value is failed
    with pytest.raises(CompileError):  # a full build's failure is never a result
        outcome(Guard(report=report))


GENCODE_FORMS = st.sampled_from([
    "-gencode=arch=compute_{c},code=sm_{c}", "-gencode arch=compute_{c},code=sm_{c}",
    "-gencode=arch=compute_{c},code=[compute_{c},sm_{c}]",
    "--generate-code=arch=compute_{c},code=[sm_{c}]", "-arch=sm_{c}"])


@given(st.lists(st.tuples(st.sampled_from(["90", "100", "103", "120", "121"]),
                          st.sampled_from(["", "a", "f"]), GENCODE_FORMS),
                min_size=1, max_size=6),
       st.sets(st.sampled_from(["100", "120", "121"]), min_size=1))
def test_family_targets_are_placed_in_the_build_file_and_nothing_else_changes(
        flags: list[tuple[str, str, str]], family: set[str]) -> None:
    """The build file's targets of the family's base codes become family targets, in every
    form torch and CMake write them; arch-specific and other codes, and words that only look
    like targets (a source named sm_120_kernel.cu), stay as they were."""
    text = "cuda_post_cflags = " + " ".join(form.format(c=code + suffix)
                                            for code, suffix, form in flags)
    text += " -c csrc/sm_120_kernel.cu -o sm_120_kernel.o\n"
    placed = to_family(text, frozenset(family))
    before, after = gencode_targets(text), gencode_targets(placed)

    def made_family(name: str) -> str:
        return f"{name}f" if name.removeprefix("sm_") in family else name

    assert after.sass == {made_family(n) for n in before.sass}
    assert after.ptx == {made_family(n) for n in before.ptx}
    assert placed.endswith(" -c csrc/sm_120_kernel.cu -o sm_120_kernel.o\n")
    assert to_family(placed, frozenset(family)) == placed  # placed once


@given(st.lists(st.one_of(st.none(), st.floats(0, 5000)), min_size=1, max_size=80),
       st.integers(1, 16))
def test_an_estimate_lies_between_the_longest_object_and_a_fair_share_plus_it(
        seconds: list[float | None], jobs: int) -> None:
    timed = [s for s in seconds if s is not None]
    mean = sum(timed) / len(timed) if timed else 0.0
    each = [s if s is not None else mean for s in seconds]
    found = estimate(seconds, jobs)
    assert max(each) - 1e-6 <= found <= sum(each) / jobs + max(each) + 1e-6
    assert found >= sum(each) / jobs - 1e-6


def test_a_build_long_on_this_machine_is_said_with_its_ways_out(tmp_path: Path) -> None:
    """flash-attn's 73 objects at an earlier run's pace on 2 jobs: the estimate and the ways
    out, once, on the plan line."""
    build = tmp_path / "build" / "temp.linux-x86_64-cpython-311"
    sources = [f"k{i}.cu" for i in range(73)]
    ninja_file = build / "build.ninja"
    build.mkdir(parents=True)
    ninja_file.write_text(torch_like_ninja(build, sources))
    names = [u.output.split(f"/{build.name}/", 1)[-1] for u in ninjafile.units(
        ninja_file.read_text())]
    timings = tmp_path / "seconds.json"
    timings.write_text(json.dumps(dict.fromkeys(names[:40], 120.0)))
    said = order_by_earlier_run(ninja_file, {TIMINGS: str(timings), "MAX_JOBS": "2"})
    assert len(names) == 73  # 37 objects of 2 min on the busier job
    assert said == ("longest first by an earlier run (40 of 73 objects timed); about 1 h 14 min "
                    "on 2 jobs by those times"
                    "; long on this machine: a compile farm (--compile-farm URL), a machine with "
                    "more cores, or a published wheel (wheelsmith install) is faster")


TARGET_FORMS = [  # (words, SASS, PTX) of one target flag as packages write it
    (["-gencode", "arch=compute_{c},code=sm_{c}"], {"sm_{c}"}, set()),
    (["-gencode=arch=compute_{c},code=sm_{c}"], {"sm_{c}"}, set()),
    (["--generate-code=arch=compute_{c},code=[compute_{c},sm_{c}]"], {"sm_{c}"}, {"sm_{c}"}),
    (["-arch=sm_{c}"], {"sm_{c}"}, {"sm_{c}"}),
    (["-arch", "sm_{c}"], {"sm_{c}"}, {"sm_{c}"}),
    (["--gpu-architecture=compute_{c}"], set(), {"sm_{c}"}),
]


@given(st.lists(st.lists(st.one_of(
    st.tuples(st.sampled_from(range(len(TARGET_FORMS))), st.sampled_from(["70", "80", "90a"])),
    st.sampled_from(["-O3", "-DX=1", "--use_fast_math", "-Ifoo", "$cuda_post_cflags"])),
    max_size=8), min_size=1, max_size=5),
    st.sets(st.sampled_from(["sm_120", "sm_100a", "sm_90"]), min_size=1),
    st.sets(st.sampled_from(["sm_120"])))
def test_rewrite_leaves_exactly_the_requested_targets_and_every_other_word(
        lines: list[list[object]], sass: set[str], ptx: set[str]) -> None:
    text, others = "", []
    for number, line in enumerate(lines):
        words: list[str] = []
        for item in line:
            if isinstance(item, tuple):
                form, code = TARGET_FORMS[item[0]][0], item[1]
                words += [w.format(c=code) for w in form]
            else:
                words.append(str(item))
        others.append([w for w in words if not any(
            w == f.format(c=c) for f_words, _, _ in TARGET_FORMS for f in f_words
            for c in ("70", "80", "90a"))])
        text += f"v{number} = " + " ".join(words) + "\n"
    flags = gencode.target_flags(frozenset(sass), frozenset(ptx))
    rewritten = gencode.retarget(text, flags)
    had_targets = any(isinstance(i, tuple) for line in lines for i in line)
    assert gencode.gencode_targets(rewritten) == (
        gencode.Targets(frozenset(sass), frozenset(ptx)) if had_targets
        else gencode.Targets(frozenset(), frozenset()))
    for number, (written, kept) in enumerate(zip(rewritten.splitlines(), others, strict=True)):
        assert [w for w in written.removeprefix(f"v{number} = ").split(" ") if w not in flags
                and w] == [w for w in kept if w]
