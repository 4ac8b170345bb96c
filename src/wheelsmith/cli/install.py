"""`install`: the wheel for the user's environment, from the index or built for it."""

from __future__ import annotations

import time
from pathlib import Path

import click

from wheelsmith import install
from wheelsmith.builder.request import BuildRequest
from wheelsmith.cli import console
from wheelsmith.cli._common import (
    JOBS,
    SPEC,
    arch_option,
    emit_json,
    flow_story,
    index_url_option,
    json_option,
    main,
    parse_archs,
    recipes_option,
    writable,
)
from wheelsmith.toolchain import target


@main.command("install")
@click.argument("recipe", metavar="RECIPE[==VERSION]", type=SPEC)
@recipes_option
@click.option("--python", "python", type=click.Path(path_type=Path), required=True,
              help="The environment to install into (its Python, torch, CUDA and GPU decide "
                   "which wheel fits).")
@index_url_option("Base URL of the wheelsmith index; the channel matching the environment's "
                  "torch and CUDA is read below it.")
@arch_option
@click.option("--publish", "publish_to", type=click.Path(), is_flag=False, flag_value="",
              default=None, metavar="[DIR]",
              help="When a wheel has to be built, publish it to this index directory "
                   "(default: the --index directory when it is file://; over HTTP, name the "
                   "directory its server serves); --index must then serve it.")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("wheelhouse"),
              show_default=True, help="Where a wheel built on a miss goes.")
@click.option("--work-dir", type=click.Path(path_type=Path), default=Path("build/wheelsmith"),
              show_default=True)
@click.option("--jobs", type=JOBS, help="MAX_JOBS for a build on a miss.")
@click.option("--compile-cache", metavar="off|DIR|URL", help="As for build.")
@click.option("--runner", type=click.Choice(["host", "podman", "docker", "auto"]),
              default="host", show_default=True, help="Where a build on a miss runs.")
@json_option
def install_command(recipe: tuple[str, str | None], python: Path, index_url: str,
                    archs: tuple[str, ...], publish_to: str | None, out_dir: Path,
                    work_dir: Path, jobs: int | None, compile_cache: str | None, runner: str,
                    as_json: bool) -> None:
    """Install RECIPE into the --python environment: the index's wheel that fits it (sha256
    pinned), or one built for it when the index has none."""
    name, version = recipe
    publish_dir = Path(publish_to) if publish_to else None
    writable(("--out", out_dir), ("--work-dir", work_dir),
             *([("--publish", publish_dir)] if publish_dir else []))
    progress = console.progress()
    flow_story(progress, out=out_dir, work=work_dir, index=publish_dir)
    progress.after["index"] = (f"pip was installing a wheel into {python}, or a build of a "
                               "missing one was starting: run the same command again")
    started = time.monotonic()
    with console.TerminalReporter() as reporter:
        environment = target.probe(python, gpu=True)
        reporter.stage("target", describe(environment))
        request = install.InstallRequest(
            recipe=name, version=version or None, python=python, index_url=index_url,
            archs=parse_archs(archs), publish=publish_to is not None,
            publish_to=publish_dir,
            build=BuildRequest(recipe=name, out_dir=out_dir, work_dir=work_dir, jobs=jobs,
                               compile_cache=compile_cache, runner=runner))
        done = install.install(request, environment, reporter)
        reporter.stage("installed", f"{done.said()}; imports "
                                    f"{', '.join(done.imports) or 'nothing'}")
    if as_json:
        emit_json({"ok": True, "wheel": done.wheel, "source": done.source,
                   "channel": done.channel_url, "python": str(python),
                   "imports": list(done.imports), "published": done.published,
                   "seconds": round(time.monotonic() - started, 1)})
        return
    click.echo(done.wheel)


def describe(environment: target.Target) -> str:
    gpu = environment.gpu.sm if environment.gpu else "no GPU"
    return (f"{environment.python}: Python {environment.version}, torch {environment.torch}, "
            f"CUDA {environment.torch_cuda}, {gpu}")
