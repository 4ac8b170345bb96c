"""`recipe new`: a first recipe for a package, read from its sdist, in the user's repository."""

from __future__ import annotations

import tempfile
from pathlib import Path

import click
from packaging.utils import canonicalize_name

from wheelsmith import scaffold
from wheelsmith.cli._common import display, emit_json, json_option, main
from wheelsmith.errors import UsageError
from wheelsmith.recipes import repos


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
@click.argument("package", metavar="NAME[==VERSION]")
@click.option("--recipes", "repo", type=click.Path(path_type=Path, file_okay=False),
              help=f"The recipe repository to write into (DIR/recipes/NAME.yaml); default: the "
                   f"first directory of ${repos.ENV}.")
@click.option("--configure/--no-configure", "configure", default=True, show_default=True,
              help="Run the new recipe's configure-only build (setup.py up to build.ninja) "
                   "when the default toolchain is already created here.")
@json_option
def recipe_new(package: str, repo: Path | None, configure: bool, as_json: bool) -> None:
    """Write a recipe for NAME from its sdist on the index: pinned by the index's sha256, with
    the package's force-build variable, its hard-coded -gencode family, whether the sdist holds
    the sources its extensions compile, and the standard patches it needs."""
    name, version = scaffold.parse_request(package)
    destination = _destination(repo)
    sdist = scaffold.choose_sdist(name, version)
    with tempfile.TemporaryDirectory(prefix="wheelsmith-recipe-new-") as work:
        tree = scaffold.unpacked(sdist, Path(work) / "sdist")
        metadata = scaffold.read_metadata(tree)
        findings = scaffold.analyse(tree)
        file = scaffold.write(sdist, metadata, findings, destination)
        checked = scaffold.configure_check(sdist, destination, Path(work)) if configure else None
    lines = scaffold.report_lines(sdist, metadata, findings)
    if checked is not None:
        lines.append(checked)
    if as_json:
        emit_json({"recipe": str(file), "sdist": sdist.filename, "sha256": sdist.sha256,
                   "force_build": findings.force_build, "gencode": list(findings.gencode),
                   "extensions": list(findings.extensions), "sources": list(findings.sources),
                   "missing_sources": list(findings.missing),
                   "patches": [p.stem for p in findings.patches],
                   "configure_check": checked, "findings": lines})
        return
    for line in lines:
        click.echo(line)
    click.echo(f"wrote {display(file)}")
    click.echo(f"next: wheelsmith build {canonicalize_name(name)} --recipes "
               f"{display(destination)} --configure-only")
