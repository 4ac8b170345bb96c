"""Prove a wheel carries exactly the device code that was asked for.

Every shared object must hold SASS for exactly the requested archs, and PTX exactly for those
requested with `+PTX`. Objects matching the recipe's `host_only` globs may carry none. A wheel
with no device code at all fails. The same check runs after every build and as
`wheelsmith verify` on any wheel.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from wheelsmith import wheelfile
from wheelsmith.arch import ArchSet
from wheelsmith.builder.ninjafile import CUDA
from wheelsmith.errors import VerifyError
from wheelsmith.inventory import DeviceCode, read_device_code, wheel_inventory
from wheelsmith.toolchain.tools import cuobjdump_for
from wheelsmith.untrusted import clip, local

if TYPE_CHECKING:
    from wheelsmith.builder.plan import BuildPlan

IGNORES_ARCH_HINT = (
    "a package that ignores the arch list compiles its own -gencode list; `arch.rewrite: true` "
    "in its recipe puts the requested targets in place of that list (see docs/recipes.md)"
)


_SM = re.compile(r"sm_(\d+)(\d)([a-z]?)")  # sm_120 is 12.0, sm_90a 9.0a


def _names(archs: frozenset[str]) -> str:
    return ", ".join(sorted(archs))


def findings(inventory: list[DeviceCode], archs: ArchSet,
             host_only: tuple[str, ...] = ()) -> list[str]:
    """What is wrong with `inventory` for the request `archs` (empty: all good)."""
    problems: list[str] = []
    checked = [d for d in inventory if not any(fnmatch.fnmatch(d.path, g) for g in host_only)]
    if not inventory:
        return ["the wheel contains no shared objects, so no device code at all"]
    for item in checked:
        if item.empty:
            problems.append(f"{item.path}: no device code at all (neither SASS nor PTX)")
            continue
        if missing := archs.sass - item.sass:
            problems.append(f"{item.path}: missing SASS for {_names(missing)}")
        if extra := item.sass - archs.sass:
            problems.append(f"{item.path}: SASS for {_names(extra)} was not requested")
        if missing_ptx := archs.ptx - item.ptx:
            problems.append(f"{item.path}: missing PTX for {_names(missing_ptx)} (+PTX asks "
                            "for it)")
        if extra_ptx := item.ptx - archs.ptx:
            problems.append(f"{item.path}: PTX for {_names(extra_ptx)} was not requested "
                            "(add +PTX to ask for it)")
    if all(d.empty for d in inventory) and not problems:
        problems.append("no shared object in the wheel carries device code")
    return problems


def check_pure(label: str, inventory: list[DeviceCode]) -> None:
    """A pure recipe's wheel must not ship compiled code at all."""
    if inventory:
        raise VerifyError(f"{label} comes from a pure recipe but contains shared objects",
                          findings=[d.path for d in inventory],
                          hint="set the recipe's kind to extension, or find what built them")


def host_only_glob(path: str) -> str:
    """A shared object's path as a host_only glob: its Python ABI suffix left open."""
    return re.sub(r"(\.cpython-[^/]*|\.abi3)?\.so$", "*.so", path)


def _hint(problems: list[str], inventory: list[DeviceCode], archs: ArchSet,
          host_only: tuple[str, ...]) -> str:
    """Why: an arch list the package ignored, modules with no CUDA sources beside ones with
    device code (host_only), or device code for other archs."""
    if any("was not requested" in p for p in problems):
        return IGNORES_ARCH_HINT
    checked = [d for d in inventory if not any(fnmatch.fnmatch(d.path, g) for g in host_only)]
    bare = [d.path for d in checked if d.empty]
    if bare and any(not d.empty for d in inventory):
        globs = ", ".join(f'"{host_only_glob(p)}"' for p in bare)
        return (f"{len(bare)} module(s) carry no device code while the others do: modules with "
                f"no CUDA sources (a CPU twin); name them in the recipe's build.host_only: "
                f"[{globs}] (`wheelsmith verify --host-only GLOB` for this wheel)")
    found = sorted({sm for d in checked for sm in d.sass})
    if found:
        return (f"its device code is SASS {', '.join(found)}, built for other archs than "
                f"{archs}: rebuild it with --arch '{archs}', or verify it with the --arch it "
                "was built for")
    return "no module carries device code: check that the build compiled its CUDA sources"


def _carried_hint(label: str, inventory: list[DeviceCode], archs: ArchSet,
                  host_only: tuple[str, ...]) -> str:
    """Why, for a wheel that was built elsewhere (`wheelsmith verify`): no recipe is
    involved, so what it carries is the answer, and the --arch or --host-only that fits it."""
    checked = [d for d in inventory if not any(fnmatch.fnmatch(d.path, g) for g in host_only)]
    bare = [d.path for d in checked if d.empty]
    if bare and any(not d.empty for d in inventory):
        globs = " ".join(f"--host-only '{host_only_glob(p)}'" for p in bare)
        return (f"{len(bare)} module(s) carry no device code while the others do (modules "
                f"with no CUDA sources): if that is meant, verify it with {globs}")
    sass = {sm for d in checked for sm in d.sass}
    ptx = {sm for d in checked for sm in d.ptx}
    if not sass and not ptx:
        return f"{label} carries no device code at all: it was not built with CUDA kernels"
    built = _arch_value(sass, ptx)
    if built is None:
        carried = f"SASS {_names(frozenset(sass)) or '-'}, PTX {_names(frozenset(ptx))}"
        return f"{label} was built for {carried}, not the requested {archs}"
    return (f"{label} was built for {built}, not the requested {archs}: verify it with --arch "
            f"'{built}', or build one for {archs}")


