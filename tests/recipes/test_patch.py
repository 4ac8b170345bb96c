"""Patches apply exactly or not at all, and every failure names the patch and the hunk."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from wheelsmith.errors import PatchError
from wheelsmith.recipes.patch import apply_one, file_diff, read_exactly, write_exactly

SETUP = """import os
cc_flag = []
cc_flag.append("-gencode")
cc_flag.append("arch=compute_75,code=sm_75")
print("done")
"""

HONOUR_ARCH_LIST = """--- a/setup.py
+++ b/setup.py
@@ -2,4 +2,5 @@
 cc_flag = []
-cc_flag.append("-gencode")
-cc_flag.append("arch=compute_75,code=sm_75")
+if not os.environ.get("TORCH_CUDA_ARCH_LIST"):
+    cc_flag.append("-gencode")
+    cc_flag.append("arch=compute_75,code=sm_75")
 print("done")
"""


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    root.mkdir()
    (root / "setup.py").write_text(SETUP)
    return root


def write_patch(tmp_path: Path, text: str, name: str = "0001-honour-arch-list.patch") -> Path:
    directory = tmp_path / "patches" / "demo" / "1.0.0"
    directory.mkdir(parents=True, exist_ok=True)
    patch = directory / name
    patch.write_text(text)
    return patch


def test_patch_applies_exactly(tmp_path: Path, tree: Path) -> None:
    apply_one(write_patch(tmp_path, HONOUR_ARCH_LIST), tree)
    assert (tree / "setup.py").read_text() == (
        'import os\ncc_flag = []\nif not os.environ.get("TORCH_CUDA_ARCH_LIST"):\n'
        '    cc_flag.append("-gencode")\n    cc_flag.append("arch=compute_75,code=sm_75")\n'
        'print("done")\n')


def test_patch_that_no_longer_applies_names_patch_hunk_and_line(tmp_path: Path,
                                                                 tree: Path) -> None:
    (tree / "setup.py").write_text(SETUP.replace("compute_75,code=sm_75", "compute_80,code=sm_80"))
    with pytest.raises(PatchError) as caught:
        apply_one(write_patch(tmp_path, HONOUR_ARCH_LIST), tree)
    assert caught.value.message == (
        "patches/demo/1.0.0/0001-honour-arch-list.patch: hunk #1 (@@ -2,4 +2,5 @@) on setup.py "
        "does not apply: line 4 is 'cc_flag.append(\"arch=compute_80,code=sm_80\")', the patch "
        "expects 'cc_flag.append(\"arch=compute_75,code=sm_75\")'")
    assert caught.value.hint == "the source changed; regenerate the patch against this version"


def test_patch_applied_twice_says_already_applied(tmp_path: Path, tree: Path) -> None:
    patch = write_patch(tmp_path, HONOUR_ARCH_LIST)
    apply_one(patch, tree)
    with pytest.raises(PatchError, match=r"hunk #1 \(@@ -2,4 \+2,5 @@\) on setup.py does not "
                                         r"apply: is already applied"):
        apply_one(patch, tree)


def test_hunk_that_changes_nothing_is_an_error(tmp_path: Path, tree: Path) -> None:
    noop = "--- a/setup.py\n+++ b/setup.py\n@@ -1,2 +1,2 @@\n import os\n cc_flag = []\n"
    with pytest.raises(PatchError) as caught:
        apply_one(write_patch(tmp_path, noop, "0002-noop.patch"), tree)
    assert caught.value.message == (
        "patches/demo/1.0.0/0002-noop.patch: hunk #1 (@@ -1,2 +1,2 @@) on setup.py changes nothing")


def test_patch_without_hunks_is_an_error(tmp_path: Path, tree: Path) -> None:
    with pytest.raises(PatchError) as caught:
        apply_one(write_patch(tmp_path, "just some text\n", "0003-empty.patch"), tree)
    assert caught.value.message == "patches/demo/1.0.0/0003-empty.patch contains no hunks"


def test_failing_second_file_leaves_first_file_untouched(tmp_path: Path, tree: Path) -> None:
    (tree / "other.py").write_text("x = 1\n")
    two_files = HONOUR_ARCH_LIST + "--- a/other.py\n+++ b/other.py\n@@ -1 +1 @@\n-x = 2\n+x = 3\n"
    with pytest.raises(PatchError, match=r"hunk #1 .* on other\.py does not apply"):
        apply_one(write_patch(tmp_path, two_files), tree)
    assert (tree / "setup.py").read_text() == SETUP


def test_patch_on_missing_file_names_it(tmp_path: Path, tree: Path) -> None:
    patch = HONOUR_ARCH_LIST.replace("setup.py", "csrc/setup.py")
    with pytest.raises(PatchError) as caught:
        apply_one(write_patch(tmp_path, patch), tree)
    assert caught.value.message == ("patches/demo/1.0.0/0001-honour-arch-list.patch: "
                                    "csrc/setup.py does not exist in the source tree")


def test_patch_can_create_a_file(tmp_path: Path, tree: Path) -> None:
    create = "--- /dev/null\n+++ b/NOTICE\n@@ -0,0 +1,2 @@\n+patched by\n+wheelsmith\n"
    apply_one(write_patch(tmp_path, create, "0004-notice.patch"), tree)
    assert (tree / "NOTICE").read_text() == "patched by\nwheelsmith\n"


def test_patch_escaping_the_tree_is_refused(tmp_path: Path, tree: Path) -> None:
    evil = "--- a/../outside.py\n+++ b/../outside.py\n@@ -1 +1 @@\n-a\n+b\n"
    with pytest.raises(PatchError, match=r"patch names a path outside the source tree"):
        apply_one(write_patch(tmp_path, evil, "0005-evil.patch"), tree)


def test_hunk_at_end_of_file_without_newline(tmp_path: Path, tree: Path) -> None:
    (tree / "v.txt").write_text("a\nb")
    patch = ("--- a/v.txt\n+++ b/v.txt\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n"
             "+c\n")
    apply_one(write_patch(tmp_path, patch, "0006-eof.patch"), tree)
    assert (tree / "v.txt").read_text() == "a\nc\n"


# --- every byte a hunk does not name is kept; the diffs recipe new writes apply back ---------

# what a source file's lines hold beside text: a carriage return (CRLF files), a form feed and
# Unicode's line breaks (which str.splitlines cuts at), a byte that is not UTF-8 (a Latin-1
# comment), a backslash that starts a line (diff's own marker)
LINE_TEXT = st.text(st.one_of(
    st.sampled_from(["\r", "\x0c", "\x0b", "\x1c", "\x85", "\u2028", "\u2029", "\udcff", "\\",
                     " ", "-", "+", "@"]),
    st.characters(exclude_categories=["Cs"], exclude_characters="\n")), max_size=12)
FILES = st.tuples(st.lists(LINE_TEXT, max_size=8), st.booleans())


def text_of(lines: list[str], newline_at_end: bool) -> str:
    return "\n".join(lines) + ("\n" if lines and newline_at_end else "")


def edited(draw: st.DrawFn, lines: list[str]) -> list[str]:
    out = list(lines)
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(out)))
        kind = draw(st.sampled_from(["insert", "replace", "delete"]))
        if kind == "insert" or not out[at:]:
            out.insert(at, draw(LINE_TEXT))
        elif kind == "replace":
            out[at] = draw(LINE_TEXT)
        else:
            del out[at]
    return out


@st.composite
def old_and_new(draw: st.DrawFn) -> tuple[str, str]:
    lines, newline = draw(FILES)
    return text_of(lines, newline), text_of(edited(draw, lines), draw(st.booleans()))


@given(pair=old_and_new())
def test_a_diff_recipe_new_writes_applies_back_to_exactly_the_new_text(
        tmp_path_factory: pytest.TempPathFactory, pair: tuple[str, str]) -> None:
    """One writer (file_diff) for every patch recipe new makes, in the applier's line model:
    CRLF lines, form feeds, a missing newline at the end, bytes that are not UTF-8."""
    old, new = pair
    assume(old != new)
    root = tmp_path_factory.mktemp("tree")
    write_exactly(root / "k.cu", old)
    patch = root.parent / f"{root.name}.patch"
    patch.write_bytes(file_diff("k.cu", old, new).encode("utf-8", "surrogateescape"))
    apply_one(patch, root)
    assert read_exactly(root / "k.cu") == new


@given(file=FILES, line=LINE_TEXT)
def test_the_lines_no_hunk_names_keep_every_byte(tmp_path_factory: pytest.TempPathFactory,
                                                  file: tuple[list[str], bool],
                                                  line: str) -> None:
    """A shipped patch changes its first line only: a form feed in a `//` comment further down
    once became a line break, and the comment's rest code."""
    lines, newline = file
    root = tmp_path_factory.mktemp("tree")
    write_exactly(root / "k.cu", text_of(["int a = 1;", *lines], newline))
    patch = root.parent / f"{root.name}.patch"
    assume(line != "int a = 1;")
    patch.write_bytes(f"--- a/k.cu\n+++ b/k.cu\n@@ -1 +1 @@\n-int a = 1;\n+{line}\n".encode(
        "utf-8", "surrogateescape"))
    apply_one(patch, root)
    assert read_exactly(root / "k.cu") == text_of([line, *lines], newline or not lines)


def test_a_patch_saved_with_crlf_line_ends_applies_to_lf_sources(tmp_path: Path,
                                                                  tree: Path) -> None:
    apply_one(write_patch(tmp_path, HONOUR_ARCH_LIST.replace("\n", "\r\n")), tree)
    assert (tree / "setup.py").read_text().splitlines()[2] == \
        'if not os.environ.get("TORCH_CUDA_ARCH_LIST"):'
