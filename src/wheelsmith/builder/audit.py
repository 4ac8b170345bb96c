"""The binary audit of a wheel: what each shared object says, read from the object itself, about
where it runs.

- its undefined symbols, resolved against a torch environment (builder/linking.py);
- the symbol versions it asks of the system's libraries (GLIBC_, GLIBCXX_, CXXABI_, GCC_), and
  the manylinux tag they allow with the version and the symbols that set it (manylinux.py);
- the CUDA runtime it loads: the major of the `libcudart.so.N` it links (DT_NEEDED), or
  `static` for an object that registers its fat binary without importing the runtime's
  registration (the runtime linked into it);
- the oldest driver its device code and runtime need: CUDA's minor-version compatibility lets
  a cubin of any CUDA 13.x, and the CUDA 13 runtime, run on the first CUDA 13 driver
  (toolchain/driver.py); PTX is compiled by the driver, which must know its PTX ISA, so PTX
  needs the driver of the release that wrote it;
- its SASS and PTX targets (inventory.py).

The build records it in the provenance (`audit`), `wheelsmith verify` prints it, and the index
serves its summary with each file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wheelsmith.builder import manylinux
from wheelsmith.builder.linking import UNKNOWN_PROVIDER, Resolution, TorchEnv, resolve
from wheelsmith.errors import VerifyError
from wheelsmith.inventory import DeviceCode, Toolkits, read_toolkits, shared_objects
from wheelsmith.toolchain.driver import MIN_DRIVER
from wheelsmith.untrusted import fatbin
from wheelsmith.untrusted.linkage import Linkage, linkage

if TYPE_CHECKING:
    from wheelsmith.builder.stableabi import StableAudit

RUNTIME = re.compile(r"libcudart\.so\.(\d+)$")
REGISTRATION = "__cudaRegisterFatBinary"
SYSTEM_VERSION = re.compile(r"(GLIBC|GLIBCXX|CXXABI|GCC)_[\d.]+$")
# PTX ISA -> the CUDA release that introduced it (NVIDIA's PTX ISA release history); the 9.x
# ISAs are CUDA 13.x's
PTX_RELEASES = {(8, 0): "12.0", (8, 1): "12.1", (8, 2): "12.2", (8, 3): "12.3", (8, 4): "12.4",
                (8, 5): "12.5", (8, 6): "12.7", (8, 7): "12.8", (8, 8): "12.9"}


@dataclass(frozen=True, slots=True)
class ObjectAudit:
    """What one shared object says."""

    path: str
    needed: tuple[str, ...]
    runtime: str | None  # "libcudart.so.13", "static", or None (it loads no CUDA runtime)
    versions: dict[str, tuple[str, ...]]  # the system's libraries -> the versions asked
    toolkits: Toolkits

    @property
    def runtime_major(self) -> int | None:
        match = RUNTIME.match(self.runtime or "")
        return int(match[1]) if match else None

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "needed": list(self.needed), "cuda_runtime": self.runtime,
                "symbol_versions": {lib: list(v) for lib, v in self.versions.items()},
                "cubin_toolkits": sorted(self.toolkits.cubins),
                "ptx_isa": sorted(self.toolkits.ptx_isa)}


@dataclass(frozen=True, slots=True)
class Audit:
    """The audit of one wheel."""

    objects: tuple[ObjectAudit, ...]
    device: tuple[DeviceCode, ...]
    tag: dict[str, Any] | None  # manylinux.evidence; None: no policy data
    driver: dict[str, Any]
    resolution: Resolution | None
    not_resolved: str | None  # why there is no resolution
    needs: dict[str, dict[str, list[str]]]  # the system's libraries -> version -> askers
    policies: tuple[manylinux.Policy, ...]
    stable: StableAudit | None = None  # a stable-ABI wheel's (stableabi.py)

    def as_dict(self) -> dict[str, Any]:
        return {"objects": [o.as_dict() for o in self.objects],
                "cuda_runtime": self.runtime(), "driver": self.driver,
                "manylinux": self.tag,
                "symbols": self.resolution.as_dict() if self.resolution else
                {"not_checked": self.not_resolved},
                **({"stable_abi": self.stable.as_dict()} if self.stable else {})}

    def runtime(self) -> str | None:
        """The CUDA runtime the wheel loads: "13 (libcudart.so.13)", "static", or None."""
        said = {o.runtime: f"{o.runtime_major} ({o.runtime})" if o.runtime_major else o.runtime
                for o in self.objects if o.runtime}
        return ", ".join(said[key] for key in sorted(said)) or None


def audit_wheel(wheel: Path, device: list[DeviceCode], cuobjdump: Path, env: TorchEnv | None,
                policies: list[manylinux.Policy] | None, *, not_resolved: str = "") -> Audit:
    """The audit of `wheel`, whose device code `device` is (inventory.py); its imports are
    resolved against `env` (None: not, `not_resolved` says why)."""
    arch = arch_of(wheel.name.removesuffix(".whl").rsplit("-", 1)[-1])
    with shared_objects(wheel) as files:
        linked = [(member, path, linkage(path)) for member, path in files]
        objects = tuple(_object(member, path, found, cuobjdump)
                        for member, path, found in linked)
        resolution = resolve([(m, p) for m, p, _ in linked], env) if env is not None else None
    needs = _system_needs([(m, found) for m, _, found in linked])
    return Audit(objects, tuple(device),
                 manylinux.evidence(needs, policies, arch) if policies else None,
                 driver_floor(objects), resolution,
                 None if env is not None else not_resolved, needs, tuple(policies or ()))


def _object(member: str, path: Path, found: Linkage | None, cuobjdump: Path) -> ObjectAudit:
    needed = found.needed if found is not None else ()
    runtime = next((n for n in needed if RUNTIME.match(n)), None)
    if runtime is None and fatbin.entries(path) and found is not None and \
            all(i.name != REGISTRATION for i in found.imports):
        runtime = "static"
    versions = {lib: tuple(v for v in versions if SYSTEM_VERSION.match(v))
                for lib, versions in (found.versions if found else {}).items()}
    return ObjectAudit(member, needed, runtime, {k: v for k, v in versions.items() if v},
                       read_toolkits(path, cuobjdump, member))


def _system_needs(linked: list[tuple[str, Linkage | None]]) -> dict[str, dict[str, list[str]]]:
    """The system's libraries -> each version asked -> `symbol in object` for each import."""
    needs: dict[str, dict[str, list[str]]] = {}
    for member, found in linked:
        for item in found.imports if found is not None else ():
            if item.library and item.version and SYSTEM_VERSION.match(item.version) and \
                    not manylinux.provided_by_torch_or_cuda(item.library):
                needs.setdefault(item.library, {}).setdefault(item.version, []).append(
                    f"{item.name} in {member}")
    return needs


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def ptx_release(isa: str) -> str | None:
    """The CUDA release whose PTX ISA `isa` is ("9.0" -> "13.0"); None where not known."""
    major, minor = (int(p) for p in isa.split("."))
    return f"13.{minor}" if major == 9 else PTX_RELEASES.get((major, minor))


