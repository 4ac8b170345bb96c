"""Toolchain profiles: every shipped one valid, `toolchain new` against pip's real resolver,
and a profile with a missing or conflicting pin refused with its line."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from packaging.requirements import Requirement
from packaging.version import Version

from tests.conftest import REPO, SMALL_FS, Served, wheelsmith, wheelsmith_on_small_fs
from wheelsmith.cli import main
from wheelsmith.errors import RecipeError
from wheelsmith.toolchain.profile import (
    INSTALLED,
    Profile,
    applies,
    load_profile,
    load_profiles,
    pinned_version,
)

SHIPPED = {"cu128-torch2.9": "2.9.1", "cu128-torch2.10": "2.10.0", "cu130-torch2.11": "2.11.0",
           "cu130-torch2.12": "2.12.1", "cu130-torch2.13": "2.13.0",
           "cu130-torch2.14": "2.14.1", "cu132-torch2.15": "2.15.0"}


def pins_for(profile: Profile, python: str) -> dict[str, str]:
    """name -> version of the requirement pins that apply on `python`."""
    chosen = {}
    for line in profile.requirements:
        req = Requirement(line)
        if applies(req, python):
            chosen[req.name] = pinned_version(req)
    return chosen


def test_a_profile_for_every_torch_minor_on_pypi_is_shipped() -> None:
    profiles = {p.name: p for p in load_profiles(REPO / "toolchains") if not p.cuda_only}
    assert {name: str(p.torch) for name, p in profiles.items()} == SHIPPED
    for profile in profiles.values():
        # the Pythons torch has wheels for: 2.15 has none for 3.10, only 2.15 has cp315
        assert profile.pythons == (("3.10",) if profile.torch.minor < 15 else ()) + (
            "3.11", "3.12", "3.13", "3.14") + (("3.15",) if profile.torch.minor >= 15 else ())
        assert profile.requirements[0] == f"torch==={profile.torch}"  # never a +cpu variant
        cuda12 = profile.cuda.major == 12
        # PyPI's CUDA 12 nvcc wheel holds only ptxas: those profiles need an installed toolkit
        assert (profile.cuda_home == INSTALLED) is cuda12, profile.name
        for python in profile.pythons:
            pins = pins_for(profile, python)
            assert pins["torch"] == str(profile.torch)
            if not cuda12:
                assert pins["nvidia-cuda-nvcc"] == pins["nvidia-cuda-crt"] == pins["nvidia-nvvm"]


def bad_profile(tmp_path: Path, edit: tuple[str, str]) -> Path:
    text = (REPO / "toolchains" / "cu130-torch2.11.yaml").read_text()
    assert edit[0] in text
    path = tmp_path / "cu130-torch2.11.yaml"
    path.write_text(text.replace(edit[0], edit[1], 1))
    return path


def line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_conflicting_pins_on_one_python_are_refused_with_their_line(tmp_path: Path) -> None:
    path = bad_profile(tmp_path, ("- ninja==1.13.2\n", "- ninja==1.13.2\n- ninja==1.11.1; "
                                                     "python_version == \"3.12\"\n"))
    with pytest.raises(RecipeError) as caught:
        load_profile(path)
    line = line_of(path, "ninja==1.11.1")
    index = next(i for i, r in enumerate(yaml.safe_load(path.read_text())["requirements"])
                 if r.startswith("ninja==1.11.1"))
    assert [p.render() for p in caught.value.problems] == [
        f"{path}:{line}:3: conflicting pins for ninja on Python 3.12: 1.13.2 "
        f"(requirements[{index - 1}]) and 1.11.1\n    hint: keep one; their markers must not "
        "overlap"]


def test_a_profile_without_a_torch_pin_for_one_python_is_refused(tmp_path: Path) -> None:
    path = bad_profile(tmp_path, ("- torch===2.11.0\n",
                                  "- torch===2.11.0; python_version != \"3.13\"\n"))
    with pytest.raises(RecipeError) as caught:
        load_profile(path)
    assert [p.render() for p in caught.value.problems] == [
        f"{path}:{line_of(path, 'requirements:')}:1: no torch pin for Python 3.13\n"
        "    hint: regenerate the profile: wheelsmith toolchain new --torch VERSION --force"]


def test_a_profile_whose_compiler_pins_are_missing_is_refused(tmp_path: Path) -> None:
    path = bad_profile(tmp_path, ("- nvidia-cuda-nvcc==13.0.88\n", ""))
    with pytest.raises(RecipeError) as caught:
        load_profile(path)
    assert len(caught.value.problems) == 5  # one per Python: 3.10 to 3.14
    assert caught.value.problems[0].message == (
        "no CUDA compiler pin for Python 3.10 (cuda_home is nvidia/cu13)")


def test_toolchain_new_pins_torch_and_its_compiler_with_pips_resolver(tmp_path: Path) -> None:
    """The real resolver (metadata only) through the machine's own pip configuration."""
    result = wheelsmith("toolchain", "new", "--torch", "2.11.0", "--python", "3.12",
                        "--dir", str(tmp_path), cwd=REPO)
    assert result.returncode == 0, result.stderr
    path = tmp_path / "cu130-torch2.11.yaml"
    assert result.stdout.startswith(f"{path}: torch 2.11.0, CUDA 13.0, Python 3.12, ")
    assert result.stdout.endswith(" pins; compiler: nvcc from PyPI (nvidia/cu13)\n")
    made = load_profile(path)
    shipped = load_profile(REPO / "toolchains" / "cu130-torch2.11.yaml")
    new, old = pins_for(made, "3.12"), pins_for(shipped, "3.12")
    # torch pins its CUDA libraries exactly, and the compiler is chosen from torch's CUDA:
    # those must come out the same as in the shipped profile (loose deps may move on)
    exact = {n for n in old if n.startswith(("nvidia-", "cuda-", "torch", "triton"))}
    assert {n: new[n] for n in exact} == {n: old[n] for n in exact}
    assert "cuda-toolkit[nvcc,cudart,cccl]==13.0.2" in made.requirements
    assert made.cuda_home == "nvidia/cu13"
    # nothing is written over an existing profile without --force
    again = wheelsmith("toolchain", "new", "--torch", "2.11.0", "--python", "3.12",
                       "--dir", str(tmp_path), cwd=REPO)
    assert again.returncode == 11
    assert f"error: {path} exists" in again.stderr


