"""`toolchain new` records the CPUs its pins have wheels for (pip's resolver, asked with each
CPU's platform tags, from a local index: nothing else is asked), and `build --platform` refuses
a CPU a profile records it was not resolved for, by name."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml

from tests.conftest import add_variant, wheelsmith
from tests.wheels import make_wheel
from wheelsmith.errors import UsageError
from wheelsmith.index.publish import publish
from wheelsmith.toolchain.profile import load_profile
from wheelsmith.toolchain.resolve import Compiler, NewProfileRequest, platforms_of, render

PLATFORMS = "platforms:\n- x86_64\n- aarch64\n"  # as the shipped profiles record them


@pytest.fixture
def local_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """pip's only index: `both-cpus` with wheels for x86-64 and aarch64, `x86-only` without
    an aarch64 one."""
    root = tmp_path / "index"
    for name, machines in (("both-cpus", ("x86_64", "aarch64")), ("x86-only", ("x86_64",))):
        for machine in machines:
            publish(make_wheel(tmp_path, name, tags=f"cp311-cp311-manylinux_2_28_{machine}"),
                    root, channel="local")
    monkeypatch.setenv("PIP_INDEX_URL", f"{root.as_uri()}/local/simple/")
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    return root


def request(tmp_path: Path) -> NewProfileRequest:
    return NewProfileRequest(torch="2.14.1", toolchains_dir=tmp_path / "toolchains")


def test_a_platform_is_recorded_only_where_every_pin_has_its_wheels(
        local_index: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert platforms_of(["both-cpus==1.0.0"], ("3.11",), request(tmp_path),
                        tmp_path) == ["x86_64", "aarch64"]
    with caplog.at_level(logging.WARNING):
        assert platforms_of(["both-cpus==1.0.0", "x86-only==1.0.0"], ("3.11",),
                            request(tmp_path), tmp_path) == ["x86_64"]
    assert caplog.messages == ["no aarch64 in the profile's platforms: Python 3.11: ERROR: No "
                               "matching distribution found for x86-only==1.0.0"]


def test_the_written_profile_carries_its_platforms_and_one_without_them_stays_valid(
        tmp_path: Path) -> None:
    shipped_file = Path(__file__).resolve().parents[2] / "toolchains" / "cu130-torch2.14.yaml"
    shipped = load_profile(shipped_file)
    assert shipped.platforms == ("x86_64", "aarch64")
    older = tmp_path / "cu130-torch2.14.yaml"  # made before platforms were recorded: any is tried
    older.write_text(shipped_file.read_text().replace(PLATFORMS, "", 1))
    assert load_profile(older).platforms is None
    data = yaml.safe_load(render(
        name="cu130-torch2.14", request=request(tmp_path), torch="2.14.1", cuda=shipped.cuda,
        pythons=("3.11",), compiler=Compiler((), "nvidia/cu13", "nvcc from PyPI"),
        requirements=["torch===2.14.1"], platforms=["x86_64", "aarch64"]))
    assert list(data)[:5] == ["name", "torch", "cuda", "pythons", "platforms"]
    assert data["platforms"] == ["x86_64", "aarch64"]


def test_build_platform_refuses_a_cpu_the_profile_was_not_resolved_for(project: Path) -> None:
    add_variant(project, "tiny-ext")
    path = project / "toolchains" / "cu130-torch2.14.yaml"
    path.write_text(path.read_text().replace(PLATFORMS, "platforms: [x86_64]\n", 1))
    assert load_profile(path).platforms == ("x86_64",)
    result = wheelsmith("build", "tiny-ext", "--platform", "aarch64", "--toolchain",
                        "cu130-torch2.14", "--python", "3.11", cwd=project)
    assert result.returncode == UsageError.exit_code, result.stderr
    assert result.stderr.splitlines()[-2:] == [
        "error: the cu130-torch2.14 profile was resolved for x86_64, not aarch64: its pins "
        "lacked aarch64 wheels when it was made",
        "hint: choose another profile with --toolchain, or regenerate it (wheelsmith toolchain "
        "new --torch 2.14.1 --force) once they exist"]
