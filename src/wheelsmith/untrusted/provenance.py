"""A wheelsmith wheel's provenance record (`wheelsmith.json` in its .dist-info): data whoever
built the wheel wrote, so read bounded (`read_member`) and parsed into `Provenance`, where every
field wheelsmith acts on is checked (docs/security.md, "What untrusted input can never do")."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.version import Version

from wheelsmith.errors import UntrustedDataError
from wheelsmith.untrusted import (
    ENV_NAME_RE,
    Node,
    channel_name,
    clip,
    describe_size,
    key_path,
    parse_json,
)
from wheelsmith.untrusted.local import MEMBER_MAX_BYTES, MemberTooLarge, open_zip, read_member
from wheelsmith.wheelfile import UNREADABLE, dist_info_dir

PROVENANCE_FILE = "wheelsmith.json"
PROVENANCE_MAX_BYTES = MEMBER_MAX_BYTES  # a record is tens of KB


@dataclass(frozen=True, kw_only=True, slots=True)
class Provenance:
    """A wheelsmith wheel's `wheelsmith.json`: data whoever built the wheel wrote. Every field
    wheelsmith acts on is checked here (names that reach a path or a command are plain names,
    versions are versions); the whole record is kept in `record` for showing it."""

    key: str | None  # the content key
    recipe: str | None  # the recipe's package name
    version: str | None  # the recipe's version
    toolchain: str | None  # the profile's name
    python: str | None  # the toolchain's Python, "3.12"
    channel: str | None  # the index channel
    archs: str | None  # the arch set requested, as `--arch` takes it
    host_only: tuple[str, ...]  # shared objects allowed to carry no device code (globs)
    extra_env: dict[str, str]  # --env NAME=VALUE of the build
    record: dict[str, Any]
    binaries: dict[str, Any] | None = None  # its audit's summary (`binary_summary`)
    # the host libraries' wheels installed beside the toolchain for its build: (name, version)
    libraries: tuple[tuple[str, str], ...] = ()
    torch_range: str | None = None  # the build's --torch-range ("all", "2.13,2.14")

    @classmethod
    def parse(cls, node: Node) -> Provenance:
        recipe, toolchain = node.get("recipe"), node.get("toolchain")

        def field(part: Node | None, key: str, read: Callable[[Node], str]) -> str | None:
            return part.optional(key, read) if part is not None else None

        env = node.optional("extra_env", Node.entries) or {}
        for name in env:
            if not ENV_NAME_RE.fullmatch(name):
                raise node.fail(f"extra_env: '{clip(name)}' is not a variable name")
        return cls(
            key=node.optional("key", Node.text),
            recipe=field(recipe, "package", Node.name),
            version=field(recipe, "version", _version),
            toolchain=field(toolchain, "name", Node.name),
            python=field(toolchain, "python", lambda n: n.text(_PYTHON_RE, "a Python version")),
            channel=field(toolchain, "channel", lambda n: n.parsed(channel_name, "a channel name")),
            archs=node.optional("archs_requested", Node.text),
            host_only=tuple(n.text() for n in node.optional("host_only", Node.items) or ()),
            extra_env={name: value.text() for name, value in env.items()},
            record={key: value.value for key, value in node.entries().items()},
            binaries=binary_summary(node) if node.get("audit") is not None else None,
            libraries=tuple(_installed(n) for n in node.optional("libraries", Node.items) or ()
                            if n.optional("from", Node.text) == "installed"),
            torch_range=node.optional("torch_range_request", lambda n: n.text(
                TORCH_RANGE_RE, "all or torch minors (2.13,2.14)")))


_PYTHON_RE = re.compile(r"\d+\.\d+")
TORCH_RANGE_RE = re.compile(r"all|\d{1,4}\.\d{1,4}(,\d{1,4}\.\d{1,4}){0,63}")  # --torch-range
RUNTIME_RE = re.compile(r"\d{1,3}|static")
DRIVER_RE = re.compile(r"\d{1,4}(\.\d{1,4}){0,3}")
TAG_RE = re.compile(r"[a-z0-9_]{1,80}")
SYMBOL_VERSION_RE = re.compile(r"[A-Z]{1,16}_[0-9.]{1,20}")
TORCH_RE = re.compile(r"[0-9A-Za-z.+!]{1,40}")
SM_RE = re.compile(r"sm_\d{2,4}[af]?")
SUMMARY_ITEMS = 64


def binary_summary(node: Node) -> dict[str, Any]:
    """What a provenance's `audit` and `device_code` say of where the wheel runs, in the form
    the index serves (`check_summary`): the CUDA runtime majors ("static": linked in), the
    oldest driver, the manylinux tag its symbol versions allow and the versions that set it,
    the torch its symbols were resolved against, its SASS and PTX targets."""
    audit = node["audit"]
    tag, symbols = audit.get("manylinux"), audit.get("symbols")
    runtimes = {o.optional("cuda_runtime", Node.text) for o in audit["objects"].items()}
    majors = sorted({r.removeprefix("libcudart.so.") if r != "static" else r
                     for r in runtimes if r})
    code = node.optional("device_code", Node.items) or []
    summary = {
        "cuda_runtime": majors,
        "driver_min": audit["driver"].optional("version", Node.text),
        "manylinux": tag.optional("tag", Node.text) if tag is not None else None,
        "manylinux_set_by": [s["version"].text() for s in tag["set_by"].items()]
        if tag is not None else [],
        "torch": symbols.optional("torch", Node.text) if symbols is not None else None,
        "sass": sorted({sm.text() for d in code for sm in d["sass"].items()}),
        "ptx": sorted({sm.text() for d in code for sm in d["ptx"].items()})}
    return check_summary(Node(summary, node.source, key_path(node.path, "audit")))


def check_summary(node: Node) -> dict[str, Any]:
    """A binary summary, every field checked by form (it reaches the index's pages)."""
    def listed(key: str, pattern: re.Pattern[str], what: str) -> list[str]:
        return [n.text(pattern, what) for n in node[key].items(SUMMARY_ITEMS)]

    def single(key: str, pattern: re.Pattern[str], what: str) -> str | None:
        return node.optional(key, lambda n: n.text(pattern, what))

    return {"cuda_runtime": listed("cuda_runtime", RUNTIME_RE, "a CUDA major or static"),
            "driver_min": single("driver_min", DRIVER_RE, "a driver version"),
            "manylinux": single("manylinux", TAG_RE, "a platform tag"),
            "manylinux_set_by": listed("manylinux_set_by", SYMBOL_VERSION_RE,
                                       "a symbol version"),
            "torch": single("torch", TORCH_RE, "a torch version"),
            "sass": listed("sass", SM_RE, "an arch"), "ptx": listed("ptx", SM_RE, "an arch")}


def _installed(node: Node) -> tuple[str, str]:
    """A host library's wheel installed for the build: its project and version."""
    project, version = node.optional("project", Node.name), node.optional("version", _version)
    if project is None or version is None:
        raise node.fail("a library installed for the build names no project and version")
    return project, version


def _version(node: Node) -> str:
    """A version, kept as it was written (a recipe names its versions so)."""
    node.parsed(Version, "a version")
    return node.text()


def read_provenance(wheel: Path) -> Provenance | None:
    """The provenance of a wheelsmith wheel; None for any other wheel (or no readable zip).
    A record that is not what wheelsmith writes: UntrustedDataError naming it. A wheel that
    is not a regular file: FileSystemError naming it (`open_zip`)."""
    source = f"the provenance of {wheel.name}"
    try:
        with open_zip(wheel) as zf:
            info_dir = dist_info_dir(zf.namelist())
            data = read_member(zf, f"{info_dir}/{PROVENANCE_FILE}")  # never a zip bomb's whole
    except MemberTooLarge:
        raise UntrustedDataError(source, f"is larger than {describe_size(PROVENANCE_MAX_BYTES)}"
                                 ) from None
    except (KeyError, ValueError, *UNREADABLE):
        return None
    return Provenance.parse(parse_json(data, source))


def recorded_provenance(wheel: Path) -> dict[str, Any]:
    """The whole provenance record of a wheelsmith wheel (checked); {} for another wheel."""
    provenance = read_provenance(wheel)
    return provenance.record if provenance else {}
