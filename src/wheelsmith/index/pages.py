"""Render simple-repository pages from the ledger: PEP 503 HTML and PEP 691 JSON.

Every function is pure (ledger state in, bytes out), so `index rebuild` and `index check` can
compare what is on disk with what the ledger says byte for byte.

Layout under the index root (one simple root per toolchain channel, as PyTorch does):

    <channel>/simple/index.html, index.json               the channel's project list
    <channel>/simple/<project>/index.html, index.json     one project's files
    files/<sha256[:2]>/<sha256>/<filename>[.metadata]     the files, shared by all channels
"""

from __future__ import annotations

import html
import json
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path

from packaging.version import Version

from wheelsmith.index import variants
from wheelsmith.index.ledger import FileRecord, IndexState, ProjectState

API_VERSION = "1.1"
HTML_TYPE = "application/vnd.pypi.simple.v1+html"
JSON_TYPE = "application/vnd.pypi.simple.v1+json"
FROM_PROJECT_PAGE = "../../../"  # <channel>/simple/<project>/ -> index root

Link = Callable[[FileRecord], str]  # where a project page points for a file


def file_url(record: FileRecord) -> str:
    """Relative URL from a project page; `+` becomes `%2B` (pip and uv both accept it)."""
    return FROM_PROJECT_PAGE + urllib.parse.quote(record.path, safe="/")


def _sorted_files(project: ProjectState) -> list[FileRecord]:
    return sorted(project.files.values(), key=lambda r: (Version(r.version), r.filename))


def project_html(name: str, project: ProjectState, link: Link = file_url) -> bytes:
    lines = ["<!DOCTYPE html>", "<html>", "<head>",
             f'<meta name="pypi:repository-version" content="{API_VERSION}">',
             f"<title>Links for {html.escape(name)}</title>", "</head>", "<body>",
             f"<h1>Links for {html.escape(name)}</h1>"]
    for record in _sorted_files(project):
        attrs = [f'href="{html.escape(link(record))}#sha256={record.sha256}"']
        if record.requires_python:
            attrs.append(f'data-requires-python="{html.escape(record.requires_python)}"')
        meta = f"sha256={record.metadata_sha256}"
        attrs += [f'data-core-metadata="{meta}"', f'data-dist-info-metadata="{meta}"']
        if record.filename in project.yanked:
            attrs.append(f'data-yanked="{html.escape(project.yanked[record.filename])}"')
        lines.append(f"<a {' '.join(attrs)}>{html.escape(record.filename)}</a><br>")
    lines += ["</body>", "</html>", ""]
    return "\n".join(lines).encode()


def project_json(name: str, project: ProjectState, link: Link = file_url) -> bytes:
    files = []
    for record in _sorted_files(project):
        yanked: bool | str = project.yanked.get(record.filename, False)
        files.append({
            "filename": record.filename,
            "url": link(record),
            "hashes": {"sha256": record.sha256},
            "requires-python": record.requires_python,
            "core-metadata": {"sha256": record.metadata_sha256},
            "yanked": yanked if yanked != "" else True,
            "size": record.size,
            "upload-time": record.upload_time,
            # a key of the index's own (PEP 691 keeps names with a leading underscore for
            # them): what the binaries say of where the file runs
            **({"_wheelsmith": {"binaries": record.binaries}} if record.binaries else {}),
        })
    versions = sorted({r.version for r in project.files.values()}, key=Version)
    data = {"meta": {"api-version": API_VERSION}, "name": name, "versions": versions,
            "files": files}
    return (json.dumps(data, indent=1, sort_keys=True) + "\n").encode()


def channel_html(projects: list[str]) -> bytes:
    lines = ["<!DOCTYPE html>", "<html>", "<head>",
             f'<meta name="pypi:repository-version" content="{API_VERSION}">',
             "<title>Simple index</title>", "</head>", "<body>"]
    lines += [f'<a href="{urllib.parse.quote(p)}/">{html.escape(p)}</a><br>' for p in projects]
    lines += ["</body>", "</html>", ""]
    return "\n".join(lines).encode()


def channel_json(projects: list[str]) -> bytes:
    data = {"meta": {"api-version": API_VERSION}, "projects": [{"name": p} for p in projects]}
    return (json.dumps(data, indent=1, sort_keys=True) + "\n").encode()


def root_html(channels: list[str]) -> bytes:
    items = "".join(f'<li><a href="{urllib.parse.quote(c)}/simple/">{html.escape(c)}</a></li>'
                    for c in channels)
    return (f"<!DOCTYPE html>\n<html><head><title>wheelsmith index</title></head><body>"
            f"<h1>Channels</h1><ul>{items}</ul></body></html>\n").encode()


def channel_pages(state: IndexState, channel: str) -> dict[Path, bytes]:
    projects = sorted(state.channels.get(channel, {}))
    base = Path(channel) / "simple"
    return {base / "index.html": channel_html(projects),
            base / "index.json": channel_json(projects)}


def project_pages(state: IndexState, channel: str, project: str,
                  link: Link = file_url) -> dict[Path, bytes]:
    data = state.channels[channel][project]
    base = Path(channel) / "simple" / project
    return {base / "index.html": project_html(project, data, link),
            base / "index.json": project_json(project, data, link),
            **{base / name: page for name, page in variants.pages(data).items()}}


def page_paths(channel: str, project: str, *, lists: bool) -> list[Path]:
    """Where `project_pages` and, with `lists`, `channel_pages` and the root page are."""
    base = Path(channel) / "simple"
    found = [base / project / "index.html", base / project / "index.json"]
    return [*found, base / "index.html", base / "index.json", Path("index.html")] if lists \
        else found


def each_page(state: IndexState, link: Link = file_url) -> Iterator[tuple[Path, bytes]]:
    """Every page the ledger implies, one at a time (what `index rebuild` writes; `index
    export` with its own links; `index check` holds one at a time). Project pages first, then
    channel lists, the root page last: the order a writer that must never list what is not
    there yet writes them in."""
    for channel, names in state.channels.items():
        for project in names:
            yield from project_pages(state, channel, project, link).items()
    for channel in state.channels:
        yield from channel_pages(state, channel).items()
    yield Path("index.html"), root_html(sorted(state.channels))


def each_path(state: IndexState) -> Iterator[Path]:
    """Where each page `each_page` renders lies, in its order (nothing rendered)."""
    for channel, names in state.channels.items():
        for project in names:
            yield from page_paths(channel, project, lists=False)
    for channel in state.channels:
        yield from (Path(channel) / "simple" / name for name in ("index.html", "index.json"))
    yield Path("index.html")


def all_pages(state: IndexState, link: Link = file_url) -> dict[Path, bytes]:
    """`each_page`, all of them at once."""
    return dict(each_page(state, link))
