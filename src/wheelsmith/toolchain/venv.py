"""A profile's venv: created once per (profile, Python) and reused, keyed by the hash of its
pins for that Python (a venv made under an older key with the same pins is linked, not made
again), installed `--no-deps` and `pip check`ed, completed by a marker
written last under a lock (an interrupted creation is redone, never half-used). Its CUDA
compiler comes from PyPI (`cuda_home: nvidia/cu13`) or, for a CUDA major PyPI ships no nvcc
for, from an installed toolkit (`cuda_home: installed`). On glibc 2.42 or newer a PyPI CUDA
older than 13.2 gets 13.2's rsqrt declarations (glibc_headers.py), recorded in the marker."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import shutil
from pathlib import Path

from packaging.version import Version

from wheelsmith import cmd
from wheelsmith.errors import MissingToolkitError, ToolchainError, WheelsmithError
from wheelsmith.files import atomic_write_text, exclusive_lock, set_times
from wheelsmith.toolchain import glibc_headers
from wheelsmith.toolchain.env import (
    Toolchain,
    find_cuobjdump,
    is_toolkit,
    library_includes,
    nvcc_version,
    probe_python,
    system_cuda_home,
)
from wheelsmith.toolchain.profile import Profile, applying
from wheelsmith.untrusted import local, tool_bounds

log = logging.getLogger(__name__)


MARKER = "wheelsmith-toolchain.json"
# Every file of a toolchain venv but Python's own sources and bytecode gets this time
# (1980-01-01, the zip epoch; Nix sets its store's times alike): nvcc's `-lineinfo` writes
# each header's mtime into the device code's line table, so two venvs of one profile installed
# at other times (here and in the image) gave other cubins (causal-conv1d: 12 bytes of
# `.debug_line` per cubin, then the whole compressed fatbin).
FILE_TIME = 315532800


def venv_root(profile: Profile, python_version: str, cache: Path) -> Path:
    return cache / "toolchains" / f"{profile.name}-py{python_version}-{profile.key(python_version)}"


def lock_path(root: Path) -> Path:
    """The lock of the venv at `root`: exclusive while it is created or removed, shared by every
    process that builds with it (`hold`)."""
    return root.parent / f"{root.name}.lock"


_HELD: list[int] = []  # the shared locks of the venvs this process builds with


def hold(root: Path) -> None:
    """Hold a shared lock on the venv at `root` until this process exits: `toolchain remove`
    and `prune` leave it alone meanwhile (the build's own processes inherit it)."""
    if not root.is_dir():
        return
    try:
        with local.open_regular(lock_path(root), "lock") as handle:
            held = os.dup(handle.fileno())
    except (OSError, WheelsmithError) as exc:  # a read-only cache (the image's): no one removes
        log.debug("not holding %s: %s", root, exc)
        return
    fcntl.flock(held, fcntl.LOCK_SH)
    _HELD.append(held)


def ensure_profile(profile: Profile, python: Path, cache: Path) -> Toolchain:
    """The toolchain of (profile, python): its venv, created on first use and reused after
    that, and its compiler (the venv's nvcc, or an installed toolkit's, checked first)."""
    cuda_home = installed_cuda_home(profile) if profile.installed_compiler else None
    root = ensure_venv(profile, python, cache)
    hold(root)
    info = json.loads((root / MARKER).read_text())
    if cuda_home is None:
        cuda_home, nvcc = Path(info["cuda_home"]), Version(info["nvcc"])
        driver_stub(cuda_home)
    else:
        nvcc = nvcc_version(cuda_home / "bin" / "nvcc")
    return Toolchain(
        name=profile.name,
        python=root / "bin" / "python",
        python_version=info["python"],
        cuda_home=cuda_home,
        torch_version=Version(info["torch"]) if info.get("torch") else None,
        torch_cuda=Version(info["torch_cuda"]) if info.get("torch_cuda") else profile.cuda,
        nvcc_version=nvcc,
        cuobjdump=find_cuobjdump(Path(info["purelib"]) / "nvidia"),
        pins=profile.pins_for(info["python"]),
        site=Path(info["purelib"]),
        library_includes=library_includes(Path(info["purelib"]), cuda_home),
    )


def ensure_venv(profile: Profile, python: Path, cache: Path) -> Path:
    """The profile's venv for `python` (its root), created under a lock if missing."""
    version = probe_python(python).python
    profile.require_python(version)
    root = venv_root(profile, version, cache)
    marker = root / MARKER
    if not marker.is_file():  # the marker is written last: with it, the venv is complete
        with exclusive_lock(lock_path(root)):
            if not marker.is_file() and not _reuse_same_pins(profile, version, root):
                _create_venv(profile, python, root)
    if json.loads(marker.read_text()).get("file_time") != FILE_TIME:
        _fix_times_once(root)
    return root


def _fix_times_once(root: Path) -> None:
    """A venv made before file times were fixed gets them now (once), where it may be
    written; else (an older image's, read-only) the build says what differs."""
    marker = root / MARKER
    if not os.access(marker, os.W_OK):
        log.warning("the toolchain in %s keeps its files' install times (it predates fixed "
                    "times): device code built with -lineinfo records them, so these wheels "
                    "differ from other builds of the same content key; for an image, rebuild "
                    "it (wheelsmith image build --rebuild)", root)
        return
    with exclusive_lock(root.parent / f"{root.name}.lock"):
        info = json.loads(marker.read_text())
        if info.get("file_time") != FILE_TIME:
            fix_file_times(root.resolve())
            atomic_write_text(marker, json.dumps({**info, "file_time": FILE_TIME}, indent=2)
                              + "\n")


def fix_file_times(root: Path) -> None:
    """Every file and directory under `root` gets FILE_TIME, but Python sources and bytecode
    (a `.pyc` names its source's time: changing it would make every import compile again)."""
    set_times(root, FILE_TIME, lambda path: not path.name.endswith((".py", ".pyc")),
              directories=True)


def _reuse_same_pins(profile: Profile, version: str, root: Path) -> bool:
    """Link `root` to a complete venv of this profile and Python made under another key (an
    older profile file that differs only for other Pythons, or an older key format) whose
    pins for this Python are the same: it holds exactly what `root` would."""
    for other in sorted(root.parent.glob(f"{profile.name}-py{version}-*")):
        requirements = other.parent / f"{other.name}.requirements.txt"
        if (other == root or other.is_symlink() or not (other / MARKER).is_file()
                or not requirements.is_file()):
            continue
        if same_pins(requirements.read_text(), profile, version):
            log.info("the %s venv for Python %s is %s (the same pins)", profile.name, version,
                     other.name)
            _clear(root)
            root.symlink_to(other.name)
            return True
    return False


def same_pins(requirements: str, profile: Profile, version: str) -> bool:
    """Whether a venv's requirements file (markers and all) holds the profile's pins for
    that Python, no more and no fewer."""
    lines = [line for line in requirements.splitlines() if line.strip()]
    return set(applying(lines, version)) == set(profile.pins_for(version))


def _create_venv(profile: Profile, python: Path, root: Path) -> None:
    log.info("creating the %s toolchain venv in %s (once; about 2 minutes)", profile.name, root)
    install_pinned(python, root, profile.pins, profile)
    answer = probe_python(root / "bin" / "python")
    if answer.torch_error is not None and not profile.cuda_only:
        raise ToolchainError(f"torch does not import in the new toolchain: {answer.torch_error}")
    info = dict(answer.raw)
    if not profile.installed_compiler:
        cuda_home = Path(info["purelib"]) / profile.cuda_home
        _link_cuda_libs(cuda_home)
        info.update(cuda_home=str(cuda_home), nvcc=str(nvcc_version(cuda_home / "bin" / "nvcc")),
                    header_fixes=glibc_headers.fix_for_machine(cuda_home))
    fix_file_times(root)
    info["file_time"] = FILE_TIME
    atomic_write_text(root / MARKER, json.dumps(info, indent=2) + "\n")


def installed_cuda_home(profile: Profile) -> Path:
    """The installed toolkit a profile without a PyPI compiler builds with: CUDA_HOME (or the
    usual guesses), else the newest /usr/local/cuda-<major>.* of the profile's CUDA major."""
    major = profile.cuda.major
    guesses = [system_cuda_home(), *sorted(Path("/usr/local").glob(f"cuda-{major}.*"),
                                           key=lambda p: version_suffix(p.name), reverse=True)]
    others = []
    for home in dict.fromkeys(guesses):
        if not is_toolkit(home):
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


def version_suffix(name: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", name))


def _clear(root: Path) -> None:
    """Remove what is at `root`: a link (never what it points to) or an incomplete venv."""
    if root.is_symlink():
        root.unlink()
    elif root.exists():
        shutil.rmtree(root)


def pip_env() -> dict[str, str]:
    """The environment a pip of another Python runs in: the caller's, less its PYTHONPATH
    (wheelsmith run from a checkout, PYTHONPATH=src), which must not reach that pip (`pip
    check` would judge the checkout's wheelsmith.egg-info as installed)."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


def install_pinned(python: Path, root: Path, pins: tuple[str, ...], profile: Profile) -> None:
    """A fresh venv at `root` with exactly `pins` (no dependency resolution, then `pip check`);
    removed again if anything fails. The log goes next to it."""
    if root.exists() or root.is_symlink():
        log.info("removing the incomplete venv %s", root)
        _clear(root)
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
    env = pip_env()
    try:
        with log_path.open("w") as log_file:
            for argv, what in steps:
                cmd.run(argv, what=what, log_file=log_file, log_path=log_path, env=env)
    except WheelsmithError as exc:
        shutil.rmtree(root, ignore_errors=True)
        raise ToolchainError(f"could not create {root.name}: {exc.message}",
                             hint=f"pins live in {profile.file}", tail=exc.tail,
                             log_file=log_path) from exc


def _link_cuda_libs(cuda_home: Path) -> None:
    """The pip CUDA wheels lack lib64/ and the unversioned libraries (libcudart.so, which
    torch's linker line needs; libcublas.so, which CMake's FindCUDAToolkit links)."""
    lib = cuda_home / "lib"
    if not (cuda_home / "bin" / "nvcc").is_file() or not lib.is_dir():
        raise ToolchainError(f"no CUDA compiler at {cuda_home}",
                             hint="the profile's cuda_home must point at the nvcc wheel's tree")
    lib64 = cuda_home / "lib64"
    if not lib64.exists():
        lib64.symlink_to("lib")
    for versioned in sorted(lib.glob("lib*.so.*")):
        unversioned = lib / versioned.name.split(".so.")[0]
        unversioned = unversioned.with_name(f"{unversioned.name}.so")
        if not unversioned.exists() and not unversioned.is_symlink():
            unversioned.symlink_to(versioned.name)


STUBS = "stubs"  # <cuda_home>/lib/stubs, where NVIDIA's toolkits keep theirs
NO_DEVICE = 100  # CUDA_ERROR_NO_DEVICE
_DRIVER_API_RE = re.compile(r"\bCUresult\s+(cu\w+)\s*\(")


def driver_stub(cuda_home: Path) -> Path | None:
    """`lib/stubs/libcuda.so` (and `libcuda.so.1`, its soname) of a PyPI toolkit, which ships
    none: every driver API function cuda.h declares, each returning CUDA_ERROR_NO_DEVICE, as
    NVIDIA's toolkits ship it. A CMake project that links the driver (FindCUDAToolkit's
    CUDA::cuda_driver: llama.cpp's VMM pool) links against it, and the smoke test of a package
    without torch loads it where no driver is installed (smoke.py). Made once, in place
    (written aside, then renamed); None where it cannot be (no cuda.h, no C compiler)."""
    stubs = cuda_home / "lib" / STUBS
    library = stubs / "libcuda.so"
    header = cuda_home / "include" / "cuda.h"
    compiler = shutil.which("gcc") or shutil.which("cc")
    if library.is_file() or not header.is_file() or compiler is None:
        return library if library.is_file() else None
    stubs.mkdir(parents=True, exist_ok=True)
    source, scratch = stubs / f"libcuda-{os.getpid()}.c", stubs / f"libcuda-{os.getpid()}.so"
    try:
        expanded = cmd.run([compiler, "-E", "-P", "-I", cuda_home / "include", header],
                           stream=False, what="the preprocessing of cuda.h",
                           bounds=tool_bounds()).stdout
        names = sorted(set(_DRIVER_API_RE.findall(expanded)))
        source.write_text("".join(f"int {name}(void) {{ return {NO_DEVICE}; }}\n"
                                  for name in names))
        cmd.run([compiler, "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", scratch,
                 source], stream=False, what="the CUDA driver stub")
        scratch.replace(library)
    except WheelsmithError as exc:
        log.warning("no CUDA driver stub in %s: %s", stubs, exc.message)
        return None
    finally:
        source.unlink(missing_ok=True)
        scratch.unlink(missing_ok=True)
    with contextlib.suppress(FileExistsError):
        (stubs / "libcuda.so.1").symlink_to(library.name)
    return library
