"""Device-code inventory: which SASS and PTX archs each shared object carries.

One function reads one `.so` with cuobjdump; the rest apply it to every shared object of a
wheel (the post-build gate, `wheelsmith verify`, the provenance record) or of an installed
package.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from wheelsmith import cmd
from wheelsmith.arch import Arch
from wheelsmith.errors import CommandError, VerifyError
from wheelsmith.untrusted import clip, fatbin, tool_bounds
from wheelsmith.untrusted.local import open_zip
from wheelsmith.wheelfile import ZIP_DAMAGE

# "ELF file    1: name.1.sm_120.cubin" / "PTX file    1: name.1.sm_120.ptx"
_ENTRY_RE = re.compile(r"^(ELF|PTX) file\s+\d+: .*\.(sm_\d+[af]?)\.(cubin|ptx)$")


NO_DEVICE_CODE = 255


@dataclass(frozen=True, slots=True)
class DeviceCode:
    """The device code of one shared object; `path` is its name inside the wheel or tree."""

    path: str
    sass: frozenset[str]
    ptx: frozenset[str]

    @property
    def empty(self) -> bool:
        return not self.sass and not self.ptx

    def as_dict(self) -> dict[str, object]:
        return {"path": self.path, "sass": sorted(self.sass, key=_arch_order),
                "ptx": sorted(self.ptx, key=_arch_order)}


def _arch_order(name: str) -> tuple[int, str]:
    digits = re.sub(r"\D", "", name)
    return (int(digits) if digits else 0, name)


def is_shared_object(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    return base.endswith(".so") or ".so." in base


def read_device_code(so: Path, cuobjdump: Path, name: str | None = None) -> DeviceCode:
    """List the cubins and PTX in `so` (deduplicated: linked objects repeat per arch). A file
    cuobjdump cannot read (not an ELF shared object, a broken fatbin) is a VerifyError naming
    it as `name` (the wheel's member, not the temporary copy), with what cuobjdump said."""
    shown = name or str(so)
    try:
        result = cmd.run([cuobjdump, "--list-elf", "--list-ptx", so], stream=False,
                         ok_returncodes=(0, NO_DEVICE_CODE), what=f"cuobjdump ({cuobjdump})",
                         bounds=tool_bounds())
    except CommandError as exc:
        raise _unreadable(shown, so, exc.tail or [exc.message]) from exc
    if result.returncode == NO_DEVICE_CODE and "does not contain device code" not in result.stderr:
        raise _unreadable(shown, so, result.stderr.splitlines())
    sass: set[str] = set()
    ptx: set[str] = set()
    for line in result.stdout.splitlines():
        match = _ENTRY_RE.match(line.strip())
        if match:
            (sass if match[1] == "ELF" else ptx).add(match[2])
    return DeviceCode(name or str(so), family_named(frozenset(sass), fatbin.targets(so)),
                      frozenset(ptx))


def family_named(sass: frozenset[str], entries: frozenset[tuple[str, str]] | None
                 ) -> frozenset[str]:
    """cuobjdump's SASS names with each family cubin named as one (`sm_120f`: cuobjdump lists it
    as `sm_120`), as the fat binary's own entries say (untrusted.fatbin); its names as they are
    where those entries cannot be read."""
    if entries is None:
        return sass
    elf = {name for kind, name in entries if kind == "ELF"}
    named = set()
    for name in sass:
        variants = {e for e in elf if e in (name, f"{name}f")} if name[-1].isdigit() else set()
        named |= variants or {name}
    return frozenset(named)


def _unreadable(shown: str, so: Path, said: list[str]) -> VerifyError:
    """`shown` is not a shared object cuobjdump reads: its first line of complaint, with the
    file named as the user knows it."""
    first = next((line.strip() for line in said if line.strip()), "no output")
    return VerifyError(f"{shown}: cuobjdump cannot read it as a shared object: "
                       f"{clip(first.replace(str(so), shown), 200)}",
                       hint="a .so in a wheel must be an ELF shared object; this one is not, or "
                            "its device code is damaged: rebuild the wheel", findings=[])


def wheel_inventory(wheel: Path, cuobjdump: Path) -> list[DeviceCode]:
    """Device code of every shared object in a wheel, in member order."""
    with shared_objects(wheel) as objects:
        return [read_device_code(path, cuobjdump, member) for member, path in objects]


@contextlib.contextmanager
def shared_objects(wheel: Path) -> Iterator[list[tuple[str, Path]]]:
    """Every shared object of a wheel (its member name, a copy in a temporary directory that
    lasts as long as the context), in member order. Each copy keeps its member's file name in
    a directory of its own, so what one finds beside it is only itself."""
    try:
        with open_zip(wheel) as zf, tempfile.TemporaryDirectory() as tmp:
            found = []
            for index, member in enumerate(n for n in zf.namelist() if is_shared_object(n)):
                target = Path(tmp) / str(index) / "lib.so"
                target.parent.mkdir()
                with zf.open(member) as source, target.open("wb") as sink:
                    shutil.copyfileobj(source, sink)  # in pieces: a .so may be a GB
                found.append((member, target))
            yield found
    except ZIP_DAMAGE as exc:
        raise VerifyError(f"{wheel.name} is not a valid wheel: {clip(str(exc), 200)}",
                          findings=[]) from exc


@dataclass(frozen=True, slots=True)
class Toolkits:
    """Which toolkits made an object's device code: its cubins' (`.note.nv.cuinfo`, "13.0")
    and its PTX's ISA versions ("9.0", from the fat binary's entries)."""

    cubins: frozenset[str]
    ptx_isa: frozenset[str]


def read_toolkits(so: Path, cuobjdump: Path, name: str | None = None) -> Toolkits:
    """The toolkits of the device code in `so`: each cubin read in place, and those whose
    payload is compressed extracted by cuobjdump (`-xelf all`, into a temporary directory) and
    read from there; a cubin whose note cannot be read is left out."""
    entries = fatbin.entries(so) or frozenset()
    cubins = [e for e in entries if e.kind == "ELF"]
    found = {fatbin.toolkit_of(so, e) for e in cubins}
    if None in found:
        found = {*found - {None}, *_extracted_toolkits(so, cuobjdump, name or str(so))}
    return Toolkits(frozenset(f"{v[0]}.{v[1]}" for v in found if v is not None),
                    frozenset(f"{e.version[0]}.{e.version[1]}" for e in entries
                              if e.kind == "PTX"))


def _extracted_toolkits(so: Path, cuobjdump: Path, shown: str) -> set[tuple[int, int] | None]:
    with tempfile.TemporaryDirectory(prefix="wheelsmith-cubins-") as tmp:
        try:
            cmd.run([cuobjdump, "-xelf", "all", so.absolute()], cwd=Path(tmp), stream=False,
                    what=f"cuobjdump ({cuobjdump})", bounds=tool_bounds())
        except CommandError as exc:
            raise _unreadable(shown, so, exc.tail or [exc.message]) from exc
        return {fatbin.cubin_toolkit(path) for path in sorted(Path(tmp).glob("*.cubin"))}


def tree_inventory(root: Path, files: Iterable[Path], cuobjdump: Path) -> list[DeviceCode]:
    """Device code of installed shared objects (paths shown relative to `root`)."""
    return [read_device_code(f, cuobjdump, str(f.relative_to(root)))
            for f in files if is_shared_object(f.name)]



SM_RE = re.compile(r"^sm_(\d+)(\d)([af]?)$")


RANK = {"sass": 2, "ptx": 1, "none": 0}


def coverage(code: DeviceCode, target: Arch) -> str:
    """How well one shared object's device code serves `target`: a cubin of the same major
    and a minor no higher runs on it (a family cubin, `sm_120f`, alike); an arch-specific one
    (`sm_120a`) only on its own compute capability."""
    for name in code.sass:
        match = SM_RE.match(name)
        if match and int(match[1]) == target.major and int(match[2]) <= target.minor and (
                match[3] in ("", "f") or
                (int(match[2]) == target.minor and match[3] == target.suffix)):
            return "sass"
    for name in code.ptx:
        match = SM_RE.match(name)
        if match and (int(match[1]), int(match[2])) <= (target.major, target.minor):
            return "ptx"
    return "none"

