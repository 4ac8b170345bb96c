"""`wheelsmith index export DIR`: the local index as a static tree for any static host or
object storage: PEP 503 HTML, PEP 691 JSON and PEP 658 metadata, rendered by pages.py (the
renderer `serve`, `index check` and `index rebuild` use), with file links that may point
elsewhere (`--base-url`: a bucket, a CDN, release assets).

    DIR/index.html, DIR/<channel>/simple/[<project>/]index.html, index.json   the pages
    DIR/files/<sha256[:2]>/<sha256>/<filename>[.metadata]   the files (--base-url URL: the
        links are URL/files/...; a URL with {filename}: URL with the name, the files flat in
        DIR/files/<filename>, as release assets are)

Incremental: a file already in DIR (its sha256 the ledger's: any other bytes there are
refused, exit 14) is not copied again, and a page whose bytes are unchanged is not rewritten.
Nothing is written through a link: DIR's own paths (the lock, files/, a channel's directory)
must stay inside it. Files first, then project pages, then channel
lists, the root last, each page replaced atomically: a page never lists a file before it is in
place. The source index is only read (its ledger is append-only; a torn last line is skipped).
"""

from __future__ import annotations

import functools
import shutil
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from wheelsmith.errors import FileSystemError, IndexDriftError, UntrustedDataError, UsageError
from wheelsmith.files import atomic_write_bytes, exclusive_lock, store_no_clobber
from wheelsmith.index import ledger, pages
from wheelsmith.index.ledger import FileRecord
from wheelsmith.untrusted import inside, local
from wheelsmith.untrusted.addresses import given_url

LOCK = ".export.lock"
TMP = ".tmp"  # every temp file of an export: one place to clear, left out of uploads
FILENAME = "{filename}"


@dataclass(frozen=True, slots=True)
class Exported:
    files: int
    files_written: int
    pages: int
    pages_written: int


@dataclass(frozen=True, slots=True)
class Layout:
    """Where each file goes in DIR and what a page links it as."""

    base_url: str | None

    @property
    def flat(self) -> bool:
        return self.base_url is not None and FILENAME in self.base_url

    def path(self, record: FileRecord) -> str:
        return f"files/{record.filename}" if self.flat else record.path

    def link(self, record: FileRecord) -> str:
        if self.base_url is None:
            return pages.file_url(record)
        if self.flat:
            return self.base_url.replace(FILENAME, urllib.parse.quote(record.filename))
        return f"{self.base_url.rstrip('/')}/{urllib.parse.quote(record.path, safe='/')}"


def check_base_url(base_url: str | None) -> None:
    if base_url is None:
        return
    given_url(base_url, "--base-url", placeholder=FILENAME,
              hint="where the files will be served, e.g. --base-url "
                   "https://bucket.example/wheels")
    if "{" in base_url.replace(FILENAME, "") or "}" in base_url.replace(FILENAME, ""):
        raise UsageError(f"--base-url: '{base_url}' has a placeholder other than {FILENAME}")


def export(source: Path, dest: Path, base_url: str | None = None) -> Exported:
    """Bring the static tree in `dest` up to the ledger of the index in `source`."""
    check_base_url(base_url)
    if local.size_of(source / ledger.LEDGER, follow=False) is None:  # a FIFO: refused, 22
        raise UsageError(f"no index at {source} (no {ledger.LEDGER}): nothing to export",
                         hint="pass the directory you publish into (--index DIR)")
    if dest.resolve() == source.resolve():
        raise UsageError(f"{dest} is the index itself", hint="export into another directory")
    dest.mkdir(parents=True, exist_ok=True)
    layout = Layout(base_url)
    with exclusive_lock(_within(dest, LOCK), follow=False):
        tmp = _within(dest, TMP)
        if tmp.is_symlink():
            tmp.unlink()
        shutil.rmtree(tmp, ignore_errors=True)  # what a killed export left
        tmp.mkdir()
        state = ledger.read(source)
        records = list(state.by_filename.values())
        written = sum(_place(source, dest, layout.path(r), r) for r in records)
        wanted = pages.all_pages(state, layout.link)  # projects, then lists, the root last
        changed = [p for p, data in wanted.items() if _write_page(dest, p, data)]
        shutil.rmtree(dest / TMP, ignore_errors=True)
    return Exported(len(records), written, len(wanted), len(changed))


def _place(source: Path, dest: Path, relative: str, record: FileRecord) -> int:
    """Copy one file and its .metadata into `dest` unless there; 1 when it was copied."""
    copied = 0
    for suffix, expected in (("", record.sha256), (".metadata", record.metadata_sha256)):
        target = _within(dest, f"{relative}{suffix}")
        if target.exists() or target.is_symlink():
            if (found := _sha256(target)) == expected:
                continue
            raise IndexDriftError(f"{target} is not the file the ledger of {source} names "
                                  f"(sha256 {found or 'unreadable'}, the ledger says "
                                  f"{expected})", hint=f"remove it and export again: files "
                                                       f"never change, so {dest} was altered")
        origin = inside(source, f"{record.path}{suffix}")  # never through a link out of it
        if _sha256(origin) != expected:
            raise IndexDriftError(f"{origin} is missing or differs from the ledger: not "
                                  "exported", hint=f"run `wheelsmith index check --index "
                                                   f"{source}`")
        target.parent.mkdir(parents=True, exist_ok=True)
        copied |= store_no_clobber(target, functools.partial(_copy, origin), dest / TMP)
    return copied


def _sha256(origin: Path) -> str | None:
    """The sha256 of a regular file (untrusted.local, never through a link); None when it is
    missing or not a regular file."""
    try:
        return local.sha256_of(origin, follow=False)
    except (FileNotFoundError, FileSystemError):
        return None


def _within(dest: Path, relative: str | Path) -> Path:
    """`dest / relative`, refused when a link in DIR leads it outside DIR (exit 14)."""
    try:
        return inside(dest, relative)
    except UntrustedDataError:
        raise IndexDriftError(f"{dest / relative} leads outside {dest} through a link: not "
                              "exported", hint=f"export writes only inside {dest}: remove "
                                               "the link, or export into a directory of its "
                                               "own") from None


def _copy(origin: Path, tmp: Path) -> None:
    with local.open_regular(origin, follow=False) as source, tmp.open("wb") as sink:
        shutil.copyfileobj(source, sink)


def _write_page(dest: Path, relative: Path, data: bytes) -> bool:
    target = _within(dest, relative)
    if local.same_bytes(target, data):  # never read past the page's size
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(target, data, dest / TMP, durable=False)  # derived: export again
    return True
