"""Fetch a recipe's source into a fresh directory: verified before it is unpacked.

Downloads land in a content-addressed cache (`downloads/<sha256>`); a file whose sha256 does
not match the pin is deleted and never unpacked (recipes/unpack.py checks what is). Git
sources are checked out at the pinned commit; local directories are copied.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import time
from http import HTTPStatus
from pathlib import Path

from wheelsmith import cmd
from wheelsmith.errors import SourceError, UntrustedDataError
from wheelsmith.files import (
    atomic_write_text,
    exclusive_lock,
    place_no_clobber,
    sha256_file,
    temp_file_in,
)
from wheelsmith.recipes.simple import pypi_sdist
from wheelsmith.recipes.sources import (
    CarriedSource,
    GitSource,
    LocalSource,
    PypiSource,
    Source,
    UrlSource,
    describe_source,
)
from wheelsmith.recipes.unpack import unpack
from wheelsmith.untrusted import Bounds, tool_bounds
from wheelsmith.untrusted.addresses import redact
from wheelsmith.untrusted.urls import copy_url

log = logging.getLogger(__name__)

RETRIES = 3
# a download's cap is its size when the index says it (PEP 700), else this
MAX_DOWNLOAD_BYTES = 1 << 30
DOWNLOAD_TIMEOUT_S = 1800.0  # the whole download (1 GiB at 0.6 MB/s)
IGNORED_IN_LOCAL = shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", "__pycache__")


def fetch(source: Source, dest: Path, cache: Path) -> Path:
    """Materialise `source` in the empty directory `dest`; return the source tree's root."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    if isinstance(source, LocalSource):
        if not source.path.is_dir():
            raise SourceError(f"source directory does not exist: {source.path}",
                              hint="a path source is relative to the recipe file")
        root = dest / source.path.name
        try:
            shutil.copytree(source.path, root, ignore=IGNORED_IN_LOCAL, symlinks=True)
        except shutil.Error as exc:  # a FIFO, a socket, an unreadable file
            first = exc.args[0][0] if exc.args and exc.args[0] else ("", "", exc)
            raise SourceError(f"cannot copy the path source {source.path}: {first[2]}",
                              hint="a path source holds regular files, directories and links "
                                   "inside it") from None
        links_inside(root, source.path, f"the path source {source.path}")
        return root
    if isinstance(source, GitSource):
        root = checkout(source, dest, cache)
        links_inside(root, root, source.url)
        return root
    archive = download(source, cache)
    root = unpack(archive, dest)
    links_inside(dest, dest, archive.name)
    return root


def carry_in(carried: CarriedSource, tree: Path, scratch: Path, cache: Path) -> Path:
    """Fetch `carried` (as `fetch` does, in the scratch directory) and move it to its `into`
    in `tree`, the release's fetched source, where nothing but an empty directory may be:
    every existing step of `into` a real directory, never a link."""
    target = tree / carried.into
    what = f"the source carried into '{carried.into}' ({describe_source(carried.source)})"
    for step in [*reversed(carried.into.parents[:-1]), carried.into]:
        found = tree / step
        if found.is_symlink() or (found.exists() and not found.is_dir()):
            raise SourceError(f"cannot place {what}: '{step}' in the source tree is a "
                              f"{'link' if found.is_symlink() else 'file'}",
                              hint="give this `carry` entry of the recipe an `into` the "
                                   "source does not have")
    if target.is_dir() and any(target.iterdir()):
        raise SourceError(f"cannot place {what}: the source tree has '{carried.into}' already, "
                          "and it is not empty",
                          hint="give this `carry` entry of the recipe an `into` the source "
                               "does not have, or drop the entry if the source ships it")
    root = fetch(carried.source, scratch, cache)
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_dir():
        target.rmdir()
    root.rename(target)
    shutil.rmtree(scratch)
    return target


