"""The `wheelsmith` command: the group and its commands (one module per area)."""

from wheelsmith.cli import build, doctor, image, index, install, nightly, toolchain  # noqa: F401
from wheelsmith.cli._common import main

__all__ = ["main"]
