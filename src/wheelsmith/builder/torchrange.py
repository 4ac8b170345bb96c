"""A wheel's torch range, by evidence: the torch releases it loads and runs under.

1. What the wheel needs of torch, read from its objects (untrusted/linkage.py): the torch
   libraries each links (libtorch*, libc10*, libtorch_python) and the symbols it leaves
   undefined that nothing but torch gives it — unversioned, not weak, not the Python's, not
   another object's of the wheel, not exported by the CUDA and other libraries it links (as the
   environment it is checked in has them).
2. Each candidate torch's exports (torchexports.py: read once from its real wheel, cached by
   its sha256). A torch library it links that the torch lacks, or a symbol none of its
   libraries exports, excludes that torch, naming the symbol demangled.
3. Under each torch where all resolve, the wheel is installed and its compiled modules and the
   recipe's imports imported, and the recipe's GPU op run where a GPU of its archs is
   (smoke.py), with that torch first on the path of the environment's Python.

The proven range is the torches that passed all three.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import Version

from wheelsmith import cmd
from wheelsmith.arch import ArchSet
from wheelsmith.builder import torchpins
from wheelsmith.builder.linking import (
    TorchEnv,
    exports_beside_torch,
    is_torch_library,
    python_exports,
)
from wheelsmith.builder.smoke import smoke_test
from wheelsmith.builder.torchexports import (
    TorchExports,
    candidate_minors,
    exports_of_wheel,
    profile_minors,
    torch_wheels,
    visible_minors,
)
from wheelsmith.errors import UsageError, VerifyError, WheelsmithError
from wheelsmith.inventory import shared_objects
from wheelsmith.recipes.repos import resolve_recipe
from wheelsmith.toolchain.torchspan import label_span
from wheelsmith.toolchain.torchspan import minor as minor_of
from wheelsmith.toolchain.venv import pip_env
from wheelsmith.untrusted import LONG, tool_bounds
from wheelsmith.untrusted.elf import dynamic_symbols
from wheelsmith.untrusted.linkage import demangle, linkage
from wheelsmith.untrusted.provenance import Provenance
from wheelsmith.wheelfile import WheelName


@dataclass(frozen=True, slots=True)
class ObjectNeeds:
    """What one shared object needs of torch."""

    object: str  # the wheel's member
    libraries: tuple[str, ...]  # the torch libraries it links (DT_NEEDED)
    symbols: tuple[str, ...]  # the symbols only torch gives it, sorted


def torch_needs(objects: list[tuple[str, Path]], env: TorchEnv | None) -> tuple[ObjectNeeds, ...]:
    """What each of `objects` ((member, file)) that links torch needs of it; `env` (the
    environment the wheel is checked in) tells what its Python and other libraries give."""
    linked = {member: linkage(path) for member, path in objects}
    defined: dict[str, frozenset[str]] = {}
    for member, path in objects:
        defined[member] = dynamic_symbols(path) or frozenset()
    python = python_exports(env.python) if env is not None and env.python else frozenset()
    found = []
    for member, _ in objects:
        found_linkage = linked[member]
        if found_linkage is None:
            continue
        libraries = tuple(n for n in found_linkage.needed if is_torch_library(n))
        if not libraries:
            continue
        others = frozenset().union(*(e for m, e in defined.items() if m != member), python)
        if env is not None:
            others |= exports_beside_torch(found_linkage, env, env.site / Path(member).parent)
        symbols = sorted({i.name for i in found_linkage.imports
                          if not i.weak and i.version is None and i.name not in others})
        found.append(ObjectNeeds(member, libraries, tuple(symbols)))
    return tuple(found)


@dataclass(frozen=True, slots=True)
class Trial:
    """One torch, checked: what it lacks, and how the import and smoke test went."""

    torch: str
    wheel: str  # the torch wheel's file name ("" where pip gave none)
    sha256: str
    missing_libraries: tuple[tuple[str, str], ...] = ()  # (object, torch library)
    missing: tuple[tuple[str, str, str], ...] = ()  # (object, symbol, demangled)
    ran: str | None = None  # "passed", or why the import or smoke test failed; None: not run
    gpu: str | None = None  # the smoke test's word on the recipe's GPU op
    unavailable: str | None = None  # why there is no wheel of this torch to check
    beside: tuple[str, ...] = ()  # its `==` requirements the environment lacked, installed

    @property
    def resolves(self) -> bool:
        return self.unavailable is None and not self.missing and not self.missing_libraries

    @property
    def proven(self) -> bool:
        return self.resolves and self.ran == "passed"

    def describe(self) -> str:
        if self.unavailable is not None:
            return f"torch {self.torch}: not checked ({self.unavailable})"
        if self.missing_libraries:
            obj, library = self.missing_libraries[0]
            return f"torch {self.torch}: excluded: {obj} links {library}, which it does not have"
        if self.missing:
            obj, _, shown = self.missing[0]
            more = f" (and {len(self.missing) - 1} more)" if len(self.missing) > 1 else ""
            return f"torch {self.torch}: excluded: {obj} needs {shown}, which it does not " \
                   f"export{more}"
        if self.ran is None:
            return f"torch {self.torch}: all symbols resolve (import not run)"
        with_pins = f" (with {_listed(self.beside)} beside it)" if self.beside else ""
        if self.ran != "passed":
            return f"torch {self.torch}{with_pins}: all symbols resolve, but {self.ran}"
        return f"torch {self.torch}: proven (symbols, import" + (
            f", smoke test; {self.gpu}" if self.gpu else ", smoke test") + ")" + with_pins

    def as_dict(self) -> dict[str, Any]:
        return {"torch": self.torch, "wheel": self.wheel, "sha256": self.sha256,
                "missing_libraries": [{"object": o, "library": lib}
                                      for o, lib in self.missing_libraries],
                "missing_symbols": [{"object": o, "symbol": s, "demangled": d}
                                    for o, s, d in self.missing],
                "import_and_smoke": self.ran, "gpu_op": self.gpu,
                "unavailable": self.unavailable, "proven": self.proven,
                "installed_beside": list(self.beside)}


def _listed(pins: tuple[str, ...]) -> str:
    """`a==1, b==2 and 3 more`: the pins installed beside a torch, the first three named."""
    shown = ", ".join(pins[:3])
    return shown + (f" and {len(pins) - 3} more" if len(pins) > 3 else "")


def check_exports(needs: tuple[ObjectNeeds, ...], exports: TorchExports) -> Trial:
    """`needs` against one torch's exports."""
    names = exports.exports()
    lacking = tuple((n.object, lib) for n in needs for lib in n.libraries
                    if lib not in exports.libraries)
    missing = [(n.object, s) for n in needs for s in n.symbols if s not in names]
    shown = demangle(sorted({s for _, s in missing}))
    return Trial(exports.version, exports.wheel, exports.sha256, lacking,
                 tuple((o, s, shown.get(s, s)) for o, s in missing))


