"""What an index channel offers a given environment: one answer for `install` and `doctor`,
and which channel of an index is the environment's (`channel_url`).

A channel's project page (PEP 691 JSON or PEP 503 HTML, read by `recipes.simple`) lists its
wheels; an offer is one the target's pip accepts (its Python, platform and glibc) and whose
arch set, read from its local label, has native kernels (SASS) for every requested arch. A
pure wheel, or one wheelsmith did not stamp, is taken to run anywhere.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass

from packaging.utils import InvalidWheelFilename
from packaging.version import Version

from wheelsmith.arch import Arch, ArchSet
from wheelsmith.errors import UntrustedDataError, UsageError
from wheelsmith.inventory import DeviceCode, coverage
from wheelsmith.recipes.simple import PAGE_TIMEOUT_S, simple_page
from wheelsmith.toolchain.target import Target
from wheelsmith.wheelfile import WheelName

_CHANNEL_PATH = re.compile(r"^(?P<base>.*)/(?P<channel>[a-z0-9][a-z0-9._-]*)/simple/?$")


def channel_url(index: str, target: Target) -> str:
    """`<index>/<channel>/simple/`: the target's channel in the index at `index`. A channel's
    own URL (`<base>/<channel>/simple/`, as doctor prints it) is taken as its base when it is
    the target's channel, and refused naming both channels when it is another."""
    base, given = split_channel(index)
    channel = target.channel
    if given is not None and given != channel:
        raise UsageError(f"--index {index} is the channel {given}, but {target.python} "
                         f"(torch {target.torch}) needs the channel {channel}",
                         hint=f"give the index's base URL, --index {base}: the channel for the "
                              "environment is read below it")
    return f"{base}/{channel}/simple/"


def split_channel(index: str) -> tuple[str, str | None]:
    """An index URL as (its base, the channel it names): `http://H/cu130-torch2.14/simple/`
    is (`http://H`, `cu130-torch2.14`); a base URL names none."""
    parts = urllib.parse.urlsplit(index)
    match = _CHANNEL_PATH.match(parts.path)
    if match is None:
        return index.rstrip("/"), None
    base = urllib.parse.urlunsplit(parts._replace(path=match["base"], query="", fragment=""))
    return base, match["channel"]


@dataclass(frozen=True, slots=True)
class Offer:
    """A wheel in an index channel that the target accepts."""

    filename: str
    url: str
    sha256: str
    version: Version


def offers(base: str, project: str, target: Target, archs: tuple[Arch, ...], *,
           version: str | None = None, timeout: float = PAGE_TIMEOUT_S) -> list[Offer]:
    """The wheels of `project` in the channel at `base` that the target's pip accepts, with
    native kernels for every arch in `archs` (and of `version`, when given). Raises
    SourceError when the channel cannot be read (UntrustedDataError when what it answered is
    malformed, too large or too slow: a wheel's name that is not a wheel filename too); a
    project it does not have offers nothing, and neither does a wheel without a sha256 (an
    install pins it)."""
    page = simple_page(project, base, timeout=timeout, missing_ok=True)
    if page is None:
        return []
    found = []
    for item in page.files:
        if not item.filename.endswith(".whl") or item.yanked:
            continue
        try:
            name = WheelName.parse(item.filename)
        except InvalidWheelFilename as exc:
            raise UntrustedDataError(page.url, f"{item.place}: {exc}") from None
        if not target.accepts(item.filename) or item.sha256 is None:
            continue
        if version is not None and name.version.public != Version(version).public:
            continue
        if all(serves(item.filename, arch) for arch in archs):
            found.append(Offer(item.filename, item.url, item.sha256, name.version))
    return found


def newest(found: list[Offer]) -> Offer | None:
    return max(found, key=lambda o: o.version, default=None)


def serves(filename: str, arch: Arch) -> bool:
    """Whether a wheel runs natively on `arch`, judged from the arch set in its label; a
    pure wheel does, and so is assumed of a wheel wheelsmith did not stamp."""
    local = WheelName.parse(filename).version.local
    code = ArchSet.label_device_code(local) if local else None
    if code is None:
        return True
    sass, ptx = code
    return coverage(DeviceCode(filename, sass, ptx), arch) == "sass"
