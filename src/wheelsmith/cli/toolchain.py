"""`toolchain list`, `remove`, `prune`, `ensure`, `requirements`, `new`."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import click
from packaging.version import InvalidVersion, Version

from wheelsmith import locations
from wheelsmith.cli import console
from wheelsmith.cli._common import display, emit_json, json_option, main, writable
from wheelsmith.errors import ToolchainError, UsageError
from wheelsmith.toolchain import cached, resolve, select
from wheelsmith.toolchain.profile import SYSTEM, Profile, default_profile_name, load_profiles
from wheelsmith.toolchain.venv import MARKER, venv_root


@main.group("toolchain")
def toolchain_group() -> None:
    """The pinned build toolchains (profiles in toolchains/)."""


@toolchain_group.command("list")
@json_option
def toolchain_list(as_json: bool) -> None:
    """List the profiles and the venvs made of them here (every Python), each with its size
    on disk; venvs of pins no profile has now are `stale` (`toolchain prune` removes them)."""
    directories = locations.profile_dirs()
    profiles = load_profiles(directories)
    venvs = cached.cached(locations.cache_dir(), profiles)
    rows = _list_rows(profiles, venvs)
    if as_json:
        emit_json(rows)
        return
    default = default_profile_name(directories)
    for row in rows:
        mark = "*" if row["name"] == default else " "
        head = (f"{mark} {row['name']:<20} torch {row['torch'] or '-':<8} "
                f"CUDA {row['cuda'] or '-':<5}")
        if not row["venvs"]:
            click.echo(f"{head} (no venv here)")
        for venv in row["venvs"]:
            click.echo(f"{head} py{venv['python']:<5} {cached.human(venv['size_bytes']):>8}  "
                       f"{_standing(venv)}{display(Path(venv['path']))}")
            head = " " * len(head)
    total = sum(v.size for v in venvs)
    click.echo(f"{cached.human(total)} in {display(cached.root(locations.cache_dir()))}"
               + (f"; {cached.human(sum(v.size for v in cached.removable(venvs)))} of it "
                  "`wheelsmith toolchain prune` removes" if any(cached.removable(venvs)) else ""))


def _list_rows(profiles: list[Profile], venvs: list[cached.CachedVenv]
               ) -> list[dict[str, Any]]:
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    rows: list[dict[str, Any]] = []
    for profile in profiles:
        venv = venv_root(profile, version, locations.cache_dir())
        rows.append({"name": profile.name, "torch": str(profile.torch_pin or "-"),
                     "cuda": str(profile.cuda), "key": profile.key(version),
                     "venv": str(venv) if (venv / MARKER).is_file() else None,
                     "venvs": [v.as_dict() for v in venvs if v.profile == profile.name]})
    named = {p.name for p in profiles}
    for other in sorted({v.profile for v in venvs} - named):  # a profile removed since
        rows.append({"name": other, "torch": None, "cuda": None, "key": None, "venv": None,
                     "venvs": [v.as_dict() for v in venvs if v.profile == other]})
    return rows


def _standing(venv: dict[str, Any]) -> str:
    return {"stale": "stale (pins no profile has now) ", "unfinished": "unfinished "}.get(
        venv["standing"], "")


@toolchain_group.command("remove")
@click.argument("profile")
@click.option("--python", "python_version", metavar="X.Y",
              help="Only the venv for this Python (default: every Python's).")
def toolchain_remove(profile: str, python_version: str | None) -> None:
    """Remove PROFILE's venvs from the cache (made again on the next build that needs them).
    A venv a running build uses is left alone, and said."""
    venvs = cached.cached(locations.cache_dir(), load_profiles(locations.profile_dirs()))
    chosen = [v for v in venvs if v.profile == profile and v.link_to is None and
              python_version in (None, v.python)]
    if not chosen:
        here = sorted({v.profile for v in venvs}) or ["none"]
        which = f" for Python {python_version}" if python_version else ""
        raise UsageError(f"no venv of {profile}{which} in "
                         f"{display(cached.root(locations.cache_dir()))}",
                         hint=f"profiles with venvs here: {', '.join(here)} (wheelsmith toolchain "
                              "list)")
    _remove_all(chosen, venvs)


@toolchain_group.command("prune")
def toolchain_prune() -> None:
    """Remove the venvs of pins no profile has now, and creations that never finished; the
    profiles' current venvs stay. A venv a running build uses is left alone, and said."""
    venvs = cached.cached(locations.cache_dir(), load_profiles(locations.profile_dirs()))
    gone = [v for v in cached.removable(venvs) if v.link_to is None]
    if not gone:
        click.echo("nothing to prune: every venv is a profile's current one")
        return
    _remove_all(gone, venvs)


