"""recipe new reads and patches only the package's own files, each walk bounded."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wheelsmith.scaffold.owntree import OWN_DIRS_NOT, own_files

DIRS = st.sampled_from([*sorted(OWN_DIRS_NOT), "csrc", "src", "Third_Party", "TESTS", "cmake",
                        "kernels", "build"])


@given(layout=st.lists(st.tuples(st.lists(DIRS, max_size=3), st.sampled_from(
    ["a.cu", "b.py", "CMakeLists.txt", "c.txt"])), max_size=12))
def test_the_walk_takes_files_outside_third_party_and_test_trees_in_any_case(
        tmp_path_factory: pytest.TempPathFactory, layout: list[tuple[list[str], str]]) -> None:
    tree = tmp_path_factory.mktemp("tree")
    for parts, name in layout:
        (tree.joinpath(*parts)).mkdir(parents=True, exist_ok=True)
        tree.joinpath(*parts, name).write_text("x")
    found = own_files(tree, lambda path: path.suffix in {".cu", ".py"}, also_not={"build"})
    expected = sorted({tree.joinpath(*parts, name) for parts, name in layout
                       if name.endswith((".cu", ".py")) and not {p.lower() for p in parts}
                       & (OWN_DIRS_NOT | {"build"})})
    assert found == expected


def test_links_large_files_and_files_past_the_limit_are_not_read(tmp_path: Path) -> None:
    outside = tmp_path / "outside.cu"
    outside.write_text("secret")
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "link.cu").symlink_to(outside)
    (tree / "huge.cu").write_bytes(b"x" * 65)
    for name in ("a.cu", "b.cu", "c.cu"):
        (tree / name).write_text("x")
    assert own_files(tree, lambda path: path.suffix == ".cu", max_bytes=64, limit=2) == [
        tree / "a.cu", tree / "b.cu"]