def _arch_value(sass: set[str], ptx: set[str]) -> str | None:
    """The --arch that asks for exactly this device code (None: PTX without its SASS, which
    --arch cannot ask for)."""
    parsed = [(sm, _SM.fullmatch(sm)) for sm in sass]
    if not ptx <= sass or any(found is None for _, found in parsed):
        return None
    entries = sorted((int(m[1]), int(m[2]), m[3], sm) for sm, m in parsed if m is not None)
    return ";".join(f"{major}.{minor}{suffix}" + ("+PTX" if sm in ptx else "")
                    for major, minor, suffix, sm in entries)


def check(label: str, inventory: list[DeviceCode], archs: ArchSet,
          host_only: tuple[str, ...] = (), *, built_here: bool = True) -> None:
    """Refuse `inventory` unless it is exactly `archs`. `built_here`: the wheel was just
    built from a recipe (the hint speaks of the recipe), else it came from elsewhere."""
    problems = findings(inventory, archs, host_only)
    if problems:
        hint = (_hint(problems, inventory, archs, host_only) if built_here
                else _carried_hint(label, inventory, archs, host_only))
        raise VerifyError(f"{label} does not contain exactly the device code for {archs}",
                          findings=problems, hint=hint)


@dataclass(frozen=True, slots=True)
class Release:
    """The release a wheel must be: the recipe's package and version (or its provenance's)."""

    package: str
    version: str


VERSION_HINT = (
    "the package's build gave its wheel another version than the recipe's release. 0.0.0 is "
    "setuptools' when nothing set one: the build requirement that sets it is missing "
    "(setuptools-scm, which its pyproject.toml names: add it, pinned, to the recipe's "
    "build.requires; where the source holds no version for it, no PKG-INFO or .git, also set "
    "SETUPTOOLS_SCM_PRETEND_VERSION to the release's version in the version's env), or a "
    "patch changed where the version comes from. Another version: the recipe's source is "
    "another release's")
CARRIED_RELEASE_HINT = (
    "the wheel is not the release its provenance records: it was built by a wheelsmith that "
    "did not check the version (a build requirement that sets it was missing), or it was "
    "changed after its build; rebuild it (`wheelsmith build NAME==VERSION`)")


def check_release(wheel: Path, release: Release, *, built_here: bool = True) -> None:
    """Refuse `wheel` unless its METADATA is `release`: Name the package (PEP 503 normal
    form), Version the version, compared as PEP 440 versions without local labels (the
    build's own label is replaced by wheelsmith's, which a stamped wheel carries).
    `built_here`: the recipe's release (the hint speaks of the build), else its
    provenance's (`wheelsmith verify`)."""
    said = wheelfile.headers(wheelfile.read_metadata(wheel))
    name, version = str(said.get("Name", "")), str(said.get("Version", ""))
    whose = "the recipe builds" if built_here else "its provenance records"
    if canonicalize_name(name) != canonicalize_name(release.package):
        raise VerifyError(
            f"{wheel.name} is the wheel of {clip(name)}, but {whose} {release.package}",
            hint="the recipe's source is another project's: check its source"
            if built_here else CARRIED_RELEASE_HINT)
    if _public(version) != _public(release.version):
        raise VerifyError(
            f"{wheel.name} is version {clip(version)}, but {whose} {release.package} "
            f"{release.version}", hint=VERSION_HINT if built_here else CARRIED_RELEASE_HINT)


def _public(version: str) -> Version | None:
    """`version` without its local label (None: no version at all)."""
    try:
        return Version(Version(version).public)
    except InvalidVersion:
        return None


CONTENT_HINT = ("rebuild it; a wheel whose members are not what a build writes (a RECORD that "
                "does not match, an unsafe or missing member) was altered or made by hand")


def require_valid(wheel: Path) -> None:
    """A VerifyError listing every reason `wheel` is not a valid, safe wheel (wheelfile.check),
    if there is one."""
    flaw, broken = wheelfile.examine(wheel)
    if flaw is not None:
        raise VerifyError(f"{wheel.name} is not a valid wheel", findings=broken,
                          hint=wheelfile.what_to_do(flaw, CONTENT_HINT))


def verify_wheel(wheel: Path, archs: ArchSet, cuobjdump: Path,
                 host_only: tuple[str, ...] = (), release: Release | None = None
                 ) -> list[DeviceCode]:
    """`wheelsmith verify` of any wheel: its structure, the release its provenance records
    (`release`, where one does), then its device code; the inventory."""
    if local.size_of(wheel) is None:  # a FIFO or a device: FileSystemError naming it
        raise VerifyError(f"no such wheel: {wheel}", findings=[])
    require_valid(wheel)
    if release is not None:
        check_release(wheel, release, built_here=False)
    inventory = wheel_inventory(wheel, cuobjdump)
    check(wheel.name, inventory, archs, host_only, built_here=False)
    return inventory


def sample_objects(records: tuple[dict[str, Any], ...], plan: BuildPlan, python: Path,
                   what: str) -> tuple[dict[str, Any], ...]:
    """The check's records with each CUDA sample's device code, which must be exactly the
    requested archs (the gate every wheel passes, on the sample objects)."""
    cuobjdump = cuobjdump_for(plan.toolchain, python)
    codes: list[DeviceCode] = []

    def read(unit: dict[str, Any]) -> dict[str, Any]:
        if unit["rule"] != CUDA:
            return unit
        codes.append(read_device_code(Path(unit["path"]), cuobjdump, unit["object"]))
        return {**unit, "sass": sorted(codes[-1].sass), "ptx": sorted(codes[-1].ptx)}

    done = tuple({**r, "samples": [read(u) for u in r.get("samples", [])]} for r in records)
    if codes:
        check(f"the sample compile of {what}", codes, plan.archs)
    return done
