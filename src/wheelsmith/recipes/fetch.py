"""Fetch a recipe's source into a fresh directory: verified before it is unpacked.

Downloads land in a content-addressed cache (`downloads/<sha256>`); a file whose sha256 does
not match the pin is deleted and never unpacked. Archives are checked member by member
(absolute paths, `..`, links leaving the tree, device files) before extraction with the
`data` filter. Git sources are checked out at the pinned commit; local directories are copied.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import re
import shutil
import stat
import sys
import tarfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path, PurePosixPath
from typing import Any, Literal, overload

from packaging.utils import canonicalize_name

from wheelsmith import cmd, locations
from wheelsmith.errors import SourceError
from wheelsmith.files import (
    atomic_write_text,
    exclusive_lock,
    naming,
    place_no_clobber,
    sha256_file,
    temp_file_in,
)
from wheelsmith.recipes.model import GitSource, LocalSource, PypiSource, Source, UrlSource

log = logging.getLogger(__name__)

RETRIES = 3
TIMEOUT_S = 60
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
PIP_INDEX_SCRIPT = locations.RESOURCES / "pip_index.py"
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
        shutil.copytree(source.path, root, ignore=IGNORED_IN_LOCAL, symlinks=True)
        return root
    if isinstance(source, GitSource):
        return checkout(source, dest, cache)
    archive = download(source, cache)
    return unpack(archive, dest)


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
            url, name = pypi_sdist_url(source)
        else:
            url, name = source.url, source.url.rsplit("/", 1)[-1]
        with temp_file_in(target.parent, suffix=partial) as tmp:
            actual = _download_with_retries(url, tmp)
            if actual != source.sha256:
                raise SourceError(
                    f"sha256 mismatch for {name}: the recipe pins {source.sha256}, "
                    f"the download has {actual}",
                    hint=f"{url} changed or is not the file the recipe means; the file was "
                         "deleted",
                )
            place_no_clobber(tmp, target)
        atomic_write_text(target.parent / f"{source.sha256}.name", name + "\n")
    return target


def _download_with_retries(url: str, dest: Path) -> str:
    for attempt in range(1, RETRIES + 1):
        try:
            return _download_once(url, dest)
        except urllib.error.HTTPError as exc:
            if exc.code < 500 or attempt == RETRIES:
                raise SourceError(f"download of {url} failed: HTTP {exc.code} {exc.reason}",
                                  hint="check the URL in the recipe") from exc
        except (urllib.error.URLError, OSError) as exc:
            if attempt == RETRIES:
                raise SourceError(f"download of {url} failed: {exc}",
                                  hint="check the network, or pre-fill the download cache") from exc
        delay = 2 ** attempt
        log.warning("download of %s failed (attempt %d of %d); retrying in %d s",
                    url, attempt, RETRIES, delay)
        time.sleep(delay)
    raise AssertionError("unreachable")


def _download_once(url: str, dest: Path) -> str:
    log.info("downloading %s", url)
    digest = hashlib.sha256()
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response, dest.open("wb") as out:  # noqa: S310 - URLs come from pinned recipes
        while chunk := response.read(1 << 20):
            digest.update(chunk)
            out.write(chunk)
    return digest.hexdigest()


@dataclass(frozen=True, slots=True)
class PackageIndex:
    """The simple index sdists are looked up on, and where that setting came from."""

    url: str
    origin: str  # WHEELSMITH_INDEX_URL, PIP_INDEX_URL, pip's configuration, pip's default

    def fix(self) -> str:
        """What to do when it does not answer."""
        if self.origin == "WHEELSMITH_INDEX_URL":
            return "fix WHEELSMITH_INDEX_URL (a PEP 691 simple index), or unset it to use pip's"
        other = "or set WHEELSMITH_INDEX_URL to a PEP 691 simple index that answers"
        if self.origin == "PIP_INDEX_URL":
            return f"fix PIP_INDEX_URL, {other}"
        if self.origin == "pip's configuration":
            return f"fix index-url in pip's configuration (`pip config list` shows it), {other}"
        return f"check the network and proxy settings, {other}"


def package_index() -> PackageIndex:
    """$WHEELSMITH_INDEX_URL, else the index the pip wheelsmith runs uses, asked from that pip
    (PIP_INDEX_URL, pip's configuration files, else pip's own default)."""
    own = os.environ.get("WHEELSMITH_INDEX_URL")
    if own:
        return PackageIndex(own.rstrip("/"), "WHEELSMITH_INDEX_URL")
    return _ask_pip(tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("PIP_"))))


@functools.cache
def _ask_pip(pip_environment: tuple[tuple[str, str], ...]) -> PackageIndex:  # noqa: ARG001 - the cache key
    result = cmd.run([sys.executable, PIP_INDEX_SCRIPT], stream=False, error=SourceError,
                     what="pip (asked which index it uses)")
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    log.info("package index: %s (%s)", answer["index_url"], answer["origin"])
    return PackageIndex(str(answer["index_url"]).rstrip("/"), str(answer["origin"]))


def index_url() -> str:
    return package_index().url


@overload
def simple_page(project: str, base: str | None = None, *, timeout: float = TIMEOUT_S,
                missing_ok: Literal[False] = False) -> tuple[str, dict[str, Any]]: ...
@overload
def simple_page(project: str, base: str | None = None, *, timeout: float = TIMEOUT_S,
                missing_ok: Literal[True]) -> tuple[str, dict[str, Any] | None]: ...
def simple_page(project: str, base: str | None = None, *, timeout: float = TIMEOUT_S,
                missing_ok: bool = False) -> tuple[str, dict[str, Any] | None]:
    """A project's PEP 691 page on a simple index (default: `index_url()`): (its URL, its
    JSON). With `missing_ok`, a project the index does not have (404) gives None. A file://
    index is read from disk, as a wheelsmith index writes it."""
    index = package_index() if base is None else None
    page = f"{(base or index_url()).rstrip('/')}/{canonicalize_name(project)}/"
    if page.startswith("file:"):
        return page, _page_on_disk(page, missing_ok=missing_ok)
    request = urllib.request.Request(page, headers={"Accept": SIMPLE_JSON})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            data: dict[str, Any] = json.load(response)
    except urllib.error.HTTPError as exc:
        if missing_ok and exc.code == HTTPStatus.NOT_FOUND:
            return page, None
        raise _unreadable(page, exc) from exc
    except (urllib.error.URLError, OSError) as exc:
        if index is not None:
            reason = getattr(exc, "reason", exc)
            raise SourceError(f"the package index {index.url} (from {index.origin}) does not "
                              f"answer: {reason}", hint=index.fix()) from exc
        raise _unreadable(page, exc) from exc
    except ValueError as exc:
        raise _unreadable(page, exc) from exc
    return page, data


def _page_on_disk(page: str, *, missing_ok: bool) -> dict[str, Any] | None:
    """The JSON page in a file:// page's directory (`index.json` beside `index.html`, as
    index/pages.py writes them); with `missing_ok`, a project not on disk gives None, as a
    404 does."""
    path = Path(urllib.request.url2pathname(urllib.parse.urlsplit(page).path)) / "index.json"
    try:
        data: dict[str, Any] = json.loads(path.read_bytes())
    except FileNotFoundError as exc:
        if missing_ok:
            return None
        raise _unreadable(page, exc) from exc
    except (OSError, ValueError) as exc:
        raise _unreadable(page, exc) from exc
    return data


def _unreadable(page: str, exc: Exception) -> SourceError:
    return SourceError(f"cannot read the index page {page}: {exc}",
                       hint="set WHEELSMITH_INDEX_URL to a PEP 691 (JSON) simple index")


def sdist_of(filename: str, project: str, version: str) -> bool:
    """`filename` is the sdist of (project, version): `torch_scatter-2.1.2.tar.gz`, and the
    older spelling with the project's own dashes (`pytorch-fast-transformers-0.4.0.tar.gz`)."""
    stem = re.sub(r"\.(tar\.gz|zip)$", "", filename)
    name, _, spelled = stem.rpartition("-")
    return stem != filename and spelled == version and \
        re.sub(r"[-_.]+", "-", name).lower() == re.sub(r"[-_.]+", "-", project).lower()


