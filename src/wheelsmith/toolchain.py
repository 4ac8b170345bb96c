"""Toolchains: the torch + CUDA compiler + build tools a package is compiled with.

A *profile* (`toolchains/<name>.yaml`, written by `wheelsmith toolchain new`, see resolve.py)
pins everything, per Python where pins differ; the host runner turns it into a venv, created
once and reused, keyed by the hash of the pins and the Python version. Its CUDA compiler comes
from PyPI (`cuda_home: nvidia/cu13`) or, for a CUDA major PyPI ships no nvcc for, from an
installed toolkit (`cuda_home: installed`). `system` uses the current interpreter's torch and
an installed CUDA toolkit instead.

Either way the result is a `Toolchain`, which knows its Python, CUDA_HOME, torch and nvcc
versions and passes a pre-flight check before anything is compiled.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from wheelsmith import cmd, document
from wheelsmith.arch import ArchSet
from wheelsmith.document import Document
from wheelsmith.errors import (
    CommandError,
    MissingToolkitError,
    ToolchainError,
    UsageError,
    WheelsmithError,
)
from wheelsmith.files import atomic_write_text, exclusive_lock

log = logging.getLogger(__name__)

SYSTEM = "system"
INSTALLED = "installed"  # cuda_home: an installed CUDA toolkit (no nvcc for it on PyPI)
MARKER = "wheelsmith-toolchain.json"
PIN = {"type": "string",
       "pattern": r"^[A-Za-z0-9._-]+(\[[a-z0-9,_-]+\])?===?[A-Za-z0-9.+!-]+(\s*;\s*\S.*)?$",
       "x-message": "must be an exact pin, NAME==VERSION, optionally '; python_version == \"3.X\"'"}
NVCC_PACKAGES = ("nvidia-cuda-nvcc", "nvidia-cuda-nvcc-cu12", "nvidia-cuda-nvcc-cu11")

PROFILE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "torch", "cuda", "pythons", "cuda_home", "requirements", "tools"],
    "properties": {
        "name": {"type": "string", "pattern": r"^cu\d+-torch\d+\.\d+$",
                 "x-message": "must look like cu130-torch2.14"},
        "torch": {"type": "string", "description": "the torch version pinned in requirements"},
        "cuda": {"type": "string", "description": "the CUDA version that torch was built with"},
        "pythons": {"type": "array", "minItems": 1,
                    "items": {"type": "string", "pattern": r"^3\.\d+$",
                              "x-message": "must be a Python version like '3.12'"},
                    "description": "the Python versions the pins were resolved for"},
        "index": {"type": "string", "pattern": r"^(https?|file)://",
                  "x-message": "must be a URL of a simple index",
                  "description": "extra index torch comes from (e.g. a per-CUDA PyTorch root)"},
        "cuda_home": {"type": "string",
                      "description": "the nvcc wheels' toolkit relative to site-packages, or "
                                     "'installed'"},
        "requirements": {"type": "array", "minItems": 1, "items": PIN},
        "tools": {"type": "array", "items": PIN},
    },
}


@dataclass(frozen=True, kw_only=True, slots=True)
class Profile:
    name: str
    file: Path
    torch: Version
    cuda: Version
    pythons: tuple[str, ...]
    cuda_home: str
    requirements: tuple[str, ...]
    tools: tuple[str, ...]
    index: str | None = None

    @property
    def pins(self) -> tuple[str, ...]:
        """Every pin of the venv, once each (a tool may also be a requirement)."""
        return tuple(dict.fromkeys(self.requirements + self.tools))

    @property
    def installed_compiler(self) -> bool:
        """True when nvcc comes from an installed toolkit, not from the profile's pins."""
        return self.cuda_home == INSTALLED

    def key(self, python_version: str) -> str:
        """Hash of everything that ends up in the venv: names the venv, image and channel."""
        data: dict[str, Any] = {"requirements": self.requirements, "tools": self.tools,
                                "cuda_home": self.cuda_home, "python": python_version}
        if self.index:
            data["index"] = self.index
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]

    def require_python(self, version: str) -> None:
        if version not in self.pythons:
            raise ToolchainError(
                f"the {self.name} profile was resolved for Python {', '.join(self.pythons)}, "
                f"not {version}",
                hint=f"add it: wheelsmith toolchain new --torch {self.torch} "
                     f"{' '.join('--python ' + p for p in (*self.pythons, version))} --force")

    def pip_index_args(self) -> list[str]:
        """pip options that make the profile's extra index (if any) visible."""
        return ["--extra-index-url", self.index] if self.index else []