def driver_floor(objects: tuple[ObjectAudit, ...]) -> dict[str, Any]:
    """The oldest driver the objects need, and each reason ("version": None where none is
    known: no device code, no runtime, or only PTX of a release whose driver wheelsmith does
    not list)."""
    reasons: list[tuple[str | None, str]] = []
    for toolkit in sorted({t for o in objects for t in o.toolkits.cubins}, key=_key):
        major = int(toolkit.split(".")[0])
        reasons.append((MIN_DRIVER.get(major), f"cubins of CUDA {toolkit} (any CUDA {major} "
                                               "driver runs them)"))
    for major in sorted({o.runtime_major for o in objects if o.runtime_major}):
        reasons.append((MIN_DRIVER.get(major), f"the CUDA {major} runtime"))
    for isa in sorted({i for o in objects for i in o.toolkits.ptx_isa}, key=_key):
        release = ptx_release(isa)
        exact = MIN_DRIVER.get(int(release.split(".")[0])) if release and \
            release.endswith(".0") else None
        reasons.append((exact, f"PTX ISA {isa}, which a driver of CUDA {release or '?'} or "
                               "newer compiles" + ("" if exact else " (that driver's number "
                                                   "is not known to wheelsmith)")))
    known = [r for r in reasons if r[0] is not None]
    top = max(known, key=lambda r: _key(r[0] or "0")) if known else None
    return {"version": top[0] if top else None, "set_by": top[1] if top else None,
            "reasons": [{"driver": v, "why": why} for v, why in reasons]}


