"""Doctor's verdict: what it found per package (`PackageReport`) and for the whole
environment (`Report`: problems, fixes, notes, the model's needs and the ops it ran), as the CLI
renders it and `--json` prints it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from wheelsmith.arch import Arch
from wheelsmith.doctor.fastpath import ModelView, default_view, missing_module
from wheelsmith.toolchain.driver import Driver

FAMILIES = {7: "Volta", 8: "Ampere", 9: "Hopper", 10: "Blackwell", 11: "Blackwell",
            12: "Blackwell"}


def missing_dependency(module: str, state: dict[str, Any]) -> str | None:
    """The module whose absence makes fast-path `module` fail to import, when that is not the
    package itself (or part of it: `fla.ops` without fla-core); None otherwise."""
    missing = missing_module(state)
    if not missing or missing.split(".")[0] == module:
        return None
    return missing.split(".")[0]


@dataclass(frozen=True, slots=True)
class PackageReport:
    name: str
    version: str
    status: str  # sass | ptx | none
    # (path, status, sass, ptx) for each shared object that carries device code
    objects: tuple[tuple[str, str, tuple[str, ...], tuple[str, ...]], ...]


@dataclass(slots=True)
class Report:
    python: str
    python_version: str
    torch: str | None
    torch_cuda: str | None
    gpu: str | None
    arch: Arch
    arch_source: str  # "gpu" | "--arch"
    packages: list[PackageReport] = field(default_factory=list)
    fast_path: dict[str, dict[str, Any]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    fixes: list[str] = field(default_factory=list)
    channel: str | None = None  # the index channel URL that matches this environment
    model: ModelView = field(default_factory=default_view)
    ops: list[dict[str, Any]] | None = None  # None: not run (no GPU, or --no-run)
    notes: list[str] = field(default_factory=list)  # trouble in what the model does not need
    driver: Driver | None = None  # None: not asked
    own_python: bool = False  # the examined Python is wheelsmith's own (no --python given)

    @property
    def healthy(self) -> bool:
        """No problem found, and the question was the one asked: a model given wrongly
        (--model-type nonsense) was not examined, so nothing is healthy for it."""
        return not self.problems and not self.model.input_error

    def as_dict(self) -> dict[str, Any]:
        return {
            "healthy": self.healthy, "python": self.python,
            "python_version": self.python_version, "channel": self.channel, "torch": self.torch,
            "torch_cuda": self.torch_cuda, "gpu": self.gpu, "arch": str(self.arch),
            "arch_source": self.arch_source,
            "packages": [{"name": p.name, "version": p.version, "status": p.status,
                          "shared_objects": [{"path": o[0], "status": o[1], "sass": list(o[2]),
                                              "ptx": list(o[3])} for o in p.objects]}
                         for p in self.packages],
            "fast_path": self.fast_path, "problems": self.problems, "fixes": self.fixes,
            "model": self.model.as_dict(), "ops": self.ops, "notes": self.notes,
            "driver": self.driver.as_dict() if self.driver else None,
        }

    @property
    def needed(self) -> set[str]:
        return {m for m, state in self.fast_path.items() if state["needed"]}


def family(arch: Arch) -> str:
    return FAMILIES.get(arch.major, f"compute capability {arch.major}.x")

