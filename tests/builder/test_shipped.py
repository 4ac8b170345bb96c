"""A wheel never carries a binary the sdist shipped prebuilt: wheelsmith builds from source."""

from __future__ import annotations

import dataclasses
import subprocess
import zipfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.recipes.test_setup_py_patterns import findings, tree_with
from wheelsmith.builder import resume
from wheelsmith.builder.shipped import record, recorded, refuse_passed_through
from wheelsmith.errors import VerifyError
from wheelsmith.scaffold import report, sdist
from wheelsmith.untrusted.elf import ELF_MAGIC

PAYLOADS = st.binary(min_size=0, max_size=64)
FILES = st.lists(st.tuples(st.booleans(), PAYLOADS), min_size=1, max_size=6)


def shared_object(where: Path, body: str) -> Path:
    """A real x86-64 ELF shared object, compiled by gcc."""
    c_file = where.with_suffix(".c")
    c_file.write_text(body)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(where), str(c_file)], check=True)
    c_file.unlink()
    return where


def wheel_of(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def test_a_prebuilt_shared_object_the_sdist_ships_is_refused_in_the_wheel(tmp_path: Path) -> None:
    source, work = tmp_path / "src" / "pkg-1.0", tmp_path
    (source / "pkg").mkdir(parents=True)
    prebuilt = shared_object(source / "pkg" / "libprebuilt_cuda120.so", "int f(void){return 1;}")
    (source / "pkg" / "__init__.py").write_text("")
    record(source, work)
    built = shared_object(tmp_path / "built.so", "int f(void){return 2;}")
    wheel = wheel_of(tmp_path / "pkg-1.0-py3-none-any.whl", {
        "pkg/__init__.py": b"", "pkg/_C.so": built.read_bytes(),
        "pkg/libcuda120.so": prebuilt.read_bytes()})
    with pytest.raises(VerifyError) as refused:
        refuse_passed_through(wheel, work)
    assert refused.value.message == (
        "pkg-1.0-py3-none-any.whl holds 1 binary file(s) the sdist ships prebuilt, byte for "
        "byte: pkg/libcuda120.so (the sdist's pkg/libprebuilt_cuda120.so); nothing in this "
        "build compiled them")
    refuse_passed_through(wheel_of(tmp_path / "ok.whl", {"pkg/_C.so": built.read_bytes(),
                                                        "pkg/__init__.py": b""}), work)


def test_a_link_to_a_binary_outside_the_source_is_not_recorded(tmp_path: Path) -> None:
    outside = shared_object(tmp_path / "outside.so", "int g(void){return 3;}")
    source = tmp_path / "src" / "pkg-1.0"
    source.mkdir(parents=True)
    (source / "linked.so").symlink_to(outside)
    record(source, tmp_path)
    assert recorded(tmp_path) == {}


def test_without_a_record_nothing_is_refused(tmp_path: Path) -> None:
    """A source prepared elsewhere (the container's own run: the host checks its wheel)."""
    wheel = wheel_of(tmp_path / "w.whl", {"a.so": ELF_MAGIC + b"x"})
    refuse_passed_through(wheel, tmp_path)


@given(shipped=FILES, fresh=FILES, taken=st.lists(st.integers(0, 5), max_size=6))
def test_only_elf_members_that_are_byte_for_byte_a_shipped_elf_file_are_refused(
        tmp_path_factory: pytest.TempPathFactory, shipped: list[tuple[bool, bytes]],
        fresh: list[tuple[bool, bytes]], taken: list[int]) -> None:
    work = tmp_path_factory.mktemp("work")
    source = resume.source_dir(work) / "pkg-1.0"
    source.mkdir(parents=True)

    def content(elf: bool, payload: bytes) -> bytes:
        return ELF_MAGIC + payload if elf else payload.lstrip(b"\x7f")

    for at, (elf, payload) in enumerate(shipped):
        (source / f"f{at}.bin").write_bytes(content(elf, payload))
    record(source, work)
    members = {f"new{at}.so": content(elf, payload) for at, (elf, payload) in enumerate(fresh)}
    members |= {f"old{at}.so": content(*shipped[at]) for at in taken if at < len(shipped)}
    shipped_elf = {content(*f) for f in shipped if f[0]}
    expected = sorted(name for name, data in members.items() if data in shipped_elf)
    wheel = wheel_of(work / "w.whl", members)
    if not expected:
        refuse_passed_through(wheel, work)
        return
    with pytest.raises(VerifyError) as refused:
        refuse_passed_through(wheel, work)
    assert f"holds {len(expected)} binary file(s)" in refused.value.message
    for name in expected[:5]:
        assert f"{name} (the sdist's " in refused.value.message


def test_recipe_new_names_the_prebuilt_binaries_an_sdist_ships(tmp_path: Path) -> None:
    """bitsandbytes 0.42.0's layout: setup.py packs the libraries the sdist holds."""
    tree = tree_with(tmp_path, "from setuptools import setup\nsetup(name='demo', "
                     "package_data={'': ['*.so']})\n", "demo/__init__.py")
    for version in ("110", "118", "120", "121"):
        shared_object(tree / "demo" / f"libdemo_cuda{version}.so",
                      f"int v(void) {{ return {version}; }}")
    (tree / "demo" / "not_elf.so").write_text("a text file with a .so name")
    found = dataclasses.replace(findings(tree), prebuilt=sdist.prebuilt_binaries(tree))
    lines = report.report_lines(found)
    assert "demo/libdemo_cuda110.so: patch needed: the sdist ships 4 prebuilt binary file(s) " \
           "(demo/libdemo_cuda110.so, demo/libdemo_cuda118.so, demo/libdemo_cuda120.so, ...): " \
           "a wheel that holds one is refused (wheelsmith builds from source): patch them out " \
           "and build them from their sources, or the package has no source build" in lines
    assert "patches: none of the standard ones is needed" not in lines
    assert "patches: none of the standard ones is needed" in report.report_lines(findings(tree))
