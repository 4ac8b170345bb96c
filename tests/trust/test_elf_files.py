"""A shared object in a wheel is data its builder chose: reading its dynamic symbols (the
smoke test's evidence of an extension module) never raises, hangs or reads past its bounds,
whatever its header, section table or string table say; a damaged file has no symbols."""

from __future__ import annotations

import shutil
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.wheels import compile_shared
from wheelsmith.untrusted import elf, linkage

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="no gcc on this machine")
SOURCE = "int PyInit__spam(void) { return 0; }\n"


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return compile_shared(tmp_path_factory.mktemp("elf"), SOURCE, soname="_spam.so").read_bytes()


def read_back(tmp_path_factory: pytest.TempPathFactory, data: bytes) -> frozenset[str] | None:
    path = tmp_path_factory.mktemp("damaged") / "_spam.so"
    path.write_bytes(data)
    found = elf.dynamic_symbols(path)
    assert found is None or all(isinstance(name, str) for name in found)
    return found


@given(edits=st.lists(st.tuples(st.integers(0, 1 << 16), st.binary(min_size=1, max_size=8)),
                      max_size=6),
       cut=st.none() | st.integers(0, 1 << 16))
def test_a_damaged_shared_object_is_read_or_has_no_symbols(
        tmp_path_factory: pytest.TempPathFactory, real: bytes,
        edits: list[tuple[int, bytes]], cut: int | None) -> None:
    read_back(tmp_path_factory, damaged(real, edits, cut))


def damaged(data: bytes, edits: list[tuple[int, bytes]], cut: int | None) -> bytes:
    """`data` with each edit's bytes written at its offset, cut at `cut`."""
    changed = bytearray(data)
    for offset, patch in edits:
        if offset < len(changed):
            changed[offset:offset + len(patch)] = patch
    return bytes(changed[:cut])


# e_shoff, e_shentsize, e_shnum of a little-endian ELF64 header
FIELDS = {"shoff": (0x28, "<Q"), "shentsize": (0x3A, "<H"), "shnum": (0x3C, "<H")}


@given(field=st.sampled_from(sorted(FIELDS)), value=st.integers(0, 2**16 - 1)
       | st.sampled_from([2**63 - 1, 2**64 - 1]))
def test_a_section_table_that_does_not_fit_the_file_has_no_symbols(
        tmp_path_factory: pytest.TempPathFactory, real: bytes, field: str, value: int) -> None:
    offset, form = FIELDS[field]
    original = struct.unpack_from(form, real, offset)[0]
    if value == original or value >= 1 << (8 * struct.calcsize(form)):
        return
    data = bytearray(real)
    struct.pack_into(form, data, offset, value)
    found = read_back(tmp_path_factory, bytes(data))
    if field == "shentsize" or (field == "shoff" and value > len(real)):
        assert found is None


def test_the_real_file_exports_its_init(tmp_path_factory: pytest.TempPathFactory,
                                        real: bytes) -> None:
    assert "PyInit__spam" in (read_back(tmp_path_factory, real) or frozenset())


LINKED = """#include <stdio.h>
#include <math.h>
extern double helper_from_elsewhere(double);
__attribute__((weak)) extern void maybe_there(void);
double PyInit__linked(double x) { printf("%f", x); if (maybe_there) maybe_there();
    return cos(x) + helper_from_elsewhere(x); }
"""


@pytest.fixture(scope="module")
def linked(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A real object that links libm and libc (versioned imports), leaves one symbol
    unversioned and undefined, and refers to another weakly."""
    folder = tmp_path_factory.mktemp("linked")
    helper = compile_shared(folder / "helper", "double helper_from_elsewhere(double x) "
                            "{ return x; }\n", soname="libhelper.so")
    return compile_shared(folder, LINKED, links=(helper,), soname="_linked.so").read_bytes()


def test_the_real_file_names_what_it_links_and_the_versions_it_asks(
        tmp_path_factory: pytest.TempPathFactory, linked: bytes) -> None:
    path = tmp_path_factory.mktemp("linkage") / "_linked.so"
    path.write_bytes(linked)
    found = linkage.linkage(path)
    assert found is not None
    assert found.needed[0] == "libhelper.so"
    assert "libc.so.6" in found.needed
    imports = {i.name: i for i in found.imports}
    assert imports["helper_from_elsewhere"] == linkage.Import(
        "helper_from_elsewhere", None, None, weak=False)
    assert imports["maybe_there"].weak
    assert (imports["printf"].library, str(imports["printf"].version).startswith("GLIBC_")) == (
        "libc.so.6", True)
    assert imports["printf"].version in found.versions["libc.so.6"]
    assert "PyInit__linked" not in imports  # defined here: an export, not an import


@given(edits=st.lists(st.tuples(st.integers(0, 1 << 16), st.binary(min_size=1, max_size=8)),
                      max_size=6),
       cut=st.none() | st.integers(0, 1 << 16))
def test_a_damaged_shared_objects_linkage_is_read_or_none(
        tmp_path_factory: pytest.TempPathFactory, linked: bytes,
        edits: list[tuple[int, bytes]], cut: int | None) -> None:
    path = tmp_path_factory.mktemp("damaged") / "_linked.so"
    path.write_bytes(damaged(linked, edits, cut))
    found = linkage.linkage(path)
    assert found is None or (all(isinstance(n, str) for n in found.needed) and
                             all(isinstance(i.name, str) for i in found.imports))


def test_a_version_needs_count_past_its_section_ends_there(
        tmp_path_factory: pytest.TempPathFactory, linked: bytes) -> None:
    """vn_cnt and sh_info far larger than the section holds: the walk ends at its end."""
    path = tmp_path_factory.mktemp("counts") / "_linked.so"
    path.write_bytes(linked)
    with elf.tables(path) as tables:
        assert tables is not None
        verneed = tables.of_type(linkage.SHT_GNU_VERNEED)
        assert verneed is not None
        offset = verneed[4]
    data = bytearray(linked)
    struct.pack_into("<H", data, offset + 2, 0xFFFF)  # vn_cnt of the first entry
    path.write_bytes(bytes(data))
    found = linkage.linkage(path)
    assert found is not None
    assert "libc.so.6" in found.needed
