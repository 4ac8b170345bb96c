"""The package's own files in an unpacked sdist: what `recipe new` reads and patches, not
its third-party or test trees; each walk bounded (an sdist is untrusted)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

OWN_DIRS_NOT = frozenset({"third_party", "3rdparty", "external", "extern", "deps", "test",
                          "tests"})
MAX_BYTES = 1 << 20  # of one file read
MAX_FILES = 5000  # of one walk: a package's own files are far fewer


def own_files(tree: Path, wanted: Callable[[Path], bool], *, also_not: Iterable[str] = (),
              max_bytes: int = MAX_BYTES, limit: int = MAX_FILES) -> list[Path]:
    """The regular files under `tree` that `wanted` takes, in sorted order: no link, none
    under a directory of OWN_DIRS_NOT or `also_not` (any case), none over `max_bytes`; the
    first `limit` of them."""
    skipped = OWN_DIRS_NOT | {name.lower() for name in also_not}
    found: list[Path] = []
    for path in sorted(tree.rglob("*")):
        if len(found) >= limit:
            break
        if skipped & {part.lower() for part in path.relative_to(tree).parts[:-1]} \
                or not wanted(path) or path.is_symlink() or not path.is_file():
            continue
        if path.stat().st_size <= max_bytes:
            found.append(path)
    return found
