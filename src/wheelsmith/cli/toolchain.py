"""`toolchain list`, `toolchain ensure`, `toolchain requirements`, `toolchain new`."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import click
from packaging.version import InvalidVersion, Version

from wheelsmith import locations
from wheelsmith.cli import console
from wheelsmith.cli._common import display, emit_json, json_option, main, writable
from wheelsmith.errors import UsageError
from wheelsmith.toolchain import resolve, select
from wheelsmith.toolchain.profile import SYSTEM, default_profile_name, load_profiles
from wheelsmith.toolchain.venv import MARKER, venv_root


@main.group("toolchain")
def toolchain_group() -> None:
    """The pinned build toolchains (profiles in toolchains/)."""


@toolchain_group.command("list")
@json_option
def toolchain_list(as_json: bool) -> None:
    """List the profiles, their pin hash and whether their venv exists here."""
    directories = locations.profile_dirs()
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    rows = []
    for profile in load_profiles(directories):
        venv = venv_root(profile, version, locations.cache_dir())
        rows.append({"name": profile.name, "torch": str(profile.torch_pin or "-"),
                     "cuda": str(profile.cuda), "key": profile.key(version),
                     "venv": str(venv) if (venv / MARKER).is_file() else None})
    if as_json:
        emit_json(rows)
        return
    default = default_profile_name(directories)
    for row in rows:
        mark = "*" if row["name"] == default else " "
        click.echo(f"{mark} {row['name']:<20} torch {row['torch']:<8} CUDA {row['cuda']:<5} "
                   f"{row['venv'] or '(not created yet)'}")


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
