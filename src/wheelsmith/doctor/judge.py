"""Doctor's judgement: what the model needs (a problem) against what it does not (a note).

Beyond what is installed, doctor judges what runs (fastpath.py): the fast-path ops run on tiny
inputs against plain PyTorch (ok / wrong / error / timeout), the functions the model's
transformers code needs (asked from transformers itself, or the GatedDeltaNet set), and the
runtime rules of known-bad.yaml (package x Triton x torch x GPU family, extensions built for
another torch). For a bad Triton the fix is the torch release whose profile pins a good one,
and the channel for it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from wheelsmith import locations
from wheelsmith.doctor import abi
from wheelsmith.doctor.abi import built_for_torch, stable_floor
from wheelsmith.doctor.fastpath import ModelView
from wheelsmith.doctor.fixes import dependency_lines, fix_lines
from wheelsmith.doctor.report import Report, family, missing_dependency
from wheelsmith.errors import UsageError
from wheelsmith.index.offers import channel_url, split_channel
from wheelsmith.recipes import knownbad
from wheelsmith.recipes.knownbad import TORCH_ABI, RuntimeRule
from wheelsmith.toolchain import driver as driver_needs
from wheelsmith.toolchain.profile import Profile, applies, load_profiles, pinned_version
from wheelsmith.toolchain.target import Target
from wheelsmith.toolchain.torchspan import label_span

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Knowledge:
    """What doctor judges by besides the environment: known-bad.yaml's runtime rules and the
    toolchain profiles (which Triton each torch release pins)."""

    rules: Sequence[RuntimeRule] = ()
    profiles: Sequence[Profile] = ()


def knowledge() -> Knowledge:
    """This project's runtime rules and profiles; none outside a wheelsmith project."""
    try:
        root = locations.project_root()
    except UsageError as exc:
        log.info("no runtime rules or profiles: %s", exc.message)
        return Knowledge()
    return Knowledge(knownbad.load_runtime(root / knownbad.FILE),
                     load_profiles(locations.profile_dirs()))


NOTHING_KNOWN = Knowledge()


def judge(report: Report, info: dict[str, Any], index_url: str, knowledge: Knowledge) -> None:
    dependencies: dict[str, str] = {}  # a missing dependency -> the fast-path module needing it
    to_install: dict[str, None] = dict.fromkeys(_judge_model(report, dependencies))
    _judge_ops(report)
    if report.torch is None:
        report.problems.append(f"torch does not import: {info.get('torch_error', 'missing')}")
        return
    if not report.torch_cuda:
        report.problems.append(f"torch {report.torch} is a CPU-only build: no CUDA kernel runs")
        return
    _judge_driver(report)
    target = Target.from_probe(Path(report.python), info)
    base = channel_url(index_url, target)
    report.channel = base
    for package in report.packages:
        if package.status == "ptx":
            report.problems.append(f"{package.name} {package.version} has only PTX for "
                                   f"{report.arch.sm}: the driver JIT-compiles it at start")
            to_install[package.name] = None
        elif package.status == "none":
            report.problems.append(f"{package.name} {package.version} has no kernel for "
                                   f"{report.arch.sm}: its ops fail or the model falls back")
            to_install[package.name] = None
    covered = set(report.model.unavailable()) if report.model.source != "default" else set()
    for module, state in report.fast_path.items():
        if not state["needed"] or state["ok"] or module in covered:
            continue
        dependency = missing_dependency(module, state)
        mismatch = _abi_mismatch(report, info, state)
        if mismatch is not None:
            report.problems.append(f"fast path: `import {module}` fails: {mismatch}")
            to_install[state["dist"]] = None
        elif dependency is not None:
            report.problems.append(f"fast path: {module} does not import: it needs {dependency}, "
                                   f"which is not installed ({state['error']}): models fall "
                                   "back to slow PyTorch code")
            dependencies.setdefault(dependency, module)
        else:
            report.problems.append(f"fast path: `import {module}` fails ({state['error']}): "
                                   "models fall back to slow PyTorch code")
            to_install[state["dist"]] = None
    upgrades = _judge_rules(report, info, knowledge, target, to_install)
    report.fixes[:0] = [*dependency_lines(dependencies),
                        *fix_lines(list(to_install), base, report.arch, target, report.python)]
    report.fixes += upgrades


def _abi_mismatch(report: Report, info: dict[str, Any], state: dict[str, Any]) -> str | None:
    """An `undefined symbol` import error explained (abi.py), for the first of the module's
    distributions that is installed."""
    dists = {str(canonicalize_name(k)): v for k, v in info.get("dists", {}).items()}
    names = state["dist"].split()
    dist = next((n for n in names if n in dists), names[0])
    return abi.explain(state["error"] or "", dist, dists.get(dist), report.torch or "?",
                       report.python)


