"""`wheelsmith toolchain new`: a toolchain profile for one torch release, resolved by pip.

Nothing in a profile is typed by hand. pip's own resolver, run as a dry run with a report
(metadata only, no multi-GB download), gives for each Python the exact closure of

  torch==VERSION  +  the CUDA compiler wheels at torch's CUDA version  +  the build tools,

and the closures are merged into one file: a pin that is the same on every Python is written
once, one that differs gets a `python_version` marker. Steps:

1. discovery: torch alone, to learn its CUDA version (from the CUDA runtime it pulls in) and
   the `cuda-toolkit` release it names, if any;
2. the compiler: `cuda-toolkit[nvcc,cudart,cccl]` at that version; the nvcc wheel pip picks
   is downloaded (tens of MB) and must hold `bin/nvcc` — its directory becomes `cuda_home`.
   For CUDA 12 it holds only ptxas, so such a profile says `cuda_home: installed` and builds
   with an installed CUDA 12 toolkit instead; `nvidia-cuda-crt` and `nvidia-nvvm` are pinned
   to nvcc's own version (a newer nvvm breaks ptxas);
3. every Python: the final closure.

`--index URL` makes an extra index visible to the resolver (a per-CUDA PyTorch root, where
`torch 2.11.0+cu128` lives); the profile records it and its venv is installed with it.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import yaml
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from wheelsmith import cmd
from wheelsmith.errors import OutputError, ToolchainError, UsageError
from wheelsmith.files import atomic_write_text
from wheelsmith.toolchain.platform import KNOWN, pip_target_options
from wheelsmith.toolchain.profile import (
    INSTALLED,
    NVCC_PACKAGES,
    Profile,
    applying,
    load_profile,
)
from wheelsmith.untrusted import LONG, tool_bounds
from wheelsmith.untrusted.local import open_zip

log = logging.getLogger(__name__)

DEFAULT_PYTHONS = ("3.10", "3.11", "3.12", "3.13", "3.14", "3.15")  # torch's wheels decide
BUILD_TOOLS = ("ninja", "cmake", "setuptools", "wheel", "packaging")  # cmake: CMake builds
COMPILER = "cuda-toolkit"
COMPILER_EXTRAS = "[nvcc,cudart,cccl]"
COMPILER_PARTS = ("nvidia-cuda-crt", "nvidia-nvvm")  # must be nvcc's own version
RUNTIMES = ("nvidia-cuda-runtime", "nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu11")
# Tools that read built wheels (device code, glibc floor), the same for every profile: the
# one place their pins are written; `toolchain new` copies them into each profile.
TOOLS = ("nvidia-cuda-cuobjdump==13.2.86", "auditwheel==6.8.2", "pyelftools==0.33",
         "packaging==26.4")
_NO_MATCH = re.compile(r"No matching distribution found for (\S+)")
_FROM_VERSIONS = re.compile(r"\(from versions: ([^)]*)\)")


@dataclass(frozen=True, kw_only=True, slots=True)
class NewProfileRequest:
    torch: str  # "2.11.0" or "2.11.0+cu128"
    cuda: Version | None = None  # the CUDA version torch must be built with
    index: str | None = None
    pythons: tuple[str, ...] = DEFAULT_PYTHONS
    toolchains_dir: Path
    force: bool = False

    @property
    def where(self) -> str:
        return self.index or "your pip index"


@dataclass(frozen=True, slots=True)
class Closure:
    """One Python's resolution: canonical name -> (version, download URL)."""

    python: str
    pins: dict[str, tuple[str, str]]

    def version(self, name: str) -> str | None:
        found = self.pins.get(name)
        return found[0] if found else None


@dataclass(frozen=True, slots=True)
class Compiler:
    """The CUDA compiler a profile pins, or why it cannot (cuda_home: installed)."""

    specs: tuple[str, ...]
    cuda_home: str
    note: str


