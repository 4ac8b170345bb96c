"""`recipe new`: a first recipe for a package, read from its sdist, in the user's repository."""

from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import click
from packaging.utils import canonicalize_name

from wheelsmith.cli import console
from wheelsmith.cli._common import SPEC, display, emit_json, json_option, main, writable
from wheelsmith.errors import UsageError, WheelsmithError
from wheelsmith.recipes import repos
from wheelsmith.scaffold import check, findings, reading, render, report


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
    with console.TerminalReporter() as reporter, \
            tempfile.TemporaryDirectory(prefix="wheelsmith-recipe-new-") as work:
        said = Said(reporter, quiet=as_json)
        chosen, tree = reading.fetched(name, version, Path(work), said)
        found = reading.read(chosen, tree, said)
        reporter.stage("write", f"the recipe and {len(found.written)} patch(es) into "
                                f"{display(destination)}")
        files = render.write(found, destination)
        checked = _checked(found, destination, said) if configure else None
        if checked is not None:
            found = dataclasses.replace(found, checked=checked)
    failed = checked.error if checked is not None else None
    if as_json and failed is None:
        emit_json(_document(found, files))
    elif not as_json:
        click.echo(report.summary(said.lines))
        for file in files:
            click.echo(f"wrote {display(file)}")
    next_step = f"wheelsmith build {canonicalize_name(name)} --recipes {display(destination)}"
    if failed is not None:
        raise check_failed(render.explained(failed, found), next_step, files)
    if not as_json:
        click.echo(f"next: {next_step}{' --check' if checked is None else ''}")


@dataclass
class Said:
    """`recipe new`'s stages on the reporter's stage lines, its findings on stdout as they are
    made (kept for the summary; in --json only in the final document)."""

    reporter: console.TerminalReporter
    quiet: bool
    lines: list[str] = field(default_factory=list)

    def stage(self, name: str, detail: str) -> None:
        if name != "configured":  # the check's outcome: its read-back finding says it
            self.reporter.stage(name, detail)

    def progress(self, done: int, total: int) -> None:
        self.reporter.progress(done, total)

    def finding(self, line: str) -> None:
        self.lines.append(line)
        if not self.quiet:
            self.reporter.finding(report.said(line), MARKS)


MARKS = {"todo": "33;1", "fixed": "32"}  # a finding's severity, coloured on a terminal


def _checked(found: findings.Findings, destination: Path, said: Said) -> check.Checked:
    """The check, its build's stages and compile progress on the same reporter; what it read
    back told (a failed check's outcome is its error, said once, at the end) and written into
    the recipe."""
    def with_rewrite() -> None:  # the recipe as written, with arch.rewrite on
        render.rewrite(dataclasses.replace(found, checked=check.Checked("", rewrite=True)),
                       destination)

    checked = check.sample_check(found.sdist, destination, said,
                                 cuda_only=found.kind == "cuda", pure=found.kind == "pure",
                                 rewrite=with_rewrite)
    said.stage("read back", "what the check showed, into the recipe")
    read_back = dataclasses.replace(found, checked=checked)
    render.rewrite(read_back, destination)
    lines = report.stage_lines(read_back, "check")
    for line in lines[1:] if checked.error is not None else lines:
        said.finding(line)
    return checked


def _document(found: findings.Findings, files: list[Path]) -> dict[str, object]:
    """--json: the files written, what the recipe holds, and every finding."""
    setup, checked = found.setup, found.checked
    return {"recipe": str(files[0]), "patches": [str(f) for f in files[1:]],
            "sdist": found.sdist.filename, "sha256": found.sdist.sha256,
            "env": {var: value for var, value, _ in found.env},
            "gencode": list(setup.gencode), "kind": found.kind,
            "extensions": [e.name for e in setup.extensions],
            "host_only": list(found.host_only), "missing": list(setup.missing),
            "patches_written": [p.file for p in found.written],
            "build_requires": list(found.requires.pins),
            "libraries": [n.wheel for n in found.libraries if n.wheel],
            "patches_needed": [p.stem for p, _ in found.needed],
            "check": checked.line if checked else None,
            "findings": report.report_lines(found)}


def check_failed(error: WheelsmithError, next_step: str, files: list[Path]) -> WheelsmithError:
    """The check's error as `recipe new` ends with it: what it wrote stays, to be fixed."""
    error.message = f"the check of the new recipe failed: {error.message}"
    error.hint = (f"{error.hint}; " if error.hint else "") + (
        f"the recipe and its patches stay written ({', '.join(map(display, files))}): fix them, "
        f"then `{next_step} --check`")
    return error
