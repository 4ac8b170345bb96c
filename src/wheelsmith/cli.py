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
from packaging.version import Version

from wheelsmith import __version__, console, index, locations, pipeline, publish
from wheelsmith.arch import Arch, ArchParseError, ArchSet
from wheelsmith.errors import (
    DoctorError,
    IndexDriftError,
    NightlyError,
    RecipeError,
    UsageError,
    WheelsmithError,
)
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


def parse_env(values: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """`--env KEY=VALUE` values; a value without '=' is an error naming it."""
    pairs = []
    for value in values:
        key, sep, text = value.partition("=")
        if not sep or not key.isidentifier():
            raise UsageError(f"--env: '{value}' is not KEY=VALUE",
                             hint="e.g. --env NVCC_APPEND_FLAGS=--split-compile=0")
        pairs.append((key, text))
    return tuple(sorted(pairs))


def parse_archs(values: tuple[str, ...]) -> ArchSet | None:
    """`--arch` values to an ArchSet (None when none were given); errors name the value."""
    if not values:
        return None
    try:
        return ArchSet.parse(values)
    except ArchParseError as exc:
        raise UsageError(f"--arch: {exc.message}", hint=exc.hint) from exc


def _emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True))


def _json_flag(ctx: click.Context, _: click.Parameter, value: bool) -> bool:
    ctx.meta["wheelsmith.json"] = value
    return value


json_option = click.option("--json", "as_json", is_flag=True, callback=_json_flag,
                           is_eager=True, help="Print a machine-readable result on stdout.")
index_option = click.option("--index", "index_dir", type=click.Path(path_type=Path),
                            default=Path("index"), show_default=True,
                            help="The local index directory.")
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
@click.option("--compile-cache", metavar="off|DIR|URL",
              help="ccache for nvcc and c++: a directory, a shared remote "
                   "(redis://host:port, redis+unix:///socket, http(s)://...), or off. Default: "
                   "$WHEELSMITH_COMPILE_CACHE, else ~/.cache/wheelsmith/ccache if ccache is "
                   "installed.")
@click.option("--configure-only", is_flag=True,
              help="Stop once the build files are generated and show the arch targets they "
                   "hold (for packages too big to compile here).")
@click.option("--publish", "publish_to", is_flag=True,
              help="Publish the verified wheel to --index afterwards.")
@index_option
@json_option
def build(recipe: str, archs: tuple[str, ...], toolchain: str | None, python: Path,
          out_dir: Path, work_dir: Path, jobs: int | None, env: tuple[str, ...], rebuild: bool,
          keep_work: bool, compile_cache: str | None, configure_only: bool, publish_to: bool,
          index_dir: Path, as_json: bool) -> None:
    """Build RECIPE into a wheel that provably carries device code for --arch."""
    name, _, version = recipe.partition("==")
    if configure_only and publish_to:
        raise click.UsageError("--configure-only builds no wheel, so there is nothing to publish")
    request = pipeline.BuildRequest(
        recipe=name, version=version or None, archs=parse_archs(archs),
        toolchain=toolchain, python=python, out_dir=out_dir, work_dir=work_dir, jobs=jobs,
        env=parse_env(env), configure_only=configure_only, compile_cache=compile_cache,
        rebuild=rebuild, keep_work=keep_work)
    with console.TerminalReporter() as reporter:
        result = pipeline.build(request, reporter)
        if result.wheel is None:
            _report_configured(result, as_json)
            return
        published = publish.publish(result.wheel, index_dir) if publish_to else None
        if published is not None:
            reporter.stage("publish", f"{published.status}: {index_dir}/{published.page}")
    if as_json:
        _emit_json({"ok": True, "wheel": str(result.wheel), "up_to_date": result.up_to_date,
                    "log": str(result.log) if result.log else None,
                    "published": _published_json(published), "provenance": result.provenance})
        return
    click.echo(str(result.wheel))
    for item in result.provenance.get("device_code", []):
        _echo_device_code(item, err=True)


