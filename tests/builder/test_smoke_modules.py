"""Which shared objects of a wheel the smoke test imports, and by what name: every one its RECORD
lists that is a Python extension module, told from shared libraries by evidence (an exported
PyInit_<name>, read from real ELF files gcc links here), never by its name alone."""

from __future__ import annotations

import csv
import io
import random
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.wheels import compile_shared
from wheelsmith.builder.modules import Compiled, Library, Module, compiled, installed, module_name
from wheelsmith.untrusted import elf

IDENTIFIER = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True)
FOLDERS = st.lists(IDENTIFIER, max_size=3)
TAGS = ["cpython-311-x86_64-linux-gnu", "cpython-312-aarch64-linux-gnu", "abi3",
        "pypy39-pp73-x86_64-linux-gnu"]
NOT_A_PACKAGE = st.sampled_from(["tiny_ext.libs", "tiny_ext-0.1.0.dist-info", "bin-x",
                                 "tiny_ext-0.1.0.data"])


@dataclass(frozen=True)
class Entry:
    """One shared object of a generated RECORD, and what it is by construction."""

    path: str
    module: str | None  # None: a library
    why: str = ""
    exports: frozenset[str] = frozenset()


@st.composite
def entries(draw: st.DrawFn) -> Entry:
    folders, stem = draw(FOLDERS), draw(IDENTIFIER)
    dotted, where = ".".join([*folders, stem]), "/".join([*folders, ""])
    kind = draw(st.sampled_from(["module", "library", "pyd", "versioned", "outside"]))
    suffix = draw(st.sampled_from(["so", *(f"{tag}.so" for tag in TAGS)]))
    if kind == "module":  # it may export others' too
        return Entry(f"{where}{stem}.{suffix}", dotted, exports=frozenset({
            f"PyInit_{stem}", "PyInit_other", "helper"}))
    if kind == "library":  # ctypes' library built as an Extension has the ABI tag too
        return Entry(f"{where}{stem}.{suffix}", None, f"it exports no PyInit_{stem}",
                     frozenset({f"PyInit_{stem}x", f"PyInit{stem}", "main"}))
    if kind == "pyd":  # a PE file, not read: a module by its name
        return Entry(f"{where}{stem}.{draw(st.sampled_from(['', 'cp311-win_amd64.']))}pyd",
                     dotted)
    if kind == "versioned":
        return Entry(f"{where}lib{stem}.so.{draw(st.integers(0, 9))}", None,
                     "its path names no module a dotted name imports")
    return Entry(f"{draw(NOT_A_PACKAGE)}/{stem}.{suffix}", None,
                 "its path names no module a dotted name imports",
                 frozenset({f"PyInit_{stem}"}))


