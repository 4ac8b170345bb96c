"""Resumable builds: a killed build goes on from the objects it finished; an object counts only
once its compiler exited 0 (ninja's log decides), so a half-written one is compiled again."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import add_variant
from tests.leftovers import new_env
from tests.resumes import kill_after_first_object, log_entries, ninja_steps, real_path
from wheelsmith import cmd, errors
from wheelsmith.builder import reproducible, resume
from wheelsmith.builder.compile import progress_parser
from wheelsmith.builder.prebuild import already_built
from wheelsmith.files import exclusive_lock
from wheelsmith.toolchain.env import Toolchain

NINJA = shutil.which("ninja", path=str(Path(sys.executable).parent)) or shutil.which("ninja")
DAY = 86400.0


def prepared(work_dir: Path, slug: str, key: str) -> Path:
    root = resume.source_dir(work_dir / slug) / "pkg-1.0"
    root.mkdir(parents=True)
    resume.mark_prepared(work_dir / slug, key, root)
    return root


def test_the_tree_an_unfinished_build_left_is_used_again_for_its_key_only(
        tmp_path: Path) -> None:
    root = prepared(tmp_path, "pkg-1.0-aaaa", "a" * 64)
    assert resume.kept_source(tmp_path / "pkg-1.0-aaaa", "a" * 64) == root
    assert resume.kept_source(tmp_path / "pkg-1.0-aaaa", "b" * 64) is None
    assert resume.kept_source(tmp_path / "nothing-here", "a" * 64) is None


def test_a_tree_whose_patching_did_not_finish_is_not_used(tmp_path: Path) -> None:
    work = tmp_path / "pkg-1.0-aaaa"
    (resume.source_dir(work) / "pkg-1.0").mkdir(parents=True)  # fetched; killed while patching
    assert resume.kept_source(work, "a" * 64) is None


def test_a_finished_build_leaves_nothing_to_resume(tmp_path: Path) -> None:
    kept = prepared(tmp_path, "kept", "a" * 64)
    resume.finished(tmp_path / "kept", keep_source=True)  # --keep-work: there to look at
    assert kept.is_dir()
    assert resume.kept_source(tmp_path / "kept", "a" * 64) is None
    prepared(tmp_path, "gone", "b" * 64)
    resume.finished(tmp_path / "gone", keep_source=False)
    assert not resume.source_dir(tmp_path / "gone").exists()


def test_old_unfinished_trees_of_other_keys_are_pruned_unless_a_build_holds_them(
        tmp_path: Path) -> None:
    for slug in ("old", "old-but-building", "recent", "mine"):
        prepared(tmp_path, slug, slug.ljust(64, "0"))
    now = time.time()
    for slug in ("old", "old-but-building", "mine"):
        marker = resume.source_dir(tmp_path / slug) / resume.MARKER
        os.utime(marker, (now - 30 * DAY, now - 30 * DAY))
    with exclusive_lock(tmp_path / "old-but-building.lock"):
        held = subprocess.run(
            [sys.executable, "-c", "import sys; from pathlib import Path; "
             "from wheelsmith.builder import reproducible, resume; "
             "print(*[p.name for p in resume.prune(Path(sys.argv[1]), keep='mine')])",
             str(tmp_path)], capture_output=True, text=True, check=True)
    assert held.stdout.split() == ["old"]  # the lock of a running build is another process's
    assert sorted(p.parent.parent.name for p in tmp_path.glob(f"*/src/{resume.MARKER}")) == [
        "mine", "old-but-building", "recent"]


def test_progress_counts_the_compiles_ninja_logged_as_finished(tmp_path: Path) -> None:
    root = prepared(tmp_path, "pkg", "a" * 64)
    assert resume.progress(tmp_path / "pkg") is None  # stopped before compiling
    build = root / "build" / "temp.linux-x86_64-cpython-311"
    build.mkdir(parents=True)
    (build / "build.ninja").write_text("".join(
        f"build {build}/{name}.o: {rule} {root}/{name}.cu\n"
        for name, rule in (("a", "cuda_compile"), ("b", "cuda_compile"), ("c", "compile"))))
    (build / ".ninja_log").write_text(f"# ninja log v7\n1\t9\t5\t{build}/b.o\tabc\n")
    assert resume.progress(tmp_path / "pkg") == (1, 3)
    assert resume.progress_text(tmp_path / "pkg") == "1/3 objects"
    with (build / ".ninja_log").open("a") as log:
        log.writelines(f"2\t9\t5\t{build}/{name}.o\tabc\n" for name in "ac")
    assert resume.progress_text(tmp_path / "pkg") == (  # cut in verify or smoke
        "3/3 objects: all compiled, stopped in the checks after them")


def test_run_facts_say_how_long_each_object_took_longest_first(tmp_path: Path) -> None:
    root = prepared(tmp_path, "pkg", "a" * 64)
    build = root / "build" / "temp.linux-x86_64-cpython-311"
    (build / "csrc").mkdir(parents=True)
    (build / "build.ninja").write_text("".join(
        f"build {build}/csrc/{name}.o: {rule} {root}/csrc/{name}.cu\n"
        for name, rule in (("fwd", "cuda_compile"), ("bwd", "cuda_compile"), ("py", "compile")))
        + f"build {build}/stamp: phony\n")
    (build / ".ninja_log").write_text(  # bwd compiled twice (a resumed build): the last counts
        f"# ninja log v7\n0\t61000\t5\t{build}/csrc/bwd.o\tabc\n"
        f"0\t2500\t5\t{build}/csrc/fwd.o\tabc\n0\t9000\t5\t{build}/stamp\tabc\n"
        f"100\t170100\t5\t{build}/csrc/bwd.o\tabc\n3000\t45250\t5\t{build}/csrc/py.o\tabc\n")
    assert resume.object_seconds(root) == {
        "csrc/bwd.o": 170.0, "csrc/py.o": 42.25, "csrc/fwd.o": 2.5}
    assert list(resume.object_seconds(root)) == ["csrc/bwd.o", "csrc/py.o",
                                                             "csrc/fwd.o"]


def test_the_newest_run_of_the_same_recipe_and_version_gives_the_earlier_times(
        tmp_path: Path) -> None:
    def ran(slug: str, seconds: dict[str, float], age_s: float) -> None:
        (tmp_path / slug).mkdir()
        reproducible.write_run(tmp_path / slug, {"build": {"object_seconds": seconds}})
        when = time.time() - age_s
        os.utime(tmp_path / slug / reproducible.RUN_FILE, (when, when))

    ran("causal-conv1d-1.7.0-aaaaaaaaaaaa", {"csrc/bwd.o": 170.0}, age_s=600)  # sm_120, older
    ran("causal-conv1d-1.7.0-bbbbbbbbbbbb", {"csrc/bwd.o": 90.0}, age_s=60)  # sm_90, newer
    ran("causal-conv1d-1.6.0-cccccccccccc", {"csrc/old.o": 1.0}, age_s=0)  # another version
    ran("causal-conv1d-1.7.0-dddddddddddd", {}, age_s=0)  # configure-only: nothing timed
    this = tmp_path / "causal-conv1d-1.7.0-eeeeeeeeeeee"
    assert resume.earlier_object_seconds(this) == {"csrc/bwd.o": 90.0}
    assert resume.earlier_object_seconds(tmp_path / "mamba-ssm-2.2.6-eeeeeeeeeeee") == {}


@pytest.mark.skipif(NINJA is None, reason="no ninja in this environment (pip install ninja)")
def test_ninja_counts_only_objects_whose_compiler_exited_0(tmp_path: Path) -> None:
    assert NINJA is not None
    for name in "abc":
        (tmp_path / f"{name}.c").write_text(f"int {name};\n")
    ninja_file = tmp_path / "build.ninja"
    ninja_file.write_text("rule compile\n  command = cp $in $out\n" + "".join(
        f"build {tmp_path}/{name}.o: compile {tmp_path}/{name}.c\n" for name in "abc"))
    subprocess.run([NINJA, "-C", str(tmp_path), f"{tmp_path}/a.o"], check=True,
                   capture_output=True)
    (tmp_path / "b.o").write_bytes(b"\x7fELF half-writ")  # a compiler killed mid-write
    argv = ["-C", str(tmp_path)]
    assert already_built(NINJA, argv, ninja_file) == "1/3 objects already built"
    run = subprocess.run([NINJA, *argv], check=True, capture_output=True, text=True)
    assert re.findall(r"^\[\d+/(\d+)\]", run.stdout, re.MULTILINE)[-1] == "2"
    assert (tmp_path / "b.o").read_text() == "int b;\n"  # compiled again, not trusted


def slow_objects(directory: Path, count: int, seconds: float) -> None:
    """A build.ninja of `count` objects whose commands take `seconds` each."""
    (directory / "build.ninja").write_text(
        f"rule compile\n  command = sleep {seconds} && touch $out\n"
        + "".join(f"build {directory}/{n}.o: compile\n" for n in range(count)))


@pytest.mark.skipif(NINJA is None, reason="no ninja in this environment (pip install ninja)")
@pytest.mark.parametrize(("limit", "drain", "finished"), [(4, 3.5, 2), (0.5, 0, 0)])
def test_a_time_limit_lets_the_compiles_in_flight_finish_and_starts_no_more(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, limit: float, drain: float,
        finished: int) -> None:
    """Two compiles of 2 s in flight when the drain begins (0.5 s in): both finish and enter
    ninja's log, none of the other four starts, and the build ends when they do, not at the
    limit. Without a drain the limit cuts both, and their work is lost."""
    assert NINJA is not None
    slow_objects(tmp_path, 6, 2)
    started = time.monotonic()
    with pytest.raises(cmd.TimeLimitReached, match=rf"^the time limit of {limit:g} s ran out$"), \
            cmd.time_limit(limit, drain=drain):
        cmd.run([NINJA, "-j", "2"], cwd=tmp_path)
    took = time.monotonic() - started
    made = sorted(p.name for p in tmp_path.glob("*.o"))
    assert len(made) == finished
    log = tmp_path / ".ninja_log"  # ninja writes it with the first finished object
    assert sorted(Path(o).name for o in (log_entries(log) if log.exists() else {})) == made
    if drain:
        assert 2 <= took < 3.5
        assert caplog.messages[-1] == ("time limit: 3.5 s left: no new compile starts; those "
                                       "running may finish")


def run_while_draining(argv: list[str | Path], cwd: Path, **options: Any) -> cmd.Completed:
    """cmd.run started 0.3 s into a time limit of 30 s whose drain began at 0.1 s."""
    with cmd.time_limit(30, drain=29.9):
        time.sleep(0.3)
        return cmd.run(argv, cwd=cwd, **options)


def test_a_command_started_while_a_time_limit_drains_runs_to_its_end(tmp_path: Path) -> None:
    """The drain stops compiles only: what runs after the compile stage (the wheel's verify,
    the auditwheel toolchain's pip, the smoke test) started during a drain on the H200 and
    failed at once, and the finished flash-attn build ended `partial (73/73 objects)`."""
    done = run_while_draining([sys.executable, "-c", "print('imported')"], tmp_path,
                              stream=False)
    assert done.stdout == "imported\n"


def test_a_command_that_fails_while_a_time_limit_drains_reports_its_own_failure(
        tmp_path: Path) -> None:
    """Only a command the drain stopped part of is the time limit's doing; a smoke test that
    fails during the drain says why, not `the time limit ran out`."""
    script = "import sys; sys.exit('no kernel image is available')"
    with pytest.raises(errors.VerifyError) as failed:
        run_while_draining([sys.executable, "-c", script], tmp_path, what="the smoke test",
                           error=errors.VerifyError)
    assert str(failed.value) == "the smoke test failed with exit code 1"
    assert failed.value.tail == ["no kernel image is available"]


@pytest.mark.skipif(NINJA is None, reason="no ninja in this environment (pip install ninja)")
def test_a_ninja_started_while_a_time_limit_drains_compiles_nothing(tmp_path: Path) -> None:
    assert NINJA is not None
    slow_objects(tmp_path, 2, 0.1)
    with pytest.raises(cmd.TimeLimitReached, match=r"^the time limit of 30 s ran out$"):
        run_while_draining([NINJA, "-j", "2"], tmp_path)
    assert not list(tmp_path.glob("*.o"))


@pytest.mark.skipif(NINJA is None, reason="no ninja in this environment (pip install ninja)")
def test_the_progress_bar_does_not_count_a_compile_that_failed(tmp_path: Path) -> None:
    """ninja counts a step when it ends, failed or not: the compile a drain stopped made the
    H200 run's bar say 36/73 where ninja's log, and the final line, had 35."""
    assert NINJA is not None
    (tmp_path / "build.ninja").write_text(
        "rule ok\n  command = touch $out\nrule refused\n  command = false\n"
        "build a.o: ok\nbuild b.o: refused\nbuild c.o: ok\n")
    shown: list[tuple[int, int]] = []
    with pytest.raises(errors.CommandError):
        cmd.run([NINJA, "-j", "1", "-k", "0"], cwd=tmp_path,
                on_line=progress_parser(lambda done, total: shown.append((done, total))))
    assert shown[-1] == (2, 3)
    assert max(done for done, _ in shown) == 2


@pytest.mark.toolchain
def test_a_build_killed_after_its_first_object_compiles_only_the_rest(
        project: Path, toolchain: Toolchain) -> None:
    add_variant(project, "tiny-ext")
    mark, env = new_env(WHEELSMITH_COMPILE_CACHE="off")  # watch real compilers
    args = [sys.executable, "-m", "wheelsmith", "build", "tiny-ext", "--jobs", "1",
            "--work-dir", "work", "--json"]
    log = kill_after_first_object(args, project, env, mark, project / "work")
    done = log_entries(log)
    ninja_text = (log.parent / "build.ninja").read_text()
    objects = re.findall(r"^build (\S+\.o): (?:cuda_)?compile ", ninja_text, re.MULTILINE)
    assert len(objects) == 2
    assert "ccache" not in ninja_text  # compile cache off: torch must not bring one of its own
    assert len(done) == 1, done  # --jobs 1: the second was compiling when the kill came
    (missing,) = [o for o in objects if o not in done]
    real_path(missing, log).write_bytes(b"\x7fELF cut off by the kill")  # as a killed compiler

    second = subprocess.run(args, cwd=project, env=env, capture_output=True, text=True,
                            check=False)
    assert second.returncode == 0, second.stderr
    assert "==> resuming: 1/2 objects already built" in re.sub(
        r"\[[^]]*\] ", "", second.stderr)
    build_log = next((project / "work").glob("tiny-ext-*/build.log"))
    assert ninja_steps(build_log) == 1  # ninja compiled exactly the missing object
    run = json.loads(second.stdout)["run"]
    assert run["smoke"][0] == "imported tiny_ext"  # the recompiled object links and loads


def test_a_cmake_build_tree_is_resumed_and_timed_like_torchs(tmp_path: Path) -> None:
    """CMake's build.ninja in build/cmake (objects relative to it, per-target rules): the
    progress of an unfinished build and the run facts' seconds read its ninja log too."""
    root = prepared(tmp_path, "pkg", "a" * 64)
    build = root / "build" / "cmake"
    build.mkdir(parents=True)
    objects = {name: f"CMakeFiles/k.dir/csrc/{name}" for name in ("a.cu.o", "b.cu.o", "c.cpp.o")}
    (build / "build.ninja").write_text("include CMakeFiles/rules.ninja\n" + "".join(
        f"build {obj}: {'CUDA' if '.cu.' in obj else 'CXX'}_COMPILER__k_unscanned_Release "
        f"{root}/csrc/{name.removesuffix('.o')} || cmake_object_order_depends_target_k\n"
        f"  FLAGS = -O3\n\n" for name, obj in objects.items())
        + "build libk.so: CXX_SHARED_LIBRARY_LINKER__k_Release " + " ".join(objects.values()))
    (build / ".ninja_log").write_text(f"# ninja log v7\n0\t61000\t5\t{objects['b.cu.o']}\tabc\n"
                                      "0\t9000\t5\tlibk.so\tabc\n")
    assert resume.progress_text(tmp_path / "pkg") == "1/3 objects"
    assert resume.object_seconds(root) == {"CMakeFiles/k.dir/csrc/b.cu.o": 61.0}
