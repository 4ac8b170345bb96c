"""The image of a profile and Python, made as cheaply as it can be.

An image for the profile's current key is made from an older image with the same pins when
there is one: when
only the key changed (the profile gained pins for other Pythons, or the key's format changed),
the older image's toolchain venv is exactly what a new build would install. The new image is
the older one plus a link from the new venv name to the old one and the new key's label: one
layer of a few bytes instead of a rebuild (minutes, and ~14 GB of disk at its peak)."""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import IO

from wheelsmith import cmd
from wheelsmith.builder.container import (
    LABEL_BASE,
    LABEL_KEY,
    LABEL_LAYOUT,
    LAYOUT,
    Engine,
    build_image,
    drop,
    image_ref,
    inspect,
    labels_of,
    staleness,
    superseded,
)
from wheelsmith.errors import ToolchainError
from wheelsmith.toolchain.profile import Profile
from wheelsmith.toolchain.venv import MARKER, same_pins, venv_root
from wheelsmith.untrusted import LONG, tool_bounds

log = logging.getLogger(__name__)

CACHE_IN_IMAGE = Path("/opt/wheelsmith/cache")  # the image's WHEELSMITH_CACHE (Dockerfile)
TOOLCHAINS_IN_IMAGE = CACHE_IN_IMAGE / "toolchains"
# Each complete venv's name, then its requirements file: `== NAME` and the lines
_LIST_VENVS = (f"cd {TOOLCHAINS_IN_IMAGE} && for d in */; do d=${{d%/}}; "
               f'[ -L "$d" ] || [ ! -f "$d/{MARKER}" ] || [ ! -f "$d.requirements.txt" ] '
               f'|| {{ echo "== $d"; cat "$d.requirements.txt"; }}; done')


def make_image(engine: Engine, profile: Profile, *, project: Path, base: str,
               mirror: Path | None, log_file: IO[str], log_path: Path, python: str,
               rebuild: bool = False) -> str:
    """The image for (`profile`, `python`) on `base`: the current one as it is; else made
    from an older one with the same pins; else (or with `rebuild`) built from the Dockerfile.
    The images of older pins are removed after."""
    ref = image_ref(profile, python)
    current = inspect(engine, ref)
    if rebuild or current is None or staleness(current, profile, python):
        base_id = str((inspect(engine, base) or {}).get("Id", base))
        reused = None if rebuild else reuse_older(engine, profile, python, base_id,
                                                  log_file=log_file, log_path=log_path)
        ref = reused or build_image(engine, profile, project=project, base=base, mirror=mirror,
                                    log_file=log_file, log_path=log_path, python=python)
    for older in superseded(engine, profile, python):
        drop(engine, older)
    return ref


def reuse_older(engine: Engine, profile: Profile, python: str, base_id: str, *,
                log_file: IO[str], log_path: Path) -> str | None:
    """The current image made from an older one on the same base with the same pins; None
    when there is none."""
    for older in superseded(engine, profile, python):
        labels = labels_of(inspect(engine, older) or {})
        if labels.get(LABEL_BASE) != base_id or labels.get(LABEL_LAYOUT) != LAYOUT:
            continue
        venv = next((name for name, text in _venvs_in(engine, older).items()
                     if f"-py{python}-" in name and same_pins(text, profile, python)), None)
        if venv is not None:
            return _relabel(engine, older, venv, profile, python, log_file=log_file,
                            log_path=log_path)
    return None


def _venvs_in(engine: Engine, image: str) -> dict[str, str]:
    """venv name -> its requirements file, for the complete venvs in the image."""
    result = cmd.run([engine.exe, "run", "--rm", *engine.common(), "--network=none",
                      "--entrypoint", "sh", image, "-c", _LIST_VENVS], stream=False,
                     ok_returncodes=range(256), what=f"the venvs in {image}",
                     bounds=tool_bounds(LONG), end_tree=False)
    found: dict[str, str] = {}
    name = None
    for line in result.stdout.splitlines():
        if line.startswith("== "):
            name = line[3:]
            found[name] = ""
        elif name is not None:
            found[name] += line + "\n"
    return found


def _relabel(engine: Engine, older: str, venv: str, profile: Profile, python: str, *,
             log_file: IO[str], log_path: Path) -> str:
    ref = image_ref(profile, python)
    new_venv = venv_root(profile, python, CACHE_IN_IMAGE).name
    log.info("%s: %s with its venv %s linked as %s (the same pins)", ref, older, venv, new_venv)
    link = ([] if venv == new_venv else  # (an image whose venv the key names: a label only)
            ["USER root", f"RUN ln -s {venv} {TOOLCHAINS_IN_IMAGE}/{new_venv}", "USER builder"])
    containerfile = "\n".join([f"FROM {older}", *link,
                               f'LABEL {LABEL_KEY}="{profile.key(python)}"', ""])
    with tempfile.TemporaryDirectory() as context:
        (Path(context) / "Containerfile").write_text(containerfile)
        cmd.run([engine.exe, "build", *engine.common(), "--file", Path(context) / "Containerfile",
                 "--tag", ref, context], log_file=log_file, log_path=log_path,
                error=ToolchainError, what=f"{engine.name} build of {ref} from {older}")
    return ref
