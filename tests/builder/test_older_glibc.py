"""pip on an older glibc refuses a wheel whose floor it is below, instead of installing a
wheel that fails at import with `GLIBC_2.3x not found`.

The older system is a real Debian bullseye root (glibc 2.31, pip 20.3.4) made with
debootstrap from the Debian archive this machine's apt uses, entered with chroot. Needs root
and debootstrap (.ci/run installs it); skipped with the reason otherwise. The root is made
once per machine (~40 s) and kept in the wheelsmith cache, like the toolchain venvs.

Bullseye's Python is 3.9 and our wheels are cp311, so a plain `pip install` there would refuse
every one of them for the wrong reason. The tests isolate the glibc question with pip's own
tag logic: `--python-version 3.11 --only-binary=:all:` (with `--target`, which pip requires for
it) makes pip accept cp311 wheels while it still computes the *platform* tags from the running
system, i.e. from bullseye's glibc 2.31. Building a cp39 wheel in there instead would test a
different wheel than the one we ship. The control (a wheel of ours whose floor is 2.31) proves
that this pip accepts cp311 wheels that fit, so a refusal can only come from the platform tag.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from packaging.version import Version

from tests.builder.test_build_tiny import build_json
from tests.builder.test_manylinux import FILESYSTEM_CXX, TO_CHARS_CXX
from tests.conftest import add_variant, wheelsmith
from tests.wheels import compile_shared, extension_wheel
from wheelsmith import locations
from wheelsmith.builder import manylinux
from wheelsmith.builder.stamp import stamp
from wheelsmith.toolchain.env import Toolchain
from wheelsmith.toolchain.foreign import SOURCES, debian_mirror

SUITE = "bullseye"  # glibc 2.31, libstdc++ of gcc 10 (GLIBCXX_3.4.28)
PACKAGES = "python3-pip"


def root_problem() -> str | None:
    if os.geteuid() != 0:
        return "debootstrap and chroot need root"
    if shutil.which("debootstrap") is None and not Path("/usr/sbin/debootstrap").exists():
        return "debootstrap is not installed (apt install debootstrap; .ci/run does this)"
    if debian_mirror() is None:
        return f"no Debian archive in {SOURCES}/*.sources to debootstrap {SUITE} from"
    return None


PROBLEM = root_problem()
pytestmark = [pytest.mark.skipif(PROBLEM is not None, reason=f"no {SUITE} root: {PROBLEM}"),
              pytest.mark.toolchain]


@pytest.fixture(scope="session")
def bullseye() -> Path:
    """A minimal bullseye root with python3-pip, made once and renamed into place whole."""
    mirror = debian_mirror()
    assert mirror is not None
    key = hashlib.sha256(f"{SUITE} {PACKAGES} {mirror}".encode()).hexdigest()[:12]
    root = locations.cache_dir() / "test-roots" / f"{SUITE}-{key}"
    if root.is_dir():
        return root
    partial = root.with_name(f"{root.name}.partial-{os.getpid()}")
    partial.parent.mkdir(parents=True, exist_ok=True)
    made = subprocess.run(["/usr/sbin/debootstrap", "--variant=minbase",
                           f"--include={PACKAGES}", SUITE, str(partial), mirror],
                          capture_output=True, text=True, check=False)
    if made.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        last = (made.stdout + made.stderr).strip().splitlines()[-1:]
        pytest.skip(f"debootstrap of {SUITE} from {mirror} failed: {' '.join(last)}")
    try:
        partial.rename(root)
    except OSError:  # another session finished first
        shutil.rmtree(partial)
    return root


def in_root(root: Path, *argv: str, files: tuple[Path, ...] = ()
            ) -> subprocess.CompletedProcess[str]:
    """Run `argv` in the root with `files` copied into its working directory /tmp/<unique>."""
    work = root / "tmp" / f"wheelsmith-{uuid.uuid4().hex}"
    work.mkdir(parents=True)
    try:
        for file in files:
            shutil.copy(file, work / file.name)
        inside = "/" + str(work.relative_to(root))
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}
        return subprocess.run(["/usr/sbin/chroot", str(root), "/bin/sh", "-c",
                               f'cd "{inside}" && exec "$@"', "sh", *argv],
                              env=env, capture_output=True, text=True, check=False)
    finally:
        shutil.rmtree(work)


def pip_install(root: Path, wheel: Path) -> subprocess.CompletedProcess[str]:
    """What the root's own pip does with a cp311 wheel on its own platform (see above)."""
    return in_root(root, "python3", "-m", "pip", "install", "--no-index", "--no-deps",
                   "--disable-pip-version-check", "--only-binary=:all:", "--python-version",
                   "3.11", "--target", "target", wheel.name, files=(wheel,))


