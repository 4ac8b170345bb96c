"""The binary audit (builder/audit.py, builder/linking.py) on real ELF files: a small extension
compiled by gcc against the pinned toolchain's own torch and CUDA libraries, resolved against
that torch, against a copy of it whose libc10.so no longer exports one symbol, and against one
without its CUDA libraries; the manylinux tag its symbol versions allow, from auditwheel's
policy data; the driver floor; the SBOM's bytes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.wheels import compile_shared, extension_wheel
from wheelsmith.builder import audit, manylinux, sbom
from wheelsmith.builder.linking import (
    UNKNOWN_PROVIDER,
    Resolution,
    TorchEnv,
    Unresolved,
    resolve,
)
from wheelsmith.builder.stamp import stamp
from wheelsmith.errors import VerifyError
from wheelsmith.inventory import Toolkits
from wheelsmith.toolchain.env import Toolchain
from wheelsmith.toolchain.tools import auditwheel_for
from wheelsmith.untrusted import elf
from wheelsmith.wheelfile import WheelName

C10 = "_ZN3c1019UndefinedTensorImpl10_singletonE"
SOURCE = f"""
extern char {C10};
extern int cudaGetDeviceCount(int*);
extern void* PyModule_Create2(void*, int);
extern char __libc_single_threaded;
char* PyInit__probe(void) {{ int n; cudaGetDeviceCount(&n); PyModule_Create2(0, 0);
    return __libc_single_threaded ? &{C10} : 0; }}
"""
PLAIN = "int PyInit__plain(void) { return 0; }\n"


def site_of(toolchain: Toolchain) -> Path:
    assert toolchain.site is not None
    return toolchain.site


@pytest.fixture
def probe(tmp_path: Path, toolchain: Toolchain) -> Path:
    site = site_of(toolchain)
    return compile_shared(tmp_path / "probe", SOURCE, soname="_probe.so", links=(
        site / "torch" / "lib" / "libc10.so", site / "nvidia" / "cu13" / "lib" /
        "libcudart.so.13"))


def copy_of_site(site: Path, into: Path, *, without: str | None = None,
                 cuda: bool = True) -> Path:
    """A site whose torch/lib links to the real libraries, libc10.so a copy that no longer
    exports `without` (its binding made local, as a build with that symbol hidden has it)."""
    lib = into / "torch" / "lib"
    lib.mkdir(parents=True)
    for found in (site / "torch" / "lib").iterdir():
        (lib / found.name).symlink_to(found)
    if cuda:
        (into / "nvidia").symlink_to(site / "nvidia")
    for info in site.glob("torch-*.dist-info"):
        (into / info.name).symlink_to(info)
    if without is not None:
        (lib / "libc10.so").unlink()
        shutil.copyfile(site / "torch" / "lib" / "libc10.so", lib / "libc10.so")
        demote(lib / "libc10.so", without)
    return into


def demote(path: Path, symbol: str) -> None:
    """Make `symbol`'s .dynsym entry local: the loader and the audit no longer find it."""
    with elf.tables(path) as found:
        assert found is not None
        dynsym = found.of_type(elf.SHT_DYNSYM)
        assert dynsym is not None
        index = next(i for i, name, *_ in found.symbols() if name == symbol)
        at = dynsym[4] + index * found.layout.symbol.size + 4  # st_info
    data = bytearray(path.read_bytes())
    data[at] &= 0x0F  # STB_LOCAL
    path.write_bytes(bytes(data))


@pytest.mark.toolchain
def test_an_extension_resolves_against_the_torch_it_was_linked_with(
        probe: Path, toolchain: Toolchain) -> None:
    found = resolve([("pkg/_probe.so", probe)], TorchEnv(site_of(toolchain), toolchain.python))
    assert (found.ok, found.findings()) == (True, [])
    assert found.resolved == 3  # c10's, CUDA's and the Python's; libc's is the system's
    assert found.torch == str(toolchain.torch_version)


@pytest.mark.toolchain
def test_a_torch_whose_exports_lack_one_of_its_symbols_names_it(
        probe: Path, toolchain: Toolchain, tmp_path: Path) -> None:
    site = copy_of_site(site_of(toolchain), tmp_path / "site", without=C10)
    found = resolve([("pkg/_probe.so", probe)], TorchEnv(site, toolchain.python))
    assert found.findings() == ["pkg/_probe.so: c10::UndefinedTensorImpl::_singleton (from "
                                "libc10.so) is not defined"]
    assert [u.symbol for u in found.unresolved] == [C10]


