"""CUDA architectures: parse what users write, check it against a toolkit, name it in versions.

Users write compute capabilities the way `TORCH_CUDA_ARCH_LIST` does: `12.0`, `9.0;12.0`,
`12.0+PTX`, `9.0a`, and the family targets CUDA 12.9 added: `12.0f` (code for every GPU of
compute capability 12.x with minor >= 0, and the features the family shares). Everything else
(`sm_120`, `13.7`, `Blackwell`) is refused with a message that says what to write instead.

torch's `cpp_extension` does not take a family target in TORCH_CUDA_ARCH_LIST: a package is
told the base capability (`12.0`) in every form, and the pre-build check turns the build
files' `compute_120`/`sm_120` targets into `compute_120f`/`sm_120f` before anything is compiled
(builder/prebuild.py, `family_codes`).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass

from packaging.version import Version

# compute capability -> (first CUDA that compiles it, first CUDA that dropped it)
KNOWN_ARCHS: dict[str, tuple[str, str | None]] = {
    "5.0": ("6.5", "13.0"),
    "5.2": ("6.5", "13.0"),
    "5.3": ("6.5", "13.0"),
    "6.0": ("8.0", "13.0"),
    "6.1": ("8.0", "13.0"),
    "6.2": ("8.0", "13.0"),
    "7.0": ("9.0", "13.0"),
    "7.2": ("9.2", "13.0"),
    "7.5": ("10.0", None),
    "8.0": ("11.0", None),
    "8.6": ("11.1", None),
    "8.7": ("11.4", None),
    "8.9": ("11.8", None),
    "9.0": ("11.8", None),
    "10.0": ("12.8", None),
    "10.1": ("12.8", "13.0"),
    "10.3": ("12.9", None),
    "11.0": ("13.0", None),
    "12.0": ("12.8", None),
    "12.1": ("12.9", None),
}
# architecture-specific ("a") variants exist from Hopper on, family ("f") ones from Blackwell
ARCH_SPECIFIC_FROM = (9, 0)
FAMILY_FROM = (10, 0)
FAMILY_CUDA = "12.9"  # the first CUDA that compiles family targets
# one GPU, two numbers: CUDA 13 renamed Jetson Thor's sm_101 to sm_110
RENAMED = {"10.1": ("11.0", "CUDA 13 calls Jetson Thor 11.0"),
           "11.0": ("10.1", "CUDA 12 calls Jetson Thor 10.1")}

_ARCH_RE = re.compile(r"^(?P<major>\d+)\.(?P<minor>\d)(?P<suffix>[a-z]?)(?P<ptx>\+PTX)?$")


class ArchParseError(ValueError):
    """An arch string is not valid; `hint` says what to write instead."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


@dataclass(frozen=True, order=True, slots=True)
class Arch:
    major: int
    minor: int
    suffix: str = ""
    ptx: bool = False

    @property
    def capability(self) -> str:
        return f"{self.major}.{self.minor}"

    @property
    def code(self) -> str:
        """The number nvcc and cuobjdump use: `120`, `90a`."""
        return f"{self.major}{self.minor}{self.suffix}"

    @property
    def sm(self) -> str:
        return f"sm_{self.code}"

    @property
    def base(self) -> Arch:
        """The arch a package is told for a family target: `12.0` for `12.0f`."""
        return Arch(self.major, self.minor, "", self.ptx) if self.suffix == "f" else self

    @property
    def base_sm(self) -> str:
        """`sm_120` for 12.0a too: the name `nvcc --list-gpu-code` lists (no variants)."""
        return f"sm_{self.major}{self.minor}"

    def __str__(self) -> str:
        return f"{self.capability}{self.suffix}" + ("+PTX" if self.ptx else "")


def parse_arch(text: str) -> Arch:
    """Parse one entry such as `12.0`, `12.0+PTX` or `9.0a`."""
    raw = text.strip()
    match = _ARCH_RE.match(raw)
    if match is None:
        raise _explain_unparsable(raw)
    capability = f"{match['major']}.{match['minor']}"
    suffix = match["suffix"]
    if capability not in KNOWN_ARCHS:
        raise ArchParseError(
            f"unknown CUDA arch '{raw}'",
            hint=_did_you_mean(capability) + "known: " + ", ".join(KNOWN_ARCHS),
        )
    arch = Arch(int(match["major"]), int(match["minor"]), suffix, bool(match["ptx"]))
    if suffix not in ("", "a", "f"):
        raise ArchParseError(f"'{raw}': unknown suffix '{suffix}'",
                             hint="use '' , 'a' (arch-specific) or 'f' (family)")
    if suffix == "a" and (arch.major, arch.minor) < ARCH_SPECIFIC_FROM:
        raise ArchParseError(
            f"'{raw}': arch-specific 'a' targets exist only from 9.0 on",
            hint=f"use '{capability}'",
        )
    if suffix == "f" and (arch.major, arch.minor) < FAMILY_FROM:
        raise ArchParseError(
            f"'{raw}': family 'f' targets exist only from 10.0 on",
            hint=f"use '{capability}'",
        )
    return arch


def _did_you_mean(text: str) -> str:
    close = difflib.get_close_matches(text, list(KNOWN_ARCHS), n=1)
    return f"did you mean '{close[0]}'? " if close else ""


