"""The command line: a thin layer over the parts (build/, index/, doctor/, fleet/, ...).

Every WheelsmithError is turned into a message and its exit code here, in one place
(`Main.invoke`); domain code never imports click. The commands live in one module per area
(build, install, doctor, nightly, index, toolchain, image, recipe); this module holds the
group and shared options, console.py the rendering.
"""

from __future__ import annotations

import errno
import json
import os
import re
import urllib.parse
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click
from packaging.version import InvalidVersion, Version

from wheelsmith import __version__, locations, numbers
from wheelsmith.arch import ArchParseError, ArchSet
from wheelsmith.builder.buildenv import protection
from wheelsmith.cli import console, interrupts
from wheelsmith.errors import UsageError, WheelsmithError, machine_error
from wheelsmith.recipes import repos
from wheelsmith.toolchain.target import refuse_free_threaded
from wheelsmith.untrusted import ENV_NAME_RE
from wheelsmith.untrusted.addresses import given_url
from wheelsmith.untrusted.text import clip


class Main(click.Group):
    """Catches WheelsmithError once, renders it, and exits with its code; the machine's own
    errors (a full disk, a read-only file system, a file in the way, ...) the same way. An
    interrupt raises KeyboardInterrupt only in here (`interrupts.raised`)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            with console.inert_output(), console.unraisable_to_log(), interrupts.raised():
                return self._invoke(ctx)
        except KeyboardInterrupt:  # one that came as the command ended, past its handlers
            pass
        return _interrupted(ctx)

    def _invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except WheelsmithError as error:
            _exit_with(ctx, error)
        except OSError as error:
            mapped = machine_error(error, locations.cache_dir())
            if mapped is None:
                raise
            _exit_with(ctx, mapped)
        except KeyboardInterrupt:
            pass
        # out of the handler: the interrupted frames are freed here, while the unraisable
        # hook is ours (an object whose constructor the signal cut short fails in __del__),
        # and not kept alive as the exit's context until the interpreter's shutdown
        return _interrupted(ctx)


def _interrupted(ctx: click.Context) -> NoReturn:
    interrupts.say(console.progress().said())
    ctx.exit(interrupts.INTERRUPTED)


def entry() -> NoReturn:
    """The `wheelsmith` command (`wheelsmith.__main__.run` blocked Ctrl-C and SIGTERM before
    any import): `main`, with the interrupts held outside Main.invoke (`interrupts.held`)."""
    interrupts.held(lambda: main(prog_name="wheelsmith"))


def _exit_with(ctx: click.Context, error: WheelsmithError) -> None:
    if ctx.meta.get("wheelsmith.json", False):
        click.echo(json.dumps(console.error_json(error), indent=2))
    console.render_error(error)
    ctx.exit(error.exit_code)


def writable(*places: tuple[str, Path], cache: bool = True) -> None:
    """Before any work starts: each place (its option, its directory) must be a directory
    this user can write, or one that can be made; with `cache`, wheelsmith's cache too. The
    first that is not is a FileSystemError naming the option, the path and what to do."""
    root = locations.cache_dir()
    _first_refusal([*places, *([("wheelsmith's cache", root)] if cache else [])], _unwritable)


def directories(*places: tuple[str, Path]) -> None:
    """Before a command reads them: each place that is there must be a directory (a file,
    a FIFO or a device is named as what it is, with its option); a missing one is the
    command's to judge."""
    _first_refusal(places, _in_the_way)


def _first_refusal(places: Iterable[tuple[str, Path]],
                   why: Callable[[Path], OSError | None]) -> None:
    root = locations.cache_dir()
    for option, path in places:
        refused = why(path.absolute())
        if refused is not None:
            error = machine_error(refused, root, given=(option, path))
            assert error is not None
            raise error


