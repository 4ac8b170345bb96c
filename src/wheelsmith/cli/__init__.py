"""The `wheelsmith` command: the group and its commands (one module per area)."""

from wheelsmith.cli import (  # noqa: F401
    build,
    doctor,
    image,
    index,
    install,
    nightly,
    recipe,
    toolchain,
    verify,
)
from wheelsmith.cli._common import entry, main

__all__ = ["entry", "main"]
