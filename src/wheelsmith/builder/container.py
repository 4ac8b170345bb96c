"""Build inside a pinned container (podman or docker): images and the container runner.

The image is the Dockerfile at the top level, built per toolchain profile: it holds the same
pinned toolchain venv the host runner makes (from the same profile file) and wheelsmith itself.
Its tag and its `dev.wheelsmith.profile-key` label carry the profile's hash, so an image whose
pins changed is stale and refused, never silently used.

A container build: the host fetches and patches the source; the container runs wheelsmith's
own build on that tree with `--network=none`, the project read-only, and only the source, an
output directory and the compile cache mounted; no host credentials or environment pass in. The
container is always removed (`--keep-container` keeps it for debugging), also when the build
is interrupted. The host then verifies the wheel again with its own cuobjdump.
"""

from __future__ import annotations

import json
import logging
import os
import re
import resource
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from packaging.version import Version

import wheelsmith
from wheelsmith import cmd
from wheelsmith.errors import (
    CommandError,
    CompileError,
    ToolchainError,
    UntrustedDataError,
    UsageError,
)
from wheelsmith.recipes import repos
from wheelsmith.toolchain.env import Toolchain
from wheelsmith.toolchain.profile import Profile
from wheelsmith.toolchain.target import refuse_free_threaded
from wheelsmith.untrusted import LONG, tool_bounds

log = logging.getLogger(__name__)

IMAGE_PYTHON = "3.11"  # the default image's Python: Debian bookworm's python3
# The Debian release that packages each Python (python3.X): the base an image for it is built
# on (images.lock pins each by digest; baseimage.py locks one on first use where it pins none).
BASES = {"3.11": "bookworm", "3.13": "trixie", "3.14": "forky", "3.15": "forky"}
LABEL_PROFILE = "dev.wheelsmith.profile"
LABEL_KEY = "dev.wheelsmith.profile-key"
LABEL_BASE = "dev.wheelsmith.base"
LABEL_LAYOUT = "dev.wheelsmith.layout"
# How an image's toolchain is made, beyond its pins (an image without the label is 1); an image
# of another layout is stale. 2: the toolchain's files have one fixed time (toolchain/venv.py:
# FILE_TIME), so device code built with -lineinfo is the same as a host build's.
LAYOUT = "2"
ENGINES = ("podman", "docker")
CODE_IN_IMAGE = "/opt/wheelsmith/current"  # where the host's wheelsmith package is mounted
PYTHON_IN_IMAGE = "/opt/wheelsmith/venv/bin/python"  # the Python wheelsmith runs with there
SOURCE_IN_IMAGE = "/work/src"  # the prepared (fetched and patched) source
OUT_IN_IMAGE = "/work/out"  # where the inner build writes its wheel
WORK_IN_IMAGE = "/work/build"  # the inner build's work directory (its request.json too)
CCACHE_IN_IMAGE = "/work/ccache"
NPROC_CEILING = 32768  # conmon's own limit: asking for more fails with EPERM
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")  # given to the image build as a secret
BUILDKIT_BUILT_IN_BEFORE = 23  # docker CLIs before 23.0 carry BuildKit; later ones use buildx


@dataclass(frozen=True, slots=True)
class Engine:
    name: str
    exe: str

    def common(self) -> list[str]:
        """Options every `run`/`build` gets. podman: runc (crun fails on hybrid cgroups) and
        this process's own limits (raising them is what fails without CAP_SYS_RESOURCE)."""
        if self.name != "podman":
            return []
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
        nproc = NPROC_CEILING if nproc in (resource.RLIM_INFINITY, -1) else min(nproc,
                                                                               NPROC_CEILING)
        runtime = ["--runtime", "runc"] if shutil.which("runc") else []
        return [*runtime, "--ulimit", f"nofile={soft}:{hard}", "--ulimit",
                f"nproc={nproc}:{nproc}"]


def detect(choice: str) -> Engine | None:
    """`host`: None. `podman`/`docker`: that engine, which must answer. `auto`: the first that
    answers, else None (the host runner)."""
    if choice == "host":
        return None
    for name in ENGINES if choice == "auto" else (choice,):
        exe = shutil.which(name)
        reason = "not installed" if exe is None else _not_working(name, exe)
        if exe is not None and reason is None:
            return Engine(name, exe)
        if choice != "auto":
            raise UsageError(f"--runner {name}: the {name} engine does not work here: {reason}",
                             hint="use --runner host, or --runner auto to pick what works")
        log.info("%s is not usable: %s", name, reason)
    return None


