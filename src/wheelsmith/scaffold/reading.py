"""`recipe new` up to the recipe, stage by stage: the sdist fetched, setup.py (or
pyproject.toml) read, its CMake files, a shipped recipe's patches carried over, its sources,
its build requirements, the standard patches made. Each stage is told as it starts and its
findings (report.STAGES) as soon as it has run, so the reader sees them while the next stage
(pip's resolution, the check's compile) runs."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Protocol

from wheelsmith import locations
from wheelsmith.scaffold import (
    aten_api,
    buildsystem,
    check,
    cmake,
    env_reads,
    libraries,
    patches,
    pindownloads,
    rebase,
    report,
    sdist,
    setup_py,
    switches,
)
from wheelsmith.scaffold.findings import Findings
from wheelsmith.toolchain import select
from wheelsmith.toolchain.profile import default_cuda_only_name


class Teller(Protocol):
    """Where `recipe new` says what it does: a stage as it starts, a finding as it is made."""

    def stage(self, name: str, detail: str) -> None: ...

    def finding(self, line: str) -> None: ...


def tell(found: Findings, stage: str, teller: Teller) -> tuple[str, ...]:
    """The findings `stage` made, told; and returned."""
    lines = tuple(report.stage_lines(found, stage))
    for line in lines:
        teller.finding(line)
    return lines


def fetched(name: str, version: str | None, work: Path, teller: Teller
            ) -> tuple[sdist.Sdist, Path]:
    """The sdist on the index (the newest final release without `version`), unpacked."""
    teller.stage("fetch", f"the sdist of {name}{f' {version}' if version else ''} from the "
                          "index pip uses")
    chosen = sdist.choose_sdist(name, version)
    tree = sdist.unpacked(chosen, work / "sdist")
    teller.finding(report.sdist_line(chosen))
    return chosen, tree


def read(chosen: sdist.Sdist, tree: Path, teller: Teller) -> Findings:
    """What the unpacked sdist says, and the patches made over it (after a shipped recipe's,
    carried over), each stage's findings told as it ends."""
    base = rebase.shipped_base(chosen.project, chosen.version)
    has_setup_py = (tree / "setup.py").is_file()
    teller.stage("read", "setup.py (with ast, not run)" if has_setup_py else "pyproject.toml")
    profile = select.profile_named(None)
    found = Findings(chosen, sdist.read_metadata(tree), setup_py.read_setup(tree), (),
                     base=base, has_setup_py=has_setup_py, toolchain=profile.name)
    tell(found, "setup.py", teller)
    teller.stage("read", "CMake files")
    found = dataclasses.replace(found, cmake=cmake.read_cmake(
        tree, buildsystem.held(profile).get("cmake")))  # the sdist's own lines, before a carry
    if found.cmake is not None and found.cmake.downloads:
        teller.stage("read", "what CMake would download, pinned as carried sources")
        found = dataclasses.replace(found, pins=pindownloads.pins(
            tree, found.cmake.downloads, found.cmake.passes_args or _reads_cmake_args(tree),
            locations.cache_dir()))
    tell(found, "cmake", teller)
    builds_with = profile if found.kind != "cuda" else select.profile_named(  # the check's
        default_cuda_only_name(locations.profile_dirs()))
    if base is not None:
        teller.stage("carry", f"the patches of the shipped recipe's {base.release.version}")
        found = dataclasses.replace(found, carried=rebase.carry(base.release, tree))
        tell(found, "carry", teller)
    teller.stage("read", "sources: the modules setup.py runs, what the extensions compile")
    found = dataclasses.replace(found, switches=env_reads.build_switches(tree),
                                switched=switches.cuda_switches(tree),
                                unheld=buildsystem.unheld_imports(tree, builds_with),
                                thc=aten_api.thc_includes(tree),
                                prebuilt=sdist.prebuilt_binaries(tree))
    tell(found, "sources", teller)
    teller.stage("read", f"build requirements and host libraries: those the toolchain "
                         f"{profile.name} lacks, pinned by pip")
    found = dataclasses.replace(found, excluded=buildsystem.excluded(tree, builds_with),
                                requires=buildsystem.pinned(tree, builds_with),
                                libraries=libraries.detect(tree, builds_with),
                                runtime_lacks=buildsystem.runtime_lacking(
                                    found.metadata.requires, builds_with))
    tell(found, "requirements", teller)
    teller.stage("patch", "the standard patches")
    found = dataclasses.replace(found, written=_written(found, tree))
    tell(found, "patch", teller)
    return found


def _written(found: Findings, tree: Path) -> tuple[patches.Written, ...]:
    kept = rebase.renumbered(found.carried)
    side = found.cmake
    return kept + patches.written(tree, setup_py.read_setup(tree) if kept else found.setup,
                                  cxx20=check.torch_needs_cxx20(), after=kept,
                                  cmake_torch=bool(side and side.cuda_at and side.links_torch),
                                  cmake_cuda=bool(side and side.cuda_at))


def _reads_cmake_args(tree: Path) -> bool:
    """setup.py hands CMAKE_ARGS on to CMake itself (vllm's does): it names the variable."""
    setup = tree / "setup.py"
    return setup.is_file() and "CMAKE_ARGS" in setup.read_text(errors="replace")