def _judge_driver(report: Report) -> None:
    """torch's CUDA major needs a driver of at least that major's first release."""
    found = report.driver
    major = Version(str(report.torch_cuda)).major
    if (found is None or found.version is None or found.runs(major)
            or major not in driver_needs.MIN_DRIVER):
        return
    others = [m for m in found.majors if m != major]
    instead = f", or use a torch built with CUDA {others[-1]}" if others else ""
    report.problems.append(f"torch {report.torch} is built with CUDA {report.torch_cuda}, which "
                           f"needs an NVIDIA {driver_needs.needs(major)}; this machine's driver is "
                           f"{found.version}: no CUDA kernel runs")
    report.fixes.append(f"install an NVIDIA driver >= {driver_needs.MIN_DRIVER[major]}{instead}")


def _judge_model(report: Report, dependencies: dict[str, str]) -> list[str]:
    """Problems from the model's view; returns the distributions to install (a module that
    does not import for want of a dependency adds that to `dependencies` instead). Nothing
    installed and importable is installed again: a package transformers passed over though it
    imports is named, not reinstalled; a dispatch that could not be seen is a note."""
    model = report.model
    name = model.model_type or "the model"
    if model.error in ("no-transformers", "too-old", "import", "failed"):
        report.problems.append(_model_error(model, name))
        return []
    for module, needs in model.undecided().items():
        report.notes.append(f"{name}: undecided whether transformers takes {module}'s "
                            f"{', '.join(n.function for n in needs)}: {needs[0].message}")
    dists = []
    for module, needs in model.unavailable().items():
        functions = ", ".join(n.function for n in needs)
        reason = needs[0].reason or ""
        if reason == "not-taken":
            report.problems.append(
                f"{name}: transformers {model.transformers} runs its torch code instead of "
                f"{module} ({functions}), though {module} imports and has them: this "
                "transformers does not take them (check the versions it supports)")
            continue
        said = {"not-installed": "is not installed", "missing": f"has no {functions}"}.get(
            reason, f"does not import: {needs[0].message}")
        report.problems.append(f"{name}: transformers will fall back to torch — {module} "
                               f"({functions}) {said}")
        state = report.fast_path.get(module)
        dependency = missing_dependency(module, state) if state else None
        if dependency is not None:
            dependencies.setdefault(dependency, module)
        else:
            dists.append(state["dist"] if state else module.replace("_", "-"))
    return dists


def _model_error(model: ModelView, name: str) -> str:
    if model.error == "no-transformers":
        return f"{name}: transformers does not import here ({model.message})"
    if model.error == "too-old":
        return (f"{name}: transformers {model.transformers} does not know this model type "
                "(too old): pip install --upgrade transformers")
    if model.error == "import":
        return f"{name}: transformers' modeling code does not import: {model.message}"
    return f"{name}: transformers could not be asked: {model.message}"


def _judge_ops(report: Report) -> None:
    """Each op that did not run correctly: a problem when the model needs its module, else a
    note. A device that cannot be used is said once."""
    for result in report.ops or []:
        if result["status"] in ("ok", "not-run"):
            continue
        if result["phase"] == "setup":  # the device itself: said once, the others not run
            cause = {"oom": "the GPU is out of memory", "busy": "the GPU is busy or "
                     "unavailable"}.get(result["kind"], "the device cannot be used")
            first = (result["error"] or "no message").strip().splitlines()[0]
            report.problems.append(f"the fast-path ops could not run: {cause} ({first})")
            continue
        text = f"{result['op']} ({result['module']}) {_op_trouble(result)}"
        if result["module"] in report.needed:
            report.problems.append(text)
        else:
            _note(report, text)


def _note(report: Report, text: str) -> None:
    """Trouble in a fast-path package the model does not need."""
    report.notes.append(f"{text} — not needed by {report.model.model_type or 'the model'}")


def _op_trouble(result: dict[str, Any]) -> str:
    status, error = result["status"], (result["error"] or "").strip().splitlines()
    first = error[0] if error else "no message"
    if status == "wrong":
        return (f"computes wrong results: max error {result['max_error'] or float('inf'):.3g} "
                f"in {result['worst']} (tolerance {result['tolerance']:g})")
    if status == "timeout":
        return (f"did not finish in {result['seconds']:g} s (hung?); a longer --op-timeout "
                "helps if it was still compiling")
    if result["kind"] == "busy":
        return f"finds the GPU busy or unavailable ({first})"
    if result["kind"] == "oom":
        return f"runs out of GPU memory ({first})"
    return f"fails in {result['phase'] or 'its run'}: {first}"


def _installed(info: dict[str, Any]) -> dict[str, Version]:
    versions = {}
    for name, version in info.get("dists", {}).items():
        try:
            versions[str(canonicalize_name(name))] = Version(version)
        except InvalidVersion:
            log.info("ignoring %s: its version '%s' is not PEP 440", name, version)
    return versions


