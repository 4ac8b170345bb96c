"""The device-code check, on inventories (the cuobjdump side is tested with real builds)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from tests.conftest import wheelsmith
from wheelsmith.arch import ArchSet
from wheelsmith.builder.verify import check, findings
from wheelsmith.errors import VerifyError
from wheelsmith.inventory import DeviceCode

SO = "pkg/_C.so"


def code(sass: set[str], ptx: set[str] | None = None, path: str = SO) -> DeviceCode:
    return DeviceCode(path, frozenset(sass), frozenset(ptx or set()))


@pytest.mark.parametrize(
    ("request_", "inventory", "expected"),
    [
        ("12.0", [code({"sm_120"})], []),
        ("9.0;12.0+PTX", [code({"sm_90", "sm_120"}, {"sm_120"})], []),
        ("12.0", [code({"sm_90"})], [f"{SO}: missing SASS for sm_120",
                                     f"{SO}: SASS for sm_90 was not requested"]),
        ("12.0", [code({"sm_75", "sm_80", "sm_120"})],
         [f"{SO}: SASS for sm_75, sm_80 was not requested"]),
        ("12.0+PTX", [code({"sm_120"})], [f"{SO}: missing PTX for sm_120 (+PTX asks for it)"]),
        ("12.0", [code({"sm_120"}, {"sm_120"})],
         [f"{SO}: PTX for sm_120 was not requested (add +PTX to ask for it)"]),
        ("12.0", [code(set())], [f"{SO}: no device code at all (neither SASS nor PTX)"]),
        ("12.0", [], ["the wheel contains no shared objects, so no device code at all"]),
    ],
    ids=["exact", "exact-ptx", "wrong-arch", "ignored-arch-list", "missing-ptx", "extra-ptx",
         "empty-so", "no-so"],
)
def test_findings_compare_exactly(request_: str, inventory: list[DeviceCode],
                                  expected: list[str]) -> None:
    assert findings(inventory, ArchSet.parse([request_])) == expected


def test_host_only_objects_may_carry_no_device_code() -> None:
    inventory = [code({"sm_120"}), code(set(), path="pkg/_cpu_helpers.so")]
    assert findings(inventory, ArchSet.parse(["12.0"]), ("*/_cpu_*.so",)) == []


def test_every_shared_object_is_checked() -> None:
    inventory = [code({"sm_120"}), code({"sm_90"}, path="pkg/_other.so")]
    assert findings(inventory, ArchSet.parse(["12.0"])) == [
        "pkg/_other.so: missing SASS for sm_120", "pkg/_other.so: SASS for sm_90 was not requested"]


def test_unrequested_archs_point_at_the_arch_list_patch() -> None:
    with pytest.raises(VerifyError) as caught:
        check("x.whl", [code({"sm_75", "sm_120"})], ArchSet.parse(["12.0"]))
    assert caught.value.message == "x.whl does not contain exactly the device code for 12.0"
    assert caught.value.hint is not None
    assert caught.value.hint.startswith("a package that ignores the arch list")


def test_missing_archs_say_which_archs_the_wheel_was_built_for() -> None:
    with pytest.raises(VerifyError) as caught:
        check("x.whl", [code({"sm_120"})], ArchSet.parse(["9.0;12.0"]))
    assert caught.value.hint == (
        "its device code is SASS sm_120, built for other archs than 9.0;12.0: rebuild it with "
        "--arch '9.0;12.0', or verify it with the --arch it was built for")


def test_a_cpu_twin_without_device_code_is_told_from_other_archs_and_gets_its_glob() -> None:
    """torch-scatter's shape: _scatter_cuda carries sm_120, _scatter_cpu nothing; the fix is
    host_only, not the --arch that was passed."""
    inventory = [code({"sm_120"}, path="torch_scatter/_scatter_cuda.so"),
                 code(set(), path="torch_scatter/_scatter_cpu.cpython-311-x86_64-linux-gnu.so")]
    with pytest.raises(VerifyError) as caught:
        check("x.whl", inventory, ArchSet.parse(["12.0"]))
    assert caught.value.findings == [
        "torch_scatter/_scatter_cpu.cpython-311-x86_64-linux-gnu.so: no device code at all "
        "(neither SASS nor PTX)"]
    assert caught.value.hint == (
        "1 module(s) carry no device code while the others do: modules with no CUDA sources "
        "(a CPU twin); name them in the recipe's build.host_only: "
        '["torch_scatter/_scatter_cpu*.so"] (`wheelsmith verify --host-only GLOB` for this '
        "wheel)")
    check("x.whl", inventory, ArchSet.parse(["12.0"]), ("torch_scatter/_scatter_cpu*.so",))


def test_verify_of_a_wheel_without_provenance_asks_for_the_arch(tmp_path: Path) -> None:
    wheel = tmp_path / "other-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("other/__init__.py", "")
    result = wheelsmith("verify", str(wheel), cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (
        "Error: --arch is required: other-1.0-py3-none-any.whl has no wheelsmith provenance "
        "that records its archs; e.g. --arch 12.0")


def test_verify_help_states_the_defaults_it_really_has(tmp_path: Path) -> None:
    text = " ".join(wheelsmith("verify", "--help", cwd=tmp_path).stdout.split())
    assert "Default: the archs a wheelsmith wheel's provenance records (required for other " \
           "wheels)." in text
    assert "Default: the host_only globs a wheelsmith wheel's provenance records" in text
    assert "the recipe's" not in text
