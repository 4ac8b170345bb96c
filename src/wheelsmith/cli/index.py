"""`publish` (to the local index or, with --to, to a server), `yank`, `index check`,
`index rebuild`, `index export`, `serve`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from wheelsmith.cli import console
from wheelsmith.cli._common import (
    directories,
    emit_json,
    index_option,
    json_option,
    main,
    writable,
)
from wheelsmith.errors import IndexDriftError
from wheelsmith.index import export, ledger, publish, upload
from wheelsmith.index import store as index
from wheelsmith.index.listener import CONNECTIONS, authority, listen, per_client_default
from wheelsmith.index.serve import IDLE_S, banner
from wheelsmith.untrusted import local


def published_json(published: publish.Published | upload.Uploaded | None
                   ) -> dict[str, Any] | None:
    if published is None:
        return None
    spread = {"also_channels": list(published.also), "not_listed": list(published.not_listed)} \
        if isinstance(published, publish.Published) and published.spread() else {}
    return {"filename": published.filename, "channel": published.channel,
            "status": published.status, "page": published.page, **spread}


@main.command("publish")
@click.argument("wheels", nargs=-1, required=True, type=click.Path(path_type=Path))
@index_option
@click.option("--to", "to", metavar="URL", help="Publish to this server's upload API (as twine "
              "does) instead of --index: a URL with {channel} where the channel's index is, "
              "e.g. http://HOST:3141/USER/{channel}/ (devpi). The token comes from "
              f"${upload.TOKEN_ENV} (user ${upload.USER_ENV}, default __token__), "
              "$TWINE_PASSWORD or the keyring, never from the command line.")
@click.option("--simple", "simple", metavar="URL", help="With --to: the channel's simple API, "
              "also with {channel} (default: the --to URL + simple/; devpi: "
              "http://HOST:3141/USER/{channel}/+simple/).")
@click.option("--channel", help="Channel to publish into (default: the toolchain channel in "
              "the wheel's provenance, e.g. cu130-torch2.14).")
@json_option
def publish_command(wheels: tuple[Path, ...], index_dir: Path, to: str | None,
                    simple: str | None, channel: str | None, as_json: bool) -> None:
    """Publish WHEELS to the local index, or with --to to a server. Identical bytes again:
    no-op; other bytes under a published name: refused."""
    if simple is not None and to is None:
        raise click.UsageError("--simple goes with --to (the server's simple API)")
    if to is None:
        writable(("--index", index_dir), cache=False)
    progress = console.progress()
    progress.items([wheel.name for wheel in wheels], "published", "not published")
    results: list[publish.Published | upload.Uploaded] = []
    for wheel in wheels:  # each is complete (ledger + pages) when its line is printed
        progress.begin(wheel.name)
        progress.stopping = (
            f"{wheel.name} was being published (`wheelsmith index check --index {index_dir}` "
            "says whether it was)" if to is None else f"{wheel.name} was not uploaded (it was "
            "being checked)")
        if to is not None:
            result: publish.Published | upload.Uploaded = upload.upload(
                wheel, to, simple=simple, channel=channel, stopping=progress.say)
            where = result.page
        else:
            result = publish.publish(wheel, index_dir, channel=channel)
            where = f"{index_dir}/{result.page}"
        progress.finish()
        results.append(result)
        if not as_json:
            click.echo(f"{result.status}: {result.filename} -> {where}")
            if isinstance(result, publish.Published) and result.spread():
                click.echo(f"  {result.spread()}")
    if as_json:
        emit_json({"ok": True, "published": [published_json(r) for r in results]})


@main.command("yank")
@click.argument("filename")
@index_option
@click.option("--reason", help="Why (shown by pip and uv). Required unless --undo.")
@click.option("--undo", is_flag=True, help="Rescind an earlier yank.")
def yank_command(filename: str, index_dir: Path, reason: str | None, undo: bool) -> None:
    """Yank FILENAME: installers skip it unless it is pinned exactly. Nothing is deleted."""
    if not undo and not reason:
        raise click.UsageError("--reason is required, e.g. --reason 'wrong results on sm_103'")
    writable(("--index", index_dir), cache=False)
    record = publish.yank(index_dir, Path(filename).name, None if undo else reason)
    click.echo(f"{'unyanked' if undo else 'yanked'}: {record.filename}")


@main.group("index")
def index_group() -> None:
    """Maintain the local index: check it, rebuild its pages, export it as a static tree for
    any web server or object store."""


@index_group.command("check")
@index_option
@json_option
def index_check(index_dir: Path, as_json: bool) -> None:
    """Re-verify every file and every page against the ledger; nothing is written (`index
    rebuild` repairs pages)."""
    directories(("--index", index_dir))
    console.progress().stopping = "nothing was changed (index check only reads)"
    report = index.check(index_dir)
    if as_json:
        emit_json({"ok": not report.problems, "files": report.files,
                   "problems": report.problems, "notes": report.notes,
                   "pages_behind": report.behind})
    else:
        for note in report.notes:
            click.echo(f"note: {note}", err=True)
    if report.problems:
        raise IndexDriftError(f"{len(report.problems)} problem(s) in {index_dir}",
                              findings=report.problems,
                              hint="pages: `wheelsmith index rebuild`; files: restore them "
                                   "from a backup (the ledger has their sha256)")
    if not as_json:
        pages_are = (f"{report.behind} page(s) are behind it, for the next writer (see the "
                     "notes)") if report.behind else "every page is current"
        click.echo(f"ok: {report.files} file(s) match the ledger; {pages_are}")


@index_group.command("rebuild")
@index_option
def index_rebuild(index_dir: Path) -> None:
    """Regenerate every page from the ledger (files are never touched)."""
    writable(("--index", index_dir), cache=False)
    count = index.rebuild(index_dir)
    click.echo(f"ok: {count} page(s) regenerated from {index_dir}/ledger.jsonl")


@index_group.command("export")
@click.argument("dest", type=click.Path(path_type=Path))
@index_option
@click.option("--base-url", metavar="URL", help="Where the files will be served from (a "
              "bucket, a CDN): pages link URL/files/...; a URL with {filename} (release "
              "assets) links URL with each file's name, the files flat in DEST/files/. "
              "Default: links relative to the pages, the files served with them.")
@json_option
def index_export(dest: Path, index_dir: Path, base_url: str | None, as_json: bool) -> None:
    """Write the index as a static tree into DEST (PEP 503, PEP 691, PEP 658), for any
    static host; again later, only what changed is written."""
    directories(("--index", index_dir))
    done = export.export(index_dir, dest, base_url)
    if as_json:
        emit_json({"ok": True, "files": done.files, "files_written": done.files_written,
                   "pages": done.pages, "pages_written": done.pages_written})
        return
    click.echo(f"ok: {done.files} file(s) ({done.files_written} new), {done.pages} page(s) "
               f"({done.pages_written} rewritten) in {dest}")


@main.command("serve")
@index_option
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535))
@click.option("--idle-timeout", "idle_s", default=int(IDLE_S), show_default=True,
              type=click.IntRange(1, 3600), metavar="SECONDS",
              help="Close a connection that has not sent a whole request, or has taken no "
                   "part of its reply, for this long.")
@click.option("--connections", default=CONNECTIONS, show_default=True,
              type=click.IntRange(1, 65536), metavar="N",
              help="Serve at most N connections at once; more are answered 503 at once.")
@click.option("--connections-per-client", "per_client", type=click.IntRange(1, 65536),
              metavar="N", help="Serve at most N connections of one client (one address; "
              "an IPv6 client: its /64) at once; more are answered 503 at once. Default: an "
              f"eighth of --connections ({per_client_default(CONNECTIONS)}).")
def serve_command(index_dir: Path, host: str, port: int, idle_s: int, connections: int,
                  per_client: int | None) -> None:
    """Serve the index read-only over HTTP (HTML/JSON negotiation, .metadata, no PyPI)."""
    directories(("--index", index_dir))
    server = listen(index_dir, host, port, idle_s=idle_s, connections=connections,
                    per_client=per_client)  # nothing is created if it cannot
    console.progress().stopping = (f"stopped serving {index_dir}; serving only reads the "
                                   "index, and has no work directory")
    try:
        if index.create(index_dir):
            click.echo(f"a new, empty index in {index_dir}: publishing fills it while it is "
                       "served", err=True)
        elif local.size_of(index_dir / ledger.LEDGER, follow=False) is None:  # a FIFO: 22
            raise IndexDriftError(f"{index_dir} is not a wheelsmith index (no ledger.jsonl)",
                                  hint="point --index at an index, an empty directory or a new "
                                       "path")
        console.setup_logging(max(1, _verbosity()))
        url = f"http://{authority(host, server.server_address[1])}"
        click.echo(f"serving {index_dir} at {url}/ (Ctrl-C stops)", err=True)
        for line in banner(index_dir, url, host):
            click.echo(line, err=True)
        server.serve_forever()
    finally:
        server.server_close()


def _verbosity() -> int:
    ctx = click.get_current_context().find_root()
    return int(ctx.params.get("verbose", 0))
