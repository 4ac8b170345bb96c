"""The fat binaries of an ELF file (untrusted.fatbin): read for the variant of each cubin that
cuobjdump's listing leaves out (a family cubin is listed as `sm_120`). Real objects and shared
objects from the toolchain's nvcc, compressed and not, name every entry as `cuobjdump -elf`
does; any bytes in a `.nv_fatbin` section are read within it, never past it, without an
exception."""

from __future__ import annotations

import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wheelsmith.inventory import Toolkits, family_named, read_device_code, read_toolkits
from wheelsmith.toolchain.env import Toolchain
from wheelsmith.untrusted import fatbin

KERNEL = "__global__ void add(float* x) { x[threadIdx.x] += 1.0f; }\n"


def nvcc(toolchain: Toolchain, out: Path, *flags: str) -> Path:
    source = out.with_suffix(".cu")
    source.write_text(KERNEL)
    subprocess.run([str(toolchain.nvcc), "-c", str(source), "-o", str(out), *flags],
                   check=True, capture_output=True)
    return out


@pytest.mark.toolchain
@pytest.mark.parametrize("compress", ["none", "size"])
def test_every_cubin_and_ptx_is_named_with_its_variant(toolchain: Toolchain, tmp_path: Path,
                                                       compress: str) -> None:
    targets = {"sm_120": "arch=compute_120,code=sm_120",
               "sm_100a": "arch=compute_100a,code=sm_100a",
               "sm_120f": "arch=compute_120f,code=[compute_120f,sm_120f]"}
    for name, gencode in targets.items():
        made = nvcc(toolchain, tmp_path / f"{name}.o", "-gencode", gencode,
                    f"--compress-mode={compress}")
        expected = {("ELF", name)} | ({("PTX", name)} if "compute_" + name[3:] in gencode
                                       .split("code=")[1] else set())
        assert fatbin.targets(made) == frozenset(expected)
    assert toolchain.cuobjdump is not None
    listed = read_device_code(tmp_path / "sm_120f.o", toolchain.cuobjdump)
    assert (listed.sass, listed.ptx) == (frozenset({"sm_120f"}), frozenset({"sm_120f"}))


def test_cuobjdumps_names_keep_their_own_where_the_entries_say_nothing_else() -> None:
    assert family_named(frozenset({"sm_120", "sm_90a"}), None) == {"sm_120", "sm_90a"}
    assert family_named(frozenset({"sm_120", "sm_90a"}),
                        frozenset({("ELF", "sm_120f"), ("ELF", "sm_90a")})) == {
        "sm_120f", "sm_90a"}
    assert family_named(frozenset({"sm_120"}),
                        frozenset({("ELF", "sm_120"), ("ELF", "sm_120f")})) == {
        "sm_120", "sm_120f"}
    assert family_named(frozenset({"sm_120"}), frozenset({("PTX", "sm_120f")})) == {"sm_120"}


def _elf_with_section(name: bytes, data: bytes) -> bytes:
    """A minimal 64-bit little-endian ELF file: a null section, the section-name table and one
    section called `name` holding `data`."""
    names = b"\0.shstrtab\0" + name + b"\0"
    body = names + data
    shoff = 64 + len(body)
    header = (b"\x7fELF" + bytes([2, 1, 1]) + bytes(9) +
              struct.pack("<HHIQQQIHHHHHH", 1, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64, 3, 1))

    def section(name_at: int, kind: int, offset: int, size: int) -> bytes:
        return struct.pack("<IIQQQQIIQQ", name_at, kind, 0, 0, offset, size, 0, 0, 1, 0)
    table = (section(0, 0, 0, 0) + section(1, 3, 64, len(names)) +
             section(11, 1, 64 + len(names), len(data)))
    return header + body + table


@given(st.binary(max_size=4096), st.integers(0, 3))
def test_any_bytes_in_a_fatbin_section_are_read_within_it(data: bytes, magics: int) -> None:
    """Random bytes, and random bytes after container magics (with sizes that point anywhere):
    an answer or None, never an exception or a read past the section."""
    payload = b"".join(struct.pack("<IHHQ", fatbin.MAGIC, 1, 16, len(data) // (magics or 1))
                       for _ in range(magics)) + data
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "x.so"
        path.write_bytes(_elf_with_section(b".nv_fatbin", payload))
        found = fatbin.targets(path)
    assert found is None or all(kind in ("ELF", "PTX") for kind, _ in found)


def test_a_file_without_the_section_has_no_entries_to_show(tmp_path: Path) -> None:
    other = tmp_path / "other.so"
    other.write_bytes(_elf_with_section(b".text", b"\0" * 64))
    assert fatbin.targets(other) is None
    ls = shutil.which("ls")
    assert ls is not None
    assert fatbin.targets(Path(ls)) is None


@pytest.mark.toolchain
@pytest.mark.parametrize("compress", ["none", "size"])
def test_each_cubin_says_which_toolkit_compiled_it(toolchain: Toolchain, tmp_path: Path,
                                                   compress: str) -> None:
    """`.note.nv.cuinfo` (`toolkit=13.0` in cuobjdump -elf): read in place from a cubin the fat
    binary holds as it is, from cuobjdump's extraction of a compressed one; PTX's ISA from its
    entry."""
    made = nvcc(toolchain, tmp_path / "k.o", "-gencode", "arch=compute_120,code=[sm_120,"
                "compute_120]", f"--compress-mode={compress}")
    entries = fatbin.entries(made) or frozenset()
    cubin = next(e for e in entries if e.kind == "ELF")
    assert cubin.compressed is (compress == "size")
    assert fatbin.toolkit_of(made, cubin) == (None if cubin.compressed else (13, 0))
    assert {e.version for e in entries if e.kind == "PTX"} == {(9, 0)}
    assert toolchain.cuobjdump is not None
    assert read_toolkits(made, toolchain.cuobjdump) == Toolkits(frozenset({"13.0"}),
                                                               frozenset({"9.0"}))
