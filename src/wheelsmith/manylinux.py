"""The platform tag and glibc floor of a built wheel, from `auditwheel show`.

wheelsmith keeps the `linux_x86_64` tag: the extensions link against libtorch and libc10 from
the torch wheel, which auditwheel must not graft into the wheel, and CUDA runtime libraries
come from torch's own dependencies. What auditwheel reports is recorded in the provenance: the
tag the wheel is consistent with, the manylinux tag its versioned symbols constrain it to, and
so the oldest glibc it needs.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from wheelsmith import cmd
from wheelsmith.errors import CommandError

_CONSISTENT = re.compile(r'consistent with the following platform tag:\s*"([^"]+)"')
_CONSTRAINED = re.compile(r'constrains the platform tag to\s*"([^"]+)"')
_GLIBC = re.compile(r"GLIBC_(\d+)\.(\d+)")
_FLOOR = re.compile(r"manylinux_(\d+)_(\d+)_")


def report(wheel: Path, auditwheel: Path) -> dict[str, Any]:
    try:
        result = cmd.run([auditwheel, "show", wheel], stream=False, what="auditwheel show")
    except CommandError as exc:
        return {"error": exc.message}
    text = " ".join((result.stdout + result.stderr).split())
    consistent = _CONSISTENT.search(text)
    constrained = _CONSTRAINED.search(text)
    symbols = sorted({(int(a), int(b)) for a, b in _GLIBC.findall(text)})
    floor = _FLOOR.search(constrained[1]) if constrained else None
    return {
        "tag": "linux_x86_64",
        "auditwheel_consistent_with": consistent[1] if consistent else None,
        "symbols_constrain_to": constrained[1] if constrained else None,
        "glibc_floor": f"{floor[1]}.{floor[2]}" if floor else None,
        "newest_glibc_symbol": f"{symbols[-1][0]}.{symbols[-1][1]}" if symbols else None,
    }
