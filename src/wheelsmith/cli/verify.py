"""`verify`: a wheel's device code, release and binaries; its torch range; its rebuild."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import click

from wheelsmith.arch import ArchSet
from wheelsmith.builder import audit, finish
from wheelsmith.builder.linking import env_of_python, env_of_toolchain
from wheelsmith.builder.rebuild import EnvEntry, judge_env, plan_rebuild, recorded_archs
from wheelsmith.builder.rebuild import rebuild as rebuild_wheel
from wheelsmith.builder.torchrange import range_of
from wheelsmith.builder.verify import Release
from wheelsmith.cli import console
from wheelsmith.cli._common import (
    emit_json,
    json_option,
    main,
    parse_archs,
    parse_env,
    recipes_option,
    runner_option,
    writable,
)
from wheelsmith.cli.build import echo_device_code
from wheelsmith.errors import UsageError, VerifyError
from wheelsmith.untrusted.provenance import Provenance, read_provenance


@main.command()
@click.argument("wheels", nargs=-1, required=True,
                type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option("--arch", "archs", multiple=True, metavar="ARCHS",
              help="Compute capability to check, e.g. 12.0; repeat or use '9.0;12.0'; '+PTX' "
                   "adds PTX. Default: the archs a wheelsmith wheel's provenance records "
                   "(required for other wheels).")
@click.option("--host-only", multiple=True, metavar="GLOB",
              help="Shared objects allowed to carry no device code. Default: the host_only "
                   "globs a wheelsmith wheel's provenance records (none for other wheels).")
@click.option("--rebuild", is_flag=True,
              help="Build each WHEEL again from its provenance (no compile cache) and compare "
                   "sha256; a mismatch names the members that differ. --arch is not needed.")
@click.option("--env", "env", multiple=True, metavar="NAME=VALUE",
              help="With --rebuild: apply a variable a wheel's provenance sets that is not a "
                   "build knob (the same value; nothing is added to what it sets).")
@click.option("--work-dir", type=click.Path(path_type=Path), default=Path("build/wheelsmith"),
              show_default=True, help="With --rebuild: sources, logs and the rebuilt wheel.")
@click.option("--python", "python", type=click.Path(path_type=Path, exists=True,
                                                    dir_okay=False), metavar="PATH",
              help="The Python environment whose torch and CUDA libraries each wheel's "
                   "undefined symbols are resolved against. Default: the toolchain its "
                   "provenance names, where that toolchain's venv is in the cache.")
@click.option("--torch-range", is_flag=True,
              help="Prove the torch releases each wheel runs under: its torch symbols checked "
                   "against each candidate torch's exports (pip downloads that torch once; its "
                   "export list is cached by the wheel's sha256), then its modules imported and "
                   "its recipe's smoke test run under each torch where all resolve. Minutes "
                   "per torch.")
@click.option("--torch", "torches", multiple=True, metavar="MINOR",
              help="With --torch-range: a torch minor to try (2.13); repeatable. Default: the "
                   "toolchain profiles' minors, those pip sees that are newer, and the one "
                   "just older.")
@runner_option
@recipes_option
@json_option
def verify(wheels: tuple[Path, ...], archs: tuple[str, ...], host_only: tuple[str, ...],
           rebuild: bool, env: tuple[str, ...], work_dir: Path, python: Path | None,
           torch_range: bool, torches: tuple[str, ...], runner: str, as_json: bool) -> None:
    """Check that each WHEEL carries SASS for exactly --arch (and PTX iff +PTX); no recipe
    is read. With --rebuild, check that building it again gives the same bytes."""
    if rebuild:
        writable(("--work-dir", work_dir))
        console.progress().stopping = (f"nothing was compared; the rebuild's work directory "
                                       f"{work_dir} keeps the objects it finished")
        _verify_rebuild(wheels, work_dir, runner, parse_env(env), as_json)
        return
    if torches and not torch_range:
        raise click.UsageError("--torch goes with --torch-range: it names a torch to try")
    if env:
        raise click.UsageError("--env goes with --rebuild: it accepts a variable the wheel's "
                               "provenance sets for the rebuild")
    results = []
    given = env_of_python(python) if python is not None else None
    for wheel in wheels:
        recorded = read_provenance(wheel)
        requested, allowed = _verify_request(wheel, recorded, archs, host_only)
        release = Release(recorded.recipe, recorded.version) if recorded is not None and \
            recorded.recipe and recorded.version else None
        torch_env = given or (env_of_toolchain(recorded.toolchain, recorded.python,
                                               recorded.libraries)
                              if recorded is not None else None)
        inventory, audited = finish.verify(
            wheel, requested, python=Path(sys.executable), host_only=allowed, release=release,
            env=torch_env, no_env=NO_TORCH_ENV)
        environment = recorded.extra_env if recorded is not None else None
        proven = range_of(wheel, recorded, torch_env, requested, torches=torches,
                          work_dir=work_dir) \
            if torch_range else None
        results.append({"wheel": str(wheel), "archs": str(requested), "host_only": list(allowed),
                        "torch_range": proven.as_dict() if proven else None,
                        "device_code": [d.as_dict() for d in inventory],
                        "audit": audited.as_dict(),
                        "release": dataclasses.asdict(release) if release else None,
                        "environment": environment})
        if not as_json:
            click.echo(f"ok: {wheel.name} carries exactly {requested}")
            click.echo(f"  the release its provenance records: {release.package} "
                       f"{release.version}" if release else
                       "  release: not checked (no wheelsmith provenance records one)")
            for item in inventory:
                echo_device_code(item.as_dict(), err=False)
            for line in audit.describe(audited) + (proven.describe() if proven else []):
                click.echo(f"  {line}")
            if environment is not None:
                _echo_env("  environment from its provenance", judge_env(environment, {}),
                          err=False)
    if as_json:
        emit_json({"ok": True, "wheels": results})


NO_TORCH_ENV = ("no torch environment to resolve them against: --python PATH names one; by "
                "default the toolchain its provenance names, whose venv is not here")


def _verify_request(wheel: Path, recorded: Provenance | None, archs: tuple[str, ...],
                    host_only: tuple[str, ...]) -> tuple[ArchSet, tuple[str, ...]]:
    """--arch and --host-only, else what the wheel's provenance records."""
    requested = parse_archs(archs) or (recorded_archs(wheel.name, recorded)
                                       if recorded and recorded.archs else None)
    if requested is None:
        raise click.UsageError(f"--arch is required: {wheel.name} has no wheelsmith provenance "
                               "that records its archs; e.g. --arch 12.0")
    return requested, host_only or (recorded.host_only if recorded else ())