def new_profile(request: NewProfileRequest, scratch: Path) -> Profile:
    """Resolve, write `toolchains/<name>.yaml`, validate it; nothing is written on failure."""
    torch_spec = torch_requirement(request)
    discovery, pythons = _discover(request, torch_spec, scratch)
    cuda = _torch_cuda(discovery, request)
    name = f"cu{cuda.major}{cuda.minor}-torch{_minor(discovery.version('torch'))}"
    target = request.toolchains_dir / f"{name}.yaml"
    if target.exists() and not request.force:
        raise OutputError(f"{target} exists", hint="pass --force to replace it (its venvs and "
                          "image are then rebuilt, keyed by the new pins)")
    compiler = _compiler(request, torch_spec, discovery, cuda, scratch)
    specs = [torch_spec, *compiler.specs, *BUILD_TOOLS, *TOOLS]  # tools: one packaging pin
    closures = _each_python(specs, pythons, request, scratch)
    pythons = tuple(c.python for c in closures)
    for closure in closures:
        if _torch_cuda(closure, request) != cuda:
            raise UsageError(f"torch {request.torch} resolves to another build on Python "
                             f"{closure.python} ({closure.version('torch')}, CUDA "
                             f"{_torch_cuda(closure, request)}) than on {pythons[0]}",
                             hint="name the build exactly, e.g. --torch 2.11.0+cu128")
    requirements = [pin for pin in merge(closures, extras={COMPILER: COMPILER_EXTRAS})
                    if pin not in TOOLS]
    text = render(name=name, request=request, torch=closures[0].version("torch") or "",
                  cuda=cuda, pythons=pythons, compiler=compiler, requirements=requirements,
                  platforms=platforms_of(requirements, pythons, request, scratch))
    staged = scratch / f"{name}.yaml"
    staged.write_text(text)
    load_profile(staged)  # what we write must load: the same checks as every build
    request.toolchains_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(target, text)
    return load_profile(target)


def torch_requirement(request: NewProfileRequest) -> str:
    """`torch===2.11.0` (that build and no local variant such as +cpu, which `==` would also
    match), or `torch==2.11.0+cu128` for a named build — also the one `--cuda 12.8` names on
    an extra index, by PyTorch's convention."""
    version = Version(request.torch)
    if version.local:
        return f"torch=={version}"
    if request.index and request.cuda is not None:
        return f"torch=={version}+cu{request.cuda.major}{request.cuda.minor}"
    return f"torch==={version}"


def pin(name: str, version: str, extras: str = "") -> str:
    """The exact pin of a resolved package (torch without a local label: `===`)."""
    operator = "===" if name == "torch" and not Version(version).local else "=="
    return f"{name}{extras}{operator}{version}"


def _discover(request: NewProfileRequest, torch_spec: str, scratch: Path
              ) -> tuple[Closure, tuple[str, ...]]:
    """torch alone on the first Python it has wheels for; the Pythons it lacks are left out
    (torch 2.15 has none for 3.10), and none at all is an error naming the newest releases."""
    newest: list[str] = []
    for position, python in enumerate(request.pythons):
        try:
            return resolve([torch_spec], python, request, scratch), request.pythons[position:]
        except _NoTorch as exc:
            log.warning("%s: left out", exc.message)
            newest = newest or exc.newest
    raise UsageError(f"there is no torch {request.torch} on {request.where} for Python "
                     f"{', '.join(request.pythons)}",
                     hint=f"newest torch releases there: {', '.join(newest) or 'none'}")


def _each_python(specs: list[str], pythons: tuple[str, ...], request: NewProfileRequest,
                 scratch: Path) -> list[Closure]:
    """The closure for every Python torch has wheels for (the others are left out)."""
    closures = []
    for python in pythons:
        try:
            closures.append(resolve(specs, python, request, scratch))
        except _NoTorch as exc:
            log.warning("%s: left out", exc.message)
    if not closures:
        raise UsageError(f"torch {request.torch} resolves on no Python of "
                         f"{', '.join(pythons)}", hint="choose other Pythons with --python")
    return closures


def _torch_cuda(closure: Closure, request: NewProfileRequest) -> Version:
    """torch's CUDA version, read from the CUDA runtime wheel it depends on."""
    runtime = next((closure.version(n) for n in RUNTIMES if closure.version(n)), None)
    if runtime is None:
        raise UsageError(f"torch {request.torch} from {request.where} is a CPU-only build (it "
                         "pulls in no CUDA runtime)", hint="a CUDA extension needs a CUDA build "
                         "of torch: give --index with a per-CUDA torch index")
    release = Version(runtime).release
    cuda = Version(f"{release[0]}.{release[1]}")
    if request.cuda is not None and (request.cuda.major, request.cuda.minor) != (
            cuda.major, cuda.minor):
        raise UsageError(f"torch {request.torch} from {request.where} is built with CUDA {cuda},"
                         f" not {request.cuda}", hint=f"for a CUDA {request.cuda} build, give "
                         "--index with that build's torch index (PyTorch's per-CUDA root, e.g. "
                         f"the one ending in /cu{request.cuda.major}{request.cuda.minor})")
    return cuda