@pytest.mark.slow  # two resolver runs against the index: about 3 minutes
def test_toolchain_new_covers_the_newest_pythons_torch_has_wheels_for(tmp_path: Path) -> None:
    """cp314 and cp315 asked from pip's resolver: torch 2.14 has cp314 wheels, not cp315."""
    result = wheelsmith("toolchain", "new", "--torch", "2.14.1", "--python", "3.14", "--python",
                        "3.15", "--dir", str(tmp_path), cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert "torch 2.14.1 has no wheel for Python 3.15 on your pip index: left out" in (
        result.stderr)
    made = load_profile(tmp_path / "cu130-torch2.14.yaml")
    assert made.pythons == ("3.14",)
    assert made.platforms == ("x86_64", "aarch64")  # every pin has cp314 aarch64 wheels
    shipped = load_profile(REPO / "toolchains" / "cu130-torch2.14.yaml")
    assert pins_for(made, "3.14") == pins_for(shipped, "3.14")


def test_adding_a_python_to_a_profile_keeps_the_other_pythons_keys(tmp_path: Path) -> None:
    """A key names a venv and an image: the pins a Python gets, not the markers that say so."""
    before = bad_profile(tmp_path, ("- ninja==1.13.2\n", "- ninja==1.13.2; python_version == "
                                    '"3.11" or python_version == "3.12"\n- ninja==1.11.1; '
                                    'python_version == "3.10" or python_version == "3.13"\n'))
    key_311, key_313 = load_profile(before).key("3.11"), load_profile(before).key("3.13")
    after = bad_profile(tmp_path, ("- ninja==1.13.2\n", "- ninja==1.13.2; python_version == "
                                   '"3.11" or python_version == "3.12" or python_version == '
                                   '"3.14"\n- ninja==1.11.1; python_version == "3.10" or '
                                   'python_version == "3.13"\n'))
    assert load_profile(after).key("3.11") == key_311
    assert load_profile(after).key("3.13") == key_313
    assert load_profile(after).key("3.11") != key_313


def test_toolchain_new_for_a_cuda_12_torch_asks_for_an_installed_compiler(
        tmp_path: Path) -> None:
    result = wheelsmith("toolchain", "new", "--torch", "2.10.0", "--cuda", "12.8", "--python",
                        "3.11", "--dir", str(tmp_path), cwd=REPO, check=True)
    path = tmp_path / "cu128-torch2.10.yaml"
    assert result.stdout.endswith("compiler: an installed CUDA toolkit\n")
    text = path.read_text()
    assert ("# Compiler: PyPI's CUDA 12 nvcc wheel (nvidia-cuda-nvcc-cu12 12.8.93) holds no "
            "nvcc, only ptxas: builds use an installed CUDA 12 toolkit.") in text
    assert load_profile(path).cuda_home == INSTALLED


@SMALL_FS
def test_toolchain_new_resolves_from_metadata_in_a_temp_dir_smaller_than_torch(
        tmp_path: Path) -> None:
    """An index without PEP 658 metadata files makes a plain pip dry run download every wheel
    it weighs: torch 2.10 with its CUDA 12 libraries is about 4 GB, and CI ran out of disk on it.
    In 400 MB of temporary space (torch's wheel alone is 915 MB) the profile is still made."""
    temp = tmp_path / "tmp"
    result = wheelsmith_on_small_fs(
        temp, "400m", "toolchain", "new", "--torch", "2.10.0", "--cuda", "12.8", "--python",
        "3.11", "--dir", str(tmp_path), cwd=REPO, env={**os.environ, "TMPDIR": str(temp)})
    assert result.returncode == 0, result.stderr
    assert load_profile(tmp_path / "cu128-torch2.10.yaml").torch == Version("2.10.0")


def test_toolchain_new_refuses_a_torch_that_does_not_exist(tmp_path: Path) -> None:
    result = wheelsmith("toolchain", "new", "--torch", "2.99.0", "--python", "3.11",
                        "--dir", str(tmp_path), cwd=REPO)
    assert result.returncode == 4
    assert result.stderr.splitlines()[-2:-1] == [
        "error: there is no torch 2.99.0 on your pip index for Python 3.11"]
    assert "hint: newest torch releases there: " in result.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("option", "value", "hint"), [
    ("--torch", "banana", "give a torch release, e.g. --torch 2.14.1"),
    ("--torch", "", "give a torch release, e.g. --torch 2.14.1"),
    ("--cuda", "twelve", "e.g. --cuda 12.8"),
])
def test_toolchain_new_refuses_a_value_that_is_not_a_version_by_name(
        tmp_path: Path, option: str, value: str, hint: str) -> None:
    args = {"--torch": "2.14.1", "--cuda": "13.0", option: value}
    result = CliRunner().invoke(main, ["toolchain", "new", *(w for pair in args.items()
                                                              for w in pair),
                                       "--dir", str(tmp_path)])
    assert (result.exit_code, result.stderr) == (
        4, f"error: {option}: '{value}' is not a version\nhint: {hint}\n")
    assert list(tmp_path.iterdir()) == []


