"""The Debian base of the build image, locked on first use.

The project's `images.lock` (beside the Dockerfile) pins each release's base by digest. Where it
pins none, the first `image build` locks one for this machine, in the user's own
`images.lock` (`locations.config_dir()`), read before the project's: with a registry reachable,
the engine pulls `debian:<release>-slim` (a short name: the engine's own registry configuration
says where it comes from) and its digest is pinned; without one, `scripts/make-base-image.sh`
builds the base with debootstrap from the machine's apt mirror and the image's ID is recorded
beside its name, so a base rebuilt or taken from elsewhere later is noticed, never used silently.
A recorded local base that this engine lacks and the other engine holds with the recorded ID
is moved across (`podman save | docker load`, or the other way): one lock serves both engines.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

from wheelsmith import cmd, document, locations
from wheelsmith.builder import container
from wheelsmith.errors import ToolchainError
from wheelsmith.files import atomic_write_text
from wheelsmith.toolchain.profile import Profile
from wheelsmith.untrusted import LONG, tool_bounds

log = logging.getLogger(__name__)

LOCK = "images.lock"
UPSTREAM = "debian:{release}-slim"
LOCAL = "localhost/wheelsmith-base:{release}"
MAKE_LOCAL = Path("scripts") / "make-base-image.sh"
HEADER = ("# Base images locked on first use by `wheelsmith image build` on this machine (the\n"
          "# project's images.lock pinned none). Remove an entry to lock it again.\n")


@dataclass(frozen=True, slots=True)
class Pin:
    key: str  # its name in the lock: debian-bookworm, or base-<profile> (a toolkit base)
    ref: str  # debian@sha256:... (from a registry) or a local image's name
    image_id: str | None  # recorded for a local base
    lock: Path  # where it is written
    new: bool = False  # locked by this call
    moved: str | None = None  # how this call moved it from the other engine

    def describe(self) -> str:
        made = (f"{self.ref} (local, id {self.image_id}: no registry answered)"
                if self.image_id else self.ref)
        return f"{self.key}: {made}"


def user_lock() -> Path:
    return locations.config_dir() / LOCK


LOCK_SCHEMA = {"type": "object", "patternProperties": {"": {"type": "string"}}}


def _read(path: Path) -> dict[str, str]:
    """A lock's pins (name: reference); every problem in it is located (document.py)."""
    if not path.is_file():
        return {}
    doc = document.load(path)
    data = document.validate(doc, LOCK_SCHEMA) if doc.data is not None else {}
    doc.raise_if_problems()
    return {str(k): str(v) for k, v in (data or {}).items() if v}


def pinned(key: str) -> Pin | None:
    """The pin called `key` (debian-bookworm): the user's lock first, then the project's."""
    for path in (user_lock(), locations.project_root() / LOCK):
        entries = _read(path)
        ref = entries.get(key)
        if ref:
            return Pin(key, ref, entries.get(f"{key}-id"), path)
    return None


def resolve(engine: container.Engine, python: str) -> Pin:
    """The base for an image with `python`: the pinned one (a local base must still have its
    recorded ID), else one locked now."""
    release = container.base_for(python)
    pin = pinned(f"debian-{release}")
    if pin is None:
        return lock_on_first_use(engine, release)
    return _still_there(engine, pin)


def toolkit_base(engine: container.Engine, profile: Profile) -> Pin:
    """The base a profile names (`image_base`: one that carries the CUDA toolkit), locked on
    first use like the Debian base: a registry's digest, else a local image by its ID."""
    assert profile.image_base is not None
    pin = pinned(f"base-{profile.name}")
    if pin is None:
        return _lock_named(engine, f"base-{profile.name}", profile.image_base)
    return _still_there(engine, pin)


def _lock_named(engine: container.Engine, key: str, ref: str) -> Pin:
    pulled = cmd.run([engine.exe, "pull", "--quiet", ref], stream=False,
                     ok_returncodes=range(256), what=f"{engine.name} pull {ref}",
                     bounds=tool_bounds(LONG), end_tree=False)
    info = container.inspect(engine, ref)
    digest = _digest(info or {}) if pulled.returncode == 0 else None
    if digest is not None:
        name = ref.rsplit(":", 1)[0] if ":" in ref.rsplit("/", 1)[-1] else ref
        return _write(Pin(key, f"{name.partition('@')[0]}@{digest}", None, user_lock(),
                          new=True))
    if info is None:
        said = (pulled.stderr.strip().splitlines() or ["no output"])[-1]
        raise ToolchainError(f"the base image {ref} can neither be pulled ({said}) nor is it in "
                             f"{engine.name}", hint="pull or load it (podman load / docker "
                                                    "load), then build the image again")
    log.warning("no registry answered for %s; locking the local image by its ID", ref)
    return _write(Pin(key, ref, str(info["Id"]), user_lock(), new=True))