def _compiler(request: NewProfileRequest, torch_spec: str, discovery: Closure, cuda: Version,
              scratch: Path) -> Compiler:
    toolkit = discovery.version(COMPILER)
    wanted = f"{COMPILER}{COMPILER_EXTRAS}==" + (toolkit or f"{cuda.major}.{cuda.minor}.*")
    try:
        closure = resolve([torch_spec, wanted], discovery.python, request, scratch)
    except UsageError as exc:
        return Compiler((), INSTALLED, f"no {wanted} resolves with torch ({exc.message})")
    nvcc = next((n for n in NVCC_PACKAGES if closure.version(n)), None)
    if nvcc is None:
        return Compiler((), INSTALLED, f"{wanted} pulls in no nvcc wheel")
    version = closure.pins[nvcc][0]
    home = _nvcc_home(nvcc, closure, request, scratch)
    if home is None:
        return Compiler((), INSTALLED, f"PyPI's CUDA {cuda.major} nvcc wheel ({nvcc} {version})"
                        " holds no nvcc, only ptxas: builds use an installed CUDA "
                        f"{cuda.major} toolkit")
    parts = tuple(f"{p}=={version}" for p in COMPILER_PARTS if closure.version(p))
    chosen = f"{COMPILER}{COMPILER_EXTRAS}=={closure.version(COMPILER)}"
    return Compiler((chosen, *parts), home, f"nvcc {version} from {nvcc}")


def _nvcc_home(name: str, closure: Closure, request: NewProfileRequest, scratch: Path
               ) -> str | None:
    """Where the nvcc wheel puts `bin/nvcc`, relative to site-packages (None: it has none)."""
    version, url = closure.pins[name]
    python = closure.python
    dest = scratch / "nvcc"
    cmd.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--no-input",
             "--only-binary=:all:", "--python-version", python, "--dest", dest,
             *_index_args(request), f"{name}=={version}"], stream=False, error=ToolchainError,
            what=f"pip download of {name} {version} (to look for nvcc in it)")
    wheel = dest / url.rsplit("/", 1)[-1].split("#", maxsplit=1)[0]
    wheels = [wheel] if wheel.is_file() else sorted(dest.glob("*.whl"))
    with open_zip(wheels[0]) as archive:
        for member in archive.namelist():
            if member.endswith("/bin/nvcc"):
                return member.removesuffix("/bin/nvcc")
    return None


class _NoTorch(UsageError):
    """No wheel of that torch for this Python (perhaps for none); `newest`: what there is."""

    def __init__(self, message: str, newest: list[str]) -> None:
        super().__init__(message)
        self.newest = newest


def resolve(specs: list[str], python: str, request: NewProfileRequest, scratch: Path) -> Closure:
    """pip's resolution of `specs` for Linux x86_64 CPython `python` (a dry run: metadata
    only, nothing installed)."""
    report = scratch / f"report-{python}.json"
    report.unlink(missing_ok=True)
    argv: list[str | Path] = [
        sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
        "--no-input", "--only-binary=:all:", "--python-version", python,
        "--implementation", "cp", "--target", scratch / "target", "--report", report,
        *_index_args(request), *specs]
    result = _pip_metadata_only(argv, what=f"pip's resolver (Python {python})")
    if result.returncode != 0:
        raise _resolve_error(result.stderr or result.stdout, specs, python, request)
    items = json.loads(report.read_text())["install"]
    return Closure(python, {canonicalize_name(i["metadata"]["name"]): (
        i["metadata"]["version"], i["download_info"]["url"]) for i in items})


_FAST_DEPS = "--use-feature=fast-deps"


def _pip_metadata_only(argv: list[str | Path], what: str) -> cmd.Completed:
    """Run pip's dry run reading each wheel's metadata by HTTP range requests (`fast-deps`):
    an index without PEP 658 metadata files otherwise makes a dry run download every wheel it
    considers (torch with its CUDA libraries: about 4 GB into the temporary folder, each time).
    A pip that no longer knows the feature runs it the plain way."""
    result = cmd.run([*argv[:4], _FAST_DEPS, *argv[4:]], stream=False,
                     ok_returncodes=range(256), what=what, bounds=tool_bounds(LONG))
    output = result.stderr + result.stdout
    if result.returncode != 0 and "invalid choice" in output and "fast-deps" in output:
        result = cmd.run(argv, stream=False, ok_returncodes=range(256), what=what,
                         bounds=tool_bounds(LONG))
    return result