def pypi_sdist_url(source: PypiSource) -> tuple[str, str]:
    """Find the sdist of (project, version) with the pinned sha256 on the simple index."""
    page, data = simple_page(source.project)
    candidates = [f for f in data.get("files", [])
                  if sdist_of(f["filename"], source.project, source.version)]
    for file in candidates:
        if file.get("hashes", {}).get("sha256") == source.sha256:
            return urllib.parse.urljoin(page, file["url"]), file["filename"]
    listed = "; ".join(f"{f['filename']} sha256={f.get('hashes', {}).get('sha256')}"
                       for f in candidates) or "none"
    raise SourceError(
        f"no sdist of {source.project} {source.version} on {index_url()} has sha256 "
        f"{source.sha256}",
        hint=f"sdists there: {listed}",
    )


# --- unpacking -------------------------------------------------------------------------------


def unpack(archive: Path, dest: Path) -> Path:
    """Extract a tar or zip archive into `dest` after checking every member."""
    if tarfile.is_tarfile(archive):
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                _check_tar_member(archive, member)
            with naming(dest):
                tar.extractall(dest, filter="data")
    elif zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                _check_zip_member(archive, info)
            with naming(dest):
                zf.extractall(dest)  # noqa: S202 - every member was checked above
    else:
        raise SourceError(f"{archive} is neither a tar nor a zip archive")
    entries = list(dest.iterdir())
    return entries[0] if len(entries) == 1 and entries[0].is_dir() else dest


