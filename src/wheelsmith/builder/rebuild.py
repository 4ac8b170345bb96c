"""`wheelsmith verify --rebuild`: build a wheel again from its provenance and compare the bytes.

The wheel's `wheelsmith.json` names what defines its build (reproducible.py): the recipe and
version, the toolchain profile and Python, the archs and any `--env`. The rebuild resolves
those here, refuses when they give another content key (the recipe, a patch or the profile
changed: the bytes could not match), builds without a compile cache into its own output
directory, and compares sha256. On a mismatch it names each member that differs, is missing
or is extra, and keeps the rebuilt wheel to compare by hand.

A provenance is data, never commands: anyone can write one. Before anything is prepared,
each field that reaches a command or a path is checked as plain data (a name, a version, a
known profile, an arch list: `plan_rebuild`), and of its environment only build knobs are
applied by themselves (`judge_env`): the packages' switches (`KNOBS`, plain words) and nvcc's
extra flags from a vocabulary that names no program or path (`FLAG_KNOBS`). Any other
variable is applied only when the user repeats it (`--env NAME=VALUE`, the same value); what
wheelsmith sets itself (recipes/envnames.py) never is.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
import shlex
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from wheelsmith import locations
from wheelsmith.arch import ArchParseError, ArchSet
from wheelsmith.builder import parallel, reproducible, runner
from wheelsmith.builder.compilesetup import split_setting
from wheelsmith.builder.request import BuildRequest, Reporter
from wheelsmith.builder.verify import require_valid
from wheelsmith.errors import VerifyError
from wheelsmith.files import sha256_file
from wheelsmith.recipes.envnames import ENV_DOC, protection
from wheelsmith.toolchain.profile import SYSTEM, profile_files
from wheelsmith.untrusted import ENV_NAME_RE, clip, local
from wheelsmith.untrusted.provenance import Provenance, read_provenance

KNOBS = ("*_FORCE_BUILD", "*_SKIP_CUDA_BUILD", "*_FORCE_CXX11_ABI")  # a plain word each
FLAG_KNOBS = ("NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS")  # read by nvcc itself, word by word
_WORD = re.compile(r"[A-Za-z0-9_.+-]{0,64}")
_NVCC_FLAG = re.compile(
    r"(--?split-compile(-extended)?|--threads|-t)=[0-9]{1,3}|-lineinfo|--generate-line-info"
    r"|-O[0-3]|--?use_fast_math|--?extra-device-vectorization|--resource-usage|-res-usage"
    r"|--(ftz|prec-div|prec-sqrt|fmad)=(true|false)|--diag-suppress=[0-9,]{1,64}"
    r"|-D[A-Za-z_][A-Za-z0-9_]{0,63}(=[A-Za-z0-9_.]{0,64})?")
_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,98}[A-Za-z0-9])?")  # a PEP 508 name
_VERSION = re.compile(r"[A-Za-z0-9.+!_-]{1,64}")
_PYTHON = re.compile(r"3\.[0-9]{1,2}")
_KEY = re.compile(r"[0-9a-f]{16,128}")
_ARCHS = re.compile(r"[0-9A-Za-z.;,+ ]{0,200}")  # what ArchSet.parse reads; "" for pure
DATA_HINT = ("a wheel's provenance is data, never commands: the wheel was built by an older "
             "wheelsmith, or its wheelsmith.json was written by someone else")


@dataclass(frozen=True, slots=True)
class EnvEntry:
    """One variable of a provenance's environment, and whether a rebuild applies it."""

    name: str
    value: str
    refusal: str | None = None  # why it is not applied; None: applied
    accepted: bool = False  # applied because the command line repeats it
    repeatable: bool = False  # a refusal that repeating it (--env) would lift

    def shown(self) -> str:
        """NAME="value", every character that is not plain ASCII escaped (a terminal shows
        what it is, and does not obey it)."""
        name = self.name if ENV_NAME_RE.fullmatch(self.name) else json.dumps(self.name)
        return f"{name}={json.dumps(self.value)}"

    def describe(self) -> str:
        why = ("applied: a build knob" if self.refusal is None and not self.accepted else
               "applied: --env repeats it" if self.refusal is None else
               f"refused: {self.refusal}")
        return f"{self.shown()}   {why}"