def _index_args(request: NewProfileRequest) -> list[str]:
    return ["--extra-index-url", request.index] if request.index else []


def _resolve_error(output: str, specs: list[str], python: str,
                   request: NewProfileRequest) -> UsageError:
    missing = _NO_MATCH.search(output)
    if missing and missing[1].startswith("torch"):
        known = _FROM_VERSIONS.search(output)
        versions = [v.strip() for v in known[1].split(",") if v.strip()] if known else []
        return _NoTorch(f"torch {request.torch} has no wheel for Python {python} on "
                        f"{request.where}", _newest(versions))
    lines = [line for line in output.splitlines() if line.strip()]
    return UsageError(f"pip cannot resolve {' '.join(specs)} for Python {python} on "
                      f"{request.where}", hint=(lines or ["(pip printed nothing)"])[-1])


def _newest(versions: list[str], count: int = 6) -> list[str]:
    parsed = []
    for text in versions:
        try:
            parsed.append(Version(text))
        except InvalidVersion:
            continue
    return [str(v) for v in sorted(set(parsed))[-count:]]


def _minor(version: str | None) -> str:
    parsed = Version(version or "0")
    return f"{parsed.major}.{parsed.minor}"


def merge(closures: list[Closure], extras: dict[str, str]) -> list[str]:
    """One pin per package, or one per distinct version with a `python_version` marker;
    torch first, then by name."""
    names = sorted({n for c in closures for n in c.pins}, key=lambda n: (n != "torch", n))
    everywhere = {c.python for c in closures}
    lines = []
    for name in names:
        by_version: dict[str, list[str]] = {}
        for closure in closures:
            version = closure.version(name)
            if version is not None:
                by_version.setdefault(version, []).append(closure.python)
        for version, pythons in by_version.items():
            line = pin(name, version, extras.get(name, ""))
            if set(pythons) != everywhere:
                line += "; " + " or ".join(f'python_version == "{p}"' for p in pythons)
            lines.append(line)
    return lines


def platforms_of(requirements: list[str], pythons: tuple[str, ...],
                 request: NewProfileRequest, scratch: Path) -> list[str]:
    """x86_64 (what the closures were resolved for), and each other CPU for which pip finds a
    wheel of every pin on every Python, asked as a cross build's target site asks (`--platform`
    tags, no dependencies; a dry run: metadata only)."""
    found = ["x86_64"]
    for machine in (m for m in KNOWN if m not in found):
        for python in pythons:
            argv: list[str | Path] = [
                sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
                "--no-deps", "--quiet", "--no-input", "--only-binary=:all:",
                *pip_target_options(machine, python), "--target", scratch / f"target-{machine}",
                *_index_args(request), *applying(requirements, python, machine)]
            result = _pip_metadata_only(argv, what=f"pip's resolver ({machine}, Python {python})")
            if result.returncode != 0:
                lines = [line for line in (result.stderr + result.stdout).splitlines() if line]
                log.warning("no %s in the profile's platforms: Python %s: %s", machine, python,
                            (lines or ["pip failed"])[-1])
                break
        else:
            found.append(machine)
    return found


def render(*, name: str, request: NewProfileRequest, torch: str, cuda: Version,
           pythons: tuple[str, ...], compiler: Compiler, requirements: list[str],
           platforms: list[str] | None = None) -> str:
    """The profile file: a header that says how it was made, then the data."""
    command = " ".join(["wheelsmith toolchain new", f"--torch {request.torch}",
                        *([f"--cuda {request.cuda}"] if request.cuda else []),
                        *([f"--index {request.index}"] if request.index else []),
                        *(f"--python {p}" for p in pythons)])
    header = [
        f"# Generated by `{command}`",
        f"# on {date.today().isoformat()} with pip's resolver: regenerate (--force), do not edit.",
        "# The host runner builds a venv from it (keyed by the hash of the pins), the image",
        "# installs the same file, and its name is the index channel.",
        f"# Compiler: {compiler.note}.",
    ]
    data: dict[str, object] = {"name": name, "torch": torch, "cuda": f"{cuda.major}.{cuda.minor}",
                               "pythons": list(pythons)}
    if platforms:
        data["platforms"] = platforms
    if request.index:
        data["index"] = request.index
    data |= {"cuda_home": compiler.cuda_home, "requirements": requirements, "tools": list(TOOLS)}
    body = yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=100)
    return "\n".join(header) + "\n" + body