def _existing(path: Path) -> Path:
    """`path`, or the nearest of its ancestors that is there."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _in_the_way(path: Path) -> OSError | None:
    """The OSError making `path` a directory would raise when it, or a directory it needs,
    is there and no directory; None when it is not."""
    existing = _existing(path)
    if existing.is_dir():
        return None
    return OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(existing))


def _unwritable(path: Path) -> OSError | None:
    """Why `path` cannot be (made into) a directory this user writes, as the OSError writing
    there would raise; None when it can."""
    refused = _in_the_way(path)
    if refused is not None:
        return refused
    existing = _existing(path)
    if os.access(existing, os.W_OK | os.X_OK):
        return None
    code = errno.EROFS if os.statvfs(existing).f_flag & os.ST_RDONLY else errno.EACCES
    return OSError(code, os.strerror(code), str(existing))


def flow_story(progress: console.Progress, *, out: Path, work: Path,
               index: Path | None = None) -> None:
    """What an interrupt leaves, stage by stage, in the one flow build -> publish -> install
    (deliver.py) that build, install and nightly run."""
    building = (f"nothing reached --out {out}; a build keeps the objects it finished in "
                f"{work}, and the same command resumes from them")
    published = f", then published to {index} (`wheelsmith index check --index {index}` " \
                "says whether it was)" if index is not None else ""
    progress.stopping = progress.fresh = building
    progress.after.update({
        "toolchain": building, "fetch": building, "compile": building,
        "up to date": f"nothing was built: the wheel in --out {out} is up to date",
        "stamp": f"the wheel was being written to --out {out} (it is there whole or not at "
                 f"all){published}",
        "publish": f"the wheel is in --out {out} and published to {index}",
        "install": f"the wheel is in --out {out}; pip was installing it (run the same command "
                   "again to finish)"})


class Number(click.ParamType[float, Any]):
    """A number that its option's use can take (numbers.Bounds: finite and within [minimum,
    maximum]): anything else is refused in one line naming the option (click's usage error,
    exit 2), before the command does anything."""

    def __init__(self, *, minimum: float, maximum: float, integer: bool = False,
                 unit: str = "", most: str = "") -> None:
        self.bounds = numbers.Bounds(minimum, maximum, integer, unit, most)
        self.name = "integer" if integer else "number"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None
                ) -> float:
        try:
            return self.bounds.parse(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


SECONDS_MAX = 30 * 24 * 3600.0
SECONDS = Number(minimum=1, maximum=SECONDS_MAX, unit="seconds", most="30 days")  # limits
DRAIN_SECONDS = Number(minimum=0, maximum=SECONDS_MAX, unit="seconds", most="30 days")
JOBS = Number(minimum=1, maximum=4096, integer=True)


def check_drain(limit: tuple[str, float | None], drain: tuple[str, float | None]) -> None:
    """A drain is the last part of its limit: refused without one, and when it is not
    shorter (the limit would pass and cut nothing), in one line naming both options."""
    (limit_option, seconds), (drain_option, draining) = limit, drain
    if draining is None:
        return
    if seconds is None:
        raise click.UsageError(f"{drain_option} {draining:.12g} needs {limit_option}: a drain is "
                               f"the last part of a time limit")
    if draining >= seconds:
        raise click.UsageError(f"{drain_option} {draining:.12g} is not shorter than "
                               f"{limit_option} {seconds:.12g}: the drain is the last part of "
                               "the limit (0 cuts at the limit)")


DRAIN_HELP = ("The last SECONDS of the time limit start no compile, so those in flight can "
              "finish and count for the next run (default: a quarter of the limit, at most "
              "15 minutes; 0: cut at the limit).")


def parse_env(values: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """`--env KEY=VALUE` values; one without '=', or naming a variable wheelsmith sets
    itself (buildenv.protection), is an error naming it."""
    pairs = []
    for value in values:
        key, sep, text = value.partition("=")
        if not sep or not ENV_NAME_RE.fullmatch(key):
            raise UsageError(f"--env: {json.dumps(value)} is not KEY=VALUE",
                             hint="e.g. --env NVCC_APPEND_FLAGS=--split-compile=0")
        protected = protection(key)
        if protected is not None:
            raise protected.error()
        pairs.append((key, text))
    return tuple(sorted(pairs))


_NAME_RE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")  # PEP 508's names


class Spec(click.ParamType[tuple[str, str | None], Any]):
    """The argument `NAME[==VERSION]` of build, install and recipe new (parse_spec): a bad one
    is wheelsmith's usage error (exit 4), raised before the command does anything."""

    name = "spec"

    def convert(self, value: Any, param: click.Parameter | None,  # noqa: ARG002 - click's
                ctx: click.Context | None) -> tuple[str, str | None]:  # noqa: ARG002
        return value if isinstance(value, tuple) else parse_spec(str(value))


SPEC = Spec()


def parse_spec(text: str) -> tuple[str, str | None]:
    """`NAME[==VERSION]` as the user typed it, for build, install and recipe new: a name by
    PEP 508's rule and a PEP 440 version, or one line naming what is wrong (exit 4)."""
    name, sep, version = text.partition("==")
    if not _NAME_RE.fullmatch(name):
        raise UsageError(f"'{clip(text, 80)}' is not a package name (NAME or NAME==VERSION)",
                         hint="e.g. causal-conv1d or causal-conv1d==1.7.0")
    if not sep:
        return name, None
    try:
        Version(version)
    except InvalidVersion:
        raise UsageError(f"'{clip(text, 80)}': '{clip(version, 60)}' is not a version (PEP 440)",
                         hint=f"e.g. {name}==1.7.0; an arch goes in --arch") from None
    return name, version


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
    if value.lower().startswith(("http://", "https://")):
        return given_url(value, "--index", hint=INDEX_URL_HINT)
    try:
        parts = urllib.parse.urlsplit(value)
    except ValueError:  # an unclosed [IPv6 host of another scheme
        parts = urllib.parse.urlsplit("")
    if parts.scheme == "file" and parts.netloc in ("", "localhost") and parts.path.startswith("/"):
        return value
    if not parts.scheme and value and Path(value).is_dir():
        return Path(value).resolve().as_uri()
    raise UsageError(f"--index: '{value}' is not an http://, https:// or file:// URL, nor an "
                     "existing directory", hint=INDEX_URL_HINT)


def _index_url(_: click.Context, __: click.Parameter, value: str) -> str:
    return parse_index_url(value)


Decorated = TypeVar("Decorated", bound=Callable[..., Any])


def index_url_option(help_text: str) -> Callable[[Decorated], Decorated]:
    """`--index URL` of the commands that read an index (install, doctor): checked once, here."""
    return click.option("--index", "index_url", default="http://127.0.0.1:8080",
                        show_default=True, metavar="URL", callback=_index_url,
                        help=f"{help_text} An http://, https:// or file:// URL (`wheelsmith "
                             "serve`, or an `index export` tree on any static server: PEP 691 "
                             "JSON or PEP 503 HTML pages); an existing directory is read as its "
                             "file:// URL.")


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
         "'+PTX' adds PTX, 'f' a family target (12.0f), 'a' an arch-specific one. Default: "
         "the recipe's.")


@click.group(cls=Main)
@click.version_option(__version__, prog_name="wheelsmith")
@click.option("-v", "--verbose", count=True, help="-v: commands and details; -vv: all output.")
def main(verbose: int) -> None:
    """Build verified CUDA-extension wheels for Blackwell (sm_120, sm_100) and Hopper."""
    console.setup_logging(verbose)






def display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)