@pytest.mark.toolchain
def test_a_torch_without_the_cuda_runtime_it_links_is_named(
        probe: Path, toolchain: Toolchain, tmp_path: Path) -> None:
    site = copy_of_site(site_of(toolchain), tmp_path / "site", cuda=False)
    found = resolve([("pkg/_probe.so", probe)], TorchEnv(site, toolchain.python))
    assert found.missing == (("pkg/_probe.so", "libcudart.so.13"),)
    assert [u.symbol for u in found.unresolved] == ["cudaGetDeviceCount"]
    assert found.unresolved[0].library == "libcudart.so.13"  # its symbol version says so


@pytest.mark.toolchain
def test_the_python_api_is_the_interpreters(probe: Path, toolchain: Toolchain) -> None:
    found = resolve([("pkg/_probe.so", probe)], TorchEnv(site_of(toolchain), None))
    assert [u.symbol for u in found.unresolved] == ["PyModule_Create2"]


@pytest.fixture(scope="module")
def policies(toolchain: Toolchain) -> list[manylinux.Policy]:
    found = manylinux.policies_for(auditwheel_for(toolchain, Path(sys.executable)), "x86_64")
    assert found is not None
    return found


def wheel_of(folder: Path, name: str, shared_object: Path) -> Path:
    folder.mkdir()
    return extension_wheel(folder, name, shared_object)


def audit_of(wheel: Path, cuobjdump: Path, policies: list[manylinux.Policy]) -> audit.Audit:
    return audit.audit_wheel(wheel, [], cuobjdump, None, policies, not_resolved="not here")


@pytest.mark.toolchain
def test_the_symbol_version_that_sets_the_tag_is_named_with_its_symbol(
        probe: Path, tmp_path: Path, toolchain: Toolchain,
        policies: list[manylinux.Policy]) -> None:
    assert toolchain.cuobjdump is not None
    needs = audit_of(wheel_of(tmp_path / "w", "probe", probe), toolchain.cuobjdump,
                     policies)
    assert needs.tag is not None
    assert (needs.tag["tag"], needs.tag["next_refused"]) == ("manylinux_2_34_x86_64",
                                                             "manylinux_2_31_x86_64")
    assert needs.tag["set_by"] == [{"version": "GLIBC_2.32", "symbols": [
        "__libc_single_threaded in probe/_native.cpython-311-x86_64-linux-gnu.so"]}]
    assert needs.objects[0].runtime == "libcudart.so.13"
    plain = audit_of(wheel_of(tmp_path / "p", "plain", compile_shared(
        tmp_path / "plain", PLAIN)), toolchain.cuobjdump, policies)
    assert plain.tag is not None
    assert plain.tag["set_by"] == []
    assert plain.tag["tag"] == f"{policies[0].name}_x86_64"
    assert plain.objects[0].runtime is None


@pytest.mark.toolchain
def test_a_tag_that_promises_an_older_glibc_than_its_symbols_need_is_refused(
        probe: Path, tmp_path: Path, toolchain: Toolchain,
        policies: list[manylinux.Policy]) -> None:
    assert toolchain.cuobjdump is not None
    raw = wheel_of(tmp_path / "w", "probe", probe)
    needs = audit_of(raw, toolchain.cuobjdump, policies)
    with pytest.raises(VerifyError) as refused:
        audit.check("probe.whl", needs, "manylinux_2_17_x86_64.manylinux2014_x86_64")
    assert refused.value.message == ("probe.whl is tagged manylinux_2_17_x86_64, but its "
                                     "symbol versions need more than manylinux_2_17 allows")
    assert refused.value.findings == [
        "GLIBC_2.32: __libc_single_threaded in probe/_native.cpython-311-x86_64-linux-gnu.so"]
    audit.check("probe.whl", needs, "manylinux_2_34_x86_64")  # what it needs: no refusal
    audit.check("probe.whl", needs, "linux_x86_64")  # promises nothing


@pytest.mark.toolchain
@pytest.mark.parametrize(("cudart", "runtime"), [("static", "static"),
                                                 ("shared", "libcudart.so.13")])
def test_the_cuda_runtime_is_read_from_what_the_object_links(
        tmp_path: Path, toolchain: Toolchain, cudart: str, runtime: str) -> None:
    assert toolchain.cuobjdump is not None
    source = tmp_path / "k.cu"
    source.write_text("__global__ void k(float* x) { x[0] = 1; }\n"
                      'extern "C" void PyInit__k(float* x) { k<<<1, 1>>>(x); }\n')
    made = tmp_path / "_k.so"
    subprocess.run([str(toolchain.nvcc), "-shared", "-Xcompiler", "-fPIC", f"-cudart={cudart}",
                    "-gencode", "arch=compute_120,code=sm_120", str(source), "-o", str(made)],
                   check=True, capture_output=True)
    found = audit_of(wheel_of(tmp_path / "w", "k", made), toolchain.cuobjdump, [])
    assert found.objects[0].runtime == runtime
    assert found.objects[0].toolkits.cubins == frozenset({"13.0"})
    assert found.driver["version"] == "580.65.06"


