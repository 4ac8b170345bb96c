"""`image build`, `image show`: the pinned build image of a toolchain profile."""

from __future__ import annotations

from pathlib import Path

import click

from wheelsmith import locations
from wheelsmith.builder import baseimage, container, images
from wheelsmith.cli._common import emit_json, json_option, main, writable
from wheelsmith.errors import UsageError
from wheelsmith.toolchain import select
from wheelsmith.toolchain.profile import Profile

engine_option = click.option("--engine", type=click.Choice(["podman", "docker", "auto"]),
                             default="auto", show_default=True)
toolchain_option = click.option("--toolchain", metavar="PROFILE",
                                help="Toolchain profile (default: the newest).")


def _engine(choice: str) -> container.Engine:
    engine = container.detect(choice)
    if engine is None:
        raise UsageError("no container engine works here (podman info / docker info failed)",
                         hint="install podman (Debian: apt install podman runc), or build with "
                              "--runner host")
    return engine


python_option = click.option("--python", "python", metavar="X.Y",
                             default=container.IMAGE_PYTHON, show_default=True,
                             help="The image's Python: "
                                  + ", ".join(f"{p} (Debian {r})" for p, r in
                                              container.BASES.items()) + ".")


def _pin(engine: container.Engine, python: str) -> baseimage.Pin:
    """The base's pin; a base moved across from the other engine says so."""
    pin = baseimage.resolve(engine, python)
    if pin.moved:
        click.echo(pin.moved, err=True)
    return pin


def _base(engine: container.Engine, python: str, profile: Profile) -> str:
    """The pinned base, or one locked now (printed: a pin is a decision to see): the
    profile's toolkit-carrying base where it names one, else Debian's for `python`."""
    pin = baseimage.toolkit_base(engine, profile) if profile.image_base else _pin(engine, python)
    if pin.new:
        click.echo(f"locked {pin.describe()} in {pin.lock}", err=True)
    return pin.ref


@main.group("image")
def image_group() -> None:
    """The pinned build image (Dockerfile) of a toolchain profile."""


@image_group.command("build")
@toolchain_option
@engine_option
@click.option("--base", help="Base image (default: the one pinned in images.lock; without a "
                             "pin, one locked now: the registry's digest, else a debootstrap "
                             "base and its ID).")
@click.option("--pip-mirror", type=click.Path(path_type=Path, exists=True, file_okay=False),
              help="A directory of wheels mounted as a pip find-links mirror (podman).")
@python_option
@click.option("--rebuild", is_flag=True,
              help="Build from the Dockerfile even when the image of these pins exists (after "
                   "editing the Dockerfile).")
def image_build(toolchain: str | None, engine: str, base: str | None,
                pip_mirror: Path | None, python: str, rebuild: bool) -> None:
    """The image for a toolchain profile (tagged with the hash of its pins): the existing one,
    one made from an older image with the same pins (a link and a label), or built."""
    container.base_for(python)  # a Python without an image: refused before anything is done
    writable()
    chosen = _engine(engine)
    container.check_builder(chosen, pip_mirror)  # before a base is locked or moved for it
    profile = select.profile_named(toolchain)
    log_path = locations.cache_dir() / f"image-{chosen.name}-{profile.name}-py{python}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("w") as log_file:
        ref = images.make_image(chosen, profile, project=locations.project_root(),
                                base=base or _base(chosen, python, profile), mirror=pip_mirror,
                                log_file=log_file, log_path=log_path, python=python,
                                rebuild=rebuild)
    click.echo(ref)


@image_group.command("base")
@engine_option
@python_option
@click.option("--toolchain", metavar="PROFILE",
              help="A profile that names its own base (image_base: one carrying the CUDA "
                   "toolkit): that base. Default: Debian's for --python.")
def image_base(engine: str, python: str, toolchain: str | None) -> None:
    """The base image an image build uses: the pinned one, else locked now (a registry's
    digest, else a base made with debootstrap from this machine's apt mirror, by its ID; a
    profile's toolkit base: its digest, else the local image's ID)."""
    chosen = _engine(engine)
    profile = select.profile_named(toolchain) if toolchain else None
    pin = (baseimage.toolkit_base(chosen, profile) if profile and profile.image_base
           else _pin(chosen, python))
    click.echo(f"{'locked' if pin.new else 'pinned'} {pin.describe()} in {pin.lock}")


@image_group.command("show")
@toolchain_option
@engine_option
@python_option
@json_option
def image_show(toolchain: str | None, engine: str, python: str, as_json: bool) -> None:
    """The image of a toolchain profile: ID, digest, labels, and whether it is current."""
    chosen = _engine(engine)
    profile = select.profile_named(toolchain)
    ref = container.image_ref(profile, python)
    info = container.inspect(chosen, ref)
    labels = container.labels_of(info) if info else {}
    pins = list(profile.pins_for(python))
    data = {"image": ref, "exists": info is not None,
            "id": info.get("Id") if info else None,
            "digest": info.get("Digest") if info else None,
            "profile": labels.get(container.LABEL_PROFILE),
            "profile_key": labels.get(container.LABEL_KEY),
            "base": labels.get(container.LABEL_BASE),
            "layout": labels.get(container.LABEL_LAYOUT, "1") if info else None,
            "current": info is not None and not container.staleness(info, profile, python),
            "pins": pins}
    if as_json:
        emit_json(data)
        return
    for key in ("image", "exists", "id", "digest", "profile", "profile_key", "base", "layout",
                "current"):
        click.echo(f"{key:<12} {data[key]}")
    click.echo(f"pins         {len(pins)} (wheelsmith toolchain requirements {profile.name})")