@dataclass(frozen=True, slots=True)
class TorchRange:
    """Every torch tried, oldest first."""

    trials: tuple[Trial, ...]
    ran: bool = True  # whether the import and smoke test were asked for
    notes: tuple[str, ...] = field(default=())

    def proven(self) -> list[str]:
        return [t.torch for t in self.trials if t.proven]

    def resolving(self) -> list[str]:
        return [t.torch for t in self.trials if t.resolves]

    def summary(self) -> str:
        """One line: the range and what proves it."""
        if not self.ran:
            found = self.resolving()
            return ("torch range: its symbols resolve against torch " + ", ".join(found) +
                    " (import and smoke test not run: --torch-range runs them)") if found \
                else "torch range: no torch tried exports every symbol it needs"
        proven = self.proven()
        if not proven:
            return "torch range: none proven (no torch tried passed)"
        tried = [t.torch for t in self.trials if t.unavailable is None]
        span = f"{proven[0]} to {proven[-1]}" if len(proven) > 1 else proven[0]
        gaps = [t for t in tried if Version(proven[0]) <= Version(t) <= Version(proven[-1])
                and t not in proven]
        return (f"torch range: {span} (proven by symbols, import and smoke test under "
                f"{', '.join(proven)}" + (f"; not {', '.join(gaps)}" if gaps else "") + ")")

    def describe(self) -> list[str]:
        return [self.summary(), *(f"  {t.describe()}" for t in self.trials), *self.notes]

    def as_dict(self) -> dict[str, Any]:
        return {"proven": self.proven(), "resolving": self.resolving(),
                "import_and_smoke_run": self.ran, "trials": [t.as_dict() for t in self.trials]}