def objects(*found: tuple[set[str], set[str], str | None]) -> tuple[audit.ObjectAudit, ...]:
    return tuple(audit.ObjectAudit(f"o{i}.so", (), runtime, {}, Toolkits(
        frozenset(cubins), frozenset(ptx))) for i, (cubins, ptx, runtime) in enumerate(found))


def test_the_driver_floor_is_set_by_the_newest_need_it_can_name() -> None:
    floor = audit.driver_floor(objects(({"13.0"}, set(), "libcudart.so.13")))
    assert (floor["version"], floor["set_by"]) == (
        "580.65.06", "cubins of CUDA 13.0 (any CUDA 13 driver runs them)")
    older = audit.driver_floor(objects(({"12.8"}, {"8.7"}, "libcudart.so.12")))
    assert older["version"] == "525.60.13"  # the first CUDA 12 driver's; PTX 8.7 asks more:
    assert older["reasons"][-1] == {"driver": None, "why": (
        "PTX ISA 8.7, which a driver of CUDA 12.8 or newer compiles (that driver's number is "
        "not known to wheelsmith)")}
    ptx = audit.driver_floor(objects((set(), {"9.0"}, "static")))
    assert ptx["version"] == "580.65.06"
    assert ptx["set_by"].startswith("PTX ISA 9.0")
    assert audit.driver_floor(objects((set(), set(), None)))["version"] is None


PROVENANCE = {"tool": "wheelsmith 0.1.0", "recipe": {"package": "probe", "version": "1.0.0"},
              "source": {"pypi": "probe", "sha256": "ab" * 32},
              "patches": [{"file": "0001-fix.patch", "sha256": "cd" * 32}],
              "toolchain": {"torch": "2.14.1", "pins": ["torch===2.14.1",
                                                        "nvidia-cuda-nvcc==13.0.88",
                                                        "nvidia-cuda-runtime==13.0.96"]},
              "nvcc": "13.0.88", "audit": {"objects": [{"cuda_runtime": "libcudart.so.13"}]},
              "vendored": [{"name": "cutlass", "version": "3.9.2",
                            "evidence": "csrc/cutlass/include/cutlass/version.h"}]}


def test_the_sbom_is_the_same_bytes_from_the_same_provenance(tmp_path: Path) -> None:
    raw = wheel_of(tmp_path / "raw", "probe", compile_shared(tmp_path / "so", PLAIN))
    for i in (1, 2):
        (tmp_path / str(i)).mkdir()
    made = [stamp(raw, tmp_path / str(i), label="cu.13.0.torch.2.14.sm.120",
                  torch_requirement="torch==2.14.*", provenance=PROVENANCE, epoch=1700000000)
            for i in (1, 2)]
    name = WheelName.parse(made[0].name)
    documents = []
    for wheel in made:
        with zipfile.ZipFile(wheel) as zf:
            documents.append(zf.read(f"probe-{name.version}.dist-info/sboms/probe.cdx.json"))
    assert documents[0] == documents[1] == sbom.document(name, PROVENANCE)
    data = json.loads(documents[0])
    assert "timestamp" not in data["metadata"]
    assert "serialNumber" not in data
    root = data["metadata"]["component"]
    assert root["purl"] == "pkg:pypi/probe@1.0.0%2Bcu.13.0.torch.2.14.sm.120"
    assert root["pedigree"]["ancestors"][0]["hashes"] == [{"alg": "SHA-256",
                                                           "content": "ab" * 32}]
    parts = {c["name"]: c for c in data["components"]}
    assert parts["patches/0001-fix.patch"]["hashes"][0]["content"] == "cd" * 32
    assert (parts["nvidia-cuda-nvcc"]["version"], parts["torch"]["version"],
            parts["nvidia-cuda-runtime"]["version"], parts["cutlass"]["version"]) == (
        "13.0.88", "2.14.1", "13.0.96", "3.9.2")
    other = {**PROVENANCE, "patches": [{"file": "0001-fix.patch", "sha256": "ef" * 32}]}
    assert sbom.document(name, other) != documents[0]


