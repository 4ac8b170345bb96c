"""Write small, valid wheels for tests (the format, and real host-compiled shared objects)."""

from __future__ import annotations

import json
import subprocess
import sysconfig
import zipfile
from pathlib import Path

from wheelsmith.untrusted.provenance import PROVENANCE_FILE
from wheelsmith.wheelfile import record_hash


def make_wheel(directory: Path, name: str = "demo", version: str = "1.0.0", *,
               files: dict[str, bytes] | None = None, requires: tuple[str, ...] = (),
               tags: str = "cp311-cp311-linux_x86_64", headers: tuple[str, ...] = ()) -> Path:
    """A valid wheel; `headers`: more METADATA lines (`Requires-Python: >=3.10`)."""
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    metadata = "\n".join(["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}",
                          *(f"Requires-Dist: {r}" for r in requires), *headers, "",
                          "A description.", ""])
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


def wheel_with_provenance(directory: Path, name: str, version: str, *, channel: str,
                          body: bytes = b"x = 1\n", key: str = "k" * 64, archs: str = "12.0",
                          tags: str = "py3-none-any") -> Path:
    """A small wheel carrying a wheelsmith provenance record (its channel, content key and arch
    set), in `directory` (made if missing)."""
    directory.mkdir(parents=True, exist_ok=True)
    dist = name.replace("-", "_")
    provenance = {"toolchain": {"channel": channel}, "key": key, "archs_requested": archs}
    return make_wheel(directory, name, version, tags=tags, files={
        f"{dist}/__init__.py": body,
        f"{dist}-{version}.dist-info/{PROVENANCE_FILE}": json.dumps(provenance).encode()})


def compile_shared(directory: Path, source: str, *, cxx: bool = False,
                   links: tuple[Path, ...] = (), soname: str | None = None,
                   flags: tuple[str, ...] = ()) -> Path:
    """A real shared object compiled by the host's gcc/g++ from `source` (which should export
    `PyInit_<module>` to look like an extension module); `links` are libraries it needs."""
    directory.mkdir(parents=True, exist_ok=True)
    name = soname or "_native.so"
    src = directory / (name + (".cpp" if cxx else ".c"))
    src.write_text(source)
    out = directory / name
    soname_flags = [f"-Wl,-soname,{soname}"] if soname else []
    link_flags = ["-Wl,--no-as-needed"] + [f for lib in links
                                           for f in (f"-L{lib.parent}", f"-l:{lib.name}")]
    subprocess.run(["g++" if cxx else "gcc", "-O2", "-shared", "-fPIC", *flags, *soname_flags, "-o",
                    str(out), str(src), *link_flags], check=True, capture_output=True)
    return out


def extension_wheel(directory: Path, name: str, shared_object: Path,
                    version: str = "1.0.0") -> Path:
    """A cp311 linux_x86_64 wheel holding `shared_object` as `<name>/_native<EXT_SUFFIX>`."""
    dist = name.replace("-", "_")
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    return make_wheel(directory, name, version, files={
        f"{dist}/__init__.py": b"",
        f"{dist}/_native{suffix}": shared_object.read_bytes()})
