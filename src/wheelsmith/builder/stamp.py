"""Stamp a verified wheel: local version label, torch pin, platform tag, provenance record.

The label encodes CUDA, torch and the arch set in numeric dotted segments
(`1.7.0+cu.13.0.torch.2.14.sm.120`); `Requires-Dist` pins torch to the toolchain's
major.minor and names the host libraries' wheels installed for the build; the platform tag is
the one manylinux.py found (filename and WHEEL `Tag:` lines); `<dist-info>/wheelsmith.json`
holds the provenance, `<dist-info>/sboms/` the SBOM made from it (sbom.py, PEP 770). The
rewrite is deterministic.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from wheelsmith import wheelfile
from wheelsmith.builder import sbom
from wheelsmith.untrusted.provenance import PROVENANCE_FILE
from wheelsmith.wheelfile import WheelName

log = logging.getLogger(__name__)


def stamped_name(raw: Path, label: str, platform: str | None = None) -> WheelName:
    """The stamped wheel's name: the label, and `platform` (e.g. "manylinux_2_34_x86_64")
    in place of the build's platform tag when given."""
    name = WheelName.parse(raw.name)
    if name.version.local:
        log.warning("%s already has a local version label; replacing it with +%s", raw.name, label)
    labelled = WheelName(name.name, Version(f"{name.version.public}+{label}"), name.build,
                         name.tags)
    return labelled.with_platform(platform) if platform else labelled


def edit_metadata(text: str, *, version: Version, torch_requirement: str | None,
                  requires: tuple[str, ...] = ()) -> str:
    """Set Version, and put `torch_requirement` (if given) and `requires` (the host libraries'
    wheels, builder/hostlibs.py) in place of any requirement on the same projects."""
    ours = [*([torch_requirement] if torch_requirement else []), *requires]
    names = {_name(f"Requires-Dist: {requirement}") for requirement in ours}
    head, sep, body = text.partition("\n\n")
    lines = []
    for line in head.splitlines():
        if line.startswith("Requires-Dist:") and _name(line) in names:
            continue
        lines.append(f"Version: {version}" if line.startswith("Version:") else line)
    if ours:
        last_requires = max((i for i, line in enumerate(lines)
                             if line.startswith("Requires-Dist:")), default=len(lines) - 1)
        lines[last_requires + 1:last_requires + 1] = [f"Requires-Dist: {r}" for r in ours]
    return "\n".join(lines) + (sep + body if sep else "\n")


def _name(line: str) -> str:
    """The project a Requires-Dist line names (canonical); a line no requirement parses
    from is torch's where it starts with torch's name, else itself."""
    value = line.split(":", 1)[1].strip()
    try:
        return canonicalize_name(Requirement(value).name)
    except InvalidRequirement:
        return "torch" if re.match(r"Requires-Dist:\s*torch\b", line) else line


def stamp(raw: Path, out_dir: Path, *, label: str, torch_requirement: str | None,
          provenance: dict[str, Any], epoch: int, platform: str | None = None,
          requires: tuple[str, ...] = ()) -> Path:
    """Write the stamped wheel into `out_dir` (a scratch directory) and return its path."""
    name = stamped_name(raw, label, platform)
    target = out_dir / name.filename()
    wheelfile.rewrite(
        raw,
        target,
        name=name,
        edits={"METADATA": lambda text: edit_metadata(text, version=name.version,
                                                      torch_requirement=torch_requirement,
                                                      requires=requires),
               "WHEEL": lambda text: wheelfile.set_tags(text, name.tag_lines())},
        extra={PROVENANCE_FILE: (json.dumps(provenance, indent=2, sort_keys=True) + "\n").encode(),
               sbom.file_name(name): sbom.document(name, provenance)},
        epoch=epoch,
    )
    return target

