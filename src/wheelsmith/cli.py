"""The command line: a thin layer over `pipeline` and friends.

Every WheelsmithError is turned into a message and its exit code here, in one place
(`Main.invoke`); domain code never imports click.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from wheelsmith import __version__, console, locations, pipeline
from wheelsmith.errors import RecipeError, WheelsmithError
from wheelsmith.recipe import load_recipe, recipe_files, schema_json

INTERRUPTED = 130  # 128 + SIGINT, as shells report it


class Main(click.Group):
    """Catches WheelsmithError once, renders it, and exits with its code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except WheelsmithError as error:
            as_json = ctx.meta.get("wheelsmith.json", False)
            if as_json:
                click.echo(json.dumps(console.error_json(error), indent=2))
            console.render_error(error)
            ctx.exit(error.exit_code)
        except KeyboardInterrupt:
            click.echo("\ninterrupted: nothing was written to the output; partial work is in "
                       "the work directory", err=True)
            ctx.exit(INTERRUPTED)


def _emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True))


def _json_flag(ctx: click.Context, _: click.Parameter, value: bool) -> bool:
    ctx.meta["wheelsmith.json"] = value
    return value


json_option = click.option("--json", "as_json", is_flag=True, callback=_json_flag,
                           is_eager=True, help="Print a machine-readable result on stdout.")
arch_option = click.option(
    "--arch", "archs", multiple=True, metavar="ARCHS",
    help="Compute capability to build/check, e.g. 12.0; repeat or use '9.0;12.0'; "
         "'+PTX' adds PTX. Default: the recipe's.")


@click.group(cls=Main)
@click.version_option(__version__, prog_name="wheelsmith")
@click.option("-v", "--verbose", count=True, help="-v: commands and details; -vv: all output.")
def main(verbose: int) -> None:
    """Build verified CUDA-extension wheels for Blackwell (sm_120, sm_100) and Hopper."""
    console.setup_logging(verbose)


@main.command()
@click.argument("recipe", metavar="RECIPE[==VERSION]")
@arch_option
@click.option("--toolchain", metavar="PROFILE|system",
              help="Toolchain profile from toolchains/ (default: the newest), or 'system' for "
                   "the current Python's torch and an installed CUDA.")
@click.option("--python", "python", type=click.Path(path_type=Path), default=sys.executable,
              show_default="this Python", help="Python the wheel is built for.")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("wheelhouse"),
              show_default=True, help="Where the finished wheel goes.")
@click.option("--work-dir", type=click.Path(path_type=Path), default=Path("build/wheelsmith"),
              show_default=True, help="Sources, logs and scratch files.")
@click.option("--jobs", type=click.IntRange(min=1), help="MAX_JOBS (default: from cores and "
              "free memory).")
@click.option("--env", "env", multiple=True, metavar="KEY=VALUE",
              help="Extra variable for the package's build (part of the content key), e.g. "
                   "NVCC_APPEND_FLAGS=--split-compile=0.")
@click.option("--rebuild", is_flag=True, help="Build even if an identical build is in --out, "
              "and replace it.")
@click.option("--keep-work", is_flag=True, help="Keep the patched source after success.")
@json_option
def build(recipe: str, archs: tuple[str, ...], toolchain: str | None, python: Path,
          out_dir: Path, work_dir: Path, jobs: int | None, env: tuple[str, ...], rebuild: bool,
          keep_work: bool, as_json: bool) -> None:
    """Build RECIPE into a wheel that provably carries device code for --arch."""
    name, _, version = recipe.partition("==")
    request = pipeline.BuildRequest(
        recipe=name, version=version or None, archs=pipeline.parse_archs(archs),
        toolchain=toolchain, python=python, out_dir=out_dir, work_dir=work_dir, jobs=jobs,
        env=pipeline.parse_env(env), rebuild=rebuild, keep_work=keep_work)
    with console.TerminalReporter() as reporter:
        result = pipeline.build(request, reporter)
    if as_json:
        _emit_json({"ok": True, "wheel": str(result.wheel), "up_to_date": result.up_to_date,
                    "log": str(result.log) if result.log else None,
                    "provenance": result.provenance})
        return
    click.echo(str(result.wheel))
    for item in result.provenance.get("device_code", []):
        _echo_device_code(item, err=True)


def _echo_device_code(item: dict[str, Any], *, err: bool) -> None:
    click.echo(f"  {item['path']}: SASS {', '.join(item['sass']) or '-'}; "
               f"PTX {', '.join(item['ptx']) or '-'}", err=err)


@main.command()
@click.argument("wheels", nargs=-1, required=True, type=click.Path(path_type=Path))
@arch_option
@click.option("--host-only", multiple=True, metavar="GLOB",
              help="Shared objects allowed to carry no device code.")
@json_option
def verify(wheels: tuple[Path, ...], archs: tuple[str, ...], host_only: tuple[str, ...],
           as_json: bool) -> None:
    """Check that each WHEEL carries SASS for exactly --arch (and PTX iff +PTX)."""
    requested = pipeline.parse_archs(archs)
    if requested is None:
        raise click.UsageError("--arch is required, e.g. --arch 12.0")
    results = []
    for wheel in wheels:
        inventory = pipeline.verify(wheel, requested, python=Path(sys.executable),
                                    host_only=host_only)
        results.append({"wheel": str(wheel), "device_code": [d.as_dict() for d in inventory]})
        if not as_json:
            click.echo(f"ok: {wheel.name} carries exactly {requested}")
            for item in inventory:
                _echo_device_code(item.as_dict(), err=False)
    if as_json:
        _emit_json({"ok": True, "archs": str(requested), "wheels": results})


@main.command("recipes")
@json_option
def list_recipes(as_json: bool) -> None:
    """List the recipes and their versions."""
    rows = []
    for file in recipe_files(locations.project_root() / "recipes"):
        recipe = load_recipe(file, _display(file))
        rows.append({"name": recipe.name, "versions": [r.version for r in recipe.releases],
                     "default_archs": str(recipe.arch.default), "summary": recipe.summary})
    if as_json:
        _emit_json(rows)
        return
    for row in rows:
        click.echo(f"{row['name']:<24} {', '.join(row['versions']):<24} "
                   f"archs {row['default_archs']:<10} {row['summary']}")


@main.command("check-recipes")
@click.argument("files", nargs=-1, type=click.Path(path_type=Path))
def check_recipes(files: tuple[Path, ...]) -> None:
    """Validate recipes (default: all of recipes/) and report every problem."""
    targets = list(files) or list(recipe_files(locations.project_root() / "recipes"))
    problems = []
    for file in targets:
        try:
            load_recipe(file, _display(file))
        except RecipeError as error:
            problems += error.problems
    if problems:
        raise RecipeError(problems, hint="the schema is printed by `wheelsmith schema`")
    click.echo(f"ok: {len(targets)} recipe(s) valid")


@main.command()
def schema() -> None:
    """Print the recipe JSON Schema (also in recipes/recipe.schema.json, for editors)."""
    click.echo(schema_json(), nl=False)


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)
