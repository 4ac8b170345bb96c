"""`toolchain list`, `toolchain ensure`, `toolchain requirements`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from wheelsmith import locations, pipeline
from wheelsmith.cli._common import emit_json, json_option, main
from wheelsmith.toolchain import (
    MARKER,
    default_profile_name,
    load_profile,
    venv_root,
)


@main.group("toolchain")
def toolchain_group() -> None:
    """The pinned build toolchains (profiles in toolchains/)."""


@toolchain_group.command("list")
@json_option
def toolchain_list(as_json: bool) -> None:
    """List the profiles, their pin hash and whether their venv exists here."""
    directory = locations.project_root() / "toolchains"
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    rows = []
    for path in sorted(directory.glob("*.yaml")):
        profile = load_profile(path)
        venv = venv_root(profile, version, locations.cache_dir())
        rows.append({"name": profile.name, "torch": str(profile.torch),
                     "cuda": str(profile.cuda), "key": profile.key(version),
                     "venv": str(venv) if (venv / MARKER).is_file() else None})
    if as_json:
        emit_json(rows)
        return
    default = default_profile_name(directory)
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
    toolchain = pipeline.resolve_toolchain(profile, python)
    click.echo(json.dumps({**toolchain.identity(), "python_path": str(toolchain.python),
                           "cuda_home": str(toolchain.cuda_home)}, indent=2))


@toolchain_group.command("requirements")
@click.argument("profile", required=False)
def toolchain_requirements(profile: str | None) -> None:
    """Print the profile's exact pins, one per line (a requirements file)."""
    click.echo("\n".join(pipeline.profile_named(profile).pins))