def _echo_env(heading: str, entries: list[EnvEntry], *, err: bool) -> None:
    """The environment a wheel's provenance sets, each variable with what a rebuild does
    with it."""
    if not entries:
        click.echo(f"{heading}: none", err=err)
        return
    click.echo(f"{heading} (what a rebuild does with it):", err=err)
    indent = heading[:len(heading) - len(heading.lstrip())]
    for entry in entries:
        click.echo(f"{indent}  {entry.describe()}", err=err)


def _verify_rebuild(wheels: tuple[Path, ...], work_dir: Path, runner: str,
                    accepted: tuple[tuple[str, str], ...], as_json: bool) -> None:
    """Every wheel's rebuild planned, its environment shown and judged, before any builds."""
    planned = [plan_rebuild(wheel, accepted=dict(accepted), work_dir=work_dir.resolve(),
                            runner_name=runner) for wheel in wheels]
    for each in planned:
        _echo_env(f"{each.wheel.name}: environment from its provenance", list(each.env),
                  err=True)
    for each in planned:
        if (refused := each.refusal()) is not None:
            raise refused
    carried = {entry.name for each in planned for entry in each.env}
    for name, _ in accepted:
        if name not in carried:
            raise UsageError(f"--env {name}: no wheel's provenance sets it; a rebuild applies "
                             "exactly what a provenance sets, nothing added",
                             hint="--env only accepts a variable a wheel's provenance sets, "
                                  "with the same value")
    results = []
    for each in planned:
        with console.TerminalReporter() as reporter:
            compared = rebuild_wheel(each, report=reporter)
        wheel = each.wheel
        if not compared.identical:
            raise VerifyError(
                f"{wheel.name} differs from its rebuild (sha256 {compared.sha256[:16]}, "
                f"rebuilt {compared.rebuilt_sha256[:16]})", findings=compared.differences,
                hint=f"the rebuilt wheel is {compared.rebuilt}; a member whose content differs "
                     "was changed after the build, or the build is not reproducible there")
        results.append({"wheel": str(wheel), "sha256": compared.sha256,
                        "rebuilt": str(compared.rebuilt),
                        "environment": dict(each.request.env)})
        if not as_json:
            click.echo(f"identical: {wheel.name} rebuilt to the same sha256 {compared.sha256}")
    if as_json:
        emit_json({"ok": True, "wheels": results})
