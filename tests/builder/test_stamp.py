"""Stamping: label, torch pin, provenance, valid RECORD, byte-identical when repeated."""

from __future__ import annotations

import zipfile
from pathlib import Path

from tests.wheels import make_wheel
from wheelsmith import wheelfile
from wheelsmith.builder.stamp import stamp
from wheelsmith.untrusted.provenance import read_provenance


def stamp_demo(raw: Path, out: Path) -> Path:
    out.mkdir(exist_ok=True)
    return stamp(raw, out, label="cu.13.0.torch.2.14.sm.120", torch_requirement="torch==2.14.*",
                 provenance={"key": "k" * 64}, epoch=1_700_000_000)


def test_stamp_sets_label_pins_torch_and_embeds_provenance(tmp_path: Path) -> None:
    raw = make_wheel(tmp_path, "causal-conv1d", "1.7.0", requires=("torch", "packaging", "ninja"))
    wheel = stamp_demo(raw, tmp_path / "out")
    assert wheel.name == ("causal_conv1d-1.7.0+cu.13.0.torch.2.14.sm.120-cp311-cp311-"
                          "linux_x86_64.whl")
    assert wheelfile.check(wheel) == []
    metadata = wheelfile.read_metadata(wheel).decode()
    assert metadata == ("Metadata-Version: 2.1\nName: causal-conv1d\n"
                        "Version: 1.7.0+cu.13.0.torch.2.14.sm.120\nRequires-Dist: packaging\n"
                        "Requires-Dist: ninja\nRequires-Dist: torch==2.14.*\n\nA description.\n")
    provenance = read_provenance(wheel)
    assert provenance is not None
    assert (provenance.key, provenance.record) == ("k" * 64, {"key": "k" * 64})


def test_stamp_is_deterministic(tmp_path: Path) -> None:
    raw = make_wheel(tmp_path, "demo", "1.0.0")
    first = stamp_demo(raw, tmp_path / "a").read_bytes()
    second = stamp_demo(raw, tmp_path / "b").read_bytes()
    assert first == second


def test_stamp_puts_dist_info_last_with_fixed_times(tmp_path: Path) -> None:
    wheel = stamp_demo(make_wheel(tmp_path, "demo", "1.0.0"), tmp_path / "out")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        times = {info.date_time for info in zf.infolist()}
    assert names[0] == "demo/__init__.py"
    assert names[-1].endswith(".dist-info/RECORD")
    assert times == {(2023, 11, 14, 22, 13, 20)}


def test_check_finds_tampered_content(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "demo", "1.0.0")
    with zipfile.ZipFile(wheel) as zin:
        items = {n: zin.read(n) for n in zin.namelist()}
    items["demo/__init__.py"] = b"x = 2\n"
    tampered = tmp_path / "t" / wheel.name
    tampered.parent.mkdir()
    with zipfile.ZipFile(tampered, "w") as zout:
        for name, data in items.items():
            zout.writestr(name, data)
    assert wheelfile.check(tampered) == ["RECORD hash of demo/__init__.py does not match its "
                                         "content"]


def test_check_finds_filename_metadata_disagreement(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "demo", "1.0.0")
    renamed = wheel.with_name("demo-2.0.0-cp311-cp311-linux_x86_64.whl")
    wheel.rename(renamed)
    assert wheelfile.check(renamed) == ["METADATA Version '1.0.0' does not match the filename "
                                        "version 2.0.0"]


def test_check_refuses_a_non_zip(tmp_path: Path) -> None:
    bogus = tmp_path / "demo-1.0.0-py3-none-any.whl"
    bogus.write_text("not a zip")
    assert wheelfile.check(bogus) == ["not a readable zip file: File is not a zip file"]