def _report_configured(result: pipeline.BuildResult, as_json: bool) -> None:
    if as_json:
        _emit_json({"ok": True, "wheel": None, "log": str(result.log),
                    "configured": list(result.configured)})
        return
    for item in result.configured:
        click.echo(f"{item['build_ninja']}: SASS {', '.join(item['sass']) or '-'}; "
                   f"PTX {', '.join(item['ptx']) or '-'}")


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
    requested = parse_archs(archs)
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


def _published_json(published: publish.Published | None) -> dict[str, str] | None:
    if published is None:
        return None
    return {"filename": published.filename, "channel": published.channel,
            "status": published.status, "page": published.page}


@main.command("publish")
@click.argument("wheels", nargs=-1, required=True, type=click.Path(path_type=Path))
@index_option
@click.option("--channel", help="Channel to publish into (default: the toolchain channel in "
              "the wheel's provenance, e.g. cu130-torch2.14).")
@json_option
def publish_command(wheels: tuple[Path, ...], index_dir: Path, channel: str | None,
                    as_json: bool) -> None:
    """Publish WHEELS to the local index. Identical bytes again: no-op; other bytes: refused."""
    results = []
    for wheel in wheels:  # each is complete (ledger + pages) when its line is printed
        result = publish.publish(wheel, index_dir, channel=channel)
        results.append(result)
        if not as_json:
            click.echo(f"{result.status}: {result.filename} -> {index_dir}/{result.page}")
    if as_json:
        _emit_json({"ok": True, "published": [_published_json(r) for r in results]})


@main.command("yank")
@click.argument("filename")
@index_option
@click.option("--reason", help="Why (shown by pip and uv). Required unless --undo.")
@click.option("--undo", is_flag=True, help="Rescind an earlier yank.")
def yank_command(filename: str, index_dir: Path, reason: str | None, undo: bool) -> None:
    """Yank FILENAME: installers skip it unless it is pinned exactly. Nothing is deleted."""
    if not undo and not reason:
        raise click.UsageError("--reason is required, e.g. --reason 'wrong results on sm_103'")
    record = publish.yank(index_dir, Path(filename).name, None if undo else reason)
    click.echo(f"{'unyanked' if undo else 'yanked'}: {record.filename}")


@main.group("index")
def index_group() -> None:
    """Maintain the local index: verify it, regenerate its pages."""


@index_group.command("check")
@index_option
@json_option
def index_check(index_dir: Path, as_json: bool) -> None:
    """Re-verify every file against the ledger and every page against the ledger."""
    report = index.check(index_dir)
    if as_json:
        _emit_json({"ok": not report.problems, "files": report.files,
                    "problems": report.problems, "notes": report.notes})
    else:
        for note in report.notes:
            click.echo(f"note: {note}", err=True)
    if report.problems:
        raise IndexDriftError(f"{len(report.problems)} problem(s) in {index_dir}",
                              findings=report.problems,
                              hint="pages: `wheelsmith index rebuild`; files: restore them "
                                   "from a backup (the ledger has their sha256)")
    if not as_json:
        click.echo(f"ok: {report.files} file(s) match the ledger; every page is current")


@index_group.command("rebuild")
@index_option
def index_rebuild(index_dir: Path) -> None:
    """Regenerate every page from the ledger (files are never touched)."""
    count = index.rebuild(index_dir)
    click.echo(f"ok: {count} page(s) regenerated from {index_dir}/ledger.jsonl")


