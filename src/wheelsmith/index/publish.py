"""Publish wheels into the local index, and yank them. Nothing is ever replaced or deleted.

Order of one publish, under the index lock:
  1. check the wheel (a regular file, valid zip, RECORD hashes, METADATA = filename, safe
     members) and its ledger line as the ledger's readers will check it
  2. ask the index's rules (rules.py) whether it refuses the wheel (a file name published
     with other bytes: exit 13; another arch set of its version in the channel: 12) or holds
     it already
  3. read the whole ledger for a new project (its channel's list needs it), and check every
     place it will write (the file, its sidecar, the ledger, the pages: inside the index,
     regular files or nothing yet): a refusal or a damaged line here leaves nothing behind
  4. store the file and its `.metadata` sidecar (content-addressed, link(2): never clobbers)
  5. append the ledger line, fsynced (the commit point)
  6. regenerate that project's pages (and the channel list for a new project) by temp file +
     rename, then move the pages watermark (see index.py) up to the ledger's end; an error
     from here on says that the wheel is published and what writes its pages
Publishing identical bytes again is a no-op.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from wheelsmith import locations, wheelfile
from wheelsmith.errors import (
    FileConflictError,
    PublishError,
    UntrustedDataError,
    UsageError,
    WheelsmithError,
    machine_error,
)
from wheelsmith.files import sha256_bytes, store_no_clobber
from wheelsmith.index import ledger, rules
from wheelsmith.index import store as index
from wheelsmith.index.ledger import FileRecord, IndexState
from wheelsmith.toolchain.torchspan import label_span, span_channels
from wheelsmith.untrusted import channel_problem, clip, local
from wheelsmith.untrusted.provenance import read_provenance

log = logging.getLogger(__name__)

@dataclass(frozen=True, slots=True)
class Published:
    filename: str
    channel: str
    project: str
    status: str  # "published" | "already published"
    also: tuple[str, ...] = ()  # the other channels of its torch span that list it
    not_listed: tuple[str, ...] = ()  # a channel of its span that refused it, and why

    @property
    def page(self) -> str:
        return f"{self.channel}/simple/{self.project}/"

    def spread(self) -> str:
        """The channels of its torch span, as a line after the publish line ("" without)."""
        said = ([f"also listed in {', '.join(self.also)} (its torch span)"] if self.also
                else []) + [f"not listed in {note}" for note in self.not_listed]
        return "; ".join(said)


@dataclass(frozen=True, slots=True)
class Candidate:
    wheel: Path
    record: FileRecord
    metadata: bytes


def inspect(wheel: Path, channel: str | None) -> Candidate:
    size = local.size_of(wheel)  # a FIFO or a device: FileSystemError naming it
    if size is None:
        raise PublishError(f"no such file: {wheel}")
    flaw, problems = wheelfile.examine(wheel)
    if flaw is not None:
        raise PublishError(f"refusing to publish {wheel.name}: it is not a valid wheel: "
                           + "; ".join(problems), hint=wheelfile.what_to_do(
                               flaw, "rebuild it; published files must be exactly what a "
                                     "build wrote"))
    metadata = wheelfile.read_metadata(wheel)
    headers = wheelfile.headers(metadata)  # checked: UTF-8, Requires-Python a specifier
    provenance = read_provenance(wheel)
    chosen = channel if channel is not None else provenance.channel if provenance else None
    if chosen is None:
        raise PublishError(f"{wheel.name} has no wheelsmith provenance, so its channel is "
                           "unknown", hint="pass --channel, e.g. --channel cu130-torch2.14")
    if (problem := channel_problem(chosen)) is not None:
        raise PublishError(f"channel '{clip(chosen)}' is not a valid name: {problem}",
                           hint="name the channel after its toolchain, e.g. cu130-torch2.14")
    name = wheelfile.WheelName.parse(wheel.name)
    record = FileRecord(
        channel=chosen, project=ledger.normalize(name.name), filename=wheel.name,
        sha256=local.sha256_of(wheel), size=size, upload_time=ledger.now(),
        metadata_sha256=sha256_bytes(metadata), requires_python=headers.get("Requires-Python"),
        version=str(name.version), key=provenance.key if provenance else None,
        archs=provenance.archs if provenance else None,
        binaries=provenance.binaries if provenance else None)
    # what the ledger's readers would refuse is never written (21, naming the wheel)
    ledger.check_entry(ledger.publish_entry(record), f"{wheel.name} (its ledger line)")
    return Candidate(wheel, record, metadata)


def publish(wheel: Path, root: Path, *, channel: str | None = None,
            advice: rules.Advice | None = None) -> Published:
    """`wheel` into the index at `root`; a refusal's hint from `advice` (default: in
    publish's words, `publish_advice`). A wheel whose label states a torch span (its torch
    range proved it under those minors: toolchain/torchspan.py) is then listed in the channel
    of each minor of the span too; a channel whose rules refuse it there is named, with why,
    and the wheel stays published in its own."""
    first = _publish_one(wheel, root, channel, advice)
    span = label_span(wheelfile.WheelName.parse(wheel.name).version.local or "")
    if span is None:
        return first
    also, refused = [], []
    for other in span_channels(first.channel, span):
        try:
            _publish_one(wheel, root, other, advice)
            also.append(other)
        except (PublishError, FileConflictError) as exc:
            refused.append(f"{other}: {exc.message}")
    return replace(first, also=tuple(also), not_listed=tuple(refused))


def _publish_one(wheel: Path, root: Path, channel: str | None,
                 advice: rules.Advice | None) -> Published:
    candidate = inspect(wheel, channel)
    record = candidate.record
    with index.locked(root, project=record.project, filename=record.filename) as known:
        status = _decide(known, record, advice or publish_advice)
        if status == "already published":
            return Published(record.filename, record.channel, record.project, status)
        new_project = record.project not in known.channels.get(record.channel, {})
        # a new project changes the channel's list, which needs the whole ledger: read (every
        # line checked) before anything is written
        state = ledger.read(root) if new_project else known
        for place in (record.path, f"{record.path}.metadata", ledger.LEDGER):
            local.check_place(root, place)
        index.page_places(root, record.channel, record.project, lists=new_project)
        _store(root, candidate)
        ledger.append(root, ledger.publish_entry(record), wheel.name)  # the commit point
        with _committed(f"{record.filename} is published (its ledger line is written)"):
            state.add(record)
            index.write_pages(root, state, record.channel, record.project, lists=new_project)
            index.pages_done(root)
    log.info("published %s to %s", record.filename, record.channel)
    return Published(record.filename, record.channel, record.project, "published")


@contextlib.contextmanager
def _committed(done: str) -> Iterator[None]:
    """After the commit point: an error (the machine's too) says what was done, and that the
    pages follow the ledger (the next writer, or `index rebuild`, writes them)."""
    try:
        yield
    except (WheelsmithError, OSError) as exc:
        error = exc if isinstance(exc, WheelsmithError) else machine_error(
            exc, locations.cache_dir())
        if error is None:
            raise
        error.hint = (f"{done}; its pages are not all written: the next publish or yank, or "
                      f"`wheelsmith index rebuild`, writes them"
                      + (f". {error.hint}" if error.hint else ""))
        if error is exc:
            raise
        raise error from exc


def _decide(state: IndexState, record: FileRecord, advice: rules.Advice) -> str:
    standing = rules.judge(state, rules.Claim.built(record))
    if standing.refusal is not None:
        raise standing.refusal.error(advice(standing.refusal))
    return "already published" if standing.held is not None else "publish"


def publish_advice(refusal: rules.Refusal) -> str:
    """A refusal's hint in publish's words (its options)."""
    if refusal.rule == rules.IMMUTABLE:
        return ("published files never change: give the new build a new name (a build tag, "
                "a .postN version or another label), or yank the old one")
    archs = (refusal.claim.archs or "").replace(";", "-").replace("+", "")
    return ("pip would pick between them by label, not by your GPU: publish one arch set per "
            f"version per channel (e.g. --channel {refusal.claim.channel}-sm{archs})")


def _store(root: Path, candidate: Candidate) -> None:
    """File and sidecar at their content-addressed paths; an existing one has the same bytes
    (its name contains its sha256), which `index check` verifies."""
    target = local.check_place(root, candidate.record.path)  # a link out: nothing there
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = index.tmp_dir(root)
    store_no_clobber(target, lambda tmp: _copy(candidate.wheel, tmp), scratch)
    store_no_clobber(target.with_name(target.name + ".metadata"),
                     lambda tmp: tmp.write_bytes(candidate.metadata), scratch)


def _copy(wheel: Path, tmp: Path) -> None:
    """The wheel's bytes into `tmp`, read as the regular file it was checked to be."""
    with local.open_regular(wheel) as source, tmp.open("wb") as sink:
        shutil.copyfileobj(source, sink)


def _check_reason(entry: dict[str, Any]) -> None:
    """A yank's reason is shown by pip and uv and read back from the ledger: text its readers
    take (no control character, no half of a UTF-16 pair from a byte that is not UTF-8, a
    line within the ledger's bound), or a usage error before anything is written."""
    try:
        ledger.check_entry(entry, "--reason")
    except UntrustedDataError as exc:
        raise UsageError(f"--reason: {exc.problem.removeprefix('reason: ')}",
                         hint="give the reason as plain text, one line of at most a few "
                              "hundred characters; nothing was written") from None


def yank(root: Path, filename: str, reason: str | None) -> FileRecord:
    """Mark a file yanked (reason given) or not yanked (None) in every channel listing it."""
    with index.locked(root, filename=filename) as found:
        record = found.by_filename.get(filename)
        if record is None:
            raise PublishError(f"{filename} is not in the index at {root}",
                               hint="yank takes a published file name, e.g. from the page")
        state = ledger.read(root, project=record.project)
        channels = [(c, record.project) for c, projects in state.channels.items()
                    if record.project in projects and filename in projects[record.project].files]
        entry = ledger.yank_entry(record, reason)
        _check_reason(entry)
        for channel, project in channels:  # every place first: a refusal leaves nothing
            index.page_places(root, channel, project, lists=False)
        ledger.append(root, entry, "--reason")  # the commit point
        with _committed(f"{filename} is {'yanked' if reason is not None else 'unyanked'} "
                        "(its ledger line is written)"):
            state = ledger.read(root, project=record.project)
            for channel, project in channels:
                index.write_pages(root, state, channel, project, lists=False)
            index.pages_done(root)
    return record
