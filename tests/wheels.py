"""Write small, valid wheels for tests (the format, not a build)."""

from __future__ import annotations

import zipfile
from pathlib import Path

from wheelsmith.wheelfile import record_hash


def make_wheel(directory: Path, name: str = "demo", version: str = "1.0.0", *,
               files: dict[str, bytes] | None = None, requires: tuple[str, ...] = (),
               tags: str = "cp311-cp311-linux_x86_64") -> Path:
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    metadata = "\n".join(["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}",
                          *(f"Requires-Dist: {r}" for r in requires), "", "A description.", ""])
    contents = dict(files or {f"{dist}/__init__.py": b"x = 1\n"})
    contents[f"{info}/METADATA"] = metadata.encode()
    contents[f"{info}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: false\n"
                                 b"Tag: " + tags.encode() + b"\n")
    record = "".join(f"{n},{record_hash(d)},{len(d)}\n" for n, d in contents.items())
    contents[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    path = directory / f"{dist}-{version}-{tags}.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for member, data in contents.items():
            zf.writestr(member, data)
    return path