def _not_working(name: str, exe: str) -> str | None:
    """Why the engine at `exe` does not work (`info` fails or hangs), or None."""
    try:
        answer = cmd.run([exe, "info"], stream=False, ok_returncodes=range(256), what=name,
                         bounds=tool_bounds(), end_tree=False)
    except UntrustedDataError as exc:
        return exc.problem
    if answer.returncode == 0:
        return None
    return (answer.stderr.strip().splitlines() or ["no answer"])[-1]


def image_ref(profile: Profile, python: str = IMAGE_PYTHON) -> str:
    """`localhost/wheelsmith:cu130-torch2.14-<pin hash>` (the default Python's image), or
    `...:cu130-torch2.14-py3.13-<pin hash>`."""
    tag = profile.name if python == IMAGE_PYTHON else f"{profile.name}-py{python}"
    return f"localhost/wheelsmith:{tag}-{profile.key(python)[:12]}"


def base_for(python: str) -> str:
    """The Debian release an image for `python` is built on."""
    refuse_free_threaded(python)
    if python not in BASES:
        raise UsageError(f"no build image for Python {python}: images exist for "
                         + ", ".join(f"{p} (Debian {r})" for p, r in BASES.items()),
                         hint="build on the host with that Python instead: --runner host "
                              "--python /path/to/python")
    return BASES[python]


def inspect(engine: Engine, ref: str) -> dict[str, Any] | None:
    result = cmd.run([engine.exe, "image", "inspect", ref], stream=False,
                     ok_returncodes=range(256), what=f"{engine.name} image inspect",
                     bounds=tool_bounds(), end_tree=False)
    if result.returncode != 0:
        return None
    data = json.loads(result.stdout)
    info: dict[str, Any] = data[0] if isinstance(data, list) else data
    return info


def labels_of(info: dict[str, Any]) -> dict[str, str]:
    config = info.get("Config") or {}
    found: dict[str, str] = config.get("Labels") or info.get("Labels") or {}
    return found


def require_image(engine: Engine, profile: Profile, python: str = IMAGE_PYTHON
                  ) -> tuple[str, dict[str, Any]]:
    """The image for (`profile`, `python`), refused with the command that makes it if missing
    or stale."""
    ref = image_ref(profile, python)
    info = inspect(engine, ref)
    build = f"wheelsmith image build --toolchain {profile.name} --engine {engine.name}"
    if python != IMAGE_PYTHON:
        build += f" --python {python}"
    if info is None:
        raise ToolchainError(f"no {engine.name} image {ref} for the {profile.name} toolchain",
                             hint=f"build it: {build}")
    why = staleness(info, profile, python)
    if why:
        raise ToolchainError(f"{ref} is stale: {why}", hint=f"rebuild it: {build}")
    return ref, info


def staleness(info: dict[str, Any], profile: Profile, python: str) -> str:
    """Why the image `info` is not the one `profile` and `python` make now ("" when it is)."""
    labels = labels_of(info)
    key = labels.get(LABEL_KEY)
    if key != profile.key(python):
        return f"it was built for pins {key}, the profile now has {profile.key(python)}"
    layout = labels.get(LABEL_LAYOUT, "1")
    if layout != LAYOUT:
        return (f"its toolchain is of layout {layout}, wheelsmith now makes {LAYOUT} (one "
                "fixed time on the toolchain's files, so its device code is a host build's)")
    return ""