def describe(audit: Audit) -> list[str]:
    """What `wheelsmith verify` prints of an audit, one line each."""
    driver = audit.driver
    lines = [f"CUDA runtime: {audit.runtime() or 'none (it loads no CUDA runtime)'}",
             f"oldest driver: {driver['version']} (set by {driver['set_by']})"
             if driver["version"] else "oldest driver: not known (" + (
                 "; ".join(r["why"] for r in driver["reasons"]) or "no device code") + ")"]
    lines.append("manylinux: " + describe_manylinux(audit.tag))
    if audit.resolution is None:
        lines.append(f"symbols: not resolved ({audit.not_resolved})")
    else:
        found = audit.resolution
        against = (f"torch {found.torch}'s libraries and its CUDA libraries" if found.torch
                   else "the environment's CUDA libraries (it has no torch)")
        lines.append(f"symbols: {found.resolved} resolved against {against}, "
                     f"{len(found.unresolved)} undefined" + (
                         f", {found.left_to_driver} left to the driver (no stub of its "
                         "library here)" if found.left_to_driver else ""))
    if audit.stable is not None:
        lines.append(audit.stable.describe())
    return lines


def describe_manylinux(found: dict[str, Any] | None) -> str:
    if found is None:
        return "not determined (no manylinux policy data for its platform: auditwheel's)"
    setters = "; ".join(f"{s['version']} ({', '.join(s['symbols'][:3])}"
                        f"{', ...' if len(s['symbols']) > 3 else ''})" for s in found["set_by"])
    if found["tag"] is None:
        return f"no manylinux policy allows its symbol versions: {setters}"
    if not setters:
        return f"{found['tag']} (the most compatible policy lists every symbol version it needs)"
    return f"{found['tag']}, set by {setters}: {found['next_refused']} does not list it"


ABI_HINT = ("it was built against another torch or CUDA major than this environment's: install "
            "the torch it pins (its Requires-Dist), or build it for this one (wheelsmith build "
            "NAME --python PATH)")
OWN_BUILD_HINT = ("no library it links should define it: the package's build left it undefined "
                  "(a source file or a -l library missing from that extension); patch its "
                  "build, or leave the module out of the wheel")


def _unresolved_hint(found: Resolution) -> str:
    """An ABI mismatch where a symbol should come from torch or CUDA, or a library is
    missing; else the package's own build left it undefined."""
    theirs = found.missing or any(u.library != UNKNOWN_PROVIDER for u in found.unresolved)
    return ABI_HINT if theirs else OWN_BUILD_HINT


def check(label: str, audit: Audit, platform: str) -> None:
    """Refuse a wheel whose objects leave a symbol undefined against the torch they were
    resolved against, or whose platform tag promises an older system than its symbol
    versions need."""
    found = audit.resolution
    if found is not None and not found.ok:
        raise VerifyError(
            f"{label} does not load against {found.where}: "
            f"{len(found.unresolved)} symbol(s) undefined, {len(found.missing)} library(ies) "
            "missing", findings=found.findings(), hint=_unresolved_hint(found))
    first = platform.split(".", 1)[0]
    promised = next((p for p in audit.policies
                     if first in {f"{n}_{arch_of(platform)}" for n in (p.name, *p.aliases)}),
                    None)
    missing = promised.missing({k: set(v) for k, v in audit.needs.items()}) if promised else []
    if promised is not None and missing:
        raise VerifyError(
            f"{label} is tagged {first}, but its symbol versions need more "
            f"than {promised.name} allows", findings=[
                f"{version}: " + ", ".join(sorted({s for v in audit.needs.values()
                                                   for s in v.get(version, [])})[:5])
                for version in missing],
            hint="its tag promises a system it does not load on: rebuild it (wheelsmith tags "
                 "a wheel by its symbol versions)")


def arch_of(platform: str) -> str:
    """The CPU of a platform tag: x86_64 of manylinux_2_34_x86_64 or linux_x86_64."""
    return re.sub(r"^(manylinux\d*(_\d+_\d+)?|linux)_", "", platform.split(".", 1)[0])
