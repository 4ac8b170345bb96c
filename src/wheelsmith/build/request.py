"""What a build is asked to do (`BuildRequest`), what it gives back (`BuildResult`) and how it
tells its caller where it is (`Reporter`).

A request crosses into a container as JSON (`to_json`/`from_json`): one serialisation that
both sides read, so a field added to the request reaches the container build without another
line of code.
"""

from __future__ import annotations

import logging
import sys
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
    out_dir: Path = Path("wheelhouse")
    work_dir: Path = Path("build/wheelsmith")
    jobs: int | None = None
    split_compile: str | None = None  # auto | off | N; None: $WHEELSMITH_SPLIT_COMPILE or auto
    compile_farm: str | None = None  # scheduler URL | off; None: $WHEELSMITH_COMPILE_FARM
    compile_farm_required: bool = False  # fail instead of compiling here
    env: tuple[tuple[str, str], ...] = ()
    configure_only: bool = False
    compile_cache: str | None = None  # None: $WHEELSMITH_COMPILE_CACHE or the local default
    runner: str = "host"  # host | podman | docker | auto
    keep_container: bool = False
    prepared_source: Path | None = None  # a tree already fetched and patched (inside a container)
    rebuild: bool = False
    keep_work: bool = False
    wait: bool = True  # for another build of the same key in the work dir (else refuse)


@dataclass(frozen=True, kw_only=True, slots=True)
class BuildResult:
    wheel: Path | None  # None after --configure-only
    provenance: dict[str, Any]
    up_to_date: bool
    log: Path | None
    configured: tuple[dict[str, Any], ...] = ()  # what each build.ninja targets

