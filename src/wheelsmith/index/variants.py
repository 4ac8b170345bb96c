"""A preview of wheel-variant metadata: per project version, `{name}-{version}-variants.json`
beside the project's pages, shaped after the index-level file of PEP 825 (draft) with the
properties of PEP 850's (draft) namespaces, each value taken from the file's binary audit
(ledger `binaries`, from its provenance), never from how it was asked to be built.

wheelsmith's wheels are not variant wheels (their file names carry no variant label), so the
file name stands where a label would, and the document says it is a preview:

- `nvidia :: cuda_version_lower_bound`: the CUDA major its objects' runtime is, as `13.0`
  (CUDA's minor-version compatibility: the first driver of that major runs it);
- `nvidia :: sm_arch`: `120_real` for SASS sm_120, `120_virtual` for PTX;
- `abi_dependency :: torch`: the torch minor its symbols were resolved against (`2.14`).
"""

from __future__ import annotations

import json
import re
from typing import Any

from packaging.version import InvalidVersion, Version

from wheelsmith.index.ledger import FileRecord, ProjectState

NAMESPACES = ["nvidia", "abi_dependency"]
PREVIEW = ("shaped after PEP 825 and PEP 850 (drafts); these wheels are not variant wheels: "
           "each file name stands where a variant label would")


def pages(project: ProjectState) -> dict[str, bytes]:
    """The variants file of each version with audited files: {file name: bytes}."""
    by_version: dict[str, list[FileRecord]] = {}
    for record in project.files.values():
        if record.binaries:
            by_version.setdefault(record.version, []).append(record)
    return {file_name(records[0]): document(records) for records in by_version.values()}


def file_name(record: FileRecord) -> str:
    """`{name}-{version}-variants.json`, name and version as the wheel's file name has them."""
    name, version = record.filename.split("-")[:2]
    return f"{name}-{version}-variants.json"


def properties(binaries: dict[str, Any]) -> dict[str, dict[str, list[str]]]:
    """The variant properties one file's binary summary gives."""
    found: dict[str, dict[str, list[str]]] = {}
    majors = sorted(int(r) for r in binaries.get("cuda_runtime", []) if r.isdigit())
    if majors:
        found.setdefault("nvidia", {})["cuda_version_lower_bound"] = [f"{majors[-1]}.0"]
    archs = [f"{sm.removeprefix('sm_')}_real" for sm in binaries.get("sass", [])] + \
        [f"{sm.removeprefix('sm_')}_virtual" for sm in binaries.get("ptx", [])]
    if archs:
        found.setdefault("nvidia", {})["sm_arch"] = sorted(archs)
    torch = _minor(binaries.get("torch"))
    if torch:
        found["abi_dependency"] = {"torch": [torch]}
    return found


def _minor(version: str | None) -> str | None:
    try:
        parsed = Version(version or "")
    except InvalidVersion:
        return None
    return re.sub(r"[^a-z0-9_.]", "", f"{parsed.major}.{parsed.minor}")


def document(records: list[FileRecord]) -> bytes:
    data = {"default-priorities": {"namespace": NAMESPACES},
            "variants": {r.filename: properties(r.binaries or {})
                         for r in sorted(records, key=lambda r: r.filename)},
            "_wheelsmith": {"preview": PREVIEW}}
    return (json.dumps(data, indent=1, sort_keys=True) + "\n").encode()
