"""The `wheelsmith` command: the group and its commands (one module per area)."""

from wheelsmith.cli import build, doctor, index, nightly  # noqa: F401 - registers the commands
from wheelsmith.cli._common import main

__all__ = ["main"]
