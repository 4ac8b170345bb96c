"""CUDA's math headers against a newer glibc: the backport a toolchain venv gets where its
CUDA's `crt/` headers predate the glibc it compiles against.

glibc 2.42 declares C23's `rsqrt`/`rsqrtf`, `noexcept` in C++ (`__THROW`); CUDA 13.0's
`crt/math_functions.h` declares them without, so every translation unit that includes
`<cmath>` stops with "exception specification is incompatible" (seen on Debian forky, the one
Debian with python3.14). CUDA 13.2 fixed it in its headers (`_NV_RSQRT_SPECIFIER`,
`noexcept(true)` from glibc 2.42 on); this module writes the same lines into an older CUDA's
headers, and only where the machine's glibc is 2.42 or newer: elsewhere the headers stay as
shipped, byte for byte, so the bytes of wheels built there do not move."""

from __future__ import annotations

import os
from pathlib import Path

from wheelsmith.errors import ToolchainError

FIX = "glibc-2.42-rsqrt"
MACRO = "_NV_RSQRT_SPECIFIER"
DEFINE = f"""
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 42))
# define {MACRO} noexcept(true) /* {FIX}: wheelsmith's backport of CUDA 13.2's fix */
#else
# define {MACRO}
#endif
"""
# (file, what is there, what CUDA 13.2 has instead): each must be found exactly once
EDITS = (
    ("math_functions.h", "#  define __NV_GLIBC_PROVIDES_IEC_60559_FUNCS 0\n#endif\n",
     "#  define __NV_GLIBC_PROVIDES_IEC_60559_FUNCS 0\n#endif\n" + DEFINE),
    ("math_functions.h", "double                 rsqrt(double x);",
     f"double                 rsqrt(double x) {MACRO};"),
    ("math_functions.h", "float                  rsqrtf(float x);",
     f"float                  rsqrtf(float x) {MACRO};"),
    ("math_functions.h", "__func__(double rsqrt(double a));",
     f"__func__(double rsqrt(double a) {MACRO});"),
    ("math_functions.h", "__func__(float rsqrtf(float a));",
     f"__func__(float rsqrtf(float a) {MACRO});"),
    ("math_functions.hpp", "__func__(double rsqrt(const double a))\n",
     f"__func__(double rsqrt(const double a)) {MACRO}\n"),
    ("math_functions.hpp", "__func__(float rsqrtf(const float a))\n",
     f"__func__(float rsqrtf(const float a) {MACRO})\n"),
)


def machine_glibc() -> tuple[int, int] | None:
    """The glibc this machine compiles against (its C library's version), or None (musl)."""
    try:
        _, version = (os.confstr("CS_GNU_LIBC_VERSION") or "").split()  # "glibc 2.42"
    except (ValueError, OSError, AttributeError):
        return None
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def needs_fix(crt: Path, glibc: tuple[int, int] | None) -> bool:
    """Whether CUDA's headers in `crt` miss glibc 2.42's `noexcept` and glibc has it."""
    header = crt / "math_functions.h"
    return (glibc is not None and glibc >= (2, 42) and header.is_file()
            and MACRO not in header.read_text())


def apply(crt: Path) -> None:
    """Write CUDA 13.2's rsqrt declarations into the older headers in `crt` (in place)."""
    texts = {name: (crt / name).read_text() for name in {edit[0] for edit in EDITS}}
    for name, old, new in EDITS:
        if texts[name].count(old) != 1:
            raise ToolchainError(
                f"{crt / name} is not laid out as CUDA 13.0's: cannot add glibc 2.42's "
                f"noexcept to its rsqrt declarations (looked for {old.strip()!r})",
                hint="on glibc 2.42 or newer use a profile with CUDA 13.2 or newer, whose "
                     "headers carry the fix (wheelsmith toolchain list)")
        texts[name] = texts[name].replace(old, new)
    for name, text in texts.items():
        (crt / name).write_text(text)


def fix_for_machine(cuda_home: Path) -> list[str]:
    """The fixes this machine's glibc needs in the toolchain at `cuda_home`, applied; their
    names (for the venv's marker)."""
    crt = cuda_home / "include" / "crt"
    if not needs_fix(crt, machine_glibc()):
        return []
    apply(crt)
    return [FIX]