def _still_there(engine: container.Engine, pin: Pin) -> Pin:
    """A pinned local base must still have its recorded ID (moved across from the other
    engine where that one holds it)."""
    recorded = pin.image_id
    if recorded is not None:
        found = (container.inspect(engine, pin.ref) or {}).get("Id")
        if found is None and (moved := _move_from_other(engine, pin.ref, recorded)):
            pin = replace(pin, moved=moved)
            found = (container.inspect(engine, pin.ref) or {}).get("Id")
        if found is None or _bare(found) != _bare(recorded):
            now = "is not in " + engine.name if found is None else f"is now {found}"
            raise ToolchainError(
                f"the base {pin.ref} recorded in {pin.lock} (id {recorded}) {now}",
                hint=f"remove the {pin.key} lines from {pin.lock} to make and lock it "
                     "again, or load the recorded image (podman save | docker load)")
    return pin


def _bare(image_id: str) -> str:
    return image_id.removeprefix("sha256:")  # docker writes the prefix, podman does not


def _move_from_other(engine: container.Engine, ref: str, image_id: str) -> str | None:
    """Load `ref` into `engine` from the other engine that holds it with ID `image_id`
    (`podman save | docker load`); what was done, or None where no engine holds it so."""
    for name in container.ENGINES:
        exe = shutil.which(name)
        if name == engine.name or exe is None:
            continue
        other = container.Engine(name, exe)
        held = (container.inspect(other, ref) or {}).get("Id")
        if held is None or _bare(held) != _bare(image_id):
            continue
        how = f"{name} save | {engine.name} load"
        cmd.run(["bash", "-c", 'set -o pipefail; "$0" save "$1" | "$2" load', other.exe, ref,
                 engine.exe], stream=False, error=ToolchainError,
                what=f"moving the base {ref} from {name} into {engine.name} ({how})",
                hint=f"check that {engine.name} works (`{engine.name} info`) and has room, then "
                     f"try again, or move it by hand: {name} save {ref} | {engine.name} load")
        return f"moved {ref} (id {image_id}) from {name} into {engine.name} ({how})"
    return None


def lock_on_first_use(engine: container.Engine, release: str) -> Pin:
    tag = UPSTREAM.format(release=release)
    pulled = cmd.run([engine.exe, "pull", "--quiet", tag], stream=False,
                     ok_returncodes=range(256), what=f"{engine.name} pull {tag}",
                     bounds=tool_bounds(LONG), end_tree=False)
    if pulled.returncode == 0:
        digest = _digest(container.inspect(engine, tag) or {})
        if digest is not None:
            return _write(Pin(f"debian-{release}", f"debian@{digest}", None, user_lock(),
                              new=True))
    log.warning("no registry answered for %s (%s); making the base with debootstrap", tag,
                (pulled.stderr.strip().splitlines() or ["no output"])[-1])
    ref = LOCAL.format(release=release)
    script = locations.project_root() / MAKE_LOCAL
    cmd.run(["bash", str(script), ref, release], stream=False, error=ToolchainError,
            env={**os.environ, "ENGINE": engine.exe},
            what=f"the {release} base with debootstrap ({MAKE_LOCAL})")
    info = container.inspect(engine, ref)
    if info is None:
        raise ToolchainError(f"{MAKE_LOCAL} made no image {ref}")
    return _write(Pin(f"debian-{release}", ref, str(info["Id"]), user_lock(), new=True))


def _digest(info: dict[str, object]) -> str | None:
    digest = info.get("Digest")  # podman
    if isinstance(digest, str) and digest.startswith("sha256:"):
        return digest
    repo_digests = info.get("RepoDigests")  # docker
    if isinstance(repo_digests, list) and repo_digests:
        return str(repo_digests[0]).partition("@")[2] or None
    return None


def _write(pin: Pin) -> Pin:
    """Set the pin's lines in its lock file, keeping every other line."""
    lines = pin.lock.read_text().splitlines(keepends=True) if pin.lock.is_file() else [HEADER]
    key = pin.key
    kept = [line for line in lines if not re.match(rf"{re.escape(key)}(-id)?:", line)]
    kept.append(f'{key}: "{pin.ref}"\n')
    if pin.image_id:
        kept.append(f'{key}-id: "{pin.image_id}"\n')
    pin.lock.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(pin.lock, "".join(kept))
    log.info("locked %s in %s", pin.describe(), pin.lock)
    return pin
