"""A newer release of a shipped recipe (issue 33 item 4): `recipe new NAME==NEWVER` for a NAME
wheelsmith ships starts from the shipped recipe, carries its patches over to the new sdist
(each hunk where its lines stand exactly, or named by file and line where they no longer do),
writes them into the user's repository, and the user's recipe adds the version to the shipped
one instead of hiding it."""

from __future__ import annotations

import difflib
import hashlib
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import REPO, wheelsmith
from wheelsmith.recipes import fetch, repos
from wheelsmith.recipes.model import PatchRef, Release, load_recipe
from wheelsmith.recipes.patch import apply_all
from wheelsmith.recipes.sources import PypiSource
from wheelsmith.scaffold.rebase import carry
from wheelsmith.toolchain.env import Toolchain

SDIST = "104cc47e9101e5401a675fa2b784f2952b9b037f3b1dd83b5ac544394e95d028"
SHIPPED = REPO / "recipes" / "mamba-ssm.yaml"


@pytest.fixture
def no_repo_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(repos.ENV, raising=False)


def test_mamba_ssm_2_3_2_post1_starts_from_the_shipped_recipe_and_its_patches(
        tmp_path: Path, no_repo_variable: None) -> None:
    """The shipped 2.3.1 patches carried over: the arch-list one no longer applies (2.3.2 put
    its CUDA-major block where the CUDA <= 12.9 archs were), named by file and line, and the
    arch-list patch is written from the new setup.py's `cc_flag.append("arch=...")` lines; the
    other three come over, two at new lines."""
    made = wheelsmith("recipe", "new", "mamba-ssm==2.3.2.post1", "--recipes", "mine",
                      "--no-configure", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    lines = made.stdout.splitlines()
    assert lines[0] == f"info: sdist: mamba_ssm-2.3.2.post1.tar.gz sha256 {SDIST}"
    assert lines[3:8] == [  # after setup.py's own lines: the carry reads them first
        f"info: starts from the shipped recipe {SHIPPED} (mamba-ssm 2.3.1): its arch knob, "
        "build variables, memory, host_only and smoke test",
        "todo: carried over: 0001-honour-torch-cuda-arch-list.patch of 2.3.1 no longer "
        "applies: hunk #1 (@@ -172,36 +172,39 @@) of 0001-honour-torch-cuda-arch-list.patch: "
        "setup.py:175 is '# If system CUDA and PyTorch CUDA have different major versions,', "
        "the patch expects 'if bare_metal_version <= Version(\"12.9\"):'",
        "info: carried over: 0002-clear-error-without-nvcc.patch: applies as it is",
        "info: carried over: 0003-never-download-prebuilt-wheel.patch: rebased (hunk #1 on "
        "setup.py -2 line(s))",
        "info: carried over: 0004-cxx20-for-newer-torch-headers.patch: rebased (hunk #1 on "
        "setup.py -6 line(s))"]
    assert "fixed: setup.py:182: hard-coded -gencode list: wrote " \
        "0004-honour-torch-cuda-arch-list.patch: keep the hard-coded -gencode list only when " \
        "TORCH_CUDA_ARCH_LIST is unset, so torch emits exactly the requested archs" in lines
    assert not [line for line in lines if "patch needed" in line]  # the carried ones cover them
    assert lines[-6:] == [
        "wrote mine/recipes/mamba-ssm.yaml",
        *[f"wrote mine/patches/mamba-ssm/2.3.2.post1/{name}" for name in (
            "0001-clear-error-without-nvcc.patch", "0002-never-download-prebuilt-wheel.patch",
            "0003-cxx20-for-newer-torch-headers.patch",
            "0004-honour-torch-cuda-arch-list.patch")],
        "next: wheelsmith build mamba-ssm --recipes mine --check"]
    written, shipped = (load_recipe(tmp_path / "mine" / "recipes" / "mamba-ssm.yaml"),
                        load_recipe(SHIPPED))
    assert (written.arch, written.env, written.memory_per_job_gb, written.smoke_imports,
            written.smoke_gpu, written.summary) == (
        shipped.arch, shipped.env, shipped.memory_per_job_gb, shipped.smoke_imports,
        shipped.smoke_gpu, shipped.summary)
    release = written.release("2.3.2.post1")
    kept = shipped.release("2.3.1").patches[1]  # byte for byte where its lines still stand
    assert release.patches[0].sha256 == kept.sha256
    tree = fetch.fetch(release.source, tmp_path / "src", tmp_path / "cache")
    apply_all(release.patches, tree)  # wheelsmith's exact applier takes every one
    setup = (tree / "setup.py").read_text()
    appends = [line.strip() for line in setup.splitlines() if 'cc_flag.append("-gencode' in line
               or 'cc_flag.append("arch=' in line]
    assert len(appends) == 18
    assert all(a.startswith('if not os.environ.get("TORCH_CUDA_ARCH_LIST"): cc_flag.append(')
               for a in appends)
    assert setup.count('"-std=c++20"') == 2  # the CUDA build's; the ROCm branch keeps its own


def test_a_user_recipe_adds_its_version_to_the_shipped_one(
        tmp_path: Path, no_repo_variable: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """mamba-ssm==2.3.1 does not vanish: the user's mamba-ssm.yaml holds 2.3.2.post1, the
    build of the newest takes it from there, 2.3.1 still from the shipped recipe."""
    mine = tmp_path / "mine"
    (mine / "recipes").mkdir(parents=True)
    text = SHIPPED.read_text().replace('version: "2.3.1"', 'version: "2.3.2.post1"')
    (mine / "recipes" / "mamba-ssm.yaml").write_text(text.split("    patches:")[0])
    listed = wheelsmith("recipes", "--recipes", str(mine), "--json", cwd=tmp_path)
    rows = [(r["file"], r["versions"], r["shadowed_by"])
            for r in json.loads(listed.stdout) if r["name"] == "mamba-ssm"]
    assert rows == [(str(mine / "recipes" / "mamba-ssm.yaml"), ["2.3.2.post1"], None),
                    (str(SHIPPED), ["2.3.1"], None)]
    monkeypatch.setenv(repos.ENV, str(mine))
    assert repos.resolve_recipe("mamba-ssm").file == mine / "recipes" / "mamba-ssm.yaml"
    assert repos.resolve_recipe("mamba-ssm", "2.3.1").file == SHIPPED
    missing = wheelsmith("build", "mamba-ssm==2.2.0", "--recipes", str(mine), cwd=tmp_path)
    assert missing.returncode == 4
    assert missing.stderr.splitlines() == [
        "error: recipe mamba-ssm has no version 2.2.0",
        f"hint: versions in {mine / 'recipes' / 'mamba-ssm.yaml'}: 2.3.2.post1, "
        f"{SHIPPED}: 2.3.1"]


# --- carrying a patch over, on generated files ---------------------------------------------

LINES = st.lists(st.integers(0, 10**6), min_size=12, max_size=60, unique=True).map(
    lambda ns: [f"line {n}" for n in ns])


def _patch(tmp_path: Path, before: list[str], after: list[str]) -> PatchRef:
    text = "A hand-written patch.\n\n" + "".join(difflib.unified_diff(
        [f"{line}\n" for line in before], [f"{line}\n" for line in after],
        "a/src/f.py", "b/src/f.py"))
    path = tmp_path / "0001-edit.patch"
    path.write_text(text)
    return PatchRef(path=path, sha256=hashlib.sha256(text.encode()).hexdigest(),
                    description="edit")


def _release(ref: PatchRef) -> Release:
    return Release(version="1.0", source=PypiSource(project="p", version="1.0", sha256=""),
                   patches=(ref,), env=())


@given(old=LINES, data=st.data())
def test_a_hunk_is_placed_where_its_lines_stand_in_the_new_file(
        tmp_path_factory: pytest.TempPathFactory, old: list[str], data: st.DataObject) -> None:
    """Lines added or removed before and after the edit (the new release's other changes):
    the patch comes over at the new lines and gives the new file the same edit; unchanged
    positions keep the patch byte for byte."""
    tmp = tmp_path_factory.mktemp("carry")
    at = data.draw(st.integers(4, len(old) - 5))
    edited = [*old[:at], "inserted", *old[at + 1:]]
    ref = _patch(tmp, old, edited)
    above = data.draw(st.integers(0, 6))
    cut = data.draw(st.integers(0, at - 4))  # lines of the old file no longer there
    new = [*[f"new {i}" for i in range(above)], *old[cut:]]
    tree = tmp / "tree"
    (tree / "src").mkdir(parents=True)
    (tree / "src" / "f.py").write_text("".join(f"{line}\n" for line in new))
    (done,) = carry(_release(ref), tree)
    want = [*new[:at - cut + above], "inserted", *new[at - cut + above + 1:]]
    assert (tree / "src" / "f.py").read_text().splitlines() == want
    assert done.written is not None
    if above == cut:
        assert done.written.text == ref.path.read_text()
        assert done.line == "0001-edit.patch: applies as it is"
    else:
        assert done.line == f"0001-edit.patch: rebased (hunk #1 on src/f.py {above - cut:+d} " \
                            "line(s))"
        assert done.written.text.startswith("A hand-written patch.\n\n--- a/src/f.py\n")


@given(old=LINES, data=st.data())
def test_a_hunk_whose_lines_changed_is_named_by_file_and_line(
        tmp_path_factory: pytest.TempPathFactory, old: list[str], data: st.DataObject) -> None:
    tmp = tmp_path_factory.mktemp("carry")
    at = data.draw(st.integers(4, len(old) - 5))
    ref = _patch(tmp, old, [*old[:at], "inserted", *old[at + 1:]])
    changed = data.draw(st.integers(at - 3, at + 3))  # a line of the hunk: context or edit
    new = [*old[:changed], "rewritten upstream", *old[changed + 1:]]
    tree = tmp / "tree"
    (tree / "src").mkdir(parents=True)
    (tree / "src" / "f.py").write_text("".join(f"{line}\n" for line in new))
    (done,) = carry(_release(ref), tree)
    assert done.written is None
    assert done.line.startswith("0001-edit.patch of 1.0 no longer applies: hunk #1 (@@ ")
    assert done.line.endswith(f"@@) of 0001-edit.patch: src/f.py:{changed + 1} is 'rewritten "
                              f"upstream', the patch expects '{old[changed]}'")
    assert (tree / "src" / "f.py").read_text().splitlines() == new  # left as it was


@pytest.mark.slow  # mamba-ssm's sample compile: make test's shipped-recipe guard compiles 2.3.1's
@pytest.mark.toolchain
@pytest.mark.build
def test_the_new_versions_check_compiles_its_sample_for_12_0(
        tmp_path: Path, no_repo_variable: None, toolchain: Toolchain) -> None:
    """The recipe recipe new wrote for mamba-ssm 2.3.2.post1, checked as it writes it: setup.py
    up to build.ninja, then one host and one CUDA object compiled, exactly sm_120 (the full
    build to a verified wheel is the slow test below)."""
    made = wheelsmith("recipe", "new", "mamba-ssm==2.3.2.post1", "--recipes", "mine",
                      cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    checked = next(line for line in made.stdout.splitlines()
                   if line.startswith("info: check: "))
    assert checked.startswith("info: check: build.ninja targets selective_scan_cuda: SASS sm_120, "
                              "compiled "), checked


@pytest.mark.slow
@pytest.mark.toolchain
def test_the_new_version_builds_a_verified_wheel_with_no_edit(
        tmp_path: Path, no_repo_variable: None, toolchain: Toolchain) -> None:
    made = wheelsmith("recipe", "new", "mamba-ssm==2.3.2.post1", "--recipes", "mine",
                      "--no-configure", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    built = wheelsmith("build", "mamba-ssm==2.3.2.post1", "--recipes", "mine", "--arch", "12.0",
                       "--json", "--work-dir", "work", "--out", "out", cwd=tmp_path)
    assert built.returncode == 0, built.stderr[-4000:]
    wheel = Path(json.loads(built.stdout)["wheel"])
    assert wheel.name.startswith("mamba_ssm-2.3.2.post1+cu.13.0.torch.2.14.sm.120-")
    verified = wheelsmith("verify", str(wheel), cwd=tmp_path)
    assert verified.returncode == 0, verified.stderr