def load_profile(path: Path) -> Profile:
    doc = document.load(path)
    document.validate(doc, PROFILE_SCHEMA)
    doc.raise_if_problems()
    data = doc.data
    versions = {}
    for key in ("torch", "cuda"):
        try:
            versions[key] = Version(str(data[key]))
        except InvalidVersion:
            doc.at_value((key,), f"'{key}' is not a version: '{data[key]}'")
    if path.stem != data["name"]:
        doc.at_value(("name",), f"profile name '{data['name']}' differs from its file name "
                     f"'{path.name}'", f"rename the file to {data['name']}.yaml")
    doc.raise_if_problems()
    _check_pins(doc, data, versions["torch"])
    doc.raise_if_problems()
    return Profile(name=data["name"], file=path, torch=versions["torch"], cuda=versions["cuda"],
                   pythons=tuple(data["pythons"]), cuda_home=data["cuda_home"],
                   requirements=tuple(data["requirements"]), tools=tuple(data["tools"]),
                   index=data.get("index"))


def applies(requirement: Requirement, python: str) -> bool:
    """Whether a pin's marker (if any) selects it on Python `python` (Linux x86_64)."""
    if requirement.marker is None:
        return True
    return requirement.marker.evaluate({  # merged over this interpreter's environment
        "python_version": python, "python_full_version": f"{python}.0", "sys_platform": "linux",
        "platform_system": "Linux", "platform_machine": "x86_64"})


def pinned_version(requirement: Requirement) -> str:
    """The version of an exact pin (`==V`, or `===V`: that string and no local variant)."""
    return str(requirement.specifier).lstrip("=")


def _check_pins(doc: Document, data: dict[str, Any], torch: Version) -> None:
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
                         chosen: dict[str, str], torch: Version) -> None:
    hint = "regenerate the profile: wheelsmith toolchain new --torch VERSION --force"
    if "torch" not in chosen:
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
    profiles = load_profiles(where)
    if not profiles:
        places = ", ".join(str(d) for d in _dirs(where))
        raise UsageError(f"no toolchain profiles in {places}")
    return max(profiles, key=lambda p: (p.torch, p.cuda)).name


@dataclass(frozen=True, kw_only=True, slots=True)
class Toolchain:
    """A usable build environment, probed and ready for the pre-flight check."""

    name: str
    python: Path
    python_version: str
    cuda_home: Path
    torch_version: Version
    torch_cuda: Version
    nvcc_version: Version
    cuobjdump: Path | None
    pins: tuple[str, ...]

    @property
    def nvcc(self) -> Path:
        return self.cuda_home / "bin" / "nvcc"

    @property
    def bin_dirs(self) -> tuple[Path, ...]:
        return (self.python.parent, self.cuda_home / "bin")

    def channel(self) -> str:
        """`cu130-torch2.14`: the index channel wheels of this toolchain belong to."""
        cuda = f"{self.torch_cuda.major}{self.torch_cuda.minor}"
        return f"cu{cuda}-torch{self.torch_version.major}.{self.torch_version.minor}"

    def identity(self) -> dict[str, Any]:
        """What the content key and the provenance record say about the toolchain."""
        return {"name": self.name, "python": self.python_version,
                "torch": str(self.torch_version), "torch_cuda": str(self.torch_cuda),
                "nvcc": str(self.nvcc_version), "pins": list(self.pins)}


# --- probing ---------------------------------------------------------------------------------

PROBE_SCRIPT = Path(__file__).parent / "resources" / "probe.py"


def probe_python(python: Path, env: dict[str, str] | None = None,
                 sections: tuple[str, ...] = ()) -> dict[str, Any]:
    """Ask an interpreter about itself and its torch (run in a subprocess: torch is not ours);
    `sections`: also "gpu" and/or "packages" (the installed extensions, for doctor)."""
    if not Path(python).exists():
        raise ToolchainError(f"{python} does not exist", hint="give the path of a Python "
                             "interpreter, e.g. /path/to/venv/bin/python")
    try:
        result = cmd.run([python, PROBE_SCRIPT, *sections], stream=False, env=env,
                         what=f"the probe of {python}")
    except CommandError as exc:  # not executable, not a program, not a working Python
        raise ToolchainError(f"{python} is not a Python interpreter: {exc.message}",
                             hint="give the path of a Python interpreter", tail=exc.tail) from exc
    for line in result.stdout.splitlines():
        if line.startswith("WHEELSMITH-PROBE "):
            data: dict[str, Any] = json.loads(line.removeprefix("WHEELSMITH-PROBE "))
            return data
    raise ToolchainError(f"{python} did not answer the probe", hint="is it a Python "
                         "interpreter (3.8 or newer)?")