def test_toolchain_new_refuses_a_torch_built_for_another_cuda(tmp_path: Path) -> None:
    result = wheelsmith("toolchain", "new", "--torch", "2.10.0", "--cuda", "13.0", "--python",
                        "3.11", "--dir", str(tmp_path), cwd=REPO)
    assert result.returncode == 4
    assert result.stderr.splitlines()[0] == ("error: torch 2.10.0 from your pip index is built "
                                             "with CUDA 12.8, not 13.0")
    assert list(tmp_path.iterdir()) == []


CPU_TORCH = sorted(Path("/opt/wheels").glob("torch-2.13.0+cpu-cp311-*.whl"))


@pytest.mark.skipif(not CPU_TORCH, reason="no local torch 2.13.0+cpu wheel (/opt/wheels) to "
                                         "serve from a local index")
def test_toolchain_new_takes_torch_from_the_given_index(tmp_path: Path,
                                                        http_dir: Served) -> None:
    """A per-accelerator index served on 127.0.0.1 holding a real torch build with a local
    label (the CPU one that lies on this machine): the resolver reads torch from it, and the
    profile would record it — here the build is CPU-only, which is refused by name."""
    files = http_dir.root / "files"
    files.mkdir()
    shutil.copy(CPU_TORCH[0], files / CPU_TORCH[0].name)
    page = http_dir.root / "simple" / "torch"
    page.mkdir(parents=True)
    name = CPU_TORCH[0].name
    (page / "index.html").write_text(f'<a href="../../files/{name.replace("+", "%2B")}">'
                                     f"{name}</a>\n")
    out = tmp_path / "out"
    result = wheelsmith("toolchain", "new", "--torch", "2.13.0+cpu", "--python", "3.11",
                        "--index", f"{http_dir.url}/simple/", "--dir", str(out), cwd=REPO)
    assert result.returncode == 4, result.stderr
    assert result.stderr.splitlines()[0] == (
        f"error: torch 2.13.0+cpu from {http_dir.url}/simple/ is a CPU-only build (it pulls in "
        "no CUDA runtime)")
    assert "/simple/torch/" in http_dir.requests
    assert not out.exists()


def test_the_readme_and_the_recipe_reference_name_exactly_the_shipped_profiles() -> None:
    """docs/recipes.md once named a cu130-torch2.15 that was shipped as cu132-torch2.15."""
    shipped = sorted(p.stem for p in (REPO / "toolchains").glob("cu*-torch*.yaml"))
    table = re.findall(r"^\| `(cu\d+-torch[\d.]+)` \|", (REPO / "README.md").read_text(),
                       re.MULTILINE)
    reference = (REPO / "docs" / "recipes.md").read_text()
    listed = reference[reference.index("Shipped: one profile"):].split("The one used")[0]
    assert (sorted(table), sorted(re.findall(r"`(cu\d+-torch[\d.]+)`", listed))) == (
        shipped, shipped)