def _remove_all(chosen: list[cached.CachedVenv], venvs: list[cached.CachedVenv]) -> None:
    freed, kept = 0, []
    for venv in chosen:
        try:
            for path in cached.remove(venv, venvs):
                click.echo(f"removed {display(path)}")
        except ToolchainError as exc:
            kept.append(exc)
            continue
        freed += venv.size
    click.echo(f"freed {cached.human(freed)}")
    if kept:
        raise ToolchainError(f"{len(kept)} venv(s) kept: " + "; ".join(e.message for e in kept),
                             hint=kept[0].hint)


@toolchain_group.command("ensure")
@click.argument("profile", required=False)
@click.option("--python", "python", type=click.Path(path_type=Path), default=sys.executable,
              show_default="this Python")
def toolchain_ensure(profile: str | None, python: Path) -> None:
    """Create the profile's venv if needed (used by the Dockerfile); print its identity."""
    if not locations.cache_dir().is_dir():  # a read-only cache that holds the venv is fine
        writable()  # (the image's, for a build container's user)
    cuda_only = profile is not None and profile != SYSTEM and \
        select.profile_named(profile).cuda_only
    toolchain = select.resolve_toolchain(profile, python, cuda_only=cuda_only)
    click.echo(json.dumps({**toolchain.identity(), "python_path": str(toolchain.python),
                           "cuda_home": str(toolchain.cuda_home),
                           "library_includes": list(map(str, toolchain.library_includes))},
                          indent=2))


@toolchain_group.command("requirements")
@click.argument("profile", required=False)
def toolchain_requirements(profile: str | None) -> None:
    """Print the profile's exact pins, one per line (a requirements file)."""
    click.echo("\n".join(select.profile_named(profile).pins))


@toolchain_group.command("new")
@click.option("--torch", "torch", required=True, metavar="VERSION",
              help="The torch release, e.g. 2.11.0 (or 2.11.0+cu128 from --index).")
@click.option("--cuda", "cuda", metavar="X.Y",
              help="The CUDA version torch must be built with (checked, never assumed).")
@click.option("--index", "index", metavar="URL",
              help="An extra simple index torch comes from (e.g. a per-CUDA PyTorch root); "
                   "recorded in the profile.")
@click.option("--python", "pythons", multiple=True, metavar="X.Y",
              help="Python versions to resolve for (repeatable; default 3.10 to 3.15: those "
                   "torch has wheels for).")
@click.option("--force", is_flag=True, help="Replace an existing profile of the same name.")
@click.option("--dir", "directory", type=click.Path(path_type=Path),
              help="Where to write it (default: the project's toolchains/; for an installed "
                   "wheelsmith, ~/.config/wheelsmith/toolchains).")
def toolchain_new(torch: str, cuda: str | None, index: str | None, pythons: tuple[str, ...],
                  force: bool, directory: Path | None) -> None:
    """Write toolchains/<name>.yaml for a torch release: its exact closure from pip's resolver
    (metadata only), the CUDA compiler wheels at torch's CUDA version, the build tools."""
    _version("--torch", torch, hint="give a torch release, e.g. --torch 2.14.1")
    destination = directory or locations.new_profile_dir()
    writable(("--dir" if directory else "the profiles' directory", destination), cache=False)
    console.progress().stopping = f"no profile was written to {destination}"
    request = resolve.NewProfileRequest(
        torch=torch, cuda=_version("--cuda", cuda, hint="e.g. --cuda 12.8"), index=index,
        pythons=pythons or resolve.DEFAULT_PYTHONS, toolchains_dir=destination, force=force)
    with tempfile.TemporaryDirectory(prefix="wheelsmith-new-") as scratch:
        profile = resolve.new_profile(request, Path(scratch))
    compiler = ("an installed CUDA toolkit" if profile.installed_compiler
                else f"nvcc from PyPI ({profile.cuda_home})")
    click.echo(f"{display(profile.file)}: torch {profile.torch}, CUDA {profile.cuda}, Python "
               f"{', '.join(profile.pythons)}, {len(profile.requirements)} pins; compiler: "
               f"{compiler}")


def _version(option: str, value: str | None, *, hint: str) -> Version | None:
    if value is None:
        return None
    try:
        return Version(value)
    except InvalidVersion:
        raise UsageError(f"{option}: '{value}' is not a version", hint=hint) from None
