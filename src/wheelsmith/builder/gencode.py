"""The CUDA targets of a generated build.ninja: read (SASS and PTX, named `sm_XX` for both, as
cuobjdump names them) and, for the family targets torch's arch list cannot name, placed
(`compute_120` -> `compute_120f`). Standard library only: it runs inside the package's build, in
the pre-build check's Python."""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

FAMILY = "WHEELSMITH_FAMILY"  # base codes (120) whose targets become family ones (120f)
REWRITTEN = "wheelsmith targets: "  # the line that says arch.rewrite was done
REWRITE = "WHEELSMITH_REWRITE_TARGETS"  # "sm_120,sm_90a;sm_120": SASS;PTX the build gets
# one CUDA target flag, whole: -gencode=arch=…,code=…, --generate-code=…, -arch=sm_90, -code=…
_TARGET_FLAG = re.compile(r"(?:-gencode=|--generate-code=)?arch=compute_\w+,code=\S+"
                          r"|(?:-arch|--gpu-architecture)=(?:sm|compute)_\w+|-code=\S+")
_TAKES_VALUE = frozenset({"-gencode", "--generate-code", "-arch", "--gpu-architecture", "-code"})
_CODE_RE = re.compile(r"arch=compute_(\w+?),code=(\[[^\]]*\]|[\w,]+)")
_ARCH_RE = re.compile(r"(?:^|\s)-arch[= ]sm_(\d+[af]?)(?=\s|$)")
_ARCH_PTX_RE = re.compile(r"(?:^|\s)-arch[= ]compute_(\d+[af]?)(?=\s|$)")


@dataclass(frozen=True, slots=True)
class Targets:
    sass: frozenset[str]
    ptx: frozenset[str]

    def as_dict(self) -> dict[str, list[str]]:
        return {"sass": sorted(self.sass), "ptx": sorted(self.ptx)}


def gencode_targets(ninja_text: str) -> Targets:
    """SASS and PTX targets (named `sm_XX` for both, as cuobjdump does) of a build.ninja."""
    sass: set[str] = set()
    ptx: set[str] = set()
    for match in _CODE_RE.finditer(ninja_text):
        for code in match[2].strip("[]").split(","):
            kind, _, number = code.strip().partition("_")
            if kind == "sm":
                sass.add(f"sm_{number}")
            elif kind == "compute":
                ptx.add(f"sm_{number}")
    for match in _ARCH_RE.finditer(ninja_text):  # -arch=sm_90: SASS and PTX for 90
        sass.add(f"sm_{match[1]}")
        ptx.add(f"sm_{match[1]}")
    for match in _ARCH_PTX_RE.finditer(ninja_text):  # -arch=compute_50: PTX for 50 alone
        ptx.add(f"sm_{match[1]}")
    return Targets(frozenset(sass), frozenset(ptx))


def to_family(ninja_text: str, codes: frozenset[str]) -> str:
    """build.ninja with the CUDA targets of the base codes in `codes` made family targets:
    `arch=compute_120,code=[compute_120,sm_120]` -> `arch=compute_120f,code=[compute_120f,
    sm_120f]`, `-arch=sm_120` -> `-arch=sm_120f` (torch's arch list cannot name them). Only
    the target flags change: an arch-specific target (`compute_120a`) and every other word
    stay as they are."""
    if not codes:
        return ninja_text

    def one(code: str) -> str:
        return f"{code}f" if code in codes else code

    def gencode(match: re.Match[str]) -> str:
        if match[1] not in codes:
            return match[0]
        listed = re.sub(r"\b(sm|compute)_(\d+)\b", lambda m: f"{m[1]}_{one(m[2])}", match[2])
        return f"arch=compute_{one(match[1])},code={listed}"

    def arch_flag(match: re.Match[str]) -> str:
        start, end = match.span(1)
        return match[0][:start - match.start()] + one(match[1]) + match[0][end - match.start():]

    text = _CODE_RE.sub(gencode, ninja_text)
    return _ARCH_PTX_RE.sub(arch_flag, _ARCH_RE.sub(arch_flag, text))


def target_flags(sass: frozenset[str], ptx: frozenset[str]) -> list[str]:
    """The -gencode flags that compile SASS `sass` and PTX `ptx` (named `sm_120`, `sm_90a`)."""
    return [*(f"-gencode=arch=compute_{s[3:]},code={s}" for s in sorted(sass)),
            *(f"-gencode=arch=compute_{p[3:]},code=compute_{p[3:]}" for p in sorted(ptx))]


def retarget(ninja_text: str, flags: list[str]) -> str:
    """build.ninja with every CUDA target flag of each line that has one replaced by `flags`
    (placed where the line's first one was); every other word stays as it is."""
    out = []
    for line in ninja_text.splitlines(keepends=True):
        body = line.rstrip("\n")
        words = body.split(" ")
        if not any(_TARGET_FLAG.fullmatch(w) or w in _TAKES_VALUE for w in words):
            out.append(line)
            continue
        kept: list[str] = []
        placed, skip = False, False
        for i, word in enumerate(words):
            if skip:
                skip = False
                continue
            pair = word in _TAKES_VALUE and i + 1 < len(words) and \
                bool(_TARGET_FLAG.fullmatch(f"{word}={words[i + 1]}"))
            if not (pair or _TARGET_FLAG.fullmatch(word)):
                kept.append(word)
                continue
            skip = pair
            if not placed:
                kept.extend(flags)
                placed = True
        out.append(" ".join(kept) + line[len(body):])
    return "".join(out)


def rewritten_targets(ninja_file: Path, environ: Mapping[str, str]) -> str | None:
    """Where the recipe asks (REWRITE), the build file's CUDA targets replaced by the requested
    ones and written back, said on stderr with what they were; the text, or None where
    nothing was asked or changed."""
    asked = environ.get(REWRITE)
    if asked is None:
        return None
    sass, _, ptx = asked.partition(";")
    text = ninja_file.read_text(errors="replace")
    placed = retarget(text, target_flags(frozenset(s for s in sass.split(",") if s),
                                         frozenset(p for p in ptx.split(",") if p)))
    if placed == text:
        return None
    scratch = ninja_file.with_name(f"{ninja_file.name}.wheelsmith-targets")
    scratch.write_text(placed)
    scratch.replace(ninja_file)
    before = gencode_targets(text)
    sys.stderr.write(f"{REWRITTEN}{ninja_file.resolve()} compiled SASS "
                     f"{', '.join(sorted(before.sass)) or '-'} and PTX "
                     f"{', '.join(sorted(before.ptx)) or '-'} of its own; it compiles the "
                     "requested targets instead (arch.rewrite)\n")
    return placed


def family_targets(ninja_file: Path, environ: Mapping[str, str]) -> str:
    """The build file's text, its family targets placed (FAMILY) and written back first."""
    text = ninja_file.read_text(errors="replace")
    placed = to_family(text, frozenset(c for c in environ.get(FAMILY, "").split(",") if c))
    if placed != text:
        scratch = ninja_file.with_name(f"{ninja_file.name}.wheelsmith-family")
        scratch.write_text(placed)
        scratch.replace(ninja_file)
    return placed