def _refuse(archive: Path, member: str, reason: str) -> SourceError:
    return SourceError(f"refusing to unpack {archive.name}: member '{member}' {reason}",
                       hint="the archive is malformed or hostile; nothing was extracted")


def _escapes(path: str) -> bool:
    pure = PurePosixPath(path)
    return pure.is_absolute() or ".." in pure.parts


def _check_tar_member(archive: Path, member: tarfile.TarInfo) -> None:
    name = member.name
    if _escapes(name):
        raise _refuse(archive, name, "has an absolute path or '..'")
    if member.isdev() or member.isfifo():
        raise _refuse(archive, name, "is a device file or FIFO")
    if member.issym():
        target = os.path.normpath(PurePosixPath(name).parent / member.linkname)
        if PurePosixPath(member.linkname).is_absolute() or _escapes(target):
            raise _refuse(archive, name, f"is a link pointing outside ({member.linkname})")
    if member.islnk() and _escapes(os.path.normpath(member.linkname)):
        raise _refuse(archive, name, f"is a hard link pointing outside ({member.linkname})")


def _check_zip_member(archive: Path, info: zipfile.ZipInfo) -> None:
    name = info.filename
    if "\\" in name or re.match(r"^[A-Za-z]:", name) or _escapes(name):
        raise _refuse(archive, name, "has an absolute path, a drive, a backslash or '..'")
    if stat.S_ISLNK(info.external_attr >> 16):
        raise _refuse(archive, name, "is a symbolic link")


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
    head = cmd.run(["git", "-C", root, "rev-parse", "HEAD"], stream=False).stdout.strip()
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
                      f"refs/tags/{tag}^{{commit}}"], stream=False, ok_returncodes=(0, 1, 128))
    return result.stdout.strip() if result.returncode == 0 else None


def _has_commit(repo: Path, commit: str) -> bool:
    result = cmd.run(["git", "-C", repo, "cat-file", "-e", f"{commit}^{{commit}}"],
                     stream=False, ok_returncodes=(0, 1, 128))
    return result.returncode == 0
