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
from wheelsmith.build import parallel, reproducible, runner
from wheelsmith.build.compilesetup import split_setting
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
    try:
        toolchain = provenance["toolchain"]
        archs = ArchSet.parse([provenance["archs_requested"]]) \
            if provenance["archs_requested"] else None
        return BuildRequest(
            recipe=provenance["recipe"]["package"], version=provenance["recipe"]["version"],
            archs=archs, toolchain=toolchain["name"], python_version=toolchain["python"],
            env=tuple(sorted(provenance.get("extra_env", {}).items())),
            out_dir=work_dir / "rebuilt" / wheel.name.removesuffix(".whl"), work_dir=work_dir,
            compile_cache="off", compile_farm="off", runner=runner_name, rebuild=True,
            fresh=True, split_compile=reproducible_split())
    except (KeyError, TypeError, ValueError) as exc:
        raise VerifyError(f"{wheel.name}: its provenance lacks what defines the build ({exc})",
                          hint="the wheel was built by an older wheelsmith or its "
                               "wheelsmith.json was edited") from None


def rebuild(wheel: Path, *, work_dir: Path, runner_name: str, report: Reporter) -> Comparison:
    """Build `wheel` again from its provenance; the comparison of the two files."""
    if not wheel.is_file():
        raise VerifyError(f"no such wheel: {wheel}")
    request = request_for(wheel, work_dir=work_dir.resolve(), runner_name=runner_name)
    refuse_unpromised(wheel)
    prepared = runner.prepare(request, report)
    key = (read_provenance(wheel) or {}).get("key")
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


def reproducible_split() -> str | None:
    """The rebuild's split: $WHEELSMITH_SPLIT_COMPILE, unless that is `fast` (whose bytes vary:
    a rebuild with it would report its own variation as a change), then auto."""
    return parallel.AUTO if split_setting(None) == parallel.FAST else None


def refuse_unpromised(wheel: Path) -> None:
    """A wheel whose provenance says its bytes vary (reproducible.promise) cannot be checked
    by its bytes: refused before anything is built, never reported as changed. The mark's
    own text is not shown (it is the wheel's); an edited mark only makes this refuse."""
    if reproducible.NOT_PROMISED in (read_provenance(wheel) or {}):
        raise VerifyError(
            f"{wheel.name}: its bytes are not promised (its provenance says so: nvcc's own "
            "split-compile, by --split-compile fast or in its NVCC flags, varies the device "
            "code from run to run), so a rebuild cannot tell a change made after the build "
            "from that; nothing was built",
            hint=f"`wheelsmith verify {wheel.name}` still checks its device code; a build with "
                 "the default --split-compile (auto) gives a wheel that --rebuild can check")


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