@main.command("serve")
@index_option
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535))
def serve_command(index_dir: Path, host: str, port: int) -> None:
    """Serve the index read-only over HTTP (HTML/JSON negotiation, .metadata, no PyPI)."""
    from wheelsmith.serve import make_server  # noqa: PLC0415 - only this command needs it

    if not (index_dir / "ledger.jsonl").is_file():
        raise IndexDriftError(f"{index_dir} is not a wheelsmith index (no ledger.jsonl)",
                              hint="publish a wheel first, or pass --index")
    server = make_server(index_dir, host, port)
    console.setup_logging(max(1, _verbosity()))
    bound = f"http://{host}:{server.server_address[1]}"
    channels = sorted(p.parent.name for p in index_dir.glob("*/simple/index.html"))
    click.echo(f"serving {index_dir} at {bound}/ (Ctrl-C stops)", err=True)
    for channel in channels:
        click.echo(f"  pip install --index-url {bound}/{channel}/simple/ PACKAGE", err=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()


def _verbosity() -> int:
    ctx = click.get_current_context().find_root()
    return int(ctx.params.get("verbose", 0))


@main.command()
@click.option("--arch", "arch_value", metavar="X.Y",
              help="Check for this compute capability (default: the GPU's).")
@click.option("--index", "index_url", default="http://127.0.0.1:8080", show_default=True,
              help="Base URL of the wheelsmith index used in the suggested fixes.")
@click.option("--python", "python", type=click.Path(path_type=Path), default=sys.executable,
              show_default="this Python", help="The Python environment to examine.")
@click.option("--need", "need", multiple=True,
              type=click.Choice(["fla", "causal_conv1d", "mamba_ssm", "flash_attn"]),
              help="Fast-path modules your models need (repeatable). Default: fla and "
                   "causal_conv1d (GatedDeltaNet hybrids); add mamba_ssm for Mamba models.")
@json_option
def doctor(arch_value: str | None, index_url: str, python: Path, need: tuple[str, ...],
           as_json: bool) -> None:
    """Is this environment on the fast path? Checks every CUDA-extension package's kernels
    for the GPU's arch and whether fla, causal_conv1d, mamba_ssm and flash_attn import."""
    from wheelsmith import doctor as checkup  # noqa: PLC0415 - only this command needs it

    info = checkup.probe(python)
    if arch_value:
        arch, source = _single_arch(arch_value), "--arch"
    elif info.get("gpu"):
        major, minor = info["gpu"]["capability"]
        arch, source = _single_arch(f"{major}.{minor}"), "gpu"
    else:
        raise UsageError("no GPU is visible to this Python's torch, so there is no arch to "
                         "check", hint="pass the arch of the GPU you will run on, e.g. --arch 12.0")
    cuobjdump = pipeline.cuobjdump_for(None, Path(sys.executable))
    report = checkup.examine(info, arch, source, cuobjdump, index_url=index_url,
                             need=need or checkup.DEFAULT_NEED)
    if as_json:
        _emit_json(report.as_dict())  # the report says healthy: false and why
        if not report.healthy:
            click.get_current_context().exit(DoctorError.exit_code)
        return
    console.render_doctor(report)
    if not report.healthy:
        raise DoctorError(f"not on the fast path for {arch.sm}: {len(report.problems)} "
                          "problem(s)", findings=report.problems,
                          hint="\n".join(["to fix:", *report.fixes]) if report.fixes else None)


def _single_arch(value: str) -> Arch:
    archs = parse_archs((value,))
    if archs is None or len(archs.archs) != 1:
        raise UsageError(f"--arch: give one arch for doctor, got '{value}'")
    return archs.archs[0]


matrix_option = click.option("--matrix", "matrix_file", type=click.Path(path_type=Path),
                             help="The matrix file (default: matrix.yaml next to recipes/).")


def _cells(matrix_file: Path | None) -> list[Any]:
    from wheelsmith import matrix  # noqa: PLC0415
    from wheelsmith.toolchain import default_profile_name  # noqa: PLC0415

    root = locations.project_root()
    return matrix.load(matrix_file or root / "matrix.yaml", root / "recipes",
                       default_toolchain=default_profile_name(root / "toolchains"),
                       default_python=f"{sys.version_info[0]}.{sys.version_info[1]}")


@main.command("matrix")
@matrix_option
@click.option("--format", "fmt", type=click.Choice(["table", "json", "github"]),
              default="table", show_default=True)
@click.option("--shards", type=click.IntRange(min=1), default=4, show_default=True,
              help="With --format github: how many runners to split the cells over.")
def matrix_command(matrix_file: Path | None, fmt: str, shards: int) -> None:
    """Expand the build matrix into cells (recipe x version x toolchain x archs x Python)."""
    from wheelsmith import matrix  # noqa: PLC0415

    cells = _cells(matrix_file)
    if fmt == "json":
        _emit_json([c.as_dict() for c in cells])
    elif fmt == "github":
        click.echo(matrix.github_matrix(cells, shards))
    else:
        for cell in cells:
            click.echo(cell.id)


@main.command("nightly")
@matrix_option
@click.option("--shard", help="Build only shard I/N of the cells (0-based), e.g. 0/4.")
@click.option("--report", "report_dir", type=click.Path(path_type=Path),
              default=Path("build/nightly"), show_default=True,
              help="Where nightly.json, nightly.md and junit.xml go.")
@click.option("--publish/--no-publish", default=True, show_default=True,
              help="Publish each wheel that passed to --index.")
@index_option
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("wheelhouse"),
              show_default=True)
