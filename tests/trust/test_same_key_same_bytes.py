"""Same key, same bytes, whatever the compile cache did: `build` with the cache off, cold or
warm gives one wheel, so two users of one content key (one with ccache, the default where it
is installed) agree, `verify --rebuild` passes between them and a second publish of the key is
not refused as other bytes.

The untrusted party here is the machine's compile cache and its configuration (a ccache.conf
that asks for base_dir): nothing it holds or is told may reach the wheel's bytes.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import zipfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.conftest import REPO, add_variant, wheelsmith
from tests.hostile import assert_orderly, run_bounded
from tests.wheels import make_wheel
from wheelsmith.builder import parallel, reproducible
from wheelsmith.builder.rebuild import differences, plan_rebuild
from wheelsmith.toolchain.env import Toolchain

needs_ccache = pytest.mark.skipif(shutil.which("ccache") is None,
                                  reason="needs ccache (.ci/run installs it)")
# -lineinfo puts the compile's file names into the device code, as causal-conv1d's build does
LINEINFO = ('"nvcc": ["-O2"]', '"nvcc": ["-O2", "-lineinfo"]')


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build(cwd: Path, where: Path, recipe: str, cache: str) -> tuple[Path, object]:
    """One build with its work and output directories in `where`: the wheel and the cache's
    outcome."""
    result = wheelsmith("build", recipe, "--arch", "12.0", "--compile-cache", cache,
                        "--work-dir", str(where / "work"), "--out", str(where / "out"), "--json",
                        cwd=cwd, check=True)
    data = json.loads(result.stdout)
    return Path(data["wheel"]), data["run"]["compile_cache"]


@pytest.mark.toolchain
@needs_ccache
def test_one_key_gives_one_sha256_with_the_compile_cache_off_cold_and_warm(
        project: Path, tmp_path: Path, toolchain: Toolchain) -> None:
    """Before the fix: off 0674..., cold and warm 85be... (ccache's base_dir compiled with
    relative paths: `__FILE__` in torch's checks and the -lineinfo file table)."""
    add_variant(project, "tiny-ext", edit=LINEINFO)
    cache = tmp_path / "ccache"
    cache.mkdir()
    # a cache directory whose configuration asks for the rewriting that changed the bytes
    (cache / "ccache.conf").write_text("base_dir = /\n")
    off, none = build(project, project / "off", "tiny-ext", "off")
    cold, missed = build(project, project / "cold", "tiny-ext", str(cache))
    warm, hit = build(project, project / "warm", "tiny-ext", str(cache))
    assert none is None
    assert missed["sources"] == {"csrc/add.cpp": "miss",  # type: ignore[index]
                                 "csrc/add_kernel.cu": "miss"}
    assert hit["sources"] == {"csrc/add.cpp": "hit (direct)",  # type: ignore[index]
                              "csrc/add_kernel.cu": "hit (direct)"}
    assert differences(off, cold) == []
    assert {sha256(off), sha256(cold), sha256(warm)} == {sha256(off)}


@pytest.mark.slow
@needs_ccache
def test_causal_conv1d_for_12_0_has_one_sha256_with_the_compile_cache_off_and_on(
        tmp_path: Path, toolchain: Toolchain) -> None:
    """The issue's case (off 2bab36c1..., on 4a6c8592... before the fix); about 11 minutes on
    2 cores: a build without the cache, a cold one with it, then a warm one."""
    cache = str(tmp_path / "ccache")
    off, cold, warm = (build(REPO, tmp_path / run, "causal-conv1d", spec)[0]
                       for spec, run in (("off", "off"), (cache, "cold"), (cache, "warm")))
    assert differences(off, cold) == []
    assert {sha256(off), sha256(cold), sha256(warm)} == {sha256(off)}



# --- speed by name: nvcc's own split, outside the key, and said so --------------------------


def provenance_of(wheel: Path) -> dict[str, Any]:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/wheelsmith.json"))
        data: dict[str, Any] = json.loads(archive.read(name))
    return data


@pytest.mark.parametrize(("setting", "flags", "mark"), [
    ("auto", "", None),
    ("4", "--ptxas-options=--split-compile=4", None),  # ptxas's split: the same code
    ("auto", "-lineinfo --split-compile=1", None),  # a split into one: no split
    ("fast", "", "built with --split-compile fast (nvcc's own split)"),
    ("auto", "-lineinfo --split-compile=0", "its NVCC flags ask for nvcc's own --split-compile=0"),
    ("off", "-split-compile 8", "its NVCC flags ask for nvcc's own --split-compile=8"),
])
def test_the_provenance_marks_exactly_the_builds_whose_bytes_vary(
        setting: str, flags: str, mark: str | None) -> None:
    chosen = parallel.choose(16, 120.0, 3.0, 1, split=parallel.parse_split(setting))
    promise = reproducible.promise(chosen, {"NVCC_APPEND_FLAGS": flags})
    assert promise == ({} if mark is None else {
        reproducible.NOT_PROMISED: f"{mark}: its device code varies from run to run"})


SETTINGS = st.one_of(st.text(max_size=12), st.sampled_from(["auto", "OFF", " fast ", "Fast"]),
                    # numbers, also in other scripts' digits (`²`: str.isdigit, but no int)
                    st.from_regex(r"\s?[0-9\u00b2\u0663\u0e53]{1,4}\s?", fullmatch=True))


@given(SETTINGS)
def test_a_split_setting_is_one_of_the_named_ones_or_refused_by_name(text: str) -> None:
    try:
        setting = parallel.parse_split(text)
    except parallel.SplitSettingError as exc:
        refused = str(exc)
    else:
        assert setting in ("auto", "off", "fast") or 0 <= int(setting) <= 256
        return
    assert refused == f"'{text}' is not auto, off, fast or a number of workers (0-256)"


@settings(max_examples=max(4, settings().max_examples // 10))  # each runs the CLI
@example("\u00b2")  # a traceback (ValueError) before parse_split took ASCII digits only
@given(SETTINGS.filter(lambda text: "\x00" not in text))
def test_build_answers_any_split_setting_in_order(project: Path, text: str) -> None:
    """Valid or not, the setting is read before anything is built: exit 4 either way here (a
    refused setting, or the recipe that does not exist)."""
    outcome = run_bounded("build", "no-such-recipe", "--split-compile", text, cwd=project,
                          seconds=60)
    assert_orderly(outcome, seconds=60)
    assert outcome.returncode == 4, outcome.describe()


UNPROMISED = ("{}: its bytes are not promised (its provenance says so: nvcc's own "
              "split-compile, by --split-compile fast or in its NVCC flags, varies the device "
              "code from run to run), so a rebuild cannot tell a change made after the build "
              "from that; nothing was built")


def wheel_with(directory: Path, **provenance: object) -> Path:
    """A wheel whose provenance describes a tiny build, plus `provenance`."""
    record = {"key": "0" * 64, "recipe": {"package": "demo", "version": "1.0.0"},
              "toolchain": {"name": "cu130-torch2.14", "python": "3.11"},
              "archs_requested": "12.0", "extra_env": {}, **provenance}
    return make_wheel(directory, files={
        "demo/__init__.py": b"",
        "demo-1.0.0.dist-info/wheelsmith.json": json.dumps(record).encode()})


@pytest.mark.parametrize(("environment", "rebuilt_with"), [
    (None, None), ("fast", "auto"), (" FAST", "auto"), ("4", None), ("off", None)])
def test_a_rebuild_never_takes_the_unreproducible_split_from_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, environment: str | None,
        rebuilt_with: str | None) -> None:
    """None: the build reads $WHEELSMITH_SPLIT_COMPILE itself (a count that matches the
    wheel's machine stays possible)."""
    if environment is not None:
        monkeypatch.setenv(parallel.SPLIT_ENV, environment)
    planned = plan_rebuild(wheel_with(tmp_path), accepted={}, work_dir=tmp_path / "w",
                           runner_name="host")
    assert planned.request.split_compile == rebuilt_with


def test_verify_rebuild_refuses_a_wheel_marked_unpromised_before_building(
        project: Path, tmp_path: Path) -> None:
    """The mark is the wheel's own data: it cannot make a rebuild pass, only refuse (exit 10),
    and its text is not echoed."""
    wheel = wheel_with(tmp_path, **{reproducible.NOT_PROMISED: "$(touch planted) `planted`"})
    result = wheelsmith("verify", "--rebuild", str(wheel), "--work-dir", "w", cwd=project)
    assert result.returncode == 10
    assert result.stderr.splitlines()[-2:] == [
        f"error: {UNPROMISED.format(wheel.name)}",
        f"hint: `wheelsmith verify {wheel.name}` still checks its device code; a build with "
        "the default --split-compile (auto) gives a wheel that --rebuild can check"]
    assert "planted" not in result.stderr + result.stdout
    assert not (project / "w").exists()


@pytest.mark.slow  # a third build of the key; make test builds it cold and warm
@pytest.mark.toolchain
def test_split_compile_fast_builds_the_same_key_and_says_its_bytes_are_not_promised(
        project: Path, toolchain: Toolchain) -> None:
    add_variant(project, "tiny-ext")
    result = wheelsmith("build", "tiny-ext", "--arch", "12.0", "--compile-cache", "off",
                        "--split-compile", "fast", "--json", cwd=project, check=True)
    data = json.loads(result.stdout)
    wheel = Path(data["wheel"])
    assert data["run"]["build"]["split_compile"] == "fast"
    assert data["run"]["build"]["plan"][0].endswith(
        "split-compile fast (nvcc's own: bytes not reproducible)")
    assert provenance_of(wheel)[reproducible.NOT_PROMISED] == (
        "built with --split-compile fast (nvcc's own split): its device code varies from run "
        "to run")
    default = wheelsmith("build", "tiny-ext", "--arch", "12.0", "--compile-cache", "off",
                         "--out", "out-default", "--json", cwd=project, check=True)
    assert json.loads(default.stdout)["provenance"]["key"] == data["provenance"]["key"]
    assert reproducible.NOT_PROMISED not in json.loads(default.stdout)["provenance"]
    assert wheelsmith("verify", str(wheel), cwd=project).returncode == 0
    refused = wheelsmith("verify", "--rebuild", str(wheel), "--work-dir", "w", cwd=project)
    assert refused.returncode == 10
    assert refused.stderr.splitlines()[-2] == f"error: {UNPROMISED.format(wheel.name)}"
    assert not (project / "w" / "rebuilt").exists()
