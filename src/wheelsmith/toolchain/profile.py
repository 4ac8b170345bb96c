"""Toolchain profiles: `toolchains/<name>.yaml`, written by `wheelsmith toolchain new`
(resolve.py), pin torch, the CUDA compiler and the build tools exactly, per Python where the
pins differ. Loading checks every pin; the profile directories are searched in order (the
user's own first), and `default.txt` names the default."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from wheelsmith import document
from wheelsmith.document import Document
from wheelsmith.errors import ToolchainError, UsageError

SYSTEM = "system"


INSTALLED = "installed"  # cuda_home: an installed CUDA toolkit (no nvcc for it on PyPI)


PIN = {"type": "string",
       "pattern": r"^[A-Za-z0-9._-]+(\[[a-z0-9,_-]+\])?===?[A-Za-z0-9.+!-]+(\s*;\s*\S.*)?$",
       "x-message": "must be an exact pin, NAME==VERSION, optionally '; python_version == \"3.X\"'"}


NVCC_PACKAGES = ("nvidia-cuda-nvcc", "nvidia-cuda-nvcc-cu12", "nvidia-cuda-nvcc-cu11")


PROFILE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "cuda", "pythons", "cuda_home", "requirements", "tools"],
    "properties": {
        "name": {"type": "string", "pattern": r"^cu\d+(-torch\d+\.\d+)?$",
                 "x-message": "must look like cu130-torch2.14 (or cu130: CUDA only, no torch)"},
        "torch": {"type": "string", "description": "the torch version pinned in requirements "
                                                    "(absent: a CUDA-only profile, for CUDA "
                                                    "packages that link no torch)"},
        "cuda": {"type": "string", "description": "the CUDA version that torch was built with"},
        "pythons": {"type": "array", "minItems": 1,
                    "items": {"type": "string", "pattern": r"^3\.\d+$",
                              "x-message": "must be a Python version like '3.12'"},
                    "description": "the Python versions the pins were resolved for"},
        "platforms": {"type": "array", "minItems": 1, "items": {"enum": ["x86_64", "aarch64"]},
                      "description": "the CPUs every pin has wheels for (absent: not recorded, "
                                     "any is tried)"},
        "index": {"type": "string", "pattern": r"^(https?|file)://",
                  "x-message": "must be a URL of a simple index",
                  "description": "extra index torch comes from (e.g. a per-CUDA PyTorch root)"},
        "cuda_home": {"type": "string",
                      "description": "the nvcc wheels' toolkit relative to site-packages, or "
                                     "'installed'"},
        "requirements": {"type": "array", "minItems": 1, "items": PIN},
        "tools": {"type": "array", "items": PIN},
        "image_base": {"type": "string", "minLength": 1,
                       "description": "the base of the profile's build image: one that carries "
                                      "the CUDA toolkit in /usr/local/cuda (cuda_home: "
                                      "installed), e.g. NVIDIA's devel image; locked by digest "
                                      "on first use"},
    },
}


@dataclass(frozen=True, kw_only=True, slots=True)
class Profile:
    name: str
    file: Path
    torch_pin: Version | None  # None: a CUDA-only profile (no torch pinned)
    cuda: Version
    pythons: tuple[str, ...]
    cuda_home: str
    requirements: tuple[str, ...]
    tools: tuple[str, ...]
    index: str | None = None
    image_base: str | None = None  # a toolkit-carrying base for its image (container builds)
    platforms: tuple[str, ...] | None = None  # CPUs its pins have wheels for; None: not recorded

    @property
    def pins(self) -> tuple[str, ...]:
        """Every pin of the venv, once each (a tool may also be a requirement)."""
        return tuple(dict.fromkeys(self.requirements + self.tools))

    @property
    def cuda_only(self) -> bool:
        """No torch: for CUDA packages that link none (their channel is `cu130`)."""
        return self.torch_pin is None

    @property
    def torch(self) -> Version:
        """The torch it pins; a CUDA-only profile has none (ask `cuda_only` first)."""
        if self.torch_pin is None:
            raise ToolchainError(f"the {self.name} profile is CUDA-only: it pins no torch",
                                 hint="a torch CUDA extension builds with a cu<CUDA>-torch<M.m> "
                                      "profile")
        return self.torch_pin

    @property
    def installed_compiler(self) -> bool:
        """True when nvcc comes from an installed toolkit, not from the profile's pins."""
        return self.cuda_home == INSTALLED

    def pins_for(self, python_version: str) -> tuple[str, ...]:
        """The pins that apply on that Python (markers evaluated and dropped), then the tools:
        what its venv holds, and what a build's content key and provenance record."""
        return tuple(dict.fromkeys((*applying(self.requirements, python_version), *self.tools)))

    def key(self, python_version: str) -> str:
        """Hash of everything that ends up in the venv for that Python (the pins its markers
        select, so a Python added to the profile leaves the others' venvs and images valid):
        names the venv and image."""
        selected = applying(self.requirements, python_version)
        data: dict[str, Any] = {"requirements": selected, "tools": self.tools,
                                "cuda_home": self.cuda_home, "python": python_version}
        if self.index:
            data["index"] = self.index
        if self.image_base:
            data["image_base"] = self.image_base
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]

    def require_python(self, version: str) -> None:
        if version not in self.pythons:
            raise ToolchainError(
                f"the {self.name} profile was resolved for Python {', '.join(self.pythons)}, "
                f"not {version}",
                hint="add it to the profile's pythons and pins by hand" if self.cuda_only else
                f"add it: wheelsmith toolchain new --torch {self.torch} "
                     f"{' '.join('--python ' + p for p in (*self.pythons, version))} --force")

    def require_platform(self, machine: str) -> None:
        """A wheel for `machine` needs the pins' wheels for it: refused by name where the
        profile records its platforms without that one."""
        if self.platforms is not None and machine not in self.platforms:
            raise UsageError(
                f"the {self.name} profile was resolved for {', '.join(self.platforms)}, not "
                f"{machine}: its pins lacked {machine} wheels when it was made",
                hint=f"choose another profile with --toolchain, or regenerate it (wheelsmith "
                     f"toolchain new --torch {self.torch} --force) once they exist")

    def pip_index_args(self) -> list[str]:
        """pip options that make the profile's extra index (if any) visible."""
        return ["--extra-index-url", self.index] if self.index else []


