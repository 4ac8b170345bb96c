"""The build plan: one immutable description of what to build, and its content key.

The key hashes everything that changes the wheel: the recipe's resolved data for the version
(not the file, so adding another version leaves keys alone), source sha256, patch sha256s,
toolchain pins, archs and Python. Provenance records it; a wheel in the output whose
provenance has the same key is up to date.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from wheelsmith import locations
from wheelsmith.arch import ArchSet
from wheelsmith.builder.request import Reporter
from wheelsmith.errors import KnownBadError, UsageError
from wheelsmith.recipes import knownbad
from wheelsmith.recipes.model import Recipe, Release, canonical
from wheelsmith.toolchain.env import Toolchain
from wheelsmith.toolchain.torchspan import Span, span_of

log = logging.getLogger(__name__)

PURE_BACKEND = frozenset({"setuptools", "wheel"})  # what builds a pure wheel (no isolation)


@dataclass(frozen=True, kw_only=True, slots=True)
class BuildPlan:
    recipe: Recipe
    release: Release
    archs: ArchSet
    toolchain: Toolchain
    extra_env: tuple[tuple[str, str], ...] = ()  # --env KEY=VALUE from the command line
    # --torch-range ("all" or "2.13,2.14"): its proven span is in the wheel's label and torch
    # requirement (toolchain/torchspan.py), so the request is in the key
    torch_range: str | None = None

    def key_inputs(self) -> dict[str, Any]:
        inputs = {
            "recipe": canonical(self.recipe, self.release),
            "toolchain": self.toolchain.identity(),
            "archs": str(self.archs),
            "python": self.toolchain.python_version,
        }
        if self.recipe.kind == "pure":
            del inputs["python"]
            inputs["toolchain"] = self._pure_toolchain()
        if self.extra_env:
            inputs["extra_env"] = dict(self.extra_env)
        if self.torch_range:
            inputs["torch_range"] = self.torch_range
        return inputs

    def _pure_toolchain(self) -> dict[str, Any]:
        """What a pure wheel's key takes from its toolchain: the profile and its build
        backend. The Python and CPU that ran the build are in neither its name (py3-none-any)
        nor what it runs, and the profile's other pins (some differ by Python) build nothing
        of it: one name, one key, whichever Python of the profile built it."""
        identity = self.toolchain.identity()
        backend = [pin for pin in identity["pins"]
                   if canonicalize_name(Requirement(pin).name) in PURE_BACKEND]
        return {**{k: identity[k] for k in ("name", "torch", "torch_cuda", "nvcc")},
                "pins": backend}

    @property
    def key(self) -> str:
        blob = json.dumps(self.key_inputs(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()

    def local_label(self, span: Span | None = None) -> str:
        """`cu.13.0.torch.2.14.sm.120`: numeric dotted segments, so versions sort right;
        `cu.13.0.sm.120` from a CUDA-only toolchain (a package that links no torch);
        `cu.13.0.torch.2.14.range.2.12.2.14.sm.120` with the torch span its range proved.

        Pure-Python wheels end in `pure` instead of an arch set (`cu.13.0.torch.2.14.pure`):
        a name of their own, never PyPI's wheel's, and one per toolchain, because what
        builds them (its setuptools, the provenance naming it) is in their bytes: two
        channels' builds never share a filename with other bytes.

        A stable-ABI wheel (`build.stable_abi`) names no torch it was built with but the floor
        it targets (`cu.13.0.stable.2.10.sm.120`): it runs under that torch and newer ones."""
        cuda, torch = self.toolchain.torch_cuda, self.toolchain.torch_version
        stable = self.recipe.stable_abi
        toolchain = f"cu.{cuda.major}.{cuda.minor}" + (
            f".stable.{stable.floor}" if stable is not None else
            f".torch.{torch.major}.{torch.minor}" if torch is not None else "") + (
            f".{span.label()}" if span is not None else "")
        return f"{toolchain}.{'pure' if self.recipe.kind == 'pure' else self.archs.label()}"

    def torch_requirement(self, span: Span | None = None) -> str | None:
        """`torch==2.14.*` for extensions (their ABI is that torch's), or the torch span its
        range proved (`torch>=2.12,<2.15`); `torch>=2.10` for a stable-ABI one (its floor,
        whatever span its range proved); None for pure wheels and for a CUDA-only toolchain's
        (they link no torch)."""
        torch = self.toolchain.torch_version
        if self.recipe.kind == "pure" or torch is None:
            return None
        if self.recipe.stable_abi is not None:
            return f"torch>={self.recipe.stable_abi.floor}"
        return span.requirement() if span is not None else f"torch=={torch.major}.{torch.minor}.*"

    def torch_span(self, proven: list[str] | None) -> Span | None:
        """The span the torch range's `proven` minors give this plan's wheel (None: not asked,
        or its own minor alone)."""
        torch = self.toolchain.torch_version
        if proven is None or torch is None or self.recipe.kind == "pure":
            return None
        return span_of(proven, (torch.major, torch.minor))

    def slug(self) -> str:
        return f"{self.recipe.name}-{self.release.version}-{self.key[:12]}"



NO_TORCH = Version("0")  # a CUDA-only toolchain's: known-bad rules on a torch range skip it


def archs_for(recipe: Recipe, requested: ArchSet | None) -> ArchSet:
    """The archs to build: none for pure recipes, else --arch (default: the recipe's), which
    must be ones the package's knob can express."""
    if recipe.kind == "pure":
        if requested is not None:
            raise UsageError(f"{recipe.name} is pure Python: it has no device code, so --arch "
                             "does not apply", hint="leave out --arch")
        return ArchSet(())
    archs = requested or recipe.arch.default
    unsupported = recipe.arch.unsupported(archs)
    if unsupported:
        supported = str(recipe.arch.supported).replace(";", ", ")
        raise UsageError(f"{recipe.name} cannot be built for {', '.join(unsupported)}: its "
                         f"{recipe.arch.env} knob only knows {supported}",
                         hint="pick archs from that list (an sm_120 cubin also runs on sm_121, "
                              "an sm_100 cubin on sm_103)")
    return archs


def check_known_bad(recipe: Recipe, release: Release, toolchain: Toolchain, archs: ArchSet,
                     report: Reporter) -> None:
    rules = knownbad.load(locations.project_root() / knownbad.FILE)
    found = knownbad.matching(rules, recipe.name, release.version, nvcc=toolchain.nvcc_version,
                              torch=toolchain.torch_version or NO_TORCH, archs=archs)
    refused = [r for r in found if r.action == "refuse"]
    for rule in found:
        if rule.action == "warn":
            log.warning("known issue: %s", rule.describe())
            report.stage("warning", rule.describe())
    if refused:
        raise KnownBadError(
            f"refusing to build {recipe.name} {release.version} for {archs} with nvcc "
            f"{toolchain.nvcc_version}: " + " ".join(r.describe() for r in refused),
            hint=f"the rule is in {knownbad.FILE}; choose other archs or another version")