def nvcc_version(nvcc: Path) -> Version:
    result = cmd.run([nvcc, "--version"], stream=False, error=ToolchainError, what="nvcc")
    match = re.search(r"release [\d.]+, V(\d+\.\d+\.\d+)", result.stdout)
    if match is None:
        raise ToolchainError(f"cannot read the CUDA version from `{nvcc} --version`")
    return Version(match[1])


def _find_cuobjdump(root: Path) -> Path | None:
    hits = sorted(root.glob("**/bin/cuobjdump"))
    return hits[0] if hits else None


# --- profile venvs ---------------------------------------------------------------------------


def venv_root(profile: Profile, python_version: str, cache: Path) -> Path:
    return cache / "toolchains" / f"{profile.name}-py{python_version}-{profile.key(python_version)}"


def ensure_profile(profile: Profile, python: Path, cache: Path) -> Toolchain:
    """The toolchain of (profile, python): its venv, created on first use and reused after
    that, and its compiler (the venv's nvcc, or an installed toolkit's, checked first)."""
    cuda_home = installed_cuda_home(profile) if profile.installed_compiler else None
    root = ensure_venv(profile, python, cache)
    info = json.loads((root / MARKER).read_text())
    if cuda_home is None:
        cuda_home, nvcc = Path(info["cuda_home"]), Version(info["nvcc"])
    else:
        nvcc = nvcc_version(cuda_home / "bin" / "nvcc")
    return Toolchain(
        name=profile.name,
        python=root / "bin" / "python",
        python_version=info["python"],
        cuda_home=cuda_home,
        torch_version=Version(info["torch"]),
        torch_cuda=Version(info["torch_cuda"]),
        nvcc_version=nvcc,
        cuobjdump=_find_cuobjdump(Path(info["purelib"]) / "nvidia"),
        pins=profile.pins,
    )


def ensure_venv(profile: Profile, python: Path, cache: Path) -> Path:
    """The profile's venv for `python` (its root), created under a lock if missing."""
    version = probe_python(python)["python"]
    profile.require_python(version)
    root = venv_root(profile, version, cache)
    marker = root / MARKER
    if not marker.is_file():  # the marker is written last: with it, the venv is complete
        with exclusive_lock(root.parent / f"{root.name}.lock"):
            if not marker.is_file():
                _create_venv(profile, python, root)
    return root


def _create_venv(profile: Profile, python: Path, root: Path) -> None:
    log.info("creating the %s toolchain venv in %s (once; about 2 minutes)", profile.name, root)
    install_pinned(python, root, profile.pins, profile)
    info = probe_python(root / "bin" / "python")
    if "torch_error" in info:
        raise ToolchainError(f"torch does not import in the new toolchain: {info['torch_error']}")
    if not profile.installed_compiler:
        cuda_home = Path(info["purelib"]) / profile.cuda_home
        _link_cuda_libs(cuda_home)
        info.update(cuda_home=str(cuda_home), nvcc=str(nvcc_version(cuda_home / "bin" / "nvcc")))
    atomic_write_text(root / MARKER, json.dumps(info, indent=2) + "\n")


def installed_cuda_home(profile: Profile) -> Path:
    """The installed toolkit a profile without a PyPI compiler builds with: CUDA_HOME (or the
    usual guesses), else the newest /usr/local/cuda-<major>.* of the profile's CUDA major."""
    major = profile.cuda.major
    guesses = [system_cuda_home(), *sorted(Path("/usr/local").glob(f"cuda-{major}.*"),
                                           key=lambda p: _version_suffix(p.name), reverse=True)]
    others = []
    for home in dict.fromkeys(guesses):
        if not _is_toolkit(home):
            continue
        found = nvcc_version(home / "bin" / "nvcc")
        if found.major == major:
            return home
        others.append(f"CUDA {found} at {home}")
    seen = f" (found only {', '.join(others)})" if others else ""
    raise MissingToolkitError(
        f"the {profile.name} profile needs an installed CUDA {major} toolkit: PyPI ships no "
        f"CUDA {major} compiler, and none is installed here{seen}",
        hint=f"install CUDA {profile.cuda} or a newer {major}.x (NVIDIA's cuda-nvcc-{major}-"
             f"{profile.cuda.minor} and cuda-cudart-dev-{major}-{profile.cuda.minor} packages) "
             "and set CUDA_HOME to it")