def load_profile(path: Path) -> Profile:
    doc = document.load(path)
    document.validate(doc, PROFILE_SCHEMA)
    doc.raise_if_problems()
    data = doc.data
    versions: dict[str, Version | None] = {"torch": None}
    for key in ("torch", "cuda"):
        try:
            versions[key] = Version(str(data[key])) if key in data else None
        except InvalidVersion:
            doc.at_value((key,), f"'{key}' is not a version: '{data[key]}'")
    if ("torch" in data) != ("-torch" in data["name"]):
        doc.at_value(("name",), f"profile name '{data['name']}' "
                     + ("names no torch, but 'torch' is " + str(data.get("torch"))
                        if "torch" in data else "names a torch, but 'torch' is missing"),
                     "a profile that pins torch is cu<CUDA>-torch<M.m>; a CUDA-only one cu<CUDA>")
    if data.get("image_base") and data["cuda_home"] != INSTALLED:
        doc.at_value(("image_base",), f"image_base names a base that carries the CUDA toolkit, "
                     f"but cuda_home is {data['cuda_home']} (the compiler from the pins)",
                     f"set cuda_home: {INSTALLED} to build with the base's toolkit, or remove "
                     "image_base")
    if path.stem != data["name"]:
        doc.at_value(("name",), f"profile name '{data['name']}' differs from its file name "
                     f"'{path.name}'", f"rename the file to {data['name']}.yaml")
    doc.raise_if_problems()
    _check_pins(doc, data, versions["torch"])
    doc.raise_if_problems()
    cuda = versions["cuda"]
    assert cuda is not None
    return Profile(name=data["name"], file=path, torch_pin=versions["torch"], cuda=cuda,
                   pythons=tuple(data["pythons"]), cuda_home=data["cuda_home"],
                   requirements=tuple(data["requirements"]), tools=tuple(data["tools"]),
                   index=data.get("index"), image_base=data.get("image_base"),
                   platforms=tuple(data["platforms"]) if data.get("platforms") else None)


def applies(requirement: Requirement, python: str, machine: str = "x86_64") -> bool:
    """Whether a pin's marker (if any) selects it on Python `python` on Linux `machine`."""
    if requirement.marker is None:
        return True
    return requirement.marker.evaluate({  # merged over this interpreter's environment
        "python_version": python, "python_full_version": f"{python}.0", "sys_platform": "linux",
        "platform_system": "Linux", "platform_machine": machine})


def applying(lines: Sequence[str], python_version: str, machine: str = "x86_64"
             ) -> tuple[str, ...]:
    """The requirement lines whose markers hold on that Python and CPU, without markers."""
    return tuple(line.partition(";")[0].strip() for line in lines
                 if applies(Requirement(line), python_version, machine))


def pinned_version(requirement: Requirement) -> str:
    """The version of an exact pin (`==V`, or `===V`: that string and no local variant)."""
    return str(requirement.specifier).lstrip("=")


