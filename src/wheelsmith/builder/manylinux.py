"""The honest platform tag of a built wheel: `manylinux_2_X_<arch>` from its real glibc floor.

A wheel's shared objects need three kinds of libraries:

- its own (inside the wheel);
- torch's and CUDA's (libtorch*, libc10*, libcudart, ...; `TORCH_AND_CUDA`): at run time they
  come from the torch wheel and its nvidia-* dependencies (the CUDA driver's libcuda from the
  system), which carry their own platform tags. They are excluded: never grafted into the
  wheel, and what they need themselves is their wheels' business;
- the system's (glibc, libstdc++, libgcc_s, ...), which manylinux policies allow up to the
  symbol versions each policy lists.

`auditwheel show --json`, run with an empty library search path so that it reads only the
wheel's own ELF files (never a library that happens to be installed on the build machine: the
tag must depend on the wheel alone), gives the versioned symbols those files need and, per
policy, the libraries the policy would have to graft. The floor is the most compatible
manylinux policy of auditwheel's policy data that

1. whitelists every library the wheel needs, except torch's and CUDA's,
2. blacklists none of the symbols it uses, and
3. lists every symbol version it needs from those libraries: GLIBC_, and also GLIBCXX_,
   CXXABI_, GCC_ (a new libstdc++ fails at import just like a new glibc).

When that cannot be determined (no auditwheel, no policy data, the wheel needs another
library), the wheel keeps `linux_<arch>` and the record says why: the tag is never guessed.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from wheelsmith import cmd
from wheelsmith.errors import CommandError
from wheelsmith.untrusted import tool_bounds
from wheelsmith.wheelfile import WheelName

log = logging.getLogger(__name__)

TORCH_AND_CUDA = (
    "libtorch*.so*", "libc10*.so*", "libshm.so*", "libcaffe2_nvrtc.so*",  # the torch wheel
    "libcuda.so*",  # the driver
    "libcudart.so*", "libcublas*.so*", "libcudnn*.so*", "libcufft*.so*", "libcufile*.so*",
    "libcurand.so*", "libcusolver*.so*", "libcusparse*.so*", "libnccl.so*", "libnvrtc*.so*",
    "libnvJitLink.so*", "libnvToolsExt.so*", "libnvshmem*.so*", "libcupti.so*",  # nvidia-*
)
POLICY_FILE = "manylinux-policy.json"
_MANYLINUX = re.compile(r"^manylinux_(\d+)_(\d+)$")


def provided_by_torch_or_cuda(soname: str) -> bool:
    return any(fnmatch.fnmatchcase(soname, pattern) for pattern in TORCH_AND_CUDA)


@dataclass(frozen=True, slots=True)
class Policy:
    """One manylinux policy of auditwheel's data, for one architecture."""

    name: str  # manylinux_2_34
    aliases: tuple[str, ...]  # manylinux2014 for manylinux_2_17
    priority: int  # higher: more compatible
    symbol_versions: dict[str, frozenset[str]]  # "GLIBCXX" -> {"3.4", ..., "3.4.29"}

    @property
    def glibc(self) -> str:
        match = _MANYLINUX.match(self.name)
        assert match is not None
        return f"{match[1]}.{match[2]}"

    def tag(self, arch: str) -> str:
        """The platform tag with its legacy alias (a compressed tag set), as auditwheel does."""
        return ".".join(f"{name}_{arch}" for name in (self.name, *self.aliases))

    def missing(self, needed: dict[str, set[str]]) -> list[str]:
        """The symbol versions in `needed` (library -> {"GLIBC_2.32", ...}) it does not list."""
        return sorted(symbol for symbols in needed.values() for symbol in symbols
                      if symbol.partition("_")[2] not in
                      self.symbol_versions.get(symbol.partition("_")[0], frozenset()))


@dataclass(frozen=True, slots=True)
class Platform:
    """What the stamp sets as the platform tag, and the record of why (for the provenance)."""

    tag: str  # "manylinux_2_34_x86_64", or the build's own "linux_x86_64" / "any"
    glibc_floor: str | None
    record: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"tag": self.tag, "glibc_floor": self.glibc_floor, **self.record}

    def describe(self) -> str:
        if self.glibc_floor is not None:
            return f"{self.tag} (glibc >= {self.glibc_floor})"
        return f"{self.tag} ({self.record.get('reason', '')})"


