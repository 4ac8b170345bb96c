"""An installed extension that does not import for an `undefined symbol`: the torch ABI
mismatch it is. The symbol is named demangled, with the torch the wheel was built for (its
local version label: `+cu.13.0.torch.2.14.sm.120`), the torch installed, and the fix."""

from __future__ import annotations

import re

from wheelsmith.untrusted.linkage import demangle

UNDEFINED = re.compile(r"undefined symbol: ([A-Za-z0-9_.$@]+)")
TORCH_LABEL = re.compile(r"torch\.?(\d+)\.(\d+)")  # +cu.13.0.torch.2.14.sm.90, +cu12torch2.6cxx11…
STABLE_LABEL = re.compile(r"(?:^|\.)stable\.(\d+)\.(\d+)")  # +cu.13.0.stable.2.10.sm.120


def built_for_torch(version: str) -> tuple[int, int] | None:
    """The torch (major, minor) a wheel's local label names, if it names one."""
    match = TORCH_LABEL.search(version.partition("+")[2])
    return (int(match[1]), int(match[2])) if match else None


def stable_floor(version: str) -> tuple[int, int] | None:
    """The oldest torch (major, minor) a stable-ABI wheel's label names (`stable.2.10`)."""
    match = STABLE_LABEL.search(version.partition("+")[2])
    return (int(match[1]), int(match[2])) if match else None


def explain(error: str, dist: str, version: str | None, torch: str, python: str) -> str | None:
    """What an import error that names an undefined symbol means, and what to do; None for
    another error."""
    found = UNDEFINED.search(error)
    if found is None:
        return None
    symbol = found[1].split("@")[0]
    shown = demangle([symbol]).get(symbol, symbol)
    named = f"{shown} ({symbol})" if shown != symbol else symbol
    built = built_for_torch(version or "")
    here = ".".join(torch.split("+", maxsplit=1)[0].split(".")[:2])
    said = f"{dist} {version}" if version else dist
    if (floor := stable_floor(version or "")) is not None:
        return (f"{said} does not import: {named} is undefined: it was built against torch's "
                f"stable ABI for torch {floor[0]}.{floor[1]} and newer, and this environment "
                f"has torch {torch}, whose libraries do not export it. Fix: install torch "
                f"{floor[0]}.{floor[1]} or newer, or rebuild it for this torch: wheelsmith "
                f"build {dist} --python {python}")
    if built is None:
        was = "a torch its version does not name (it has no torch in its local label)"
    else:
        was = f"torch {built[0]}.{built[1]}"
    same = built is not None and f"{built[0]}.{built[1]}" == here
    return (f"{said} does not import: {named} is undefined: it was built for {was}, and this "
            f"environment has torch {torch}, whose libraries do not export it: " +
            ("another build of the same torch minor (its ABI differs)" if same else
             "a torch ABI mismatch") +
            f". Fix: install its wheel built for torch {here} (below), or rebuild it for this "
            f"torch: wheelsmith build {dist} --python {python}")