def test_a_runtime_linked_in_is_named_in_the_sbom() -> None:
    static = {**PROVENANCE, "audit": {"objects": [{"cuda_runtime": "static"}]}}
    name = WheelName.parse("probe-1.0.0-cp311-cp311-linux_x86_64.whl")
    parts = {c["name"]: c for c in json.loads(sbom.document(name, static))["components"]}
    assert parts["cudart_static"]["version"] == "13.0.96"
    assert "nvidia-cuda-runtime" not in parts


def test_vendored_cutlass_is_found_by_its_version_header(tmp_path: Path) -> None:
    header = tmp_path / "src" / "csrc" / "cutlass" / "include" / "cutlass" / "version.h"
    header.parent.mkdir(parents=True)
    header.write_text("#define CUTLASS_MAJOR 3\n#define CUTLASS_MINOR 9\n"
                      "#define CUTLASS_PATCH 2\n")
    assert sbom.vendored(tmp_path / "src") == [{
        "name": "cutlass", "version": "3.9.2",
        "evidence": "csrc/cutlass/include/cutlass/version.h"}]
    header.write_text("#define CUTLASS_MAJOR 3\n")  # no version it can name
    assert sbom.vendored(tmp_path / "src") == []


DRIVER_API = """
extern int cuInit(unsigned);
extern int cuWheelsmithNoSuchCall(void);
int PyInit__driver(void) { return cuInit(0) + cuWheelsmithNoSuchCall(); }
"""


@pytest.mark.toolchain
def test_what_an_object_needs_of_the_driver_is_read_from_the_stub_where_there_is_one(
        tmp_path: Path, toolchain: Toolchain) -> None:
    site = site_of(toolchain)
    stub = site / "nvidia" / "cu13" / "lib" / "stubs" / "libcuda.so"
    driver = compile_shared(tmp_path / "driver", DRIVER_API, soname="_driver.so", links=(stub,))
    found = resolve([("pkg/_driver.so", driver)], TorchEnv(site, toolchain.python))
    assert [u.symbol for u in found.unresolved] == ["cuWheelsmithNoSuchCall"]
    assert (found.resolved, found.left_to_driver) == (1, 0)
    bare = copy_of_site(site, tmp_path / "site", cuda=False)  # no stubs: the driver's call
    found = resolve([("pkg/_driver.so", driver)], TorchEnv(bare, toolchain.python))
    assert (found.ok, found.left_to_driver) == (True, 2)


@pytest.mark.toolchain
def test_the_cuda_runtime_import_torch_loads_globally_serves_an_object_that_does_not_link_it(
        tmp_path: Path, toolchain: Toolchain) -> None:
    unlinked = compile_shared(tmp_path / "unlinked", "extern int cudaGetDeviceCount(int*);\n"
                              "int PyInit__u(void) { int n; return cudaGetDeviceCount(&n); }\n",
                              soname="_u.so")
    site = site_of(toolchain)
    found = resolve([("pkg/_u.so", unlinked)], TorchEnv(site, toolchain.python))
    assert (found.ok, found.resolved) == (True, 1)  # libtorch_global_deps.so links libcudart
    bare = copy_of_site(site, tmp_path / "site", cuda=False)
    found = resolve([("pkg/_u.so", unlinked)], TorchEnv(bare, toolchain.python))
    assert [u.symbol for u in found.unresolved] == ["cudaGetDeviceCount"]


@given(providers=st.lists(st.sampled_from(["libc10.so", "libtorch_cpu.so", "libcudart.so.13",
                                           UNKNOWN_PROVIDER]), min_size=1, max_size=4),
       missing=st.booleans())
def test_an_undefined_symbol_is_called_an_abi_mismatch_only_where_torch_or_cuda_should_have_it(
        providers: list[str], missing: bool) -> None:
    """A symbol torch or CUDA should define (or a library of theirs not there): the wheel was
    built for another torch. One no library it links should define: its own build's gap."""
    found = Resolution("2.14.1", 3, tuple(Unresolved("pkg/_m.so", f"s{i}", f"s{i}", lib)
                                          for i, lib in enumerate(providers)),
                       (("pkg/_m.so", "libc10.so"),) if missing else ())
    with pytest.raises(VerifyError) as caught:
        audit.check("probe.whl", audit.Audit((), (), None, {}, found, None, {}, ()),
                    "linux_x86_64")
    theirs = missing or any(p != UNKNOWN_PROVIDER for p in providers)
    assert caught.value.hint == (audit.ABI_HINT if theirs else audit.OWN_BUILD_HINT)