def build_image(engine: Engine, profile: Profile, *, project: Path, base: str,
                mirror: Path | None, log_file: IO[str], log_path: Path,
                python: str = IMAGE_PYTHON) -> str:
    """Build the Dockerfile for `profile` on `base`, whose python3 must be `python`; returns
    the image reference."""
    profile.require_python(python)
    if profile.file.parent.resolve() != (project / "toolchains").resolve():
        raise UsageError(f"the image is built from {project}, and profile {profile.name} is not "
                         f"in its toolchains/ ({profile.file})",
                         hint="build on the host (--runner host), or copy the profile into a "
                              "wheelsmith checkout's toolchains/ and build the image there")
    check_builder(engine, mirror)
    base_info = inspect(engine, base)
    if base_info is None and base.startswith("localhost/"):
        raise ToolchainError(f"base image {base} does not exist in {engine.name}",
                             hint="make it with scripts/make-base-image.sh (debootstrap; "
                                  "ENGINE=docker for docker)")
    ref = image_ref(profile, python)
    previous = (inspect(engine, ref) or {}).get("Id")
    argv: list[str | Path] = [
        engine.exe, "build", *engine.common(), "--file", project / "Dockerfile", "--tag", ref,
        "--build-arg", f"BASE={base}", "--build-arg", f"PROFILE={profile.name}",
        "--build-arg", f"PROFILE_KEY={profile.key(python)}", "--build-arg", f"PYTHON={python}",
        "--build-arg", f"BASE_ID={(base_info or {}).get('Id', base)}",
        "--build-arg", f"LAYOUT={LAYOUT}"]
    if HOST_CA.is_file():  # networks that re-sign TLS: a build secret, never in the image
        argv += ["--secret", f"id=host-ca,src={HOST_CA}"]
    if engine.name == "docker":
        argv += ["--progress=plain"]  # BuildKit's log, line by line
    if mirror is not None:  # podman: a build-time volume
        argv += ["--volume", f"{mirror.resolve()}:/mirror:ro"]
    env = {**os.environ, "DOCKER_BUILDKIT": "1"} if engine.name == "docker" else None
    cmd.run([*argv, project], env=env, log_file=log_file, log_path=log_path,
            error=ToolchainError, what=f"{engine.name} build of the {profile.name} image")
    if previous and previous != (inspect(engine, ref) or {}).get("Id"):
        drop(engine, previous)  # the tag moved: the image it left behind
    return ref


def superseded(engine: Engine, profile: Profile, python: str) -> list[str]:
    """Images of this profile and Python that an older profile file (other pins) named: a new
    image replaces them (each is several GB)."""
    current = image_ref(profile, python)
    repository, _, tag = current.rpartition("-")[0].partition(":")
    listed = cmd.run([engine.exe, "images", "--format", "{{.Repository}}:{{.Tag}}", repository],
                     stream=False, ok_returncodes=range(256), what=f"{engine.name} images",
                     bounds=tool_bounds(), end_tree=False)
    pattern = re.compile(rf"{re.escape(repository)}:{re.escape(tag)}-[0-9a-f]{{12}}")
    return [ref for ref in listed.stdout.split() if pattern.fullmatch(ref) and ref != current]


def drop(engine: Engine, image: str) -> None:
    """Remove an image (or a tag of it) unless a container still uses it."""
    cmd.run([engine.exe, "rmi", image], stream=False, ok_returncodes=range(256),
            what=f"{engine.name} rmi")


def check_builder(engine: Engine, mirror: Path | None) -> None:
    """Refuse an image build this engine cannot do: docker needs BuildKit (the Dockerfile's
    RUN --mount and its build secret) and cannot mount a pip mirror directory."""
    if engine.name != "docker":
        return
    if mirror is not None:
        raise UsageError("--pip-mirror needs podman (docker build cannot mount a host "
                         "directory)", hint="drop --pip-mirror, or use --engine podman")
    problem = buildkit_problem(engine)
    if problem is not None:
        raise ToolchainError(f"docker image builds need BuildKit (the Dockerfile's RUN "
                             f"--mount), and {problem}",
                             hint="install docker's buildx component, or use a docker CLI with "
                                  "BuildKit built in (Debian's docker.io), or --engine podman")


def buildkit_problem(engine: Engine) -> str | None:
    """Why `docker build` has no BuildKit here, or None. A CLI with the buildx component uses
    it; one older than 23 has BuildKit built in (DOCKER_BUILDKIT=1); a newer one without buildx
    has only the legacy builder, which cannot build the Dockerfile."""
    if cmd.run([engine.exe, "buildx", "version"], stream=False, ok_returncodes=range(256),
               what="docker buildx version", bounds=tool_bounds()).returncode == 0:
        return None
    shown = cmd.run([engine.exe, "version", "--format", "{{.Client.Version}}"], stream=False,
                    ok_returncodes=range(256), what="docker version", bounds=tool_bounds())
    version = shown.stdout.strip()
    major = version.split(".", 1)[0]
    if major.isdigit() and int(major) < BUILDKIT_BUILT_IN_BEFORE:
        return None
    return (f"the docker CLI {engine.exe} (client {version or 'of unknown version'}) has none: "
            "its buildx component is missing")


