"""`recipe new`: a first recipe for a package, read from its sdist, in the user's repository."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import click
from packaging.utils import canonicalize_name

from wheelsmith.cli import console
from wheelsmith.cli._common import SPEC, display, emit_json, json_option, main, writable
from wheelsmith.errors import UsageError, WheelsmithError
from wheelsmith.recipes import repos
from wheelsmith.scaffold import (
    aten_api,
    buildsystem,
    check,
    cmake,
    env_reads,
    findings,
    libraries,
    patches,
    rebase,
    render,
    sdist,
    setup_py,
    switches,
)
from wheelsmith.toolchain import select


@main.group("recipe")
def recipe_group() -> None:
    """Write recipes (the built-in ones are listed by `wheelsmith recipes`)."""


def _destination(given: Path | None) -> Path:
    if given is not None:
        return given.resolve()
    named = repos.user_dirs()
    if named:
        return named[0].resolve()
    raise UsageError("say which recipe repository to write into: --recipes DIR",
                     hint=f"or set {repos.ENV}; the recipes wheelsmith ships are not written to")


@recipe_group.command("new")
@click.argument("package", metavar="NAME[==VERSION]", type=SPEC)
@click.option("--recipes", "repo", type=click.Path(path_type=Path, file_okay=False),
              help=f"The recipe repository to write into (DIR/recipes/NAME.yaml); default: the "
                   f"first directory of ${repos.ENV}.")
@click.option("--configure/--no-configure", "configure", default=True, show_default=True,
              help="Check the new recipe: `build --check` (setup.py or CMake up to "
                   "build.ninja, then one host and one CUDA object of each extension "
                   "compiled) with the default toolchain of its kind, made first where this "
                   "machine lacks it; a failure exits with its error.")
@json_option
def recipe_new(package: tuple[str, str | None], repo: Path | None, configure: bool,
               as_json: bool) -> None:
    """Write a recipe for NAME from its sdist on the index: pinned by the index's sha256, with
    the package's force-build variable, its hard-coded -gencode family, whether the sdist holds
    the sources its extensions compile, and the standard patches it needs."""
    name, version = package
    destination = _destination(repo)
    writable(("--recipes", destination))
    chosen = sdist.choose_sdist(name, version)
    base = rebase.shipped_base(name, chosen.version)
    with tempfile.TemporaryDirectory(prefix="wheelsmith-recipe-new-") as work:
        found = _read(chosen, sdist.unpacked(chosen, Path(work) / "sdist"), base)
        files = render.write(found, destination)
        checked = _checked(chosen, destination, found.kind) if configure else None
        if checked is not None:  # its findings go into the recipe too
            found = dataclasses.replace(found, checked=checked)
            render.rewrite(found, destination)
    lines = render.report_lines(found)
    failed = checked.error if checked is not None else None
    setup = found.setup
    if as_json and failed is None:
        emit_json({"recipe": str(files[0]), "patches": [str(f) for f in files[1:]],
                   "sdist": chosen.filename, "sha256": chosen.sha256,
                   "env": {var: value for var, value, _ in found.env},
                   "gencode": list(setup.gencode), "kind": found.kind,
                   "extensions": [e.name for e in setup.extensions],
                   "host_only": list(found.host_only), "missing": list(setup.missing),
                   "patches_written": [p.file for p in found.written],
                   "build_requires": list(found.requires.pins),
                   "libraries": [n.wheel for n in found.libraries if n.wheel],
                   "patches_needed": [p.stem for p, _ in found.needed],
                   "check": checked.line if checked else None, "findings": lines})
    elif not as_json:
        for line in lines:
            click.echo(line)
        for file in files:
            click.echo(f"wrote {display(file)}")
    next_step = f"wheelsmith build {canonicalize_name(name)} --recipes {display(destination)}"
    if failed is not None:
        raise check_failed(render.explained(failed, found), next_step, files)
    if not as_json:
        click.echo(f"next: {next_step}{' --check' if checked is None else ''}")


def _read(chosen: sdist.Sdist, tree: Path, base: rebase.Base | None) -> findings.Findings:
    """What the unpacked sdist says, and the patches made over it (after a shipped recipe's,
    carried over)."""
    setup = setup_py.read_setup(tree)  # the findings name the sdist's own lines
    profile = select.profile_named(None)
    side = cmake.read_cmake(tree, buildsystem.held(profile).get("cmake"))
    carried = rebase.carry(base.release, tree) if base is not None else ()
    kept = rebase.renumbered(carried)
    made = patches.written(tree, setup_py.read_setup(tree) if kept else setup,
                           cxx20=check.torch_needs_cxx20(), after=kept,
                           cmake_torch=bool(side and side.cuda_at and side.links_torch),
                           cmake_cuda=bool(side and side.cuda_at))
    return findings.Findings(chosen, sdist.read_metadata(tree), setup, kept + made,
                             base=base, carried=carried, cmake=side,
                             unheld=buildsystem.unheld_imports(tree, profile),
                             excluded=buildsystem.excluded(tree, profile),
                             thc=aten_api.thc_includes(tree),
                             prebuilt=sdist.prebuilt_binaries(tree),
                             requires=buildsystem.pinned(tree, profile),
                             has_setup_py=(tree / "setup.py").is_file(),
                             toolchain=profile.name,
                             switches=env_reads.build_switches(tree),
                             switched=switches.cuda_switches(tree),
                             libraries=libraries.detect(tree, profile))


def _checked(chosen: sdist.Sdist, destination: Path, kind: str) -> check.Checked:
    with console.TerminalReporter() as reporter:
        return check.sample_check(chosen, destination, reporter, cuda_only=kind == "cuda",
                                  pure=kind == "pure")


def check_failed(error: WheelsmithError, next_step: str, files: list[Path]) -> WheelsmithError:
    """The check's error as `recipe new` ends with it: what it wrote stays, to be fixed."""
    error.message = f"the check of the new recipe failed: {error.message}"
    error.hint = (f"{error.hint}; " if error.hint else "") + (
        f"the recipe and its patches stay written ({', '.join(map(display, files))}): fix them, "
        f"then `{next_step} --check`")
    return error