def _explain_unparsable(raw: str) -> ArchParseError:
    numbers = re.fullmatch(r"(?:sm_|compute_)?(\d+)(\d)([a-z]?)", raw)
    if numbers:
        guess = f"{numbers[1]}.{numbers[2]}{numbers[3]}"
        return ArchParseError(
            f"'{raw}' is not a compute capability",
            hint=f"write MAJOR.MINOR as TORCH_CUDA_ARCH_LIST does: did you mean '{guess}'?",
        )
    if raw.lower() in {"native", "all", "all-major", "blackwell", "hopper", "ada", "ampere"}:
        return ArchParseError(
            f"'{raw}' names a group of GPUs, not an arch",
            hint="list the archs explicitly, e.g. '10.0;12.0' (B200 + RTX 50 / RTX PRO 6000)",
        )
    return ArchParseError(
        f"'{raw}' is not a CUDA arch",
        hint="write MAJOR.MINOR, optionally with 'a' or '+PTX': e.g. '12.0', '9.0;12.0+PTX'",
    )


@dataclass(frozen=True, slots=True)
class ArchSet:
    """A sorted, duplicate-free set of requested archs."""

    archs: tuple[Arch, ...]

    @classmethod
    def parse(cls, values: Iterable[str]) -> ArchSet:
        """Parse `--arch` values; each may itself hold `;`- or space-separated entries."""
        entries = [e for v in values for e in re.split(r"[;\s,]+", v) if e]
        if not entries:
            raise ArchParseError("no arch given", hint="pass e.g. --arch 12.0")
        archs: dict[tuple[int, int, str], Arch] = {}
        for entry in entries:
            arch = parse_arch(entry)
            key = (arch.major, arch.minor, arch.suffix)
            if key in archs:
                raise ArchParseError(f"arch '{entry}' is listed twice")
            archs[key] = arch
        for arch in archs.values():
            if arch.suffix == "f" and (arch.major, arch.minor, "") in archs:
                raise ArchParseError(
                    f"'{arch.capability}' and '{arch}' are both listed: both run on every "
                    f"{arch.major}.x GPU from {arch.capability} on",
                    hint=f"keep one: '{arch}' where its family's features are wanted, else "
                         f"'{arch.capability}'")
        return cls(tuple(sorted(archs.values())))

    def __str__(self) -> str:
        return ";".join(str(a) for a in self.archs)

    @property
    def sass(self) -> frozenset[str]:
        """The `sm_XX` names cuobjdump must list as ELF (cubin) entries."""
        return frozenset(a.sm for a in self.archs)

    @property
    def ptx(self) -> frozenset[str]:
        """The `sm_XX` names cuobjdump must list as PTX entries (it names PTX `sm_`, too)."""
        return frozenset(a.sm for a in self.archs if a.ptx)

    def torch_arch_list(self) -> str:
        """The value for TORCH_CUDA_ARCH_LIST (a family target as its base: torch refuses
        `12.0f`)."""
        return ";".join(str(a.base) for a in self.archs)

    def numbers_list(self) -> str:
        """The `80;90;120` form some packages read (flash-attn's FLASH_ATTN_CUDA_ARCHS)."""
        return ";".join(a.base.code for a in self.archs)

    @property
    def family_codes(self) -> frozenset[str]:
        """The base codes (`120`) whose build-file targets become family targets (`120f`)."""
        return frozenset(a.base.code for a in self.archs if a.suffix == "f")

    def label(self) -> str:
        """Local-version segments: `sm.90.120`, plus `.ptx.120` for PTX; numbers stay numeric."""
        parts = ["sm", *(a.code for a in self.archs)]
        ptx = [a.code for a in self.archs if a.ptx]
        if ptx:
            parts += ["ptx", *ptx]
        return ".".join(parts)

    @staticmethod
    def label_device_code(local: str) -> tuple[frozenset[str], frozenset[str]] | None:
        """The inverse of `label()` inside a local version (`cu.13.0.torch.2.14.sm.90.120`):
        the (SASS, PTX) `sm_XX` names it promises, or None when it names no arch set."""
        parts = local.lower().split(".")
        if "sm" not in parts:
            return None
        start = parts.index("sm") + 1
        end = parts.index("ptx") if "ptx" in parts[start:] else len(parts)
        return (frozenset(f"sm_{code}" for code in parts[start:end]),
                frozenset(f"sm_{code}" for code in parts[end + 1:]))

    def toolkit_problems(self, cuda: Version) -> list[str]:
        """Archs the given CUDA toolkit cannot compile, each as a sentence."""
        problems = []
        for arch in self.archs:
            if arch.suffix == "f" and cuda < Version(FAMILY_CUDA):
                problems.append(f"arch {arch} is a family target, which needs CUDA >= "
                                f"{FAMILY_CUDA}, the toolchain has {cuda}")
            first, dropped = KNOWN_ARCHS[arch.capability]
            renamed = RENAMED.get(arch.capability)
            also = f" ({renamed[1]}: write {renamed[0]})" if renamed else ""
            if cuda < Version(first):
                problems.append(f"arch {arch} needs CUDA >= {first}, the toolchain has {cuda}"
                                + also)
            elif dropped is not None and cuda >= Version(dropped):
                problems.append(
                    f"arch {arch} was removed in CUDA {dropped}, the toolchain has {cuda}" + also)
        return problems
