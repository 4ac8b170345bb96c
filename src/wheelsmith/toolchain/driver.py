"""The machine's NVIDIA driver and the CUDA majors it runs.

CUDA's minor-version compatibility: a program built with any CUDA 12.x runs on a driver of at
least the first CUDA 12 release's (525.60.13), any 13.x on one of at least 580.65.06 — so the
driver decides which CUDA major of torch (and of the wheels built for it) can run here. Asked
from `nvidia-smi` (present wherever the driver is, containers included), else the kernel
module's /proc file.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from wheelsmith import cmd
from wheelsmith.errors import CommandError, UntrustedDataError
from wheelsmith.untrusted import tool_bounds

MIN_DRIVER = {12: "525.60.13", 13: "580.65.06"}  # as NVIDIA writes them: 580.65.06, not 580.65.6
PROC_FILE = Path("/proc/driver/nvidia/version")
_PROC_VERSION = re.compile(r"Kernel Module(?: for \w+)?\s+(\d+\.\d+(?:\.\d+)?)")
_VERSION = re.compile(r"\d+\.\d+(?:\.\d+)?")


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


@dataclass(frozen=True, slots=True)
class Driver:
    version: str | None
    source: str  # where it was read, or why none was found

    @property
    def majors(self) -> list[int]:
        """The CUDA majors this driver runs (none without a driver)."""
        return [major for major in sorted(MIN_DRIVER) if self.runs(major)]

    def runs(self, cuda_major: int) -> bool:
        minimum = MIN_DRIVER.get(cuda_major)
        return (self.version is not None and minimum is not None
                and _key(self.version) >= _key(minimum))

    def describe(self) -> str:
        if self.version is None:
            return f"none found ({self.source})"
        found = f"{self.version} (from {self.source})"
        if not self.majors:
            return f"{found}: too old for any CUDA wheelsmith builds with ({needs(12)})"
        return f"{found}: runs CUDA {' and '.join(str(m) for m in self.majors)}"

    def as_dict(self) -> dict[str, object]:
        return {"version": self.version, "source": self.source,
                "cuda_majors": self.majors}


def needs(cuda_major: int) -> str:
    """'driver >= 580.65.06 (CUDA 13)': what a CUDA major asks of the driver."""
    return f"driver >= {MIN_DRIVER[cuda_major]} (CUDA {cuda_major})"


def parse_version(text: str) -> str | None:
    """The driver version in nvidia-smi's `--query-gpu=driver_version` answer (one line per GPU)
    or in the kernel module's /proc text."""
    found = _PROC_VERSION.search(text)
    candidate = found[1] if found else (text.strip().splitlines() or [""])[0].strip()
    return candidate if _VERSION.fullmatch(candidate) else None


def find_driver(proc_file: Path = PROC_FILE) -> Driver:
    smi = shutil.which("nvidia-smi")
    if smi is not None:
        try:
            answer = cmd.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                             stream=False, what="nvidia-smi", bounds=tool_bounds())
        except (CommandError, UntrustedDataError) as exc:
            return Driver(None, f"nvidia-smi failed: {exc.message}")
        if (version := parse_version(answer.stdout)) is not None:
            return Driver(version, "nvidia-smi")
    try:
        text = proc_file.read_text()
    except OSError:
        where = "nvidia-smi gave no version" if smi else "no nvidia-smi on PATH"
        return Driver(None, f"{where}, and no {proc_file}: no NVIDIA kernel module is loaded")
    return Driver(parse_version(text), str(proc_file))
