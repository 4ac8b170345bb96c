"""`wheelsmith verify --rebuild`: build a wheel again from its provenance and compare the bytes.

The wheel's `wheelsmith.json` names what defines its build (reproducible.py): the recipe and
version, the toolchain profile and Python, the archs and any `--env`. The rebuild resolves
those here, refuses when they give another content key (the recipe, a patch or the profile
changed: the bytes could not match), builds without a compile cache into its own output
directory, and compares sha256. On a mismatch it names each member that differs, is missing
or is extra, and keeps the rebuilt wheel to compare by hand.
"""

from __future__ import annotations

import hashlib
import zipfile
from dataclasses import dataclass
from pathlib import Path

from wheelsmith.arch import ArchSet
from wheelsmith.build import runner
from wheelsmith.build.request import BuildRequest, Reporter
from wheelsmith.errors import VerifyError
from wheelsmith.files import sha256_file
from wheelsmith.wheelfile import read_provenance


@dataclass(frozen=True, slots=True)
class Comparison:
    wheel: Path
    rebuilt: Path
    sha256: str
    rebuilt_sha256: str
    differences: tuple[str, ...]  # empty: identical

    @property
    def identical(self) -> bool:
        return self.sha256 == self.rebuilt_sha256 and self.wheel.name == self.rebuilt.name


def request_for(wheel: Path, *, work_dir: Path, runner_name: str) -> BuildRequest:
    """The build request the wheel's provenance describes."""
    provenance = read_provenance(wheel)
    if provenance is None:
        raise VerifyError(f"{wheel.name} carries no wheelsmith provenance "
                          "(<dist-info>/wheelsmith.json)",
                          hint="only a wheel wheelsmith built can be rebuilt from itself")
    recipe, version, python = provenance.recipe, provenance.version, provenance.python
    if recipe is None or version is None or python is None or provenance.toolchain is None:
        raise VerifyError(f"{wheel.name}: its provenance lacks what defines the build (the "
                          "recipe's package and version, the toolchain's name and Python)",
                          hint="the wheel was built by an older wheelsmith or its "
                               "wheelsmith.json was edited")
    return BuildRequest(
        recipe=recipe, version=version,
        archs=ArchSet.parse([provenance.archs]) if provenance.archs else None,
        toolchain=provenance.toolchain, python_version=python,
        env=tuple(sorted(provenance.extra_env.items())),
        out_dir=work_dir / "rebuilt" / wheel.name.removesuffix(".whl"), work_dir=work_dir,
        compile_cache="off", compile_farm="off", runner=runner_name, rebuild=True, fresh=True)


def rebuild(wheel: Path, *, work_dir: Path, runner_name: str, report: Reporter) -> Comparison:
    """Build `wheel` again from its provenance; the comparison of the two files."""
    if not wheel.is_file():
        raise VerifyError(f"no such wheel: {wheel}")
    request = request_for(wheel, work_dir=work_dir.resolve(), runner_name=runner_name)
    prepared = runner.prepare(request, report)
    provenance = read_provenance(wheel)
    key = provenance.key if provenance else None
    if prepared.plan.key != key:
        raise VerifyError(
            f"cannot rebuild {wheel.name} as it was built: the recipe, patches and toolchain "
            f"here give content key {prepared.plan.key[:12]}, the wheel says {str(key)[:12]}",
            hint="rebuild with the recipe repository and toolchain profile it was built from "
                 "(--recipes DIR); its provenance names the recipe's and patches' sha256")
    result = runner.build(request, report, prepared)
    assert result.wheel is not None  # a rebuild never stops after configuring
    return Comparison(wheel, result.wheel, sha256_file(wheel), sha256_file(result.wheel),
                      tuple(differences(wheel, result.wheel)))


def differences(wheel: Path, rebuilt: Path) -> list[str]:
    """Each member that differs between the two wheels, and how; the name if that differs."""
    found = [] if wheel.name == rebuilt.name else [f"the rebuilt wheel is named {rebuilt.name}"]
    with zipfile.ZipFile(wheel) as ours, zipfile.ZipFile(rebuilt) as theirs:
        mine = {i.filename: i for i in ours.infolist()}
        other = {i.filename: i for i in theirs.infolist()}
        for name in sorted(mine.keys() | other.keys()):
            if name not in other:
                found.append(f"{name}: only in the wheel, not in its rebuild")
            elif name not in mine:
                found.append(f"{name}: only in the rebuild, missing from the wheel")
            elif (a := _digest(ours, name)) != (b := _digest(theirs, name)):
                found.append(f"{name}: content differs (sha256 {a[:12]}, rebuilt {b[:12]})")
            elif _entry(mine[name]) != _entry(other[name]):
                found.append(f"{name}: zip entry differs (time, permissions or compression)")
        if not found and list(mine) != list(other):
            found.append("the members are in another order")
    return found


def _digest(zf: zipfile.ZipFile, name: str) -> str:
    return hashlib.sha256(zf.read(name)).hexdigest()


def _entry(info: zipfile.ZipInfo) -> tuple[object, ...]:
    return (info.date_time, info.external_attr, info.compress_type, info.create_system)
