"""The paths a compile sees, made the same for every Python: the Python axis of a build matrix
compiles its Python-free translation units once.

A build for Python 3.12 after one for 3.11 (same torch, CUDA, arch) used to miss the compile
cache on every file: the toolchain venv sits in a per-Python directory
(`.../<profile>-py3.12-<key>/lib/python3.12/site-packages`), and the work directory holds the
content key (which names the Python), so every header path, every `__FILE__` torch's checks
expand, and the source path differ in the preprocessed text ccache hashes.

So the compile runs in a private mount namespace (`unshare -rm`, with `-n` where the build is
offline) in which a tmpfs covers ROOT (`/tmp/wheelsmith-view`), the toolchain's site-packages is
bind-mounted at ROOT/site (torch is imported from there: PYTHONPATH, so its include paths and
CUDA_HOME, which lies inside it, say that) and the patched source tree at ROOT/source. The build
then names the same paths for every Python, except what truly differs: the Python include
directory and `build/temp.*-cpython-3XX` (the objects' directory, which ccache does not hash).

ROOT is one fixed path, not under the user's cache, because the same path is also what makes a
build reproducible across work directories, users, machines and runners: cudafe++ names each
file's anonymous namespaces after a hash of the source file's real path (a symlink does not
hide it), and those names are in the binary. The container runner's build runs in the same view
inside the image, so host and container compile the same source path. The tmpfs keeps ROOT
empty on disk: another user's namespace mounts over the same directory without touching it.

Correctness stays with the cache: ccache hashes the preprocessed text, so a file that includes
`Python.h` (the bindings) differs with the Python headers it includes and is never shared.

Not used with a compile farm (its sccache server runs outside the namespace and must find the
files), for cross builds, for a toolchain whose site-packages is not known (`system`), or where
this machine allows no user namespace with mounts: then the build runs at its real paths.
"""

from __future__ import annotations

import functools
import logging
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from wheelsmith import cmd
from wheelsmith.errors import WheelsmithError
from wheelsmith.toolchain.env import Toolchain

log = logging.getLogger(__name__)

# nothing is written here: in the build's namespace a tmpfs covers it (a symlink is refused)
ROOT = Path("/tmp/wheelsmith-view")  # noqa: S108
# a tmpfs on the fixed root, the real directories bound into it, then run the build from the
# fixed source tree
_MOUNT_SCRIPT = ('mount -t tmpfs -o mode=0755 wheelsmith-view "$1" && mkdir "$1/site" "$1/source"'
                 ' && mount --bind "$2" "$1/site" && mount --bind "$3" "$1/source" && '
                 'cd "$1/source" && shift 3 && exec "$@"')


@dataclass(frozen=True, slots=True)
class PathView:
    """Where the build sees the toolchain's site-packages and the source tree."""

    root: Path  # ROOT: the fixed mount point
    site: Path  # the toolchain's site-packages (real)
    source: Path  # the patched source tree (real)

    @property
    def fixed_site(self) -> Path:
        return self.root / "site"

    @property
    def fixed_source(self) -> Path:
        return self.root / "source"

    def describe(self) -> str:
        return f"toolchain and source at {self.root} (the same for every Python)"

    def inside(self, path: Path) -> Path:
        """`path` as the build sees it."""
        for real, fixed in ((self.source, self.fixed_source), (self.site, self.fixed_site)):
            if path.is_relative_to(real):
                return fixed / path.relative_to(real)
        return path

    def outside(self, path: Path) -> Path:
        """A path the build saw (in build.ninja, a log) where it really is."""
        for real, fixed in ((self.source, self.fixed_source), (self.site, self.fixed_site)):
            if path.is_relative_to(fixed):
                return real / path.relative_to(fixed)
        return path

    def env(self, env: Mapping[str, str]) -> dict[str, str]:
        """`env` with the real site-packages and source paths replaced by the fixed ones (PATH,
        CUDA_HOME, PYTORCH_NVCC ...), and torch imported from the fixed site-packages."""
        pattern = re.compile("|".join(re.escape(str(p)) + r"(?=/|:|=|\s|$)"
                                      for p in (self.source, self.site)))
        fixed = {str(self.source): str(self.fixed_source), str(self.site): str(self.fixed_site)}
        seen = {k: pattern.sub(lambda m: fixed[m[0]], v) for k, v in env.items()}
        seen["PYTHONPATH"] = ":".join(filter(None, [str(self.fixed_site),
                                                    seen.get("PYTHONPATH")]))
        return seen

    def prefix(self, *, offline: bool) -> tuple[str, ...]:
        """The command line that runs a command (appended) in the view, from its source tree;
        its own programs found on wheelsmith's PATH (the build's is not the one to look them
        up on)."""
        return (shutil.which("unshare") or "unshare", "-rmn" if offline else "-rm",
                shutil.which("sh") or "/bin/sh", "-c", _MOUNT_SCRIPT, "wheelsmith-view",
                str(self.root), str(self.site), str(self.source))


def resolve(toolchain: Toolchain, source: Path, *, farm: bool) -> PathView | None:
    """The view for a build of `source` with `toolchain`, or None (and why, in the log)."""
    if farm or toolchain.cross or toolchain.site is None:
        return None
    problem = mount_point_problem(ROOT)
    if problem:
        log.warning("no path view: %s: the build runs at its real paths, so its binaries "
                    "depend on the work directory, and a build for another Python compiles "
                    "every file again", problem)
        return None
    return PathView(ROOT, toolchain.site, source)


def mount_point_problem(root: Path) -> str:
    """"" when `root` is a directory this machine lets a user namespace mount a tmpfs on."""
    if root.is_symlink():  # the build would see (and hash) where it points
        return f"{root} is a symbolic link"
    try:
        root.mkdir(mode=0o755, parents=True, exist_ok=True)
    except OSError as exc:
        return f"cannot make {root} ({exc.strerror})"
    return "" if mounts_allowed(root) else "no user namespace with mounts here"


@functools.cache
def mounts_allowed(root: Path) -> bool:
    """Whether `unshare -rm`, a tmpfs and a bind mount work on this machine."""
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return False
    try:
        cmd.run(["unshare", "-rm", "sh", "-c", _MOUNT_SCRIPT, "wheelsmith-view", root, root,
                 root, "true"], stream=False, what="unshare with a tmpfs and bind mounts")
    except WheelsmithError:
        return False
    return True