def _check_pins(doc: Document, data: dict[str, Any], torch: Version | None) -> None:
    """A missing or conflicting pin, for each Python the profile covers."""
    parsed: list[tuple[int, Requirement]] = []
    for position, line in enumerate(data["requirements"]):
        try:
            parsed.append((position, Requirement(line)))
        except InvalidRequirement as exc:
            doc.at_value(("requirements", position), f"not a requirement: {exc}")
    for python in data["pythons"]:
        chosen: dict[str, tuple[int, str]] = {}
        for position, req in parsed:
            if not applies(req, python):
                continue
            name, version = canonicalize_name(req.name), pinned_version(req)
            if name in chosen and chosen[name][1] != version:
                doc.at_value(("requirements", position),
                             f"conflicting pins for {name} on Python {python}: "
                             f"{chosen[name][1]} (requirements[{chosen[name][0]}]) and "
                             f"{version}", "keep one; their markers must not overlap")
            chosen.setdefault(name, (position, version))
        _check_required_pins(doc, data, python, {n: v for n, (_, v) in chosen.items()}, torch)


def _check_required_pins(doc: Document, data: dict[str, Any], python: str,
                         chosen: dict[str, str], torch: Version | None) -> None:
    hint = "regenerate the profile: wheelsmith toolchain new --torch VERSION --force"
    if torch is None and "torch" in chosen:
        doc.at_key(("requirements",), f"a CUDA-only profile pins torch for Python {python}",
                   "remove the torch pin, or name the profile cu<CUDA>-torch<M.m> with torch:")
    elif torch is None:
        pass
    elif "torch" not in chosen:
        doc.at_key(("requirements",), f"no torch pin for Python {python}", hint)
    elif Version(chosen["torch"]) != torch:
        doc.at_value(("torch",), f"'torch' says {torch} but requirements pin torch=="
                     f"{chosen['torch']} for Python {python}", hint)
    if data["cuda_home"] != INSTALLED and not any(p in chosen for p in NVCC_PACKAGES):
        doc.at_key(("requirements",), f"no CUDA compiler pin for Python {python} (cuda_home "
                   f"is {data['cuda_home']})", "pin cuda-toolkit[nvcc,cudart,cccl] and its parts"
                   " (" + hint.removeprefix("regenerate the profile: ") + "), or set cuda_home: "
                   "installed")


ProfileDirs = Path | Sequence[Path]  # one toolchains/ directory, or several: first match wins


def _dirs(where: ProfileDirs) -> tuple[Path, ...]:
    return (where,) if isinstance(where, Path) else tuple(where)


def profile_files(where: ProfileDirs) -> dict[str, Path]:
    """name -> file of every profile in `where`, by name; the first directory wins."""
    found: dict[str, Path] = {}
    for directory in _dirs(where):
        for path in sorted(directory.glob("*.yaml")):
            found.setdefault(path.stem, path)
    return dict(sorted(found.items()))


def find_profile(where: ProfileDirs, name: str) -> Profile:
    files = profile_files(where)
    if name not in files:
        places = ", ".join(str(d) for d in _dirs(where))
        raise UsageError(f"no toolchain profile '{name}' in {places}",
                         hint=f"known profiles: {', '.join(files)}, or '{SYSTEM}' for an "
                              "installed CUDA")
    return load_profile(files[name])


def load_profiles(where: ProfileDirs) -> list[Profile]:
    return [load_profile(p) for p in profile_files(where).values()]


DEFAULT_FILE = "default.txt"


def default_profile_name(where: ProfileDirs) -> str:
    """The profile a build without --toolchain (or a target environment) uses: the one named
    in `toolchains/default.txt` (the first directory that has one), else the newest (by torch
    version)."""
    for chosen in (d / DEFAULT_FILE for d in _dirs(where)):
        lines = [line.strip() for line in chosen.read_text().splitlines()
                 if line.strip() and not line.startswith("#")] if chosen.is_file() else []
        if lines:
            return find_profile(where, lines[0]).name
    profiles = torch_profiles(load_profiles(where))
    if not profiles:
        places = ", ".join(str(d) for d in _dirs(where))
        raise UsageError(f"no toolchain profiles in {places}")
    return max(profiles, key=lambda p: (p.torch, p.cuda)).name


def torch_profiles(profiles: list[Profile]) -> list[Profile]:
    """The profiles that pin a torch (what serves a torch environment)."""
    return [p for p in profiles if not p.cuda_only]


def default_cuda_only_name(where: ProfileDirs) -> str:
    """The profile a CUDA package that links no torch builds with (recipe `kind: cuda`) without
    --toolchain: the CUDA-only profile (`cu130`) of the newest CUDA."""
    profiles = [p for p in load_profiles(where) if p.cuda_only]
    if not profiles:
        places = ", ".join(str(d) for d in _dirs(where))
        raise UsageError(f"no CUDA-only toolchain profile (cu<CUDA>.yaml, no torch) in {places}",
                         hint="a recipe of kind cuda builds with one; wheelsmith ships "
                              "toolchains/cu130.yaml")
    return max(profiles, key=lambda p: p.cuda).name