def _version_suffix(name: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", name))


def install_pinned(python: Path, root: Path, pins: tuple[str, ...], profile: Profile) -> None:
    """A fresh venv at `root` with exactly `pins` (no dependency resolution, then `pip check`);
    removed again if anything fails. The log goes next to it."""
    if root.exists():
        log.info("removing the incomplete venv %s", root)
        shutil.rmtree(root)
    root.parent.mkdir(parents=True, exist_ok=True)
    log_path = root.parent / f"{root.name}.log"
    venv_python = root / "bin" / "python"
    requirements = root.parent / f"{root.name}.requirements.txt"
    requirements.write_text("\n".join(pins) + "\n")
    steps: list[tuple[list[str | Path], str]] = [
        ([python, "-m", "venv", root], "python -m venv"),
        ([venv_python, "-m", "pip", "install", "--no-input", "--no-deps",
          *profile.pip_index_args(), "-r", requirements], "pip install of the pinned packages"),
        ([venv_python, "-m", "pip", "check"], "pip check (are all dependencies pinned?)"),
    ]
    try:
        with log_path.open("w") as log_file:
            for argv, what in steps:
                cmd.run(argv, what=what, log_file=log_file, log_path=log_path)
    except WheelsmithError as exc:
        shutil.rmtree(root, ignore_errors=True)
        raise ToolchainError(f"could not create {root.name}: {exc.message}",
                             hint=f"pins live in {profile.file}", tail=exc.tail,
                             log_file=log_path) from exc


def _link_cuda_libs(cuda_home: Path) -> None:
    """The pip CUDA wheels lack lib64/ and libcudart.so, which torch's linker line needs."""
    lib = cuda_home / "lib"
    if not (cuda_home / "bin" / "nvcc").is_file() or not lib.is_dir():
        raise ToolchainError(f"no CUDA compiler at {cuda_home}",
                             hint="the profile's cuda_home must point at the nvcc wheel's tree")
    lib64 = cuda_home / "lib64"
    if not lib64.exists():
        lib64.symlink_to("lib")
    unversioned = lib / "libcudart.so"
    versioned = sorted(lib.glob("libcudart.so.*"))
    if not unversioned.exists() and versioned:
        unversioned.symlink_to(versioned[0].name)


@dataclass(frozen=True, slots=True)
class Tools:
    """The wheel-checking tools of a profile's small tools venv."""

    cuobjdump: Path
    auditwheel: Path | None


def ensure_tools(profile: Profile, python: Path, cache: Path) -> Tools:
    """A small venv with only the profile's tools (cuobjdump, auditwheel), for checking wheels
    without torch."""
    key = hashlib.sha256("\n".join(profile.tools).encode()).hexdigest()[:16]
    root = cache / "tools" / key
    with exclusive_lock(root.parent / f"{key}.lock"):
        marker = root / MARKER
        if not marker.is_file():
            log.info("installing %s into %s (once)", ", ".join(profile.tools), root)
            install_pinned(python, root, profile.tools, profile)
            atomic_write_text(marker, json.dumps({"tools": profile.tools}) + "\n")
    found = _find_cuobjdump(root)
    if found is None:
        raise ToolchainError(f"cuobjdump is missing from {root}",
                             hint=f"the tools of {profile.file} must include nvidia-cuda-cuobjdump")
    auditwheel = root / "bin" / "auditwheel"
    return Tools(found, auditwheel if auditwheel.is_file() else None)


# --- system toolchain ------------------------------------------------------------------------


def _is_toolkit(home: Path) -> bool:
    return (home / "bin" / "nvcc").is_file() and (home / "include" / "cuda_runtime.h").is_file()


def system_cuda_home() -> Path:
    """CUDA_HOME or CUDA_PATH when set; else the toolkit around `nvcc` on PATH, then
    /usr/local/cuda. A guess must look like a toolkit (bin/nvcc and include/cuda_runtime.h):
    `/usr/local/bin/nvcc` is often a link or a wrapper script, and `/usr/local` is no toolkit
    (the trap torch's own guess falls into)."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            return Path(os.environ[var])
    nvcc = shutil.which("nvcc")
    guesses = [Path(nvcc).resolve().parent.parent] if nvcc else []
    guesses.append(Path("/usr/local/cuda"))
    return next((g for g in guesses if _is_toolkit(g)), guesses[0])


def system_cuobjdump() -> Path | None:
    """cuobjdump of an installed CUDA toolkit (CUDA_HOME first, then PATH), if any."""
    candidate = system_cuda_home() / "bin" / "cuobjdump"
    if candidate.is_file():
        return candidate
    found = shutil.which("cuobjdump")
    return Path(found) if found else None


def system_toolchain(python: Path) -> Toolchain:
    cuda_home = system_cuda_home()
    if not (cuda_home / "bin" / "nvcc").is_file():
        raise ToolchainError(f"no nvcc in {cuda_home}/bin",
                             hint="set CUDA_HOME to an installed CUDA toolkit, or use a profile")
    info = probe_python(python)
    if "torch_error" in info:
        raise ToolchainError(f"torch does not import in {python}: {info['torch_error']}",
                             hint="install torch there, or use a pinned toolchain profile")
    if not info.get("torch_cuda"):
        raise ToolchainError(f"the torch in {python} is a CPU-only build ({info['torch']})",
                             hint="a CUDA extension needs a CUDA build of torch")
    return Toolchain(
        name=SYSTEM,
        python=python,
        python_version=info["python"],
        cuda_home=cuda_home,
        torch_version=Version(info["torch"]),
        torch_cuda=Version(info["torch_cuda"]),
        nvcc_version=nvcc_version(cuda_home / "bin" / "nvcc"),
        cuobjdump=system_cuobjdump(),
        pins=(),
    )


# --- pre-flight ------------------------------------------------------------------------------


def preflight(toolchain: Toolchain, archs: ArchSet,
              min_cuda: tuple[tuple[str, Version], ...] = ()) -> None:
    """Refuse, before compiling, what would fail or silently mis-build later."""
    problems: list[str] = []
    nvcc = toolchain.nvcc_version
    if nvcc.major != toolchain.torch_cuda.major:
        problems.append(f"CUDA major mismatch: nvcc is {nvcc}, torch {toolchain.torch_version} "
                        f"was built with CUDA {toolchain.torch_cuda}")
    problems += archs.toolkit_problems(Version(f"{nvcc.major}.{nvcc.minor}"))
    needed = dict(min_cuda)
    for arch in archs.archs:
        floor = needed.get(arch.capability)
        if floor is not None and nvcc < floor:
            problems.append(f"the recipe needs CUDA >= {floor} for arch {arch}, nvcc is {nvcc}")
    problems += _nvcc_arch_problems(toolchain, archs)
    problems += _torch_arch_problems(toolchain, archs)
    if problems:
        raise ToolchainError(
            f"the {toolchain.name} toolchain cannot build {archs}: " + "; ".join(problems),
            hint="pick other archs (--arch) or another toolchain (--toolchain)",
        )


def _nvcc_arch_problems(toolchain: Toolchain, archs: ArchSet) -> list[str]:
    if not archs.archs:
        return []
    try:
        result = cmd.run([toolchain.nvcc, "--list-gpu-code"], stream=False, what="nvcc")
    except CommandError:
        return []  # older nvcc without the flag: the version table above still applies
    known = set(result.stdout.split())
    return [f"nvcc {toolchain.nvcc_version} cannot generate {arch.sm}"
            for arch in archs.archs if arch.sm not in known]


def _torch_arch_problems(toolchain: Toolchain, archs: ArchSet) -> list[str]:
    """Ask the toolchain's torch whether it accepts the arch list. Importing torch takes
    seconds, so a profile venv remembers the answers (they cannot change for its pins)."""
    if not archs.archs:
        return []
    probe = hashlib.sha256(PROBE_SCRIPT.read_bytes()).hexdigest()[:12]  # a new probe re-asks
    memo = (toolchain.python.parent.parent / f"wheelsmith-arch-checks-{probe}.json"
            if toolchain.name != SYSTEM else None)
    known: dict[str, list[str]] = json.loads(memo.read_text()) if memo and memo.is_file() else {}
    wanted = archs.torch_arch_list()
    if wanted not in known:
        env = dict(os.environ, TORCH_CUDA_ARCH_LIST=wanted, CUDA_HOME=str(toolchain.cuda_home))
        info = probe_python(toolchain.python, env=env)
        known[wanted] = ([f"torch {toolchain.torch_version} refuses the arch list: "
                          f"{info['arch_error']}"] if "arch_error" in info else [])
        if memo is not None:
            with contextlib.suppress(OSError):  # a read-only toolchain (an image) just re-asks
                atomic_write_text(memo, json.dumps(known, indent=1, sort_keys=True) + "\n")
    return known[wanted]

