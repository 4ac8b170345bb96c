"""Files in a source tree are not trusted (build, recipe new): a `path:` source, a git checkout
and an unpacked archive keep only links that resolve inside the tree (made relative within the
copy), and a link that leads outside is refused naming it, so a patch never writes through one
to anything outside the tree."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.hostile import returned_or_raised, sentinel
from wheelsmith.errors import SourceError
from wheelsmith.recipes.fetch import fetch
from wheelsmith.recipes.patch import apply_one
from wheelsmith.recipes.sources import LocalSource
from wheelsmith.recipes.unpack import unpack


def tree(root: Path, links: dict[str, str]) -> Path:
    """A path source `root/src` with setup.py, a subdirectory and the given links."""
    source = root / "src"
    (source / "pkg" / "deep").mkdir(parents=True, exist_ok=True)
    (source / "setup.py").write_text("print('setup')\n")
    (source / "pkg" / "core.h").write_text("int x;\n")
    for name, target in links.items():
        (source / name).symlink_to(target)
    return source


def test_a_link_to_a_file_outside_is_refused_and_no_patch_writes_through_it(
        tmp_path: Path) -> None:
    """The issue's case: a path source holding a link to a file outside it, and a recipe
    patch that rewrites that file."""
    with sentinel(tmp_path / "outside") as guard:
        source = tree(tmp_path, {"notes.txt": str(guard.root / "precious.txt")})
        with pytest.raises(SourceError) as caught:
            fetch(LocalSource(path=source), tmp_path / "work", tmp_path / "cache")
    assert caught.value.message == (
        f"refusing the path source {source}: 'notes.txt' is a link pointing outside the tree "
        f"({guard.root / 'precious.txt'})")
    assert caught.value.hint == ("a patch applied through it would write outside the tree: "
                                 "copy what it points to into the tree instead")


def test_links_inside_are_kept_and_lead_into_the_copy_not_back_to_the_source(
        tmp_path: Path) -> None:
    source = tree(tmp_path, {"relative.h": "pkg/core.h", "pkg/deep/up.h": "../core.h",
                             "alias": "pkg", "absolute.h": str(tmp_path / "src/pkg/core.h")})
    root = fetch(LocalSource(path=source), tmp_path / "work", tmp_path / "cache")
    for name in ("relative.h", "absolute.h", "pkg/deep/up.h", "alias/core.h"):
        assert (root / name).resolve() == (root / "pkg" / "core.h").resolve(), name
    assert not (root / "absolute.h").readlink().is_absolute()
    patch = tmp_path / "0001.patch"
    patch.write_text("--- a/absolute.h\n+++ b/absolute.h\n@@ -1 +1 @@\n-int x;\n+int y;\n")
    apply_one(patch, root)
    assert (source / "pkg" / "core.h").read_text() == "int x;\n"  # the user's tree is intact
    assert (root / "pkg" / "core.h").read_text() == "int y;\n"


TARGETS = st.sampled_from([
    "pkg/core.h", "pkg", "../src/pkg/core.h", "pkg/deep/../core.h", "..", "../..", "/etc",
    "/", "pkg/deep/../../..", "loop", "a", "b", "c/../..", "missing/file", "./setup.py"])


@given(st.dictionaries(st.sampled_from(["a", "b", "c", "pkg/l", "pkg/deep/l", "loop"]),
                       TARGETS, max_size=5))
def test_any_links_give_a_copy_whose_links_all_stay_inside_or_a_refusal_naming_one(
        tmp_path_factory: pytest.TempPathFactory, links: dict[str, str]) -> None:
    base = tmp_path_factory.mktemp("tree")
    source = tree(base, links)
    with sentinel(base / "outside"):
        root = returned_or_raised(
            lambda: fetch(LocalSource(path=source), base / "work", base / "cache"), SourceError)
    if isinstance(root, SourceError):
        assert root.message.startswith(f"refusing the path source {source}: '")
        return
    real = root.resolve()
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            link = Path(folder, name)
            if link.is_symlink():
                assert not link.readlink().is_absolute()
                assert (link.parent / link.readlink()).resolve().is_relative_to(real)


def test_an_archive_link_that_leaves_through_another_link_is_refused_not_a_traceback(
        tmp_path: Path) -> None:
    """`c -> .` and `x -> a/b/c/../../../..`: inside by their names, outside once resolved
    (tarfile's data filter sees it at extraction)."""
    archive = tmp_path / "demo-1.0.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        folder = tarfile.TarInfo("demo-1.0/a/b")
        folder.type = tarfile.DIRTYPE
        tar.addfile(folder)
        for name, target in (("demo-1.0/a/b/c", "."), ("demo-1.0/x", "a/b/c/../../../..")):
            link = tarfile.TarInfo(name)
            link.type, link.linkname = tarfile.SYMTYPE, target
            tar.addfile(link)
        setup = tarfile.TarInfo("demo-1.0/setup.py")
        setup.size = 2
        tar.addfile(setup, io.BytesIO(b"#\n"))
    (tmp_path / "out").mkdir()
    with pytest.raises(SourceError) as caught:
        unpack(archive, tmp_path / "out")
    assert caught.value.message == (
        f"refusing to unpack demo-1.0.tar.gz: member 'demo-1.0/x' is refused: 'demo-1.0/x' "
        f"would link to '{tmp_path}', which is outside the destination")