def links_inside(tree: Path, origin: Path, what: str) -> None:
    """`tree` (a copy of `origin`, or `origin` itself) once every symbolic link in it leads,
    resolved in `origin`, inside `origin`: each such link is made again relative within
    `tree`, and any other is refused naming it, so a patch can never write through one to
    outside the tree. The one rule for path sources, git checkouts and archives (whose members
    are also checked before they are extracted)."""
    real = origin.resolve()
    for folder, dirs, files in os.walk(tree):
        for name in sorted([*dirs, *files]):
            link = Path(folder, name)
            if not link.is_symlink():
                continue
            relative = link.relative_to(tree)
            try:
                target: Path | None = (origin / relative).resolve()
            except (RuntimeError, OSError):  # a loop of links
                target = None
            if target is None or not target.is_relative_to(real):
                raise SourceError(f"refusing {what}: '{relative}' is a link pointing outside "
                                  f"the tree ({link.readlink()})",
                                  hint="a patch applied through it would write outside the "
                                       "tree: copy what it points to into the tree instead")
            if tree != origin:
                link.unlink()
                link.symlink_to(os.path.relpath(tree / target.relative_to(real), link.parent))


# --- downloads -------------------------------------------------------------------------------


def cached_path(cache: Path, sha256: str) -> Path:
    return cache / "downloads" / sha256[:2] / sha256


def download(source: PypiSource | UrlSource, cache: Path) -> Path:
    """The verified file for `source`, from the cache or downloaded into it. One process at
    a time downloads a given file (the others wait and then use it); partial downloads that a
    killed process left are removed first."""
    target = cached_path(cache, source.sha256)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = f".{source.sha256}.part"
    with exclusive_lock(target.parent / f"{source.sha256}.lock"):
        for stale in target.parent.glob(f".tmp-*{partial}"):
            log.info("removing the partial download %s", stale)
            stale.unlink()
        if target.is_file():
            if sha256_file(target) == source.sha256:
                log.info("using cached %s", target)
                return target
            log.warning("cached %s is corrupt (sha256 differs); downloading it again", target)
            target.unlink()
        if isinstance(source, PypiSource):
            found = pypi_sdist(source)
            url, name, size = found.url, found.filename, found.size
        else:
            url, name, size = source.url, source.url.rsplit("/", 1)[-1], None
        bounds = Bounds(size or MAX_DOWNLOAD_BYTES, DOWNLOAD_TIMEOUT_S)
        with temp_file_in(target.parent, suffix=partial) as tmp:
            actual = _download_with_retries(url, tmp, bounds)
            if actual != source.sha256:
                raise SourceError(
                    f"sha256 mismatch for {name}: the recipe pins {source.sha256}, "
                    f"the download has {actual}",
                    hint=f"{redact(url)} changed or is not the file the recipe means; the file was "
                         "deleted",
                )
            _keep(tmp, target, name)
    return target


def _keep(tmp: Path, target: Path, name: str) -> None:
    """A verified download moved to its cache path (never over one there), with its name."""
    place_no_clobber(tmp, target)
    atomic_write_text(target.parent / f"{target.name}.name", name + "\n")


def download_unpinned(url: str, cache: Path) -> str:
    """`url` downloaded once into the download cache (no retry: `recipe new` pins what a
    build would download, and says so where it cannot); its sha256, which `download` then
    finds cached."""
    folder = cache / "downloads" / "unpinned"
    folder.mkdir(parents=True, exist_ok=True)
    with temp_file_in(folder, suffix=".part") as tmp:
        try:
            digest = _download_once(url, tmp, Bounds(MAX_DOWNLOAD_BYTES, DOWNLOAD_TIMEOUT_S))
        except UntrustedDataError as exc:
            raise SourceError(f"download of {redact(url)} failed: {exc.problem}") from exc
        target = cached_path(cache, digest)
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.is_file():
            _keep(tmp, target, url.rsplit("/", 1)[-1])
    return digest


