"""Known-bad combinations (package x version x toolchain x arch), refused or warned about
before anything is compiled. The table is data: `known-bad.yaml` next to `recipes/`."""

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


def load(path: Path) -> list[Rule]:
    if not path.is_file():
        return []
    doc = document.load(path)
    data = document.validate(doc, SCHEMA)
    rules = [_rule(doc, index, entry) for index, entry in enumerate(data or [])
             if isinstance(entry, dict) and "package" in entry]
    doc.raise_if_problems()
    return rules


def _rule(doc: document.Document, index: int, entry: dict[str, Any]) -> Rule:
    specs = {}
    for key in ("versions", "nvcc", "torch"):
        try:
            specs[key] = SpecifierSet(entry.get(key, ""))
        except InvalidSpecifier:
            doc.at_value((index, key), f"'{document.render_path((index, key))}' is not a version "
                         f"specifier: '{entry[key]}'",
                         "write e.g. '>=1.5.3,<1.8'")
            specs[key] = SpecifierSet()
    archs = set()
    for position, value in enumerate(entry.get("archs", [])):
        try:
            arch = parse_arch(value)
            archs.add(f"{arch.capability}{arch.suffix}")
        except ArchParseError as exc:
            doc.at_value((index, "archs", position), exc.message, exc.hint)
    return Rule(package=str(canonicalize_name(entry["package"])), versions=specs["versions"],
                nvcc=specs["nvcc"], torch=specs["torch"], archs=frozenset(archs),
                action=entry.get("action", "refuse"),
                reason=" ".join(entry.get("reason", "").split()), link=entry.get("link", ""))


def matching(rules: list[Rule], package: str, version: str, *, nvcc: Version, torch: Version,
             archs: ArchSet) -> list[Rule]:
    return [r for r in rules if r.matches(package, Version(version), nvcc, torch, archs)]