def judge_env(extra_env: Mapping[str, str], accepted: Mapping[str, str]) -> list[EnvEntry]:
    """Each variable of a provenance's `extra_env`, judged: a build knob (KNOBS, FLAG_KNOBS),
    one the user repeats on the command line (`accepted`, the same value), or refused."""
    return [_judge(name, value, accepted) for name, value in sorted(extra_env.items())]


def _judge(name: str, value: str, accepted: Mapping[str, str]) -> EnvEntry:
    if not ENV_NAME_RE.fullmatch(name):
        return EnvEntry(name, value, "it is not a variable's name")
    protected = protection(name)
    if protected is not None:
        return EnvEntry(name, value, protected.why)
    if name in accepted:
        same = accepted[name] == value
        given = json.dumps(accepted[name])
        return EnvEntry(name, value, None if same else f"--env gives it {given}",
                        accepted=same)
    why = _knob_problem(name, value)
    return EnvEntry(name, value, why, repeatable=why is not None)


def _knob_problem(name: str, value: str) -> str | None:
    """Why (name, value) is not a build knob a rebuild applies by itself; None when it is."""
    upper = name.upper()
    if upper in FLAG_KNOBS:
        odd = [word for word in value.split() if not _NVCC_FLAG.fullmatch(word)]
        return f"{json.dumps(odd[0])} is not an nvcc flag a rebuild applies by itself" if odd \
            else None
    if any(fnmatch.fnmatchcase(upper, pattern) for pattern in KNOBS):
        return None if _WORD.fullmatch(value) else "its value is not a plain word"
    return "it is not a build knob a rebuild applies by itself"


def refusal(label: str, entries: list[EnvEntry]) -> VerifyError | None:
    """The error that names a refused entry, one that repeating cannot lift first, with the
    others as findings (None when every entry is applied)."""
    refused = sorted((e for e in entries if e.refusal is not None), key=lambda e: e.repeatable)
    if not refused:
        return None
    first, others = refused[0], [f"also refused: {e.shown()}: {e.refusal}" for e in refused[1:]]
    shown = first.shown()
    if first.repeatable and shown.isascii() and first.value.isprintable():
        again = shlex.quote(f"{first.name}={first.value}")
        hint = (f"if you trust it, repeat it: --env {again} (the build knobs a rebuild "
                f"applies by itself: {ENV_DOC})")
    elif first.repeatable:
        hint = "its value holds characters that are not printable: it is not shown as a command"
    else:
        hint = (f"{DATA_HINT}; what chooses programs, paths, archs or the network is "
                f"wheelsmith's ({ENV_DOC})")
    return VerifyError(f"{label}: its provenance sets {shown}, which a rebuild does not apply: "
                       f"{first.refusal}", findings=others, hint=hint)


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


@dataclass(frozen=True, slots=True)
class Rebuild:
    """What rebuilding a wheel will do: its request, the key it must give, the environment."""

    wheel: Path
    request: BuildRequest
    key: str
    env: tuple[EnvEntry, ...]

    def refusal(self) -> VerifyError | None:
        return refusal(self.wheel.name, list(self.env))