def _download_with_retries(url: str, dest: Path, bounds: Bounds) -> str:
    """Retried: nothing answering and a server's failure (HTTP 5xx); final: any other answer
    (4xx), too large, too slow."""
    for attempt in range(1, RETRIES + 1):
        try:
            return _download_once(url, dest, bounds)
        except UntrustedDataError as exc:
            if exc.status is None:  # too large, too slow, not HTTP
                raise
            if exc.status < HTTPStatus.INTERNAL_SERVER_ERROR or attempt == RETRIES:
                raise SourceError(f"download of {redact(url)} failed: {exc.problem}",
                                  hint="check the URL in the recipe") from exc
        except SourceError as exc:  # nothing answers
            if attempt == RETRIES:
                raise SourceError(f"download failed: {exc.message}",
                                  hint="check the network, or pre-fill the download cache") from exc
        delay = 2 ** attempt
        log.warning("download of %s failed (attempt %d of %d); retrying in %d s",
                    redact(url), attempt, RETRIES, delay)
        time.sleep(delay)
    raise AssertionError("unreachable")


def _download_once(url: str, dest: Path, bounds: Bounds) -> str:
    log.info("downloading %s", redact(url))
    digest = hashlib.sha256()
    with dest.open("wb") as out:

        def take(chunk: bytes) -> None:
            digest.update(chunk)
            out.write(chunk)

        copy_url(url, take, bounds)
    return digest.hexdigest()


# --- git -------------------------------------------------------------------------------------


def checkout(source: GitSource, dest: Path, cache: Path) -> Path:
    """Check out the pinned commit (from a cached mirror) into `dest/src`."""
    mirror = cache / "git" / (hashlib.sha256(source.url.encode()).hexdigest()[:16] + ".git")
    if not mirror.is_dir():
        mirror.parent.mkdir(parents=True, exist_ok=True)
        _git("clone", "--mirror", "--quiet", source.url, str(mirror))
    elif not _has_commit(mirror, source.commit):
        _git("-C", str(mirror), "fetch", "--quiet", "--prune", "origin")
    if not _has_commit(mirror, source.commit):
        raise SourceError(f"commit {source.commit} is not in {source.url}",
                          hint="check the commit in the recipe (a full 40-digit hash)")
    if source.tag is not None:
        _check_tag(mirror, source)
    root = dest / "src"
    _git("clone", "--quiet", "--no-checkout", str(mirror), str(root))
    _git("-C", str(root), "checkout", "--quiet", "--detach", source.commit)
    _git("-C", str(root), "submodule", "update", "--init", "--recursive", "--quiet")
    head = cmd.run(["git", "-C", root, "rev-parse", "HEAD"], stream=False,
                   bounds=tool_bounds()).stdout.strip()
    if head != source.commit:
        raise SourceError(f"checked out {head}, expected {source.commit}")
    return root


def _git(*args: str) -> None:
    cmd.run(["git", *args], stream=False, error=SourceError, what="git")


def _check_tag(mirror: Path, source: GitSource) -> None:
    """The recipe's tag must name its pinned commit upstream, now: the mirror is refreshed
    first (tags move); offline, the cached mirror's tag is checked, with a warning."""
    try:
        _git("-C", str(mirror), "fetch", "--quiet", "--prune", "--force", "origin",
             "+refs/tags/*:refs/tags/*")
    except SourceError as exc:
        log.warning("cannot refresh %s (%s): checking tag %s in the cached mirror",
                    source.url, exc.message, source.tag)
    tagged = _tag_commit(mirror, str(source.tag))
    if tagged is None:
        raise SourceError(f"tag {source.tag} is not in {source.url}",
                          hint="check the tag in the recipe, or drop `tag` and keep the commit")
    if tagged != source.commit:
        raise SourceError(f"tag {source.tag} of {source.url} is commit {tagged}, but the recipe "
                          f"pins {source.commit}",
                          hint="the tag was moved upstream: review the new commit before you "
                               "pin it (its patches may no longer apply)")


def _tag_commit(repo: Path, tag: str) -> str | None:
    result = cmd.run(["git", "-C", repo, "rev-parse", "--verify", "--quiet",
                      f"refs/tags/{tag}^{{commit}}"], stream=False, ok_returncodes=(0, 1, 128),
                     bounds=tool_bounds())
    return result.stdout.strip() if result.returncode == 0 else None


def _has_commit(repo: Path, commit: str) -> bool:
    result = cmd.run(["git", "-C", repo, "cat-file", "-e", f"{commit}^{{commit}}"],
                     stream=False, ok_returncodes=(0, 1, 128), bounds=tool_bounds())
    return result.returncode == 0
