"""The command line: a thin layer over the parts (build/, index/, doctor/, fleet/, ...).

Every WheelsmithError is turned into a message and its exit code here, in one place
(`Main.invoke`); domain code never imports click. The commands live in one module per area
(build, install, doctor, nightly, index, toolchain, image, recipe); this module holds the
group and shared options, console.py the rendering.
"""

from __future__ import annotations

import json
import re
import signal
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from wheelsmith import __version__, locations
from wheelsmith.arch import ArchParseError, ArchSet
from wheelsmith.build.buildenv import ENV_NAME, protection
from wheelsmith.cli import console
from wheelsmith.errors import UsageError, WheelsmithError, disk_full
from wheelsmith.recipes import repos
from wheelsmith.toolchain.target import refuse_free_threaded

INTERRUPTED = 130  # 128 + SIGINT, as shells report it


class Main(click.Group):
    """Catches WheelsmithError once, renders it, and exits with its code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except WheelsmithError as error:
            _exit_with(ctx, error)
        except OSError as error:
            full = disk_full(error, locations.cache_dir())
            if full is None:
                raise
            _exit_with(ctx, full)
        except KeyboardInterrupt:
            click.echo("\ninterrupted: nothing was written to the output; partial work is in "
                       "the work directory", err=True)
            ctx.exit(INTERRUPTED)


def _exit_with(ctx: click.Context, error: WheelsmithError) -> None:
    if ctx.meta.get("wheelsmith.json", False):
        click.echo(json.dumps(console.error_json(error), indent=2))
    console.render_error(error)
    ctx.exit(error.exit_code)


DRAIN_HELP = ("The last SECONDS of the time limit start no compile, so those in flight can "
              "finish and count for the next run (default: a quarter of the limit, at most "
              "15 minutes; 0: cut at the limit).")


def parse_env(values: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """`--env KEY=VALUE` values; one without '=', or naming a variable wheelsmith sets
    itself (buildenv.protection), is an error naming it."""
    pairs = []
    for value in values:
        key, sep, text = value.partition("=")
        if not sep or not ENV_NAME.fullmatch(key):
            raise UsageError(f"--env: {json.dumps(value)} is not KEY=VALUE",
                             hint="e.g. --env NVCC_APPEND_FLAGS=--split-compile=0")
        protected = protection(key)
        if protected is not None:
            raise protected.error()
        pairs.append((key, text))
    return tuple(sorted(pairs))


def parse_python(value: str | None) -> dict[str, Any]:
    """`--python` as BuildRequest fields. A path names a target environment; `X.Y` only a
    Python version (python3.X here, or the image's Python in a container build)."""
    if value is None:
        return {}
    refuse_free_threaded(value)
    if re.fullmatch(r"3\.\d+", value):
        return {"python_version": value}
    return {"python": Path(value), "target": Path(value)}


def parse_archs(values: tuple[str, ...]) -> ArchSet | None:
    """`--arch` values to an ArchSet (None when none were given); errors name the value."""
    if not values:
        return None
    try:
        return ArchSet.parse(values)
    except ArchParseError as exc:
        raise UsageError(f"--arch: {exc.message}", hint=exc.hint) from exc


INDEX_URL_HINT = ("give the URL `wheelsmith serve` listens on, e.g. --index "
                  "http://127.0.0.1:8080, or an index directory, e.g. --index "
                  "file:///path/to/index")


def parse_index_url(value: str) -> str:
    """An `--index` value as a URL: http://HOST..., https://HOST... or file:///PATH; an
    existing directory becomes its file:// URL. Anything else is an error naming the value."""
    parts = urllib.parse.urlsplit(value)
    if parts.scheme in ("http", "https") and parts.hostname and _port_ok(parts):
        return value
    if parts.scheme == "file" and parts.netloc in ("", "localhost") and parts.path.startswith("/"):
        return value
    if not parts.scheme and value and Path(value).is_dir():
        return Path(value).resolve().as_uri()
    raise UsageError(f"--index: '{value}' is not an http://, https:// or file:// URL, nor an "
                     "existing directory", hint=INDEX_URL_HINT)


def _port_ok(parts: urllib.parse.SplitResult) -> bool:
    try:
        parts.port  # noqa: B018 - reading it checks it
    except ValueError:
        return False
    return True


def _index_url(_: click.Context, __: click.Parameter, value: str) -> str:
    return parse_index_url(value)


Decorated = TypeVar("Decorated", bound=Callable[..., Any])


def index_url_option(help_text: str) -> Callable[[Decorated], Decorated]:
    """`--index URL` of the commands that read an index (install, doctor): checked once, here."""
    return click.option("--index", "index_url", default="http://127.0.0.1:8080",
                        show_default=True, metavar="URL", callback=_index_url,
                        help=f"{help_text} An http://, https:// or file:// URL; an existing "
                             "directory is read as its file:// URL.")


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True))


def _json_flag(ctx: click.Context, _: click.Parameter, value: bool) -> bool:
    ctx.meta["wheelsmith.json"] = value
    return value


json_option = click.option("--json", "as_json", is_flag=True, callback=_json_flag,
                           is_eager=True, help="Print a machine-readable result on stdout.")
index_option = click.option("--index", "index_dir", type=click.Path(path_type=Path),
                            default=Path("index"), show_default=True,
                            help="The local index directory.")
runner_option = click.option(
    "--runner", type=click.Choice(["host", "podman", "docker", "auto"]), default="host",
    show_default=True, help="Where to compile: here, or inside the pinned image of the "
                            "toolchain (auto: a working engine, else here).")


def _recipe_repos(_: click.Context, __: click.Parameter, values: tuple[Path, ...]) -> None:
    repos.use_option([repos.check_user_repo(value, repos.OPTION) for value in values])


recipes_option = click.option(
    "--recipes", multiple=True, metavar="DIR", type=click.Path(path_type=Path),
    callback=_recipe_repos, expose_value=False,
    help="A recipe repository (DIR/recipes/NAME.yaml, DIR/patches/NAME/VERSION/), searched "
         "before $WHEELSMITH_RECIPES and the built-in recipes; repeatable, the first match "
         "wins.")
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
    signal.signal(signal.SIGTERM, _terminated)  # clean up (containers, temp files) as on Ctrl-C


def _terminated(*_: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one is enough: let the clean-up finish
    raise KeyboardInterrupt




def display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)
