"""A wheel's provenance is untrusted data (`verify`, `verify --rebuild`): anyone can write a
wheelsmith.json. Its fields that reach a command or a path are checked as plain data, and of
its environment only build knobs are applied by themselves: the rest only when the user
repeats it, what wheelsmith sets never. All of it before anything is prepared or run."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.conftest import add_variant
from tests.hostile import assert_orderly, run_bounded
from tests.trust.test_build_env import KNOB, PROTECTED, SHELL_TEXT
from tests.wheels import make_wheel
from wheelsmith.arch import ArchSet
from wheelsmith.builder.plan import BuildPlan
from wheelsmith.builder.rebuild import judge_env, plan_rebuild
from wheelsmith.errors import UntrustedDataError, VerifyError
from wheelsmith.recipes.repos import resolve_recipe
from wheelsmith.toolchain.env import Toolchain

KEY = "ab" * 32
# a CLI run is a second or two: an eighth of the profile's budget (make fuzz: more)
CLI_EXAMPLES = settings(max_examples=max(4, settings().max_examples // 8))


def provenance(**changes: Any) -> dict[str, Any]:
    """A provenance like a build writes, with `changes` (dotted keys) applied."""
    record: dict[str, Any] = {
        "schema": 1, "key": KEY, "recipe": {"package": "causal-conv1d", "version": "1.7.0"},
        "toolchain": {"name": "cu130-torch2.14", "python": "3.11"}, "archs_requested": "12.0",
        "host_only": [], "extra_env": {}}
    for dotted, value in changes.items():
        *parents, last = dotted.split(".")
        place = record
        for part in parents:
            place = place[part]
        place[last] = value
    return record


def wheel_with(directory: Path, record: dict[str, Any], *, name: str = "causal-conv1d",
               files: dict[str, bytes] | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    dist = name.replace("-", "_")
    contents = {f"{dist}/__init__.py": b"", **(files or {}),
                f"{dist}-1.7.0.dist-info/wheelsmith.json": json.dumps(record).encode()}
    return make_wheel(directory, name, "1.7.0", files=contents)


# --- the environment: judged as data ---------------------------------------------------------

@given(name=PROTECTED, value=SHELL_TEXT, repeat=st.booleans())
def test_a_protected_variable_is_never_applied_even_when_repeated(name: str, value: str,
                                                                  repeat: bool) -> None:
    [entry] = judge_env({name: value}, {name: value} if repeat else {})
    assert entry.refusal is not None
    assert not entry.repeatable
    assert entry.describe().startswith(f"{name}={json.dumps(value)}   refused: ")


FLAGS = st.lists(st.sampled_from(["--split-compile=0", "--split-compile=8", "-lineinfo", "-O3",
                                  "--use_fast_math", "--threads=4", "-DNDEBUG", "-DX=1"]),
                 max_size=4).map(" ".join)
UNSAFE_FLAGS = st.sampled_from(["-ccbin /tmp/x", "-Xcompiler -wrapper,sh,-c,id",
                                "--compiler-bindir=/tmp", "-include /etc/passwd", "$(id)",
                                "-O3;id", "--run", "-o /tmp/x"])


@given(knob=st.sampled_from(["NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS"]), flags=FLAGS,
       unsafe=UNSAFE_FLAGS)
def test_nvcc_flags_apply_only_from_a_vocabulary_that_names_no_program_or_path(
        knob: str, flags: str, unsafe: str) -> None:
    [safe] = judge_env({knob: flags}, {})
    assert (safe.refusal, safe.describe()) == (None, f"{knob}={json.dumps(flags)}   applied: "
                                                     "a build knob")
    [odd] = judge_env({knob: f"{flags} {unsafe}".strip()}, {})
    assert odd.refusal is not None
    assert odd.refusal.endswith("is not an nvcc flag a rebuild applies by itself")
    assert odd.repeatable
    [trusted] = judge_env({knob: f"{flags} {unsafe}"}, {knob: f"{flags} {unsafe}"})
    assert (trusted.refusal, trusted.accepted) == (None, True)


@given(name=KNOB, value=SHELL_TEXT, other=st.text(max_size=8))
def test_any_other_variable_needs_the_same_value_on_the_command_line(
        name: str, value: str, other: str) -> None:
    [entry] = judge_env({name: value}, {})
    if entry.refusal is None:  # a knob whose value is a plain word or safe nvcc flags
        assert not entry.accepted
        return
    assert entry.repeatable
    [accepted] = judge_env({name: value}, {name: value})
    assert (accepted.refusal, accepted.accepted) == (None, True)
    [differs] = judge_env({name: value}, {name: value + other + "x"})
    assert differs.refusal == f"--env gives it {json.dumps(value + other + 'x')}"


@given(name=st.text(min_size=1, max_size=12).filter(lambda n: not n.isidentifier()
                                                     or not n.isascii()))
def test_a_name_that_is_no_variable_is_refused_and_shown_escaped(name: str) -> None:
    [entry] = judge_env({name: "1"}, {name: "1"})
    assert entry.refusal == "it is not a variable's name"
    assert entry.shown().isascii()
    assert entry.shown().isprintable()


# --- verify --rebuild: the real CLI on real wheels with edited provenance ----------------------

ENV_HINT = ("hint: a wheel's provenance is data, never commands: the wheel was built by an older "
            "wheelsmith, or its wheelsmith.json was written by someone else; what chooses "
            "programs, paths, archs or the network is wheelsmith's (docs/cli.md, 'The build's "
            "environment')")


@pytest.mark.parametrize(("name", "why"), [
    ("PYTORCH_NVCC", "wheelsmith sets torch's build settings (torch writes PYTORCH_NVCC into "
                     "build.ninja, where a shell runs it)"),
    ("PATH", "it changes where programs, libraries, headers or modules come from"),
    ("CUDA_HOME", "the CUDA toolkit is the toolchain's (CUDA_HOME is always set from it)"),
    ("LD_PRELOAD", "it changes where programs, libraries, headers or modules come from"),
])
def test_rebuild_refuses_what_wheelsmith_sets_naming_it_before_anything_runs(
        tmp_path: Path, name: str, why: str) -> None:
    marker = tmp_path / "X"
    value = f"touch {marker}; nvcc"
    wheel = wheel_with(tmp_path / "in", provenance(
        extra_env={name: value, "NVCC_APPEND_FLAGS": "--split-compile=0"}))
    work = tmp_path / "work"
    outcome = run_bounded("verify", "--rebuild", str(wheel), "--work-dir", str(work),
                          cwd=tmp_path, seconds=60)
    assert_orderly(outcome, seconds=60)
    assert outcome.returncode == 10
    shown = f"{name}={json.dumps(value)}"
    assert outcome.stderr.splitlines() == [
        f"{wheel.name}: environment from its provenance (what a rebuild does with it):",
        *sorted(['  NVCC_APPEND_FLAGS="--split-compile=0"   applied: a build knob',
                 f"  {shown}   refused: {why}"]),
        f"error: {wheel.name}: its provenance sets {shown}, which a rebuild does not apply: "
        f"{why}", ENV_HINT]
    assert not marker.exists()
    assert not work.exists()  # nothing prepared: no source, no lock, no log
    repeated = run_bounded("verify", "--rebuild", str(wheel), "--env", f"{name}={value}",
                           "--work-dir", str(work), cwd=tmp_path, seconds=60)
    assert repeated.returncode == 4  # repeating it is refused as `build --env` refuses it
    assert repeated.stderr.startswith(f"error: --env {name}: {why}; a build's --env cannot "
                                      "override it\n")
    assert not marker.exists()
    assert not work.exists()


@CLI_EXAMPLES
@given(name=PROTECTED, value=SHELL_TEXT)
def test_rebuild_refuses_any_protected_variable_with_any_value(tmp_path_factory: pytest.
                                                                TempPathFactory, name: str,
                                                                value: str) -> None:
    root = tmp_path_factory.mktemp("generated")
    marker = root / "X"
    wheel = wheel_with(root, provenance(extra_env={name: f"{value}; touch {marker}"}))
    outcome = run_bounded("verify", "--rebuild", str(wheel), "--work-dir", str(root / "work"),
                          cwd=root, seconds=60)
    assert_orderly(outcome, seconds=60)
    assert outcome.returncode == 10
    shown = f"{name}={json.dumps(f'{value}; touch {marker}')}"
    assert f"error: {wheel.name}: its provenance sets {shown}, which a rebuild does not " \
           "apply: " in outcome.stderr
    assert not marker.exists()
    assert not (root / "work").exists()


FIELDS = st.sampled_from(["recipe.package", "recipe.version", "toolchain.name",
                          "toolchain.python", "archs_requested", "key"])
HOSTILE = st.one_of(
    st.sampled_from(["../../../etc/passwd", "/tmp/x", "3.11; touch X", "$(touch X)",
                     "`id`", "x\ny", "\x1b[2Jhi", "a b", "..", "", "12.0;$(id)", "cu130/../x"]),
    SHELL_TEXT.filter(lambda t: any(c in t for c in ";|&$`()<>'\"\\\n *?~#!{}/")),
    st.integers(), st.lists(st.integers(), max_size=2), st.none(),
    st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2))


@given(field=FIELDS, value=HOSTILE)
def test_a_field_that_reaches_a_command_or_path_is_plain_data_or_refused(
        tmp_path_factory: pytest.TempPathFactory, field: str, value: object) -> None:
    assume((field, value) != ("archs_requested", ""))  # a pure wheel's: no archs
    root = tmp_path_factory.mktemp("field")
    wheel = wheel_with(root, provenance(**{field: value}))
    with pytest.raises((VerifyError, UntrustedDataError)) as refused:
        plan_rebuild(wheel, accepted={}, work_dir=root / "work", runner_name="host")
    message = refused.value.message
    # Provenance refuses the shape (exit 21), plan_rebuild what this command takes
    assert message.startswith((f"{wheel.name}: its provenance",
                               f"the provenance of {wheel.name}: "))
    assert field in message or "toolchain profile" in message
    assert message.replace("…", "").isascii()  # what came from the wheel escaped; "…" clips it
    assert message.isprintable()
    assert not (root / "work").exists()


def test_a_hostile_arch_list_is_named_with_the_field(tmp_path: Path) -> None:
    wheel = wheel_with(tmp_path, provenance(archs_requested="12.0;$(touch X)"))
    outcome = run_bounded("verify", "--rebuild", str(wheel), cwd=tmp_path)
    assert outcome.returncode == 10
    assert outcome.stderr.splitlines()[-2] == (
        f'error: {wheel.name}: its provenance\'s archs_requested is "12.0;$(touch X)", not an '
        "arch list")
    assert not (tmp_path / "X").exists()


def test_a_toolchain_that_is_no_profile_here_is_refused_by_name(tmp_path: Path) -> None:
    wheel = wheel_with(tmp_path, provenance(**{"toolchain.name": "cu999-torch9.9"}))
    with pytest.raises(VerifyError, match=r"names the toolchain profile cu999-torch9\.9, "
                                          r"which is not here"):
        plan_rebuild(wheel, accepted={}, work_dir=tmp_path, runner_name="host")


def test_rebuild_env_on_the_command_line_accepts_and_never_adds(tmp_path: Path) -> None:
    wheel = wheel_with(tmp_path, provenance(extra_env={"MYPKG_KNOB": "fast"}))
    refused = run_bounded("verify", "--rebuild", str(wheel), cwd=tmp_path)
    assert refused.returncode == 10
    assert refused.stderr.splitlines()[-2:] == [
        f'error: {wheel.name}: its provenance sets MYPKG_KNOB="fast", which a rebuild does not '
        "apply: it is not a build knob a rebuild applies by itself",
        "hint: if you trust it, repeat it: --env MYPKG_KNOB=fast (the build knobs a rebuild "
        "applies by itself: docs/cli.md, 'The build's environment')"]
    other = run_bounded("verify", "--rebuild", str(wheel), "--env", "MYPKG_KNOB=slow",
                        cwd=tmp_path)
    assert other.returncode == 10
    assert ('error: ' f'{wheel.name}: its provenance sets MYPKG_KNOB="fast", which a rebuild '
            'does not apply: --env gives it "slow"') in other.stderr
    extra = run_bounded("verify", "--rebuild", str(wheel), "--env", "MYPKG_KNOB=fast",
                        "--env", "NEW_KNOB=1", cwd=tmp_path)
    assert extra.returncode == 4
    assert extra.stderr.splitlines()[-2] == (
        "error: --env NEW_KNOB: no wheel's provenance sets it; a rebuild applies exactly what "
        "a provenance sets, nothing added")
    assert "  MYPKG_KNOB=\"fast\"   applied: --env repeats it" in extra.stderr
    with pytest.raises(VerifyError, match=r"^no such wheel file"):
        plan_rebuild(tmp_path / "gone.whl", accepted={}, work_dir=tmp_path, runner_name="host")


@pytest.mark.toolchain
def test_a_wheel_whose_build_would_run_its_command_is_refused_and_nothing_runs(
        project: Path, toolchain: Toolchain) -> None:
    """The whole threat: a provenance whose content key really is the one this machine
    computes for tiny-ext with PYTORCH_NVCC="touch X; nvcc" (torch writes it into build.ninja,
    and ninja runs it through /bin/sh). Without the rule the rebuild would prepare, find the
    key equal, build, and run `touch X`; with it nothing is prepared."""
    add_variant(project, "tiny-ext")
    marker = project / "X"
    injected = (("PYTORCH_NVCC", f"touch {marker}; {toolchain.nvcc}"),)
    recipe = resolve_recipe("tiny-ext")
    key = BuildPlan(recipe=recipe, release=recipe.latest, archs=ArchSet.parse(["12.0"]),
                    toolchain=toolchain, extra_env=injected).key
    wheel = wheel_with(project / "in", provenance(**{
        "key": key, "recipe.package": "tiny-ext", "recipe.version": "0.1.0",
        "toolchain.name": toolchain.name, "toolchain.python": toolchain.python_version,
        "extra_env": dict(injected)}), name="tiny-ext")
    env = {**os.environ, "WHEELSMITH_HOME": str(project)}
    outcome = run_bounded("verify", "--rebuild", str(wheel), "--work-dir",
                          str(project / "work"), cwd=project, env=env, seconds=120)
    assert_orderly(outcome, seconds=120)
    assert outcome.returncode == 10
    assert "its provenance sets PYTORCH_NVCC=" in outcome.stderr
    assert not marker.exists()
    assert not (project / "work").exists()


@pytest.mark.toolchain
def test_plain_verify_shows_the_environment_a_provenance_sets(tmp_path: Path,
                                                               toolchain: Toolchain) -> None:
    """A real shared object with device code (the toolchain's libcufftw: SASS sm_75 only)."""
    so = next(toolchain.cuda_home.glob("lib/libcufftw.so.*"))
    record = provenance(archs_requested="7.5", extra_env={
        "PYTORCH_NVCC": "touch X; nvcc", "NVCC_APPEND_FLAGS": "--split-compile=0",
        "MYPKG_KNOB": "\t$(id)"})  # a terminal's controls: test_json_documents
    wheel = wheel_with(tmp_path, record, files={"causal_conv1d/_C.so": so.read_bytes()})
    outcome = run_bounded("verify", str(wheel), cwd=tmp_path, seconds=120)
    assert_orderly(outcome, seconds=120)
    assert outcome.returncode == 0, outcome.describe()
    said = outcome.stdout.splitlines()  # between them: the release and the binary audit
    assert said[:3] == [f"ok: {wheel.name} carries exactly 7.5",
                        "  the release its provenance records: causal-conv1d 1.7.0",
                        "  causal_conv1d/_C.so: SASS sm_75; PTX -"], said
    assert said[-4:] == [
        "  environment from its provenance (what a rebuild does with it):",
        '    MYPKG_KNOB="\\t$(id)"   refused: it is not a build knob a rebuild applies by '
        "itself",
        '    NVCC_APPEND_FLAGS="--split-compile=0"   applied: a build knob',
        '    PYTORCH_NVCC="touch X; nvcc"   refused: wheelsmith sets torch\'s build settings '
        "(torch writes PYTORCH_NVCC into build.ninja, where a shell runs it)"]
    data = json.loads(run_bounded("verify", str(wheel), "--json", cwd=tmp_path).stdout)
    assert data["wheels"][0]["environment"] == record["extra_env"]


ARCH_TEXT = st.one_of(HOSTILE.filter(lambda v: isinstance(v, str) and v != ""),
                      st.text(alphabet="0123456789.;,+a ", min_size=1, max_size=40),
                      st.integers(20, 4000).map(lambda n: "9" * n + ".0"))


@CLI_EXAMPLES
@given(archs=ARCH_TEXT)
def test_plain_verify_names_a_provenance_arch_list_it_cannot_read_as_the_wheels_field(
        tmp_path_factory: pytest.TempPathFactory, archs: str) -> None:
    """With no --arch, verify checks the archs the provenance records: one that is no arch
    list is the wheel's fault (exit 10, the field named), never a usage error about --arch."""
    try:
        ArchSet.parse([archs])
    except Exception:
        pass
    else:
        assume(False)  # a list it reads: verified against it
    root = tmp_path_factory.mktemp("archs")
    wheel = wheel_with(root, provenance(archs_requested=archs))
    outcome = run_bounded("verify", str(wheel), cwd=root)
    assert_orderly(outcome)
    assert outcome.returncode in (10, 21), outcome.describe()  # 21: a shape it refuses
    error = next(line for line in outcome.stderr.splitlines() if line.startswith("error: "))
    assert error.startswith((f"error: {wheel.name}: its provenance's archs_requested is ",
                             f"error: the provenance of {wheel.name}: ")), error
    assert "--arch" not in outcome.stderr
    assert len(error) < 400


@given(data=st.binary(max_size=64).filter(lambda b: not b.startswith(b"\x7fELF")))
@settings(max_examples=max(3, settings().max_examples // 16))
def test_verify_of_a_shared_object_that_is_no_elf_names_the_member(
        tmp_path_factory: pytest.TempPathFactory, toolchain: Toolchain, data: bytes) -> None:
    """cuobjdump's complaint about a temporary copy was exit 8 naming /tmp/tmpXXXX/0.so: the
    wheel's member is named, as a wheel that fails verification (exit 10)."""
    root = tmp_path_factory.mktemp("not-elf")
    member = "causal_conv1d/_C.cpython-311-x86_64-linux-gnu.so"
    wheel = wheel_with(root, provenance(), files={member: data})
    outcome = run_bounded("verify", str(wheel), cwd=root, seconds=120)
    assert_orderly(outcome, seconds=120)
    assert outcome.returncode == 10, outcome.describe()
    error = next(line for line in outcome.stderr.splitlines() if line.startswith("error: "))
    assert error.startswith(f"error: {member}: cuobjdump cannot read it as a shared object: ")
    assert "/tmp" not in outcome.stderr