def plan_rebuild(wheel: Path, *, accepted: Mapping[str, str], work_dir: Path,
                 runner_name: str) -> Rebuild:
    """The build request the wheel's provenance describes, every field checked as data for
    this command (nothing prepared or run); its environment judged (`Rebuild.refusal`)."""
    if local.size_of(wheel) is None:  # a FIFO or a device: FileSystemError naming it
        raise VerifyError(f"no such wheel file: {wheel}")
    provenance = read_provenance(wheel)  # a record of another shape: UntrustedDataError
    require_valid(wheel)  # its members are compared after the build
    if provenance is None:
        raise VerifyError(f"{wheel.name} carries no wheelsmith provenance "
                          "(<dist-info>/wheelsmith.json)",
                          hint="only a wheel wheelsmith built can be rebuilt from itself")
    label = wheel.name
    entries = judge_env(provenance.extra_env, accepted)
    parsed = recorded_archs(label, provenance)
    request = BuildRequest(
        recipe=_plain(label, "recipe.package", provenance.recipe, _NAME, "a package name"),
        version=_version(label, provenance.version), archs=parsed,
        toolchain=_toolchain(label, provenance.toolchain),
        python_version=_plain(label, "toolchain.python", provenance.python, _PYTHON,
                              "a Python X.Y"),
        env=tuple((e.name, e.value) for e in entries if e.refusal is None),
        out_dir=work_dir / "rebuilt" / wheel.name.removesuffix(".whl"), work_dir=work_dir,
        compile_cache="off", compile_farm="off", runner=runner_name, rebuild=True, fresh=True,
        split_compile=reproducible_split(), torch_range=provenance.torch_range)
    key = _plain(label, "key", provenance.key, _KEY, "a content key")
    return Rebuild(wheel, request, key, tuple(entries))


def recorded_archs(label: str, provenance: Provenance) -> ArchSet | None:
    """The archs a wheel's provenance records (None for a pure wheel's ""); a VerifyError
    naming the field when they are not an arch list (never blamed on --arch)."""
    archs = _plain(label, "archs_requested", provenance.archs, _ARCHS, "an arch list")
    try:
        return ArchSet.parse([archs]) if archs else None
    except ArchParseError as exc:
        raise _bad(label, "archs_requested", archs,
                   f"an arch list ({clip(exc.message, 80)})") from None


def _plain(label: str, path: str, value: str | None, pattern: re.Pattern[str],
           what: str) -> str:
    """`value` (the provenance's at dotted `path`) when it is `what`; else a VerifyError
    naming the field."""
    if value is None:
        raise VerifyError(f"{label}: its provenance lacks what defines the build ({path})",
                          hint=DATA_HINT)
    if not pattern.fullmatch(value):
        raise _bad(label, path, value, what)
    return value


def _version(label: str, version: str | None) -> str:
    value = _plain(label, "recipe.version", version, _VERSION, "a version")
    try:
        Version(value)
    except InvalidVersion:
        raise _bad(label, "recipe.version", value, "a version") from None
    return value


def _toolchain(label: str, name: str | None) -> str:
    """The profile the wheel names: one known here (or 'system'), never a path."""
    value = _plain(label, "toolchain.name", name, _NAME, "a toolchain profile's name")
    known = profile_files(locations.profile_dirs())
    if value != SYSTEM and value not in known:
        raise VerifyError(f"{label}: its provenance names the toolchain profile {value}, which "
                          f"is not here (known: {', '.join(known) or 'none'})",
                          hint="rebuild where its profile is: WHEELSMITH_HOME with that "
                               "toolchains/NAME.yaml")
    return value


def _bad(label: str, path: str, value: object, what: str) -> VerifyError:
    shown = json.dumps(value)
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    return VerifyError(f"{label}: its provenance's {path} is {shown}, not {what}",
                       hint=DATA_HINT)


def rebuild(planned: Rebuild, *, report: Reporter) -> Comparison:
    """Build the wheel again as `planned` (plan_rebuild) says; the comparison of the two
    files. A refused environment stops it before anything is prepared."""
    refused = planned.refusal()
    if refused is not None:
        raise refused
    wheel, request = planned.wheel, planned.request
    refuse_unpromised(wheel)
    prepared = runner.prepare(request, report)
    if prepared.plan.key != planned.key:
        raise VerifyError(
            f"cannot rebuild {wheel.name} as it was built: the recipe, patches and toolchain "
            f"here give content key {prepared.plan.key[:12]}, the wheel says {planned.key[:12]}",
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
    provenance = read_provenance(wheel)
    if provenance is not None and reproducible.NOT_PROMISED in provenance.record:
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
    with local.open_zip(wheel) as ours, local.open_zip(rebuilt) as theirs:
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
