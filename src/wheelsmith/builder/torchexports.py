"""What each torch release exports, read from its real libraries, once per torch wheel.

A torch wheel's `torch/lib/libtorch*.so*` and `libc10*.so*` (libtorch_python.so among them)
are what an extension built against torch binds at import. Their dynamic symbol tables are read
with wheelsmith's own ELF reader (untrusted/elf.py) and kept, per library, in the cache under
`torch-exports/<the wheel's sha256>.json`: the wheel is read once, whatever asks later.

The torch wheels come from pip as this machine configures it (`pip download`, run by the
environment's Python, so its tags choose the file): the minors the toolchain profiles pin, and
the newest and oldest that pip sees beside them.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from wheelsmith import cmd, locations
from wheelsmith.errors import CommandError, ToolchainError, UntrustedDataError
from wheelsmith.files import atomic_write_text, sha256_file
from wheelsmith.toolchain.profile import load_profiles
from wheelsmith.toolchain.venv import pip_env
from wheelsmith.untrusted import LONG, tool_bounds
from wheelsmith.untrusted.elf import dynamic_symbols
from wheelsmith.untrusted.local import open_zip
from wheelsmith.wheelfile import WheelName

LIBRARY = re.compile(r"torch/lib/((?:libtorch|libc10)[A-Za-z0-9_.-]*\.so[0-9.]*)")
MEMBER_MAX_BYTES = 16 << 30  # libtorch_cuda.so is a few GB unpacked
CACHE = "torch-exports"
WHEELS = "torch-wheels"
FORMAT = 1


@dataclass(frozen=True, slots=True)
class TorchExports:
    """The exports of one torch's libraries: its version, the wheel they were read from
    (its file name and sha256; "" for a directory of libraries), each library's names."""

    version: str
    wheel: str
    sha256: str
    libraries: dict[str, frozenset[str]]

    def exports(self) -> frozenset[str]:
        return frozenset().union(*self.libraries.values())

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT, "torch": self.version, "wheel": self.wheel,
                           "sha256": self.sha256,
                           "libraries": {k: sorted(v) for k, v in sorted(self.libraries.items())}})

    @classmethod
    def from_json(cls, text: str) -> TorchExports | None:
        """A cached list (None: not one this wheelsmith wrote)."""
        try:
            data = json.loads(text)
            if data.get("format") != FORMAT:
                return None
            return cls(str(data["torch"]), str(data["wheel"]), str(data["sha256"]),
                       {str(k): frozenset(map(str, v)) for k, v in data["libraries"].items()})
        except (ValueError, KeyError, TypeError, AttributeError):
            return None


def exports_of_libraries(lib: Path, version: str, *, wheel: str = "",
                         sha256: str = "") -> TorchExports:
    """The exports of the torch libraries in the directory `lib` (a torch's torch/lib)."""
    found = {path.name: dynamic_symbols(path) or frozenset() for path in sorted(lib.iterdir())
             if LIBRARY.fullmatch(f"torch/lib/{path.name}") and path.is_file()}
    return TorchExports(version, wheel, sha256, found)


def exports_of_wheel(wheel: Path, cache: Path | None = None) -> TorchExports:
    """The exports of the torch wheel `wheel`'s libraries: from the cache when this wheel's
    sha256 was read before, else read from the wheel (each library unpacked, read, removed)
    and kept there."""
    digest = sha256_file(wheel)
    kept = (cache or locations.cache_dir()) / CACHE / f"{digest}.json"
    if kept.is_file() and (cached := TorchExports.from_json(kept.read_text())) is not None:
        return cached
    libraries: dict[str, frozenset[str]] = {}
    with open_zip(wheel) as zf, tempfile.TemporaryDirectory() as scratch:
        for info in zf.infolist():
            match = LIBRARY.fullmatch(info.filename)
            if match is None or info.file_size > MEMBER_MAX_BYTES:
                continue
            unpacked = Path(scratch) / match[1]
            with zf.open(info) as source, unpacked.open("wb") as target:
                shutil.copyfileobj(source, target, 1 << 20)
            libraries[match[1]] = dynamic_symbols(unpacked) or frozenset()
            unpacked.unlink()
    if not libraries:
        raise UntrustedDataError(wheel.name, "holds no torch/lib/libtorch*.so or libc10*.so: "
                                             "it is no torch wheel")
    found = TorchExports(str(WheelName.parse(wheel.name).version), wheel.name, digest,
                         libraries)
    kept.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(kept, found.to_json())
    return found