class _Undetermined(Exception):
    """Internal: why the floor cannot be determined (becomes the record's reason)."""


def assess(wheel: Path, auditwheel: Path | None) -> Platform:
    """The platform tag `wheel` (as the build wrote it) should carry."""
    platform = WheelName.parse(wheel.name).tags.split("-")[-1]
    if platform == "any":
        return Platform(platform, None, {"reason": "a pure Python wheel has no platform tag"})
    if not platform.startswith("linux_"):
        return Platform(platform, None, {"reason": f"the build tagged it {platform} itself"})
    arch = platform.removeprefix("linux_")
    try:
        if auditwheel is None:
            raise _Undetermined("auditwheel is not available: add it to the profile's tools, "
                                "or put it on PATH")
        policies, version = load_policies(auditwheel, arch)
        return _floor(show(wheel, auditwheel), policies, arch, f"auditwheel {version}")
    except _Undetermined as exc:
        reason = f"{exc}; the tag stays {platform} (not guessed)"
        log.warning("%s: %s", wheel.name, reason)
        return Platform(platform, None, {"reason": reason})


def show(wheel: Path, auditwheel: Path) -> dict[str, Any]:
    """`auditwheel show --json`, reading only the wheel's own ELF files (an empty --ldpaths,
    and no AUDITWHEEL_LD_LIBRARY_PATH, which would add to it)."""
    with tempfile.TemporaryDirectory(prefix="wheelsmith-ldpaths-") as nothing:
        try:
            result = cmd.run([auditwheel, "show", "--json", "--ldpaths", nothing, wheel],
                             env=_without("AUDITWHEEL_LD_LIBRARY_PATH"), stream=False,
                             what=f"auditwheel show ({auditwheel})", bounds=tool_bounds())
        except CommandError as exc:
            raise _Undetermined(exc.message + "".join(f": {line}" for line in exc.tail[-1:])
                                ) from exc
    try:
        data: dict[str, Any] = json.loads(result.stdout)
    except ValueError as exc:
        raise _Undetermined(f"auditwheel show --json printed no JSON ({exc})") from exc
    if data.get("error") or "versioned_symbols" not in data:
        raise _Undetermined(f"auditwheel show: {data.get('error', 'no versioned symbols')}")
    return data


def _without(variable: str) -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if key != variable}


def load_policies(auditwheel: Path, arch: str) -> tuple[list[Policy], str]:
    """auditwheel's manylinux policies for `arch`, most compatible first, and its version, read
    from the installation the `auditwheel` script belongs to."""
    prefix = auditwheel.resolve().parent.parent
    found = sorted(prefix.glob(f"lib/python3*/*-packages/auditwheel/policy/{POLICY_FILE}"))
    if len(found) != 1:
        raise _Undetermined(f"cannot find auditwheel's policy data under {prefix} (found "
                            f"{len(found)} {POLICY_FILE})")
    site = found[0].parents[2]
    versions = [p.name.removesuffix(".dist-info").partition("-")[2]
                for p in site.glob("*.dist-info")
                if canonicalize_name(p.name.partition("-")[0]) == "auditwheel"]
    policies = [_policy(entry, arch) for entry in json.loads(found[0].read_text())
                if _MANYLINUX.match(entry["name"]) and arch in entry["symbol_versions"]]
    if not policies:
        raise _Undetermined(f"auditwheel's policy data has no manylinux policy for {arch}")
    return sorted(policies, key=lambda p: -p.priority), versions[0] if versions else "?"


def _policy(entry: dict[str, Any], arch: str) -> Policy:
    return Policy(name=entry["name"], aliases=tuple(entry.get("aliases", ())),
                  priority=int(entry["priority"]),
                  symbol_versions={key: frozenset(values) for key, values in
                                   entry["symbol_versions"][arch].items()})