def tagged(raw: Path, auditwheel: Path, out: Path) -> Path:
    """`raw` stamped with the platform tag wheelsmith finds for it."""
    platform = manylinux.assess(raw, auditwheel)
    out.mkdir(parents=True, exist_ok=True)
    return stamp(raw, out, label="cu.13.0.torch.2.14.sm.120", torch_requirement=None,
                 provenance=platform.as_dict(), epoch=0, platform=platform.tag)


@pytest.mark.slow  # a debootstrapped Debian bullseye root: minutes
def test_bullseye_pip_refuses_the_cuda_wheel_and_accepts_one_within_its_glibc(
        project: Path, toolchain: Toolchain, auditwheel: Path, bullseye: Path) -> None:
    assert "GLIBC 2.31" in in_root(bullseye, "ldd", "--version").stdout
    add_variant(project, "tiny-ext")
    data = build_json(project, "tiny-ext", "--arch", "12.0")
    wheel = Path(str(data["wheel"]))
    provenance = data["provenance"]
    assert isinstance(provenance, dict)
    assert wheel.name == ("tiny_ext-0.1.0+cu.13.0.torch.2.14.sm.120-cp311-cp311-"
                          f"{provenance['platform']['tag']}.whl")
    assert Version(provenance["platform"]["glibc_floor"]) > Version("2.31")

    refused = pip_install(bullseye, wheel)
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines()[-1] == (
        f"ERROR: {wheel.name} is not a supported wheel on this platform.")

    control = tagged(extension_wheel(project, "floor-control",
                                     compile_shared(project / "obj", FILESYSTEM_CXX, cxx=True)),
                     auditwheel, project / "control")
    assert control.name.endswith("-cp311-cp311-manylinux_2_31_x86_64.whl")
    accepted = pip_install(bullseye, control)
    assert accepted.returncode == 0, accepted.stderr
    assert "Successfully installed floor-control-1.0.0" in accepted.stdout

    # what the same pip did before: the build's own linux_x86_64 wheel goes in unchecked
    raw = next((project / "build" / "wheelsmith").glob("tiny-ext-*/dist/*.whl"))
    assert raw.name == "tiny_ext-0.1.0-cp311-cp311-linux_x86_64.whl"
    assert pip_install(bullseye, raw).returncode == 0

    here = wheelsmith("verify", str(wheel), "--arch", "12.0", cwd=project)  # the new name
    assert here.returncode == 0, here.stderr


def test_the_libstdcxx_floor_is_what_bullseye_can_load(tmp_path: Path, auditwheel: Path,
                                                       bullseye: Path) -> None:
    """A wheel that needs nothing newer from glibc but GLIBCXX_3.4.29 from libstdc++ is
    refused; forcing its library into bullseye shows the import error the tag prevents, while
    the control (GLIBCXX_3.4.26, floor 2.31) loads there."""
    too_new = compile_shared(tmp_path / "tc", TO_CHARS_CXX, cxx=True)
    wheel = tagged(extension_wheel(tmp_path / "tc", "cxx-floor", too_new), auditwheel,
                   tmp_path / "out")
    assert wheel.name.endswith("-cp311-cp311-manylinux_2_34_x86_64.whl")
    assert pip_install(bullseye, wheel).stderr.strip().splitlines()[-1] == (
        f"ERROR: {wheel.name} is not a supported wheel on this platform.")

    fits = compile_shared(tmp_path / "fs", FILESYSTEM_CXX, cxx=True)
    load = "import ctypes, sys; ctypes.CDLL('./' + sys.argv[1]); print('loaded')"
    broken = in_root(bullseye, "python3", "-c", load, too_new.name, files=(too_new,))
    assert broken.returncode == 1
    assert broken.stderr.strip().splitlines()[-1].endswith(
        "version `GLIBCXX_3.4.29' not found (required by ./_native.so)")
    ok = in_root(bullseye, "python3", "-c", load, fits.name, files=(fits,))
    assert (ok.returncode, ok.stdout) == (0, "loaded\n"), ok.stderr
