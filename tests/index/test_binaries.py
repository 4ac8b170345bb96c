"""What a wheel's binary audit says reaches the index: publish takes its summary from the
provenance (checked), the ledger keeps it, the PEP 691 page serves it under `_wheelsmith`, a
variants preview names its properties, and `index serve` serves that file. A summary of
another form, in a wheel or in the ledger, is refused naming its field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.wheels import make_wheel
from wheelsmith.errors import IndexDriftError, UntrustedDataError
from wheelsmith.index import ledger, serve
from wheelsmith.index import store as index
from wheelsmith.index.publish import publish
from wheelsmith.untrusted.provenance import PROVENANCE_FILE

CHANNEL = "cu130-torch2.14"
VERSION = "1.0.0+cu.13.0.torch.2.14.sm.120"
AUDIT: dict[str, Any] = {"objects": [{"path": "demo_ext/_C.so", "cuda_runtime": "libcudart.so.13"}],
         "driver": {"version": "580.65.06", "set_by": "cubins of CUDA 13.0", "reasons": []},
         "manylinux": {"tag": "manylinux_2_34_x86_64", "glibc": "2.34", "next_refused":
                       "manylinux_2_31_x86_64", "set_by": [
                           {"version": "GLIBC_2.32", "symbols": ["x in demo_ext/_C.so"]}]},
         "symbols": {"torch": "2.14.1", "resolved": 26, "unresolved": [],
                     "missing_libraries": []}}
SUMMARY = {"cuda_runtime": ["13"], "driver_min": "580.65.06",
           "manylinux": "manylinux_2_34_x86_64", "manylinux_set_by": ["GLIBC_2.32"],
           "torch": "2.14.1", "sass": ["sm_120"], "ptx": []}


def audited_wheel(folder: Path, audit: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    provenance = {"toolchain": {"channel": CHANNEL}, "key": "k" * 64, "archs_requested": "12.0",
                  "device_code": [{"path": "demo_ext/_C.so", "sass": ["sm_120"], "ptx": []}],
                  "audit": audit}
    return make_wheel(folder, "demo-ext", VERSION, files={
        "demo_ext/__init__.py": b"",
        f"demo_ext-{VERSION}.dist-info/{PROVENANCE_FILE}": json.dumps(provenance).encode()})


def test_the_summary_is_kept_served_and_named_in_the_variants_preview(tmp_path: Path) -> None:
    root = tmp_path / "index"
    wheel = audited_wheel(tmp_path / "wheels", AUDIT)
    publish(wheel, root)
    line = json.loads((root / ledger.LEDGER).read_text())
    assert line["binaries"] == SUMMARY
    project = root / CHANNEL / "simple" / "demo-ext"
    page = json.loads((project / "index.json").read_text())
    assert page["files"][0]["_wheelsmith"] == {"binaries": SUMMARY}
    variants = project / f"demo_ext-{VERSION}-variants.json"
    assert json.loads(variants.read_text())["variants"] == {wheel.name: {
        "nvidia": {"cuda_version_lower_bound": ["13.0"], "sm_arch": ["120_real"]},
        "abi_dependency": {"torch": ["2.14"]}}}
    answer = serve.route(root, f"/{CHANNEL}/simple/demo-ext/{variants.name}", None)
    assert (answer.status, answer.path) == (200, variants)
    assert serve.route(root, f"/{CHANNEL}/simple/demo-ext/other.json", None).status == 404
    assert index.check(root).problems == []  # the pages, the variants file among them, current
    variants.unlink()
    assert index.check(root).problems != []  # what the ledger implies and is not there


def test_a_wheel_without_an_audit_has_neither(tmp_path: Path) -> None:
    root = tmp_path / "index"
    (tmp_path / "wheels").mkdir()
    publish(make_wheel(tmp_path / "wheels", "demo-ext", "1.0.0"), root, channel=CHANNEL)
    assert "binaries" not in json.loads((root / ledger.LEDGER).read_text())
    project = root / CHANNEL / "simple" / "demo-ext"
    assert "_wheelsmith" not in json.loads((project / "index.json").read_text())["files"][0]
    assert sorted(p.name for p in project.iterdir()) == ["index.html", "index.json"]


def test_a_summary_of_another_form_is_refused_naming_its_field(tmp_path: Path) -> None:
    hostile = {**AUDIT, "manylinux": {**AUDIT["manylinux"], "set_by": [
        {"version": "<script>", "symbols": []}]}}
    with pytest.raises(UntrustedDataError) as refused:
        publish(audited_wheel(tmp_path / "wheels", hostile), tmp_path / "index")
    assert "audit.manylinux_set_by[0]: '<script>' is not a symbol version" in str(
        refused.value)
    root = tmp_path / "good"
    publish(audited_wheel(tmp_path / "more", AUDIT), root)
    line = json.loads((root / ledger.LEDGER).read_text())
    line["binaries"]["sass"] = ["sm_120", "javascript:x"]
    (root / ledger.LEDGER).write_text(json.dumps(line) + "\n")
    with pytest.raises(IndexDriftError) as drift:
        ledger.read(root)
    assert "binaries.sass[1]: 'javascript:x' is not an arch" in drift.value.message