def record_of(paths: list[str]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for path in paths:
        writer.writerow([path, "sha256=AAAA", "12"])
    writer.writerow(["tiny_ext-0.1.0.dist-info/RECORD", "", ""])
    return out.getvalue()


@given(found=st.lists(entries(), max_size=12,
                      unique_by=(lambda e: e.path, lambda e: e.module or e.path)),
       others=st.lists(st.sampled_from(["tiny_ext/__init__.py", "tiny_ext/so.py",
                                        "tiny_ext/data.json", "tiny_ext-0.1.0.dist-info/WHEEL",
                                        "tiny_ext/sofa.txt", "bin/tool"]), unique=True),
       seed=st.integers(0, 2**32))
def test_a_record_listings_shared_objects_are_its_modules_and_libraries(
        found: list[Entry], others: list[str], seed: int) -> None:
    paths = [e.path for e in found] + others
    random.Random(seed).shuffle(paths)
    exports = {e.path: e.exports for e in found}
    asked: list[tuple[str, str]] = []

    def evidence(path: str, symbol: str) -> bool:
        asked.append((path, symbol))
        return symbol in exports[path]

    assert compiled(record_of(paths), evidence) == Compiled(
        tuple(sorted((Module(e.module, e.path) for e in found if e.module),
                     key=lambda m: m.name)),
        tuple(sorted((Library(e.path, e.why) for e in found if e.module is None),
                     key=lambda library: library.path)))
    # each `.so` whose path names a module is judged by what it exports, nothing else is
    assert sorted(asked) == sorted(
        (e.path, f"PyInit_{e.path.rsplit('/', 1)[-1].split('.')[0]}") for e in found
        if e.path.endswith(".so") and not e.path.startswith(("tiny_ext.", "tiny_ext-", "bin-x"))
        and ".so." not in e.path)


INIT_C = {"PyInit__C"}


@pytest.mark.parametrize(("path", "exports", "module"), [
    ("tiny_ext/_C.cpython-311-x86_64-linux-gnu.so", INIT_C, "tiny_ext._C"),
    ("tiny_ext/_C.cpython-311-x86_64-linux-gnu.so", {"PyInit_C", "_C"}, None),
    ("flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so", {"PyInit_flash_attn_2_cuda"},
     "flash_attn_2_cuda"),
    ("pkg/sub/_ops.abi3.so", {"PyInit__ops"}, "pkg.sub._ops"),
    ("tiny_cmake/libtinycmake.cpython-311-x86_64-linux-gnu.so", {"tiny_add_one"}, None),
    ("pkg/_native.so", {"PyInit__native"}, "pkg._native"),
    ("pkg/_native.so", {"PyInit_native", "PyInit__nativeX"}, None),
    ("pkg/libfoo.so", {"foo_add"}, None),
    ("pkg.libs/libgomp-a34b3233.so.1", set(), None),
    ("pkg/libcudart.so.13", set(), None),
    ("pkg/_win.cp311-win_amd64.pyd", set(), "pkg._win"),
    ("pkg/mod.pyd", set(), "pkg.mod"),
    ("pkg/foo.bar.so", {"PyInit_foo"}, None),  # "bar" is no ABI tag: no suffix Python tries
    ("pkg/my-mod.cpython-311-x86_64-linux-gnu.so", {"PyInit_my-mod"}, None),
    ("tiny_ext-0.1.0.data/platlib/x.abi3.so", {"PyInit_x"}, None),
    ("pkg/mod.pypy39-pp73-x86_64-linux-gnu.so", {"PyInit_mod"}, "pkg.mod"),
])
def test_a_shared_object_is_named_as_python_imports_it(path: str, exports: set[str],
                                                       module: str | None) -> None:
    assert module_name(path, lambda _, symbol: symbol in exports) == module


# --- the evidence, from real ELF files ---------------------------------------------------

GCC = shutil.which("gcc")
needs_gcc = pytest.mark.skipif(GCC is None, reason="no gcc on this machine")
SOURCES = {
    "_spam.so": "int PyInit__spam(void) { return 0; }\nint helper(void) { return 1; }\n",
    # a library that calls a module's init: the name is in its tables, undefined
    "libcalls.so": "extern int PyInit_libcalls(void);\nint run(void) "
                   "{ return PyInit_libcalls(); }\n",
    "_hidden.so": "__attribute__((visibility(\"hidden\"))) int PyInit__hidden(void) "
                  "{ return 0; }\nint other(void) { return PyInit__hidden(); }\n",
    "_static.so": "static int PyInit__static(void) { return 0; }\n"
                  "int other(void) { return PyInit__static(); }\n",
    "_weak.so": "__attribute__((weak)) int PyInit__weak(void) { return 0; }\n",
}


@needs_gcc
def test_only_a_defined_visible_pyinit_is_evidence(tmp_path: Path) -> None:
    built = {name: compile_shared(tmp_path, source, soname=name)
             for name, source in SOURCES.items()}
    assert {name: elf.defines(path, f"PyInit_{name.removesuffix('.so')}")
            for name, path in built.items()} == {
        "_spam.so": True, "libcalls.so": False, "_hidden.so": False, "_static.so": False,
        "_weak.so": True}
    assert {"PyInit__spam", "helper"} <= (elf.dynamic_symbols(built["_spam.so"]) or set())
    (tmp_path / "text.so").write_text("not an ELF file at all\n")
    assert elf.dynamic_symbols(tmp_path / "text.so") is None
    assert elf.defines(tmp_path / "missing.so", "PyInit_missing") is False


@needs_gcc
def test_an_installed_wheels_modules_are_found_by_its_record(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "pkg").mkdir(parents=True)
    for name in ("_spam.so", "libcalls.so"):
        compile_shared(site / "pkg", SOURCES[name], soname=name)
    shutil.copy(site / "pkg" / "_spam.so", site / "pkg" / "_ham.cpython-311-x86_64-linux-gnu.so")
    (site / "pkg-1.0.dist-info").mkdir()
    (site / "pkg-1.0.dist-info" / "RECORD").write_text(record_of(
        ["pkg/__init__.py", "pkg/_spam.so", "pkg/libcalls.so",
         "pkg/_ham.cpython-311-x86_64-linux-gnu.so"]))
    assert installed(site) == Compiled(  # a copy of another module exports its init, not one
        (Module("pkg._spam", "pkg/_spam.so"),),  # of its own name
        (Library("pkg/_ham.cpython-311-x86_64-linux-gnu.so", "it exports no PyInit__ham"),
         Library("pkg/libcalls.so", "it exports no PyInit_libcalls")))