def _current_code() -> list[str]:
    """Run the host's own wheelsmith code inside (the image supplies its dependencies and the
    toolchain), so host and container never compute plans or keys with different code."""
    return ["--volume", f"{Path(wheelsmith.__file__).parent}:{CODE_IN_IMAGE}/wheelsmith:ro",
            "--env", f"PYTHONPATH={CODE_IN_IMAGE}"]


def _wheelsmith_in_image(image: str, *args: str) -> list[str]:
    return [image, PYTHON_IN_IMAGE, "-m", "wheelsmith", *args]


def toolchain_in(engine: Engine, image: str, profile: Profile) -> Toolchain:
    """The image's toolchain (paths inside the container): what the content key needs."""
    result = cmd.run([engine.exe, "run", "--rm", *engine.common(), "--network=none",
                      *_current_code(),
                      *_wheelsmith_in_image(image, "toolchain", "ensure", profile.name)],
                     stream=False, error=ToolchainError, what="the toolchain probe in the image",
                     bounds=tool_bounds(LONG), end_tree=False)
    info = json.loads(result.stdout)
    return Toolchain(name=profile.name, python=Path(info["python_path"]),
                     python_version=info["python"], cuda_home=Path(info["cuda_home"]),
                     torch_version=Version(info["torch"]) if info.get("torch") else None,
                     torch_cuda=Version(info.get("torch_cuda") or str(profile.cuda)),
                     nvcc_version=Version(info["nvcc"]), cuobjdump=None,
                     pins=tuple(info["pins"]),
                     library_includes=tuple(map(Path, info.get("library_includes", ()))))


@dataclass(frozen=True, slots=True)
class Mounts:
    project: Path
    source: Path
    out: Path
    work: Path
    ccache: Path | None
    recipes: tuple[Path, ...] = ()  # user recipe repositories, at the same paths inside


@contextmanager
def running(engine: Engine, *, keep: bool) -> Iterator[str]:
    """A container name that is removed afterwards, whatever happens (unless `keep`)."""
    name = f"wheelsmith-{uuid.uuid4().hex[:12]}"
    try:
        yield name
    finally:
        if keep:
            log.warning("kept container %s (--keep-container); remove it with: %s rm %s",
                        name, engine.name, name)
        else:  # docker has no --ignore: a container already gone is its exit code 1
            ignore = ["--ignore"] if engine.name == "podman" else []
            cmd.run([engine.exe, "rm", "--force", *ignore, name], stream=False,
                    ok_returncodes=range(256), what=f"{engine.name} rm")


def run_argv(engine: Engine, image: str, mounts: Mounts, args: list[str], *,
             env: dict[str, str], keep: bool, name: str) -> list[str]:
    """The `run` command line: offline, only these mounts, only these variables."""
    volumes = [f"{mounts.project}:/project:ro", f"{mounts.source}:{SOURCE_IN_IMAGE}",
               f"{mounts.out}:{OUT_IN_IMAGE}", f"{mounts.work}:{WORK_IN_IMAGE}"]
    if mounts.ccache is not None:
        volumes.append(f"{mounts.ccache}:{CCACHE_IN_IMAGE}")
    volumes += [f"{repo}:{repo}:ro" for repo in mounts.recipes]
    argv = [engine.exe, "run", *([] if keep else ["--rm"]), "--name", name, *engine.common(),
            "--network=none", "--env", "WHEELSMITH_HOME=/project", *_current_code()]
    if mounts.recipes:  # the same repositories in the same order: the same recipe is found
        env = {repos.ENV: os.pathsep.join(str(r) for r in mounts.recipes), **env}
    for key, value in env.items():
        argv += ["--env", f"{key}={value}"]
    for volume in volumes:
        argv += ["--volume", volume]
    return [*argv, *_wheelsmith_in_image(image, "-vv", *args)]


def run_build(engine: Engine, image: str, mounts: Mounts, args: list[str], *,
              env: dict[str, str], keep: bool, log_file: IO[str], log_path: Path,
              on_line: Callable[[str], None]) -> None:
    """Run `wheelsmith ARGS` inside the image on the prepared tree, offline."""
    with running(engine, keep=keep) as name:
        try:
            cmd.run(run_argv(engine, image, mounts, args, env=env, keep=keep, name=name),
                    log_file=log_file, log_path=log_path, on_line=on_line, error=CompileError,
                    what=f"the build in the {engine.name} container")
        except CommandError as exc:  # the engine itself failed (not the package's build)
            raise ToolchainError(exc.message, tail=exc.tail, log_file=log_path) from exc