def _floor(report: dict[str, Any], policies: list[Policy], arch: str, tool: str) -> Platform:
    for flag, what in (("pyfpe", "uses PyFPE_jbuf"), ("ucs2", "uses narrow unicode (UCS2)"),
                       ("unsupported_isa", "needs ISA extensions beyond the baseline")):
        if report.get(flag):
            raise _Undetermined(f"{tool}: the wheel {what}, which no manylinux tag allows")
    symbols: dict[str, list[str]] = report["versioned_symbols"]
    excluded = sorted({lib for upgrade in report.get("policy_upgrades", {}).values()
                       for lib in upgrade.get("libs_to_eliminate", [])
                       if provided_by_torch_or_cuda(lib)} |
                      {lib for lib in symbols if provided_by_torch_or_cuda(lib)})
    needed = {lib: set(versions) for lib, versions in symbols.items() if lib not in excluded}
    refused: list[str] = []
    for policy in policies:
        problems = _problems(policy, arch, report, needed)
        if not problems:
            return Platform(policy.tag(arch), policy.glibc, {
                "policy": f"{policy.name}_{arch}", "checked_with": tool,
                "older_policy_refused": refused,
                "symbol_versions": {lib: sorted(v) for lib, v in sorted(needed.items())},
                "excluded": excluded,
                "excluded_why": "torch's and CUDA's libraries come from the torch wheel, its "
                                "nvidia-* dependencies and the driver; never grafted"})
        refused = [f"{policy.name}_{arch}: {problem}" for problem in problems]
    raise _Undetermined(f"{tool}: no manylinux policy fits ({refused[0]})")


def _problems(policy: Policy, arch: str, report: dict[str, Any],
              needed: dict[str, set[str]]) -> list[str]:
    upgrade = report.get("policy_upgrades", {}).get(f"{policy.name}_{arch}", {})
    foreign = [lib for lib in upgrade.get("libs_to_eliminate", [])
               if not provided_by_torch_or_cuda(lib)]
    problems = [f"needs {lib}, which is neither a system library the policy allows nor "
                "torch's or CUDA's" for lib in foreign]
    problems += [f"uses blacklisted symbols of {lib}"
                 for lib in upgrade.get("blacklisted_symbols", {})]
    return problems + [f"needs {symbol}" for symbol in policy.missing(needed)]


def evidence(needs: dict[str, dict[str, list[str]]], policies: list[Policy], arch: str
             ) -> dict[str, Any]:
    """The manylinux tag the symbol versions in `needs` (library -> version -> the symbols
    that ask for it, each `name in object`) allow, and what sets it: the versions the next
    more compatible policy does not list, with the symbols that need them. `policies` most
    compatible first; torch's and CUDA's libraries are not in `needs`."""
    needed = {lib: set(versions) for lib, versions in needs.items()}
    refused: Policy | None = None
    for policy in policies:
        missing = policy.missing(needed)
        if not missing:
            setters = refused.missing(needed) if refused is not None else []
            return {"tag": f"{policy.name}_{arch}", "glibc": policy.glibc,
                    "set_by": [{"version": version, "symbols": _askers(needs, version)}
                               for version in setters],
                    "next_refused": f"{refused.name}_{arch}" if refused else None}
        refused = policy
    last = refused.missing(needed) if refused is not None else []
    return {"tag": None, "glibc": None,
            "set_by": [{"version": version, "symbols": _askers(needs, version)}
                       for version in last],
            "next_refused": f"{refused.name}_{arch}" if refused else None}


def _askers(needs: dict[str, dict[str, list[str]]], version: str) -> list[str]:
    return sorted({symbol for versions in needs.values() for symbol in versions.get(version, [])})


def policies_for(auditwheel: Path | None, arch: str) -> list[Policy] | None:
    """auditwheel's policies for `arch`, most compatible first; None where there are none
    (no auditwheel, no policy data)."""
    if auditwheel is None:
        return None
    try:
        return load_policies(auditwheel, arch)[0]
    except (_Undetermined, OSError, ValueError, KeyError) as exc:
        log.warning("no manylinux policy data: %s", exc)
        return None