@click.option("--work-dir", type=click.Path(path_type=Path), default=Path("build/wheelsmith"),
              show_default=True)
@click.option("--jobs", type=click.IntRange(min=1))
@click.option("--compile-cache", metavar="off|DIR|URL",
              help="As for build: share compiled objects between runners (redis://...).")
def nightly_command(matrix_file: Path | None, shard: str | None, report_dir: Path,
                    publish: bool, index_dir: Path, out_dir: Path, work_dir: Path,
                    jobs: int | None, compile_cache: str | None) -> None:
    """Build every cell that is missing or changed; one failure never stops the others."""
    from wheelsmith import matrix, nightly, report  # noqa: PLC0415

    cells = matrix.shard(_cells(matrix_file), shard)
    settings = nightly.Settings(out_dir=out_dir, work_dir=work_dir, index_dir=index_dir,
                                publish=publish, jobs=jobs, compile_cache=compile_cache)
    with console.TerminalReporter() as reporter:
        results = nightly.run(cells, settings, reporter)
    written = report.write(report_dir, results, shard=shard)
    counts = report.summary(results)
    click.echo(f"{counts['built']} built, {counts['skipped']} skipped, {counts['failed']} "
               f"failed; reports: {', '.join(str(p) for p in written)}")
    failed = [r for r in results if r.status == "failed"]
    if failed:
        raise NightlyError(f"{len(failed)} of {len(results)} cell(s) failed",
                           findings=[f"{r.cell.id}: {r.reason}" for r in failed])


@main.command("outdated")
@json_option
def outdated_command(as_json: bool) -> None:
    """Recipes whose package has newer releases, and torch releases newer than every profile."""
    from wheelsmith import outdated  # noqa: PLC0415
    from wheelsmith.toolchain import load_profile  # noqa: PLC0415

    root = locations.project_root()
    rows: list[dict[str, Any]] = []
    for file in recipe_files(root / "recipes"):
        recipe = load_recipe(file, _display(file))
        found = outdated.newer_than(recipe.name, Version(recipe.latest.version))
        if found:
            rows.append({"kind": "recipe", "name": recipe.name, "current": found.current,
                         "newer": list(found.newer)})
    newest_torch = max(load_profile(p).torch for p in sorted((root / "toolchains").glob("*.yaml")))
    torch = outdated.newer_than("torch", newest_torch)
    if torch:
        rows.append({"kind": "toolchain", "name": "torch", "current": torch.current,
                     "newer": list(torch.newer)})
    if as_json:
        _emit_json(rows)
        return
    if not rows:
        click.echo("everything is current")
    for row in rows:
        what = "recipe" if row["kind"] == "recipe" else "toolchain profile"
        click.echo(f"{row['name']:<24} {row['current']:<10} -> {', '.join(row['newer'])}  "
                   f"(add a {what} version)")
