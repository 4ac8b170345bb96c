"""What a configured build leaves (--configure-only, --check): the targets its build files
hold, the CUDA samples' device code, the stand-in objects dropped; and what a build that stopped
or went wrong before its wheel says: the pre-build check's mismatch, a missing source, a sample
compile that failed, an error in its log the build went on past."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from wheelsmith.arch import ArchParseError, ArchSet
from wheelsmith.builder import buildenv, prebuild, sample
from wheelsmith.builder.compilesetup import read_guard_report
from wheelsmith.builder.diagnose import SOURCES_MISSING, diagnose, explain, first_error, in_tree
from wheelsmith.builder.plan import BuildPlan
from wheelsmith.builder.request import BuildRequest, BuildResult, Reporter
from wheelsmith.builder.verify import IGNORES_ARCH_HINT, sample_objects
from wheelsmith.errors import (
    CompileError,
    NoDeviceCodeError,
    SourceError,
    VerifyError,
    WheelsmithError,
)


def configured(records: tuple[dict[str, Any], ...], *, plan: BuildPlan, request: BuildRequest,
               source: Path, log_path: Path, report: Reporter) -> BuildResult:
    """A configure-only build's result: each CUDA sample's device code read first (--check),
    then nothing of the build tree kept but its build.ninja files."""
    what = f"{plan.recipe.name} {plan.release.version}"
    try:
        if request.check:
            records = sample_objects(records, plan, request.python, what)
    finally:
        drop_stand_ins(source / "build")
    if plan.recipe.kind != "pure" and not any(c.get("cuda_units", 1) for c in records):
        raise no_device_code(what, log_path, source, check=request.check)
    return configured_result(records, log_path, report)


NO_CUDA_HINT = ("the package decides while it builds whether to compile CUDA: set the switch it "
                "reads (FORCE_CUDA, <PKG>_TARGET_DEVICE, ...) in the recipe's build.env; a "
                "package whose ops compile at first use (JIT) has no CUDA wheel to build; its "
                "log says what it did")


WENT_ON_HINT = ("a tool the package's build runs (CMake, a configure script) failed and the build "
                "went on without it: fix what the error names, with a recipe patch or a "
                "build.env setting")


def no_device_code(what: str, log_path: Path, source: Path, *, check: bool
                   ) -> NoDeviceCodeError:
    """A configured build (--configure-only, --check) that generated nothing to compile for
    the GPU: exit 9 either way, with the error the build went on past as its cause."""
    error = NoDeviceCodeError(
        f"{'the check' if check else 'configuring'} of {what} found nothing to compile for the "
        "GPU: its build generated no build.ninja with CUDA rules", hint=NO_CUDA_HINT,
        log_file=log_path)
    if not went_on_past(error, log_path, source):
        error.message += ", so its wheel would hold no device code"
    return error


def went_on_past(error: WheelsmithError, log_path: Path, source: Path) -> bool:
    """When the log of a build that did not fail holds an error (a setup.py that runs CMake and
    ignores its failure, then builds nothing for the GPU), that error, with its file:line, is
    named as the cause of `error`, and its known meaning becomes the hint. False: none."""
    text = log_path.read_text(errors="replace")
    cause = first_error(text)
    if cause is None:
        return False
    error.message += f"; the build went on past this error: {in_tree(cause, source, None)}"
    error.hint = explain(diagnose(text)) or WENT_ON_HINT
    return True


def sample_failed(exc: CompileError, what: str, source: Path, log_path: Path) -> None:
    """A sample compile that failed (sample.py) as the error users see: the object, its
    source and the compiler's first error, paths in the source tree relative to it."""
    text = log_path.read_text(errors="replace")
    line = next((line for line in text.splitlines() if line.startswith(sample.FAILED_LINE)),
                None)
    if line is None:
        return
    failed = in_tree(line.removeprefix(sample.FAILED_LINE), source, None)
    raise CompileError(f"the sample compile of {what} failed: {failed}", hint=exc.hint,
                       tail=exc.tail, log_file=log_path) from exc


