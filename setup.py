"""One build step on top of pyproject.toml: the top-level data ships inside the package.

recipes/, patches/, toolchains/, known-bad.yaml, matrix.yaml, the Dockerfile, images.lock and
the base-image script stay where they are in the repository; building the wheel copies them
into `wheelsmith/data/`, where an installed wheelsmith finds them (`wheelsmith.locations`).
An editable install reads the checkout itself, so nothing is copied for it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
DATA = ("recipes", "patches", "toolchains", "known-bad.yaml", "matrix.yaml", "Dockerfile",
        "images.lock", "scripts/make-base-image.sh")


class BuildPyWithData(build_py):
    """build_py, then a copy of the top-level data into the package."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return
        target = Path(self.build_lib) / "wheelsmith" / "data"
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        for name in DATA:
            source = HERE / name
            if source.is_dir():
                shutil.copytree(source, target / name,
                                ignore=shutil.ignore_patterns("__pycache__"))
            else:
                (target / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target / name)


setup(cmdclass={"build_py": BuildPyWithData})