def minor_of(version: str) -> str:
    """"2.14" of "2.14.1+cu130"."""
    release = Version(version).release
    return f"{release[0]}.{release[1] if len(release) > 1 else 0}"


def profile_minors() -> list[str]:
    """The torch minors the toolchain profiles pin, oldest first."""
    pinned = {minor_of(str(p.torch_pin))
              for p in load_profiles(locations.profile_dirs())
              if p.torch_pin is not None}
    return sorted(pinned, key=Version)


def visible_minors(python: Path) -> list[str]:
    """The torch minors pip (as this machine configures it, with `python`'s tags) sees, oldest
    first; none where pip does not answer."""
    return sorted({minor_of(str(v)) for v in visible_versions(python)}, key=Version)


def visible_versions(python: Path) -> list[Version]:
    """The torch versions pip (as this machine configures it, with `python`'s tags) lists,
    oldest first; none where pip does not answer."""
    try:
        answer = cmd.run([python, "-m", "pip", "index", "versions", "torch"], stream=False,
                         env=pip_env(), what="pip index versions torch",
                         bounds=tool_bounds())
    except (CommandError, UntrustedDataError):
        return []
    listed = re.search(r"Available versions: (.*)", answer.stdout)
    found = set()
    for text in (listed[1].split(", ") if listed else []):
        try:
            found.add(Version(text.strip()))
        except InvalidVersion:
            continue
    return sorted(found)


def release_of(minor: str, versions: Iterable[Version]) -> str | None:
    """The newest final release of `minor` among `versions` with no local label (the build a
    project's own index serves, not a local variant such as a `+cpu` a wheel folder adds)."""
    found = [v for v in versions if minor_of(str(v)) == minor and v.local is None
             and not v.is_prerelease]
    return str(max(found)) if found else None


def candidate_minors(profiles: Iterable[str], visible: Iterable[str]) -> list[str]:
    """The profiles' minors, and those pip sees that are newer than the newest of them, and
    the one just older than the oldest."""
    pinned = sorted(set(profiles), key=Version)
    seen = sorted(set(visible), key=Version)
    if not pinned:
        return seen[-1:]
    newer = [m for m in seen if Version(m) > Version(pinned[-1])]
    older = [m for m in seen if Version(m) < Version(pinned[0])][-1:]
    return sorted({*older, *pinned, *newer}, key=Version)


def download(python: Path, minor: str, cache: Path | None = None,
             release: str | None = None) -> Path:
    """The torch wheel of `minor` for `python`'s tags, downloaded by pip into the cache (pip
    reuses a file already there): exactly `release` (`torch===2.13.0`: no local variant) when
    given, else the newest pip gives of the minor."""
    into = (cache or locations.cache_dir()) / WHEELS
    into.mkdir(parents=True, exist_ok=True)
    wanted = f"torch==={release}" if release else f"torch=={minor}.*"
    answer = cmd.run([python, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                      "--disable-pip-version-check", "-d", into, wanted],
                     stream=False, env=pip_env(), what=f"pip download {wanted}",
                     error=ToolchainError, bounds=tool_bounds(LONG),
                     hint="pip could not give a torch wheel of this minor for this Python")
    saved = re.findall(r"(?:Saved|File was already downloaded) (\S+\.whl)", answer.stdout)
    if not saved:
        raise ToolchainError(f"pip download {wanted} named no wheel it saved",
                             hint="run the same pip download by hand to see what it did")
    return Path(saved[-1])


def torch_wheels(python: Path, minors: list[str],
                 cache: Path | None = None) -> list[tuple[str, Path | str]]:
    """Each minor's torch wheel for `python`: its newest release with no local label that pip
    lists (what the project's index serves), else the newest pip gives; or why pip gave none."""
    versions = visible_versions(python)
    found: list[tuple[str, Path | str]] = []
    for minor in minors:
        try:
            found.append((minor, download(python, minor, cache, release_of(minor, versions))))
        except ToolchainError as exc:
            found.append((minor, f"pip gave no torch {minor} wheel for this Python: "
                                 f"{exc.message}"))
    return found
