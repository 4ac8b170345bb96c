"""The documentation site builds with --strict (a broken link or anchor, a missing page, a page
left out of the nav all fail it) and offline: in a network namespace where nothing outside can
be reached, with no page that loads a font, a script or a style from elsewhere."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

MKDOCS = Path(sys.executable).with_name("mkdocs")


def offline() -> list[str]:
    """A prefix that runs a command with no network (a new network namespace), or [] where
    this machine cannot make one."""
    if shutil.which("unshare") is None:
        return []
    probe = subprocess.run(["unshare", "-rn", "true"], capture_output=True, check=False)
    return ["unshare", "-rn"] if probe.returncode == 0 else []


def build(site: Path, config: Path = REPO / "mkdocs.yml") -> subprocess.CompletedProcess[str]:
    return subprocess.run([*offline(), str(MKDOCS), "build", "--strict", "--config-file",
                           str(config), "--site-dir", str(site)], cwd=REPO,
                          capture_output=True, text=True, check=False,
                          env=os.environ | {"NO_MKDOCS_2_WARNING": "1"})


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not MKDOCS.exists():
        pytest.skip("mkdocs is not installed here (the dev extra has it)")
    out = tmp_path_factory.mktemp("site")
    result = build(out)
    assert result.returncode == 0, result.stderr
    assert "WARNING" not in result.stderr, result.stderr
    return out


def test_the_site_builds_strict_and_offline_with_every_page(site: Path) -> None:
    pages = {p.relative_to(REPO / "docs").with_suffix("") for p in
             (REPO / "docs").rglob("*.md")}
    built = {p.parent.relative_to(site) for p in site.rglob("index.html")}
    for page in pages:
        expected = page.parent if page.name in ("index", "README") else page
        assert expected in built, page


def test_no_page_loads_anything_from_elsewhere(site: Path) -> None:
    remote = re.compile(r"<(?:link|script|img)\b[^>]*\b(?:href|src)=\"(?:https?:)?//[^\"]+")
    found = [f"{page.relative_to(site)}: {m[0][:120]}" for page in site.rglob("*.html")
             for m in [remote.search(page.read_text())] if m]
    assert not found, found[:10]


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    """--strict is what catches it: the same site with one link to a page that is not there."""
    if not MKDOCS.exists():
        pytest.skip("mkdocs is not installed here (the dev extra has it)")
    docs = tmp_path / "docs"
    shutil.copytree(REPO / "docs", docs)
    page = docs / "getting-started.md"
    page.write_text(page.read_text() + "\nSee [nowhere](no-such-page.md).\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text((REPO / "mkdocs.yml").read_text().replace("docs_dir: docs",
                                                                 f"docs_dir: {docs}"))
    result = build(tmp_path / "site", config)
    assert result.returncode != 0
    assert ("Doc file 'getting-started.md' contains a link 'no-such-page.md', but the target is "
            "not found among documentation files.") in result.stderr
