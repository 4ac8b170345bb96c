"""Known-bad combinations, as data in `known-bad.yaml` next to `recipes/`.

Build rules (package x version x toolchain x arch) are refused or warned about before anything
is compiled. Runtime rules (`stage: runtime`) are what `wheelsmith doctor` judges an installed
environment by: a package x version x Triton x torch x GPU arch that breaks at run time, or any
extension built for another torch than the environment's (`when: torch-abi`); each carries its
fix (`fix.triton`: the Triton that works, which doctor turns into the torch release that brings
it; `fix.alternative`: another way out)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from wheelsmith import document
from wheelsmith.arch import ArchParseError, ArchSet, parse_arch

FILE = "known-bad.yaml"
SPEC = {"type": "string"}
RUNTIME = "runtime"
TORCH_ABI = "torch-abi"
SCHEMA: dict[str, Any] = {
    "type": "array",
    "items": {
        "type": "object",
        "additionalProperties": False,
        "required": ["package", "action", "reason", "link"],
        "properties": {
            "package": {"type": "string"},
            "versions": SPEC,
            "nvcc": SPEC,
            "torch": SPEC,
            "archs": {"type": "array", "items": {"type": "string"}},
            "action": {"type": "string", "enum": ["refuse", "warn"]},
            "reason": {"type": "string"},
            "link": {"type": "string", "pattern": "^https://",
                     "x-message": "must be an https:// link to the upstream report"},
            "stage": {"type": "string", "enum": ["build", RUNTIME]},
            "triton": SPEC,
            "unless": {"type": "array", "items": {"type": "string"}},
            "when": {"type": "string", "enum": [TORCH_ABI]},
            "fix": {"type": "object", "additionalProperties": False,
                    "properties": {"triton": SPEC, "alternative": {"type": "string"}}},
        },
    },
}


@dataclass(frozen=True, kw_only=True, slots=True)
class Rule:
    package: str
    versions: SpecifierSet
    nvcc: SpecifierSet
    torch: SpecifierSet
    archs: frozenset[str]  # capabilities with suffix, e.g. "10.3", "10.3a"; empty: any
    action: str
    reason: str
    link: str

    def matches(self, package: str, version: Version, nvcc: Version, torch: Version,
                archs: ArchSet) -> bool:
        requested = {f"{a.capability}{a.suffix}" for a in archs.archs}
        return (canonicalize_name(package) == self.package
                and self.versions.contains(version, prereleases=True)
                and self.nvcc.contains(nvcc, prereleases=True)
                and self.torch.contains(torch, prereleases=True)
                and (not self.archs or bool(self.archs & requested)))

    def describe(self) -> str:
        return f"{self.reason} ({self.link})"


@dataclass(frozen=True, kw_only=True, slots=True)
class RuntimeRule:
    """Something that breaks when it runs, judged on an installed environment."""

    package: str  # a distribution; "*" with `when: torch-abi`: every CUDA extension
    versions: SpecifierSet
    torch: SpecifierSet
    triton: SpecifierSet  # non-empty: only with an installed Triton in this range
    archs: frozenset[str]
    unless: frozenset[str]  # distributions that avoid it when installed (tilelang)
    when: str | None  # TORCH_ABI: the package was built for another torch minor
    reason: str
    link: str
    fix_triton: SpecifierSet | None
    alternative: str | None

    def matches(self, package: str, version: Version, installed: dict[str, Version],
                torch: Version | None, arch: str) -> bool:
        """Whether this rule (not a torch-abi one) applies to `package` `version` in an
        environment with `installed` distributions and `torch`, on GPU `arch` ("9.0")."""
        triton = installed.get("triton")
        return (self.when is None and canonicalize_name(package) == self.package
                and self.versions.contains(version, prereleases=True)
                and (not self.torch or (torch is not None
                                        and self.torch.contains(torch, prereleases=True)))
                and (not self.triton or (triton is not None
                                         and self.triton.contains(triton, prereleases=True)))
                and (not self.archs or arch in self.archs)
                and not self.unless & set(installed))


def load(path: Path) -> list[Rule]:
    """The build rules."""
    return _load(path)[0]


def load_runtime(path: Path) -> list[RuntimeRule]:
    return _load(path)[1]


def _load(path: Path) -> tuple[list[Rule], list[RuntimeRule]]:
    if not path.exists() and not path.is_symlink():  # none: no rules; a FIFO, a device or a
        return [], []  # link to one is there, and document.load refuses it (never "no rules")
    doc = document.load(path)
    data = document.validate(doc, SCHEMA)
    build: list[Rule] = []
    runtime: list[RuntimeRule] = []
    for index, entry in enumerate(data or []):
        if isinstance(entry, dict) and "package" in entry:
            if entry.get("stage") == RUNTIME:
                runtime.append(_runtime_rule(doc, index, entry))
            else:
                build.append(_rule(doc, index, entry))
    doc.raise_if_problems()
    return build, runtime


def _spec(doc: document.Document, path: tuple[int | str, ...], value: str) -> SpecifierSet:
    try:
        return SpecifierSet(value)
    except InvalidSpecifier:
        doc.at_value(path, f"'{document.render_path(path)}' is not a version specifier: "
                     f"'{value}'", "write e.g. '>=1.5.3,<1.8'")
        return SpecifierSet()


def _archs(doc: document.Document, index: int, entry: dict[str, Any]) -> frozenset[str]:
    archs = set()
    for position, value in enumerate(entry.get("archs", [])):
        try:
            arch = parse_arch(value)
            archs.add(f"{arch.capability}{arch.suffix}")
        except ArchParseError as exc:
            doc.at_value((index, "archs", position), exc.message, exc.hint)
    return frozenset(archs)


def _rule(doc: document.Document, index: int, entry: dict[str, Any]) -> Rule:
    specs = {key: _spec(doc, (index, key), entry.get(key, ""))
             for key in ("versions", "nvcc", "torch")}
    return Rule(package=str(canonicalize_name(entry["package"])), versions=specs["versions"],
                nvcc=specs["nvcc"], torch=specs["torch"], archs=_archs(doc, index, entry),
                action=entry.get("action", "refuse"),
                reason=" ".join(entry.get("reason", "").split()), link=entry.get("link", ""))


def _runtime_rule(doc: document.Document, index: int, entry: dict[str, Any]) -> RuntimeRule:
    specs = {key: _spec(doc, (index, key), entry.get(key, ""))
             for key in ("versions", "torch", "triton")}
    fix = entry.get("fix") or {}
    package = entry["package"]
    return RuntimeRule(
        package=package if package == "*" else str(canonicalize_name(package)),
        versions=specs["versions"], torch=specs["torch"], triton=specs["triton"],
        archs=_archs(doc, index, entry),
        unless=frozenset(str(canonicalize_name(u)) for u in entry.get("unless", [])),
        when=entry.get("when"), reason=" ".join(entry.get("reason", "").split()),
        link=entry.get("link", ""),
        fix_triton=_spec(doc, (index, "fix", "triton"), fix["triton"]) if "triton" in fix
        else None, alternative=fix.get("alternative"))


def matching(rules: list[Rule], package: str, version: str, *, nvcc: Version, torch: Version,
             archs: ArchSet) -> list[Rule]:  # build rules
    return [r for r in rules if r.matches(package, Version(version), nvcc, torch, archs)]