Runner = Callable[[Path, Path], tuple[str, str | None]]  # (torch site, scratch) -> ran, gpu


def install_torch(python: Path, torch_wheel: Path, site: Path) -> None:
    """`torch_wheel` alone (no dependencies: the environment's own serve it) into `site`."""
    if site.exists():
        shutil.rmtree(site)
    cmd.run([python, "-m", "pip", "install", "--no-deps", "--no-index", "--no-compile",
             "--target", site, torch_wheel], stream=False, env=pip_env(),
            what=f"pip install of {torch_wheel.name} for the torch range",
            bounds=tool_bounds(LONG))


def torch_imported(python: Path, site: Path) -> str | None:
    """Why `python` with `site` first on its path does not import the torch in `site` (None:
    it does)."""
    answer = cmd.run([python, "-c", "import torch; print(torch.__file__)"], stream=False,
                     env=dict(os.environ, PYTHONPATH=str(site), PYTHONNOUSERSITE="1"),
                     what=f"import torch from {site}", error=VerifyError,
                     bounds=tool_bounds(LONG))
    found = (answer.stdout.strip().splitlines() or ["?"])[-1]
    return None if Path(found).is_relative_to(site) else f"its Python imported torch from {found}"


def run_under(python: Path, torch_wheel: Path, scratch: Path, smoke: Runner) -> Trial:
    """Install `torch_wheel` under `scratch`, with its `==` requirements the environment does
    not meet (torchpins.py), and run `smoke` with it first on the path."""
    site = scratch / "torch"
    pins: tuple[str, ...] = ()
    try:
        install_torch(python, torch_wheel, site)
        pins = tuple(torchpins.unmet(python, torch_wheel))
        torchpins.install(python, pins, site, torch_wheel.name)
        if (elsewhere := torch_imported(python, site)) is not None:
            raise VerifyError(elsewhere)
        ran, gpu = smoke(site, scratch)
    except WheelsmithError as exc:
        found = getattr(exc, "findings", None) or []
        ran, gpu = exc.message + "".join(f"; {f}" for f in found[:2]), None
    finally:
        shutil.rmtree(site, ignore_errors=True)
    return Trial("", torch_wheel.name, "", ran=ran, gpu=gpu, beside=pins)


def smoke_runner(wheel: Path, python: Path, *, imports: tuple[str, ...], gpu_code: str | None,
                 archs: ArchSet, cuda_home: Path, log_path: Path) -> Runner:
    """The recipe's smoke test of `wheel` (smoke.py) with a torch site first on the path."""
    def run(site: Path, scratch: Path) -> tuple[str, str | None]:
        said = smoke_test(wheel, python=[python], pip=[python, "-m", "pip"], cuda_home=cuda_home,
                          imports=imports, gpu_code=gpu_code, archs=archs,
                          scratch=scratch / "smoke", log_path=log_path, sites=(site,))
        gpu = next((line.removeprefix("gpu op: ") for line in said.splitlines()
                    if line.startswith("gpu op: ")), None)
        if gpu is not None and gpu.startswith("skipped"):
            gpu = f"the recipe's GPU op needs a GPU of its archs and was not run: {gpu}"
        return "passed", gpu
    return run


