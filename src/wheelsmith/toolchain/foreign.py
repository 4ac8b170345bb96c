"""A Python of another CPU, run under qemu-user: how a cross-built wheel is import-tested.

The root is a minimal Debian of the target CPU: debootstrap's first (`--foreign`) stage
fetches the packages from the archive this machine's apt reads, and their files are unpacked
with dpkg-deb (no package scripts run, nothing runs as the target CPU while it is made). The
interpreter runs as `qemu-<cpu>-static -L ROOT ROOT/usr/bin/pythonX.Y`: qemu looks up every
absolute path in ROOT first, so the root's libraries serve the emulated program.

Two files make torch's CPU probes work there: qemu 7 shows the host's /proc/cpuinfo (x86-64,
which torch's cpuinfo cannot read: it crashes), and oneDNN reads MIDR_EL1 from sysfs. The root
carries small stand-ins for both (a Neoverse V2), found first through `-L`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
from pathlib import Path

from wheelsmith import cmd
from wheelsmith.errors import ToolchainError, WheelsmithError

log = logging.getLogger(__name__)

SOURCES = Path("/etc/apt/sources.list.d")
SUITES = {"3.11": "bookworm", "3.13": "trixie"}  # the Debian release whose python3.X it is
DEBIAN_ARCH = {"aarch64": "arm64", "x86_64": "amd64"}
CPUINFO_ENTRY = ("processor\t: {n}\nBogoMIPS\t: 2000.00\nFeatures\t: fp asimd evtstrm aes pmull "
                 "sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp\n"
                 "CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x0\n"
                 "CPU part\t: 0xd4f\nCPU revision\t: 0\n\n")
MIDR = "sys/devices/system/cpu/cpu0/regs/identification/midr_el1"


def debian_mirror() -> str | None:
    """The Debian archive this machine's apt reads (deb822 `.sources`): the first `deb` stanza
    with a release suite (not only -security or -updates). No host name is written here."""
    for file in sorted(SOURCES.glob("*.sources")):
        for stanza in file.read_text().split("\n\n"):
            fields = dict(line.split(":", 1) for line in stanza.splitlines()
                          if ":" in line and not line.startswith(("#", " ")))
            types = fields.get("Types", "").split()
            suites = fields.get("Suites", "").split()
            if "deb" in types and any("-" not in s for s in suites) and fields.get("URIs"):
                return fields["URIs"].split()[0].strip()
    return None


def find_emulator(machine: str) -> Path | None:
    for name in (f"qemu-{machine}-static", f"qemu-{machine}"):
        found = shutil.which(name)
        if found is not None:
            return Path(found)
    return None


def emulator(machine: str) -> Path:
    found = find_emulator(machine)
    if found is not None:
        return found
    raise ToolchainError(f"no qemu-{machine}-static here: a {machine} wheel is import-tested "
                         "under qemu-user", hint="install it (Debian: apt install "
                                                 "qemu-user-static)")


def emulated_python(machine: str, python_version: str, cache: Path) -> list[str]:
    """The argv prefix that runs Python `python_version` of `machine` under qemu-user."""
    qemu = emulator(machine)
    root = ensure_root(machine, python_version, cache)
    return [str(qemu), "-L", str(root), str(root / "usr" / "bin" / f"python{python_version}")]


def root_for(machine: str, python_version: str, cache: Path,
             extra: tuple[str, ...] = ()) -> Path:
    """Where the Debian root of `machine` with python3.X (and `extra`) is, or is made."""
    suite = SUITES.get(python_version)
    if suite is None or machine not in DEBIAN_ARCH:
        raise ToolchainError(f"no Debian root with Python {python_version} for {machine} to "
                             "import-test in", hint="a cross build imports its wheel under "
                             f"qemu-user with Python {' or '.join(SUITES)}; use one of those")
    mirror = debian_mirror()
    if mirror is None:
        raise ToolchainError(f"no Debian archive in {SOURCES}/*.sources to make the "
                             f"{machine} root from", hint="configure apt with a Debian archive")
    packages = ",".join((f"python{python_version}", *extra))
    key = hashlib.sha256(f"{suite} {machine} {packages} {mirror}".encode()).hexdigest()[:12]
    return cache / "foreign-roots" / f"{suite}-{machine}-{key}"


def ensure_root(machine: str, python_version: str, cache: Path,
                extra: tuple[str, ...] = ()) -> Path:
    """A minimal Debian root of `machine` with python3.X (and the `extra` packages), made once
    and renamed into place."""
    root = root_for(machine, python_version, cache, extra)
    if root.is_dir():
        return root
    suite, mirror = SUITES[python_version], debian_mirror()
    assert mirror is not None  # root_for refuses a machine without one
    packages = ",".join((f"python{python_version}", *extra))
    partial = root.with_name(f"{root.name}.partial-{os.getpid()}")
    partial.parent.mkdir(parents=True, exist_ok=True)
    log.info("making a %s %s root in %s (once; about a minute)", suite, machine, root)
    try:
        cmd.run(["debootstrap", "--foreign", f"--arch={DEBIAN_ARCH[machine]}",
                 "--variant=minbase", f"--include={packages}", suite, partial, mirror],
                stream=False, what=f"debootstrap of a {suite} {machine} root")
        for deb in sorted((partial / "var" / "cache" / "apt" / "archives").glob("*.deb")):
            cmd.run(["dpkg-deb", "-x", deb, partial], stream=False, what=f"dpkg-deb -x {deb.name}")
    except WheelsmithError as exc:
        shutil.rmtree(partial, ignore_errors=True)
        raise ToolchainError(f"could not make the {machine} root: {exc.message}",
                             hint="debootstrap and dpkg-deb need root", tail=exc.tail) from exc
    (partial / "proc").mkdir(exist_ok=True)
    (partial / "proc" / "cpuinfo").write_text(
        "".join(CPUINFO_ENTRY.format(n=n) for n in range(os.cpu_count() or 1)))
    (partial / MIDR).parent.mkdir(parents=True, exist_ok=True)
    (partial / MIDR).write_text("0x00000000410fd4f0\n")
    try:
        partial.rename(root)
    except OSError:  # another session finished first
        shutil.rmtree(partial)
    return root