def _judge_rules(report: Report, info: dict[str, Any], knowledge: Knowledge, target: Target,
                 to_install: dict[str, None]) -> list[str]:
    """The runtime rules of known-bad.yaml; returns their upgrade fix lines."""
    installed = _installed(info)
    arch = f"{report.arch.capability}{report.arch.suffix}"
    fixes: list[str] = []
    for rule in knowledge.rules:
        if rule.when == TORCH_ABI:
            _torch_abi(report, rule, target, to_install)
            continue
        for dist, version in installed.items():
            if rule.matches(dist, version, installed, target.torch, arch):
                _rule_finding(report, rule, dist, version, installed)
                fixes += [line for line in _upgrade(report, rule, target, knowledge.profiles)
                          if line not in fixes + report.fixes]
    return fixes


def _rule_finding(report: Report, rule: RuntimeRule, dist: str, version: Version,
                  installed: dict[str, Version]) -> None:
    subject = f"{dist} {version}"
    if rule.triton:
        subject += f" with Triton {installed['triton']}"
    if rule.archs:
        subject += f" on {family(report.arch)} ({report.arch.sm})"
    text = f"{subject}: {rule.reason} ({rule.link})"
    modules = [m for m, state in report.fast_path.items() if dist in state["dist"].split()]
    if modules and not set(modules) & report.needed:
        _note(report, text)
    else:
        report.problems.append(text)


def _torch_abi(report: Report, rule: RuntimeRule, target: Target,
               to_install: dict[str, None]) -> None:
    """Extensions whose label names another torch minor than the environment's, and no torch
    span (toolchain/torchspan.py) that holds it."""
    assert target.torch is not None
    here = (target.torch.major, target.torch.minor)
    for package in report.packages:
        floor = stable_floor(package.version)
        if floor is not None and floor > (target.torch.major, target.torch.minor):
            report.problems.append(
                f"{package.name} {package.version} needs torch {floor[0]}.{floor[1]} or newer "
                f"(its stable-ABI floor), this environment has torch {target.torch}")
            to_install[package.name] = None
        built = built_for_torch(package.version)
        span = label_span(package.version.partition("+")[2])
        if built is not None and built != here and not (span and span.contains(here)):
            report.problems.append(
                f"{package.name} {package.version} was built for torch {built[0]}.{built[1]}, "
                f"this environment has torch {target.torch}: {rule.reason} ({rule.link})")
            to_install[package.name] = None


def _upgrade(report: Report, rule: RuntimeRule, target: Target,
             profiles: Sequence[Profile]) -> list[str]:
    """The torch release whose profile pins a Triton the rule accepts, the channel's wheels for
    the extensions installed here, and the rule's alternative."""
    lines = []
    found = torch_for_triton(rule.fix_triton, target, profiles) if rule.fix_triton else None
    if found is not None:
        profile, triton = found
        newer = dataclasses.replace(target, torch=profile.torch, torch_dist=profile.torch,
                                    torch_cuda=profile.cuda)
        base = split_channel(report.channel)[0] if report.channel else ""
        rebuilt = fix_lines([p.name for p in report.packages if not p.name.startswith("torch")],
                            f"{base}/{profile.name}/simple/", report.arch, newer, report.python,
                            after=f"torch {profile.torch}")
        then = f"; then the extensions for it (channel {profile.name}):" if rebuilt else ""
        lines += [f"pip install torch=={profile.torch}   # brings Triton {triton} "
                  f"(toolchains/{profile.name}.yaml){then}", *rebuilt]
    if rule.alternative:
        lines.append(f"or: {rule.alternative}")
    return lines


def torch_for_triton(spec: SpecifierSet, target: Target, profiles: Sequence[Profile]
                     ) -> tuple[Profile, str] | None:
    """The oldest profile newer than the environment's torch, with its CUDA major, that pins a
    Triton in `spec` (for the environment's Python); another CUDA major only if none does."""
    assert target.torch is not None
    assert target.torch_cuda is not None
    torch, cuda = target.torch, target.torch_cuda
    candidates = []
    for profile in profiles:
        triton = _triton_pin(profile, target.version)
        if triton and spec.contains(triton, prereleases=True) and profile.torch > Version(
                torch.base_version):
            candidates.append(((profile.cuda.major != cuda.major, profile.torch), profile, triton))
    if not candidates:
        return None
    _, profile, triton = min(candidates, key=lambda c: c[0])
    return profile, triton


def _triton_pin(profile: Profile, python: str) -> str | None:
    for line in profile.requirements:
        requirement = Requirement(line)
        if canonicalize_name(requirement.name) == "triton" and applies(requirement, python):
            return pinned_version(requirement)
    return None

