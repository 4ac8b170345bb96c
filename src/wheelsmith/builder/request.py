"""What a build is asked to do (`BuildRequest`), what it gives back (`BuildResult`) and how it
tells its caller where it is (`Reporter`).

A request crosses into a container as JSON (`to_json`/`from_json`): one serialisation that
both sides read, so a field added to the request reaches the container build without another
line of code.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from wheelsmith.arch import ArchSet

log = logging.getLogger(__name__)


RUNNER_INFO = "WHEELSMITH_RUNNER_INFO"  # set by a container runner: engine, image id, digest


class Reporter(Protocol):
    """How the library tells its caller where it is; the CLI decides how that looks."""

    def stage(self, name: str, detail: str) -> None: ...

    def progress(self, done: int, total: int) -> None: ...


class QuietReporter:
    def stage(self, name: str, detail: str) -> None:
        log.info("%s: %s", name, detail)

    def progress(self, done: int, total: int) -> None:
        pass


@dataclass(frozen=True, kw_only=True, slots=True)
class BuildRequest:
    recipe: str
    version: str | None = None
    archs: ArchSet | None = None
    toolchain: str | None = None
    python: Path = field(default_factory=lambda: Path(sys.executable))
    # The environment the wheel is for (`--python`): without --toolchain its torch and CUDA
    # choose the profile; the wheel is also import-tested there.
    target: Path | None = None
    python_version: str | None = None  # `--python X.Y`: python3.X here, or the image's Python
    platform: str | None = None  # the CPU the wheel is for (aarch64, x86_64); None: this one's
    out_dir: Path = Path("wheelhouse")
    work_dir: Path = Path("build/wheelsmith")
    jobs: int | None = None
    split_compile: str | None = None  # auto | off | N; None: $WHEELSMITH_SPLIT_COMPILE or auto
    compile_farm: str | None = None  # scheduler URL | off; None: $WHEELSMITH_COMPILE_FARM
    compile_farm_required: bool = False  # fail instead of compiling here
    env: tuple[tuple[str, str], ...] = ()
    configure_only: bool = False
    check: bool = False  # configure, then compile a sample of each extension (sample.py); no
    # wheel: it implies configure_only
    compile_cache: str | None = None  # None: $WHEELSMITH_COMPILE_CACHE or the local default
    runner: str = "host"  # host | podman | docker | auto
    keep_container: bool = False
    prepared_source: Path | None = None  # a tree already fetched and patched (inside a container)
    earlier_object_seconds: Path | None = None  # a JSON file of an earlier run's seconds per
    # object, for longest first (prebuild.py), from the runner outside (container runs)
    rebuild: bool = False
    keep_work: bool = False
    fresh: bool = False  # ignore what an unfinished build of the same key left (resume.py)
    wait: bool = True  # for another build of the same key in the work dir (else refuse)
    torch_range: str | None = None  # "all" or "2.13,2.14": prove the torch range (torchrange.py)

    def __post_init__(self) -> None:
        if self.check and not self.configure_only:  # a check stops where configuring does
            object.__setattr__(self, "configure_only", True)  # frozen: set once, here


@dataclass(frozen=True, kw_only=True, slots=True)
class BuildResult:
    wheel: Path | None  # None after --configure-only
    provenance: dict[str, Any]
    up_to_date: bool
    log: Path | None
    configured: tuple[dict[str, Any], ...] = ()  # what each build.ninja with CUDA rules targets
    host_modules: tuple[str, ...] = ()  # the extensions whose build.ninja has only C++ rules
    run: dict[str, Any] = field(default_factory=dict)  # one run's facts (reproducible.py)



# --- one serialisation, read by both sides of a container build ---------------------------


def to_json(request: BuildRequest) -> str:
    """Every field of the request as JSON (`from_json` gives the same request back)."""
    return json.dumps({f.name: _encode(getattr(request, f.name))
                       for f in dataclasses.fields(BuildRequest)}, indent=2, sort_keys=True)


def from_json(text: str) -> BuildRequest:
    data = json.loads(text)
    hints = typing.get_type_hints(BuildRequest)
    unknown = set(data) - set(hints)
    if unknown:  # written by another wheelsmith: never silently drop a setting
        raise ValueError(f"unknown build request field(s): {', '.join(sorted(unknown))}")
    values: dict[str, Any] = {name: _decode(hints[name], value) for name, value in data.items()}
    return BuildRequest(**values)


def _encode(value: object) -> object:
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, (Path, ArchSet)):
        return str(value)
    if isinstance(value, tuple):
        return [_encode(item) for item in value]
    raise TypeError(f"a BuildRequest field holds a {type(value).__name__}, which to_json "
                    "cannot write: teach _encode and _decode that type")


def _decode(hint: Any, value: object) -> object:
    if value is None:
        return None
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        (hint,) = [arg for arg in typing.get_args(hint) if arg is not type(None)]
    if hint in (Path, ArchSet):
        assert isinstance(value, str)
        return Path(value) if hint is Path else ArchSet.parse([value])
    if typing.get_origin(hint) is tuple:
        assert isinstance(value, list)
        args = typing.get_args(hint)
        items = [args[0]] * len(value) if args[-1] is Ellipsis else list(args)
        return tuple(_decode(item, entry) for item, entry in zip(items, value, strict=True))
    if not isinstance(value, hint):
        raise ValueError(f"a build request field holds {value!r}, not a {hint.__name__}")
    return value
