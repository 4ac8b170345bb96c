"""`matrix`, `nightly`, `support-table`, `outdated`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
from packaging.version import Version

from wheelsmith import locations
from wheelsmith.cli import console
from wheelsmith.cli._common import (
    DRAIN_HELP,
    DRAIN_SECONDS,
    JOBS,
    SECONDS,
    Number,
    check_drain,
    display,
    emit_json,
    flow_story,
    index_option,
    json_option,
    main,
    recipes_option,
    runner_option,
    writable,
)
from wheelsmith.errors import NightlyError, UsageError
from wheelsmith.fleet import matrix, nightly, outdated, report, support
from wheelsmith.index import upload
from wheelsmith.recipes import repos
from wheelsmith.recipes.model import load_recipe
from wheelsmith.toolchain.profile import default_profile_name, load_profiles, torch_profiles

matrix_option = click.option("--matrix", "matrix_file", type=click.Path(path_type=Path),
                             help="The matrix file (default: matrix.yaml next to recipes/).")


def _cells(matrix_file: Path | None) -> list[matrix.Cell]:
    root = locations.project_root()
    profiles = {p.name: p for p in load_profiles(locations.profile_dirs())}
    return matrix.load(matrix_file or root / "matrix.yaml", repos.recipe_file,
                       default_toolchain=default_profile_name(locations.profile_dirs()),
                       default_python=f"{sys.version_info[0]}.{sys.version_info[1]}",
                       profiles=profiles)


@main.command("matrix")
@matrix_option
@recipes_option
@click.option("--format", "fmt", type=click.Choice(["table", "json", "github"]),
              default="table", show_default=True)
@click.option("--shards", type=Number(minimum=1, maximum=256, integer=True), default=4,
              show_default=True,
              help="With --format github: how many runners to split each Python's cells over.")
def matrix_command(matrix_file: Path | None, fmt: str, shards: int) -> None:
    """Expand the build matrix into cells (recipe x version x toolchain x archs x Python x
    platform)."""

    cells = _cells(matrix_file)
    if fmt == "json":
        emit_json([c.as_dict() for c in cells])
    elif fmt == "github":
        click.echo(matrix.github_matrix(cells, shards))
    else:
        for cell in cells:
            click.echo(cell.id)


@main.command("nightly")
@matrix_option
@recipes_option
@click.option("--python", "python", metavar="X.Y",
              help="Only the cells for this Python (as a `matrix --format github` entry says).")
@click.option("--shard", help="Build only shard I/N of the cells (0-based), e.g. 0/4; with "
                               "--python, of that Python's cells.")
@click.option("--report", "report_dir", type=click.Path(path_type=Path),
              default=Path("build/nightly"), show_default=True,
              help="Where nightly.json, nightly.md and junit.xml go.")
@click.option("--where", "where", metavar="TEXT",
              help="Where this runs, as the reports and the support table name it (e.g. "
                   "'an H200, 16 cores'; default: this machine's cores and CPU, '2-core x86_64').")
@click.option("--publish/--no-publish", default=True, show_default=True,
              help="Publish each wheel that passed to --index.")
@click.option("--published", "published", multiple=True, metavar="URL",
              callback=lambda _c, _p, v: _published(v),
              help="A published index's simple API with {channel} (devpi: http://HOST/USER/"
                   "{channel}/+simple/; an export: https://HOST/{channel}/simple/), read over "
                   "HTTP: a cell whose wheel every such index lists is skipped. Repeatable.")
@index_option
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("wheelhouse"),
              show_default=True)
@click.option("--work-dir", type=click.Path(path_type=Path), default=Path("build/wheelsmith"),
              show_default=True)
@click.option("--jobs", type=JOBS)
@click.option("--compile-cache", metavar="off|DIR|URL",
              help="As for build: share compiled objects between runners (redis://...).")
@runner_option
@click.option("--cell-time-limit", type=SECONDS, metavar="SECONDS",
              help="Stop a cell's build after SECONDS: it is reported partial (N/M objects) "
                   "and resumes from them on the next run with the same --work-dir.")
@click.option("--cell-drain", type=DRAIN_SECONDS, metavar="SECONDS", help=DRAIN_HELP)
def nightly_command(matrix_file: Path | None, python: str | None, shard: str | None,
                    report_dir: Path, where: str | None, publish: bool, published: tuple[str, ...],
                    index_dir: Path, out_dir: Path,
                    work_dir: Path, jobs: int | None, compile_cache: str | None,
                    runner: str, cell_time_limit: float | None,
                    cell_drain: float | None) -> None:
    """Build every cell that is missing or changed; one failure never stops the others."""

    check_drain(("--cell-time-limit", cell_time_limit), ("--cell-drain", cell_drain))
    writable(("--out", out_dir), ("--work-dir", work_dir), ("--report", report_dir),
             *([("--index", index_dir)] if publish else []))
    cells = [c for c in _cells(matrix_file) if python in (None, c.python)]
    if python is not None and not cells:
        raise UsageError(f"--python {python}: the matrix has no cells for that Python")
    cells = matrix.shard(cells, shard)
    progress = console.progress()
    progress.items([c.id for c in cells], "finished", "not started", stage="cell")
    flow_story(progress, out=out_dir, work=work_dir, index=index_dir if publish else None)
    progress.note = f"no report was written to {report_dir}"
    settings = nightly.Settings(out_dir=out_dir, work_dir=work_dir, index_dir=index_dir,
                                publish=publish, jobs=jobs, compile_cache=compile_cache,
                                runner=runner, time_limit=cell_time_limit, drain=cell_drain,
                                published=published)
    with console.TerminalReporter() as reporter:
        results = nightly.run(cells, settings, reporter)
    written = report.write(report_dir, results, shard=shard, where=where)
    counts = report.summary(results)
    partial = f", {counts['partial']} partial" if counts["partial"] else ""
    click.echo(f"{counts['built']} built, {counts['skipped']} skipped{partial}, "
               f"{counts['failed']} failed; reports: {', '.join(str(p) for p in written)}")
    failed = [r for r in results if r.status == "failed"]
    if failed:
        raise NightlyError(f"{len(failed)} of {len(results)} cell(s) failed",
                           findings=[f"{r.cell.id}: {r.reason}" for r in failed])


def _published(values: tuple[str, ...]) -> tuple[str, ...]:
    for url in values:
        upload.check_url("--published", url)
        if upload.CHANNEL not in url:
            raise UsageError(f"--published {url} names no channel",
                             hint="put {channel} where the channel's index is, e.g. "
                                  "http://HOST/USER/{channel}/+simple/")
    return values


@main.command("support-table")
@click.argument("reports", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--readme", type=click.Path(path_type=Path, dir_okay=False, exists=True),
              help=f"Rewrite the table between the {support.BEGIN} and {support.END} lines of "
                   "this file in place (default: print it).")
def support_table_command(reports: tuple[Path, ...], readme: Path | None) -> None:
    """Render the support table (recipes x toolchain profiles) from nightly reports: each
    REPORT a nightly.json, a nightly's --report directory, or a directory of reports."""

    table = support.render_files(reports)
    if readme is None:
        click.echo(table, nl=False)
        return
    changed = support.rewrite_file(readme, table)
    click.echo(f"{readme}: the support table {'rewritten' if changed else 'was already this'}")


@main.command("outdated")
@recipes_option
@json_option
def outdated_command(as_json: bool) -> None:
    """Recipes whose package has newer releases, and torch releases newer than every profile."""
    rows: list[dict[str, Any]] = []
    for entry in repos.in_use():
        recipe = load_recipe(entry.file, display(entry.file))
        found = outdated.newer_than(recipe.name, Version(recipe.latest.version))
        if found:
            rows.append({"kind": "recipe", "name": recipe.name, "current": found.current,
                         "newer": list(found.newer)})
    newest_torch = max(p.torch for p in torch_profiles(load_profiles(locations.profile_dirs())))
    torch = outdated.newer_than("torch", newest_torch)
    if torch:
        rows.append({"kind": "toolchain", "name": "torch", "current": torch.current,
                     "newer": list(torch.newer)})
    if as_json:
        emit_json(rows)
        return
    if not rows:
        click.echo("everything is current")
    for row in rows:
        todo = ("add a recipe version" if row["kind"] == "recipe" else
                f"add a profile: wheelsmith toolchain new --torch {row['newer'][-1]}")
        click.echo(f"{row['name']:<24} {row['current']:<10} -> {', '.join(row['newer'])}  "
                   f"({todo})")
