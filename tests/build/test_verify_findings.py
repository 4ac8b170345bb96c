"""The device-code check, on inventories (the cuobjdump side is tested with real builds)."""

from __future__ import annotations

import pytest

from wheelsmith.arch import ArchSet
from wheelsmith.build.verify import check, findings
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


def test_missing_archs_say_how_to_build_them() -> None:
    with pytest.raises(VerifyError) as caught:
        check("x.whl", [code({"sm_120"})], ArchSet.parse(["9.0;12.0"]))
    assert caught.value.hint == ("the wheel was built for other archs or without device code; "
                                 "build it with --arch '9.0;12.0'")