def configured_result(records: tuple[dict[str, Any], ...], log_path: Path,
                report: Reporter) -> BuildResult:
    """The result of a build that stopped after generating its build files: the build.ninja
    files with CUDA rules, and the extensions whose build.ninja has only C++ rules."""
    cuda = tuple(c for c in records if c.get("cuda_units", 1))
    host = tuple(dict.fromkeys([*(str(c["extension"]) for c in records
                                  if not c.get("cuda_units", 1) and c.get("extension")),
                                *(name for c in records for name in c.get("host_libraries", []))]))
    line = "; ".join(f"{configured_name(c)}: SASS {', '.join(c['sass'])}{sample.sampled_text(c)}"
                     for c in cuda) or (
        "no build.ninja with CUDA rules was generated (setup.py built no CUDA extension); "
        "no wheel is kept")
    report.stage("configured", line + (f"; C++ only: {', '.join(host)}" if host else ""))
    return BuildResult(wheel=None, provenance={}, up_to_date=False, log=log_path,
                       configured=cuda, host_modules=host)


def drop_stand_ins(build_tree: Path) -> None:
    """After a configure-only build only its build.ninja files stay: the empty objects and the
    modules linked from them must never look built to a later build of the tree."""
    for path in sorted(build_tree.rglob("*"), reverse=True) if build_tree.is_dir() else []:
        if path.is_dir() and not any(path.iterdir()):
            path.rmdir()
        elif path.is_file() and path.name != "build.ninja":
            path.unlink()


def configured_name(record: dict[str, Any]) -> str:
    """The extension a pre-build record is of (its build directory for older records)."""
    return str(record.get("extension") or Path(record["build_ninja"]).parent.name)


def arch_specific(records: tuple[dict[str, Any], ...], archs: ArchSet) -> ArchSet | None:
    """The arch-specific variants of `archs` (12.0a for 12.0) when the build.ninja that stopped
    the build compiles exactly those: a package that turns 12X into 12Xa itself (llama.cpp,
    for Blackwell's FP4 instructions; natten for 9.0 and 10.0)."""
    if not records or not archs.archs or any(a.ptx for a in archs.archs):
        return None
    try:
        specific = ArchSet.parse([f"{a.capability}a" for a in archs.archs])
    except ArchParseError:  # an arch before 9.0 has no arch-specific variant
        return None
    return specific if set(records[-1].get("sass", [])) == set(specific.sass) and \
        not records[-1].get("ptx") else None


def own_targets(records: tuple[dict[str, Any], ...], archs: ArchSet) -> bool:
    """Whether the build.ninja that stopped the build compiles CUDA targets of its own, not
    the requested ones nor their arch-specific variants: a package that ignores the arch list
    (its `-gencode` list is fixed in its setup.py or CMake files)."""
    if not records or arch_specific(records, archs) is not None:
        return False
    last = records[-1]
    found = (set(last.get("sass", [])), set(last.get("ptx", [])))
    return bool(last.get("cuda_units")) and bool(found[0] | found[1]) and \
        found != (set(archs.sass), set(archs.ptx))


def prebuild_outcome(guard: buildenv.Guard | None, log_path: Path, exc: CompileError,
                     archs: ArchSet, tree: Callable[[str], str]) -> tuple[dict[str, Any], ...]:
    """A build the pre-build check stopped: a mismatch becomes a VerifyError; a
    configure-only build that failed because the check stopped CMake's build after its
    generate step is a result; anything else re-raises the compile error (a torch build whose
    objects were stood in for fails for reasons of its own). `tree` makes the source tree's
    paths in the check's line relative to it."""
    text = log_path.read_text(errors="replace")
    missing = next((line for line in text.splitlines() if prebuild.SOURCE_CHECK in line), None)
    if missing is not None:
        raise SourceError(tree(missing.strip().removeprefix("wheelsmith ")),
                          hint=SOURCES_MISSING.remedy, log_file=log_path) from exc
    mismatch = next((line for line in text.splitlines()
                     if "wheelsmith pre-build check:" in line), None)
    if mismatch is not None:
        specific = arch_specific(read_guard_report(guard), archs)
        hint = (f"the package builds the arch-specific variant of each requested arch itself "
                f"(it turns {archs} into {specific}): build it for {specific} (--arch "
                f"'{specific}', or the recipe's arch.default)" if specific else IGNORES_ARCH_HINT)
        raise VerifyError(tree(mismatch.strip().removeprefix("wheelsmith ")), hint=hint,
                          log_file=log_path) from exc
    configured = read_guard_report(guard)
    if guard is not None and guard.configure_only and any(
            line.startswith(prebuild.CMAKE_STOP) for line in text.splitlines()):
        return configured  # the build failed because the check stopped CMake's, as asked
    raise exc