def prove(wheel: Path, env: TorchEnv | None, candidates: list[tuple[str, Path | str]],
          scratch: Path, smoke: Runner | None) -> TorchRange:
    """The torch range of `wheel`: each candidate ((minor, its torch wheel, or why there is
    none)) checked by its exports and, where all resolve and `smoke` is given, by running it
    under that torch (with `env`'s Python)."""
    with shared_objects(wheel) as objects:
        needs = torch_needs(objects, env)
    trials = []
    for minor, torch_wheel in candidates:
        if isinstance(torch_wheel, str):
            trials.append(Trial(minor, "", "", unavailable=torch_wheel))
            continue
        trial = check_exports(needs, exports_of_wheel(torch_wheel))
        if trial.resolves and smoke is not None and env is not None and env.python:
            ran = run_under(env.python, torch_wheel, scratch / minor, smoke)
            trial = Trial(trial.torch, trial.wheel, trial.sha256, ran=ran.ran, gpu=ran.gpu,
                          beside=ran.beside)
        trials.append(trial)
    notes = () if needs else ("  it links no torch library: any torch serves it",)
    return TorchRange(tuple(trials), ran=smoke is not None, notes=notes)


def range_of(wheel: Path, recorded: Provenance | None, env: TorchEnv | None, archs: ArchSet,
             *, torches: tuple[str, ...], work_dir: Path) -> TorchRange:
    """`wheelsmith verify --torch-range`: the torch range of `wheel`, the recipe its
    provenance names giving the smoke test (without one: its compiled modules imported); a
    VerifyError where its label states a torch span this range does not prove."""
    smoke: tuple[tuple[str, ...], str | None] = ((), None)
    if recorded is not None and recorded.recipe:
        try:
            recipe = resolve_recipe(recorded.recipe, recorded.version)
            smoke = (recipe.smoke_imports, recipe.smoke_gpu)
        except WheelsmithError:
            pass  # no recipe here: its compiled modules are imported all the same
    found = run_range(wheel, env, archs, smoke=smoke, torches=torches, work_dir=work_dir)
    if (problem := span_problem(wheel.name, found)) is not None:
        raise VerifyError(f"{wheel.name}: {problem}", findings=found.describe(),
                          hint="a wheel's torch span is what its --torch-range build proved; "
                               "install it only where each torch of the span runs it")
    return found


def span_problem(filename: str, found: TorchRange) -> str | None:
    """What a wheel's label claims of torch (its span, toolchain/torchspan.py) that `found`
    did not prove: the first minor of the span not proven here, and why; None where the label
    states no span or every minor of it was proven."""
    version = WheelName.parse(filename).version
    span = label_span(version.local or "")
    if span is None:
        return None
    proven = {minor_of(t.torch) for t in found.trials if t.proven}
    for low, high in span.minors():
        if (low, high) in proven:
            continue
        trial = next((t for t in found.trials if minor_of(t.torch) == (low, high)), None)
        why = trial.describe().split(": ", 1)[1] if trial is not None else \
            "not tried (--torch names the minors to try)"
        return (f"its label states the torch span {span} ({span.label()}), but torch "
                f"{low}.{high} was not proven here: {why}")
    return None


def run_range(wheel: Path, env: TorchEnv | None, archs: ArchSet, *,
              smoke: tuple[tuple[str, ...], str | None], torches: tuple[str, ...],
              work_dir: Path) -> TorchRange:
    """The torch range of `wheel`, run with `env`'s Python (its torch's dependencies and CUDA
    libraries serve the torch tried); `smoke`: the recipe's imports and GPU op; `torches`: the
    minors to try (none: every one the profiles pin, and those pip sees beside them)."""
    if env is None or env.python is None:
        raise UsageError("--torch-range runs each wheel under each torch with the Python of "
                         "a torch environment, and there is none here",
                         hint="--python PATH names one (a venv with torch and the CUDA "
                              "runtime the wheel links)")
    minors = list(torches) or candidate_minors(profile_minors(), visible_minors(env.python))
    scratch = work_dir.resolve() / "torch-range" / wheel.name.removesuffix(".whl")
    scratch.mkdir(parents=True, exist_ok=True)
    cuda_home = next(iter(sorted(env.site.glob("nvidia/cu*"))), env.site)
    runner = smoke_runner(wheel, env.python, imports=smoke[0], gpu_code=smoke[1], archs=archs,
                          cuda_home=cuda_home, log_path=scratch / "log.txt")
    return prove(wheel, env, torch_wheels(env.python, minors), scratch, runner)
