"""`build`, `verify`, `recipes`, `check-recipes`, `schema`."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import click
from packaging.version import Version

from wheelsmith.builder import compilesetup
from wheelsmith.builder.request import BuildRequest, BuildResult, from_json
from wheelsmith.cli import console
from wheelsmith.cli._common import (
    DRAIN_HELP,
    DRAIN_SECONDS,
    JOBS,
    SECONDS,
    SPEC,
    arch_option,
    check_drain,
    display,
    emit_json,
    flow_story,
    index_option,
    json_option,
    main,
    parse_archs,
    parse_env,
    parse_python,
    recipes_option,
    runner_option,
    writable,
)
from wheelsmith.cli.index import published_json
from wheelsmith.deliver import deliver
from wheelsmith.errors import RecipeError
from wheelsmith.recipes import repos
from wheelsmith.recipes.model import load_recipe
from wheelsmith.recipes.schema import schema_json
from wheelsmith.toolchain import target
from wheelsmith.toolchain.target import Target


@main.command()
@click.argument("recipe", metavar="RECIPE[==VERSION]", type=SPEC)
@recipes_option
@arch_option
@click.option("--toolchain", metavar="PROFILE|system",
              help="Toolchain profile from toolchains/ (default: the newest), or 'system' for "
                   "the current Python's torch and an installed CUDA.")
@click.option("--python", "python", metavar="PATH|X.Y",
              help="The environment the wheel is for: its Python, and (without --toolchain) "
                   "its torch and CUDA choose the profile; the wheel is import-tested there. "
                   "X.Y: just that Python version (python3.X on PATH). Default: this Python.")
@click.option("--platform", metavar="aarch64|x86_64",
              help="The CPU the wheel is for. Another than this machine's is cross-compiled "
                   "(its GNU compiler, the profile's pins for that CPU) and import-tested "
                   "under qemu-user. Default: this machine's.")
@click.option("--install", "install_into", is_flag=True,
              help="pip-install the verified wheel into the --python environment (--no-deps).")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("wheelhouse"),
              show_default=True, help="Where the finished wheel goes.")
@click.option("--work-dir", type=click.Path(path_type=Path), default=Path("build/wheelsmith"),
              show_default=True, help="Sources, logs and scratch files.")
@click.option("--jobs", type=JOBS, help="MAX_JOBS (default: from cores, free "
              "memory and a compile farm's CPUs).")
@click.option("--split-compile", "split_compile", metavar="auto|off|fast|N",
              help="ptxas --split-compile workers, so one heavy file uses idle cores. auto: "
                   "from cores, memory and build.ninja's CUDA files. fast: nvcc's own split "
                   "(cicc too), faster on many cores but its bytes vary: the wheel says so "
                   "and verify --rebuild refuses it. Not part of the content key. Default: "
                   "$WHEELSMITH_SPLIT_COMPILE, else auto.")
@click.option("--compile-farm", "compile_farm", metavar="URL|off",
              help="Compile nvcc and c++ on an sccache-dist scheduler's build servers (token "
                   "in $WHEELSMITH_COMPILE_FARM_TOKEN). When it is unusable, compile here and "
                   "say so. Default: $WHEELSMITH_COMPILE_FARM.")
@click.option("--compile-farm-required", is_flag=True,
              help="Fail (exit 9) instead of compiling here when the farm is unusable or "
                   "loses compiles.")
@click.option("--env", "env", multiple=True, metavar="KEY=VALUE",
              help="Extra variable for the package's build (part of the content key), e.g. "
                   "NVCC_APPEND_FLAGS=--split-compile=0.")
@click.option("--rebuild", is_flag=True, help="Build even if an identical build is in --out, "
              "and replace it.")
@click.option("--keep-work", is_flag=True, help="Keep the patched source after success.")
@click.option("--fresh", is_flag=True,
              help="Start clean: do not resume from the objects an unfinished build of the "
                   "same content key left in --work-dir.")
@click.option("--no-wait", is_flag=True,
              help="Refuse (exit 18) instead of waiting when another build of the same "
                   "content key is running in --work-dir.")
@click.option("--compile-cache", metavar="off|DIR|URL",
              help="ccache for nvcc and c++: a directory, a shared remote "
                   "(redis://host:port, redis+unix:///socket, http(s)://...), or off. Default: "
                   "$WHEELSMITH_COMPILE_CACHE, else ~/.cache/wheelsmith/ccache if ccache is "
                   "installed.")
@runner_option
@click.option("--keep-container", is_flag=True, help="Keep the build container (debugging).")
@click.option("--configure-only", is_flag=True,
              help="Stop once the build files are generated and show the arch targets they "
                   "hold (for packages too big to compile here).")
@click.option("--check", is_flag=True,
              help="Configure, then compile the cheapest host object and CUDA object of each "
                   "extension with the build's own flags (the CUDA one checked with cuobjdump "
                   "to hold exactly --arch), and stop: no wheel. A failure names the object "
                   "and the compiler's first error (exit 9).")
@click.option("--torch-range", "torch_range", metavar="all|MINOR,...",
              help="After the smoke test, prove the torch releases the wheel runs under "
                   "(verify --torch-range's checks): `all` tries the profiles' torch minors and "
                   "those pip sees beside them, `2.13,2.14` those. The trials go to run.json; the "
                   "proven minors around the build's own are the wheel's torch span: its label "
                   "(range.2.12.2.14), its torch requirement (torch>=2.12,<2.15) and, with "
                   "--publish, the channels that list it. Default: not run.")
@click.option("--publish", "publish_to", is_flag=True,
              help="Publish the verified wheel to --index afterwards.")
@click.option("--time-limit", type=SECONDS, metavar="SECONDS",
              help="Stop the build after SECONDS (exit 20): --work-dir keeps the objects it "
                   "finished, and the same build resumes from them.")
@click.option("--drain", type=DRAIN_SECONDS, metavar="SECONDS", help=DRAIN_HELP)
@index_option
@json_option
def build(recipe: tuple[str, str | None], archs: tuple[str, ...], python: str | None,
          install_into: bool, split_compile: str | None, env: tuple[str, ...], no_wait: bool,
          publish_to: bool,
          time_limit: float | None, drain: float | None, index_dir: Path, as_json: bool,
          **same_named: Any) -> None:
    """Build RECIPE into a wheel that provably carries device code for --arch."""
    # Options named like a BuildRequest field arrive in `same_named` and go into the request
    # as they are: a new build flag is one field plus one option (docs/architecture.md).
    name, version = recipe
    if (same_named["configure_only"] or same_named["check"]) and (publish_to or install_into):
        raise click.UsageError(f"--{'check' if same_named['check'] else 'configure-only'} "
                               "builds no wheel, so there is nothing to publish or install")
    chosen_python = parse_python(python)
    target_env: Path | None = chosen_python.get("target")
    if install_into and target_env is None:
        raise click.UsageError("--install needs --python PATH: the environment to install into")
    check_drain(("--time-limit", time_limit), ("--drain", drain))
    out, work = same_named["out_dir"], same_named["work_dir"]
    index = index_dir if publish_to else None
    writable(("--out", out), ("--work-dir", work), *([("--index", index_dir)] if index else []))
    flow_story(console.progress(), out=out, work=work, index=index)
    request = BuildRequest(
        recipe=name, version=version or None, archs=parse_archs(archs), **chosen_python,
        split_compile=None if split_compile is None else compilesetup.split_setting(split_compile),
        env=parse_env(env), wait=not no_wait, **same_named)
    install_target = target.probe(target_env) if install_into and target_env else None
    _deliver(request, publish_to=index_dir if publish_to else None,
             install_into=install_target, as_json=as_json, time_limit=time_limit, drain=drain)


@main.command("build-request", hidden=True)
@click.argument("file", type=click.Path(path_type=Path, exists=True, dir_okay=False))
def build_request(file: Path) -> None:
    """Run the build a container runner wrote to FILE (builder/request.py's JSON)."""
    _deliver(from_json(file.read_text()), publish_to=None, install_into=None, as_json=False)


def _deliver(request: BuildRequest, *, publish_to: Path | None, install_into: Target | None,
             as_json: bool, time_limit: float | None = None, drain: float | None = None) -> None:
    with console.TerminalReporter() as reporter:
        done = deliver(request, reporter, publish_to=publish_to, install_into=install_into,
                       time_limit=time_limit, drain=drain)
    result = done.result
    if result.wheel is None:
        _report_configured(result, as_json)
        return
    if as_json:
        emit_json({"ok": True, "wheel": str(result.wheel), "up_to_date": result.up_to_date,
                   "log": str(result.log) if result.log else None,
                   "published": published_json(done.published), "provenance": result.provenance,
                   "run": result.run,
                   "installed": None if install_into is None or done.imports is None else {
                       "python": str(install_into.python), "imports": list(done.imports)}})
        return
    click.echo(str(result.wheel))
    for item in result.provenance.get("device_code", []):
        echo_device_code(item, err=True)


def _report_configured(result: BuildResult, as_json: bool) -> None:
    if as_json:
        emit_json({"ok": True, "wheel": None, "log": str(result.log),
                    "configured": list(result.configured),
                    "host_modules": list(result.host_modules)})
        return
    for item in result.configured:
        click.echo(f"{item['build_ninja']} ({item.get('extension') or '?'}): SASS "
                   f"{', '.join(item['sass']) or '-'}; PTX {', '.join(item['ptx']) or '-'}")
        for unit in item.get("samples", []):
            device = "C++" if unit["rule"] == "compile" else \
                f"SASS {', '.join(unit['sass']) or '-'}; PTX {', '.join(unit['ptx']) or '-'}"
            click.echo(f"  compiled {unit['object']} ({device})")
    for name in result.host_modules:
        click.echo(f"{name}: C++ only (its build.ninja has no CUDA rule)")


def echo_device_code(item: dict[str, Any], *, err: bool) -> None:
    click.echo(f"  {item['path']}: SASS {', '.join(item['sass']) or '-'}; "
               f"PTX {', '.join(item['ptx']) or '-'}", err=err)


@main.command("recipes")
@recipes_option
@json_option
def list_recipes(as_json: bool) -> None:
    """List the recipes by repository (first match wins), with the ones shadowed there; a
    recipe of a name an earlier repository has lists the versions it still adds."""
    rows: list[dict[str, Any]] = []
    listed: dict[str, set[Version]] = {}  # versions an earlier repository's recipe has
    for entry in repos.entries():
        recipe = load_recipe(entry.file, display(entry.file))
        earlier = listed.setdefault(recipe.name, set())
        own = [r.version for r in recipe.releases if Version(r.version) not in earlier]
        earlier.update(Version(r.version) for r in recipe.releases)
        rows.append({"name": recipe.name, "versions": own or [r.version for r in recipe.releases],
                     "default_archs": None if recipe.kind == "pure" else str(recipe.arch.default),
                     "summary": recipe.summary,
                     "file": str(entry.file), "repository": str(entry.repo.root),
                     "origin": entry.repo.origin, "shadowed_by": None if entry.shadowed_by
                     is None or own else str(entry.shadowed_by.root)})
    if as_json:
        emit_json(rows)
        return
    for (repository, origin), group in itertools.groupby(
            rows, key=lambda r: (r["repository"], r["origin"])):
        click.echo(f"{repository} ({origin}):")
        for row in group:
            archs = f"archs {row['default_archs']}" if row["default_archs"] else "pure Python"
            detail = (f"shadowed by {row['shadowed_by']}" if row["shadowed_by"] else
                      f"{archs:<16} {row['summary']}")
            click.echo(f"  {row['name']:<24} {', '.join(row['versions']):<24} {detail}")


@main.command("check-recipes")
@click.argument("files", nargs=-1, type=click.Path(path_type=Path))
@recipes_option
def check_recipes(files: tuple[Path, ...]) -> None:
    """Validate recipes (default: every recipe of every repository) and report every
    problem."""
    targets = list(files) or [entry.file for entry in repos.entries()]
    problems = []
    for file in targets:
        try:
            load_recipe(file, display(file))
        except RecipeError as error:
            problems += error.problems
    if problems:
        raise RecipeError(problems, hint="the schema is printed by `wheelsmith schema`")
    click.echo(f"ok: {len(targets)} recipe(s) valid")


@main.command()
def schema() -> None:
    """Print the recipe JSON Schema (also in recipes/recipe.schema.json, for editors)."""
    click.echo(schema_json(), nl=False)
