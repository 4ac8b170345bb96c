"""Publish wheels to an index on another server through the upload API that twine speaks (a
multipart POST with `:action=file_upload`), under the local index's rules.

One index per channel: `--to` is a URL template with `{channel}` (devpi's
`http://HOST/USER/{channel}/`), or the one channel's URL with `--channel`. Per wheel:
  1. check the wheel as a local publish does (publish.inspect: valid, channel known)
  2. read the channel's simple API: the same filename with the same sha256 is a no-op; with
     other bytes it is refused, and so is another arch set for the same version
  3. upload it (file, sha256 and blake2b digests, the METADATA fields)
  4. the server's answer arbitrates: accepted, or refused because it has the name (a
     concurrent publisher) -- then its listing says whether it is these bytes or others
  5. read the listing again: the file must be there with this sha256 (and the PEP 658
     metadata hash, where the server serves one, must be this METADATA's)
The token comes from the environment or the keyring, never the command line (`credentials`).
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import os
import secrets
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from email.parser import BytesParser
from pathlib import Path

from wheelsmith.arch import ArchSet
from wheelsmith.errors import FileConflictError, PublishError, UsageError
from wheelsmith.files import CHUNK
from wheelsmith.index import remote
from wheelsmith.index.publish import Candidate, inspect
from wheelsmith.index.remote import Auth
from wheelsmith.recipes.simple import PageFile
from wheelsmith.untrusted import local
from wheelsmith.untrusted.addresses import given_url
from wheelsmith.untrusted.redaction import keep, keep_header
from wheelsmith.wheelfile import WheelName

log = logging.getLogger(__name__)

TOKEN_ENV = "WHEELSMITH_UPLOAD_TOKEN"  # noqa: S105 - the variable's name
USER_ENV = "WHEELSMITH_UPLOAD_USER"
DEFAULT_USER = "__token__"  # what PyPI-style token authentication expects
CREDENTIAL_HINT = (f"set {TOKEN_ENV} (and {USER_ENV}, default {DEFAULT_USER}), or TWINE_USERNAME"
                   " and TWINE_PASSWORD, or store it in the keyring under the upload URL")
CHANNEL = "{channel}"
_PLURAL = {"classifier": "classifiers", "project_url": "project_urls",
           "provides_extra": "provides_extras"}


@dataclass(frozen=True, slots=True)
class Uploaded:
    filename: str
    channel: str
    project: str
    status: str  # "published" | "already published"
    page: str  # the project's page on the server's simple API


@dataclass(frozen=True, slots=True)
class Server:
    """Where one channel goes: its upload URL and its simple API (both ending in /)."""

    upload: str
    simple: str


def credentials(upload_url: str, env: Mapping[str, str] = os.environ) -> Auth | None:
    """$WHEELSMITH_UPLOAD_TOKEN (user $WHEELSMITH_UPLOAD_USER, default __token__), else
    $TWINE_PASSWORD (user $TWINE_USERNAME), else the keyring's entry for the upload URL
    (when the keyring package is installed); None: upload without credentials. Whichever it
    is is never shown from here on, nor its Authorization header (`redaction`)."""
    auth = _credentials(upload_url, env)
    if auth is not None:
        keep(auth.password)
        keep_header("Authorization", auth.header())
    return auth


def _credentials(upload_url: str, env: Mapping[str, str]) -> Auth | None:
    if env.get(TOKEN_ENV):
        return Auth(env.get(USER_ENV) or DEFAULT_USER, env[TOKEN_ENV], TOKEN_ENV)
    if env.get("TWINE_PASSWORD"):
        return Auth(env.get("TWINE_USERNAME") or DEFAULT_USER, env["TWINE_PASSWORD"],
                    "TWINE_PASSWORD")
    return _from_keyring(upload_url, env.get(USER_ENV) or env.get("TWINE_USERNAME"))


def _from_keyring(url: str, username: str | None) -> Auth | None:
    try:
        keyring = importlib.import_module("keyring")
        failure: type[Exception] = importlib.import_module("keyring.errors").KeyringError
    except ImportError:
        return None
    try:
        if username:
            password = keyring.get_password(url, username)
            return Auth(username, password, "the keyring") if password else None
        found = keyring.get_credential(url, None)
    except failure as error:
        log.warning("the keyring could not be read (%s); uploading without credentials", error)
        return None
    return Auth(found.username, found.password, "the keyring") if found else None


def server_for(to: str, simple: str | None, channel: str) -> Server:
    """The channel's upload URL and simple API from the templates (`{channel}` in them)."""
    upload = _with_slash(to.replace(CHANNEL, channel))
    return Server(upload, _with_slash(simple.replace(CHANNEL, channel)) if simple
                  else upload + "simple/")


def check_url(option: str, url: str) -> None:
    """An http(s) URL template with no credentials in it and no placeholder but {channel}."""
    given_url(url, option, placeholder=CHANNEL,
              hint="e.g. --to http://HOST:3141/USER/{channel}/ (devpi)")
    parts = urllib.parse.urlsplit(url.replace(CHANNEL, "c"))
    if parts.username or parts.password:
        raise UsageError(f"{option}: '{parts.hostname}' is given with credentials in the URL, "
                         "where every process on the machine can read them",
                         hint=CREDENTIAL_HINT)
    if "{" in url.replace(CHANNEL, "") or "}" in url.replace(CHANNEL, ""):
        raise UsageError(f"{option}: '{url}' has a placeholder other than {CHANNEL}")


def check_templates(to: str, simple: str | None, channel: str | None) -> None:
    """Refuse what would put credentials on a command line, mix channels, or is no URL."""
    check_url("--to", to)
    if simple is not None:
        check_url("--simple", simple)
    if channel is None and CHANNEL not in to:
        raise UsageError(f"--to {to} names no channel: every channel would share one index, "
                         "where pip picks among the builds by label, not by your torch",
                         hint="put {channel} in the URL (e.g. http://HOST:3141/USER/{channel}/)"
                              ", or give the one channel this URL is with --channel")


def _with_slash(url: str) -> str:
    return url if url.endswith("/") else url + "/"


def _quiet(_: str) -> None:
    return None


def upload(wheel: Path, to: str, *, simple: str | None = None, channel: str | None = None,
           env: Mapping[str, str] = os.environ,
           stopping: Callable[[str], None] = _quiet) -> Uploaded:
    """Publish `wheel` to the channel's index on the server at `to` (see the module doc);
    `stopping` is told, as each step begins, what stopping there leaves."""
    check_templates(to, simple, channel)
    candidate = inspect(wheel, channel)
    record = candidate.record
    server = server_for(to, simple, record.channel)
    stopping(f"{record.filename} was not uploaded (its index {server.simple} was being read)")
    auth = credentials(server.upload, env)
    remote.check_index(server.simple, auth)
    done = Uploaded(record.filename, record.channel, record.project, "already published",
                    urllib.parse.urljoin(server.simple, f"{record.project}/"))
    if _decide(candidate, remote.project_files(server.simple, record.project, auth), server):
        return done
    stopping(f"{record.filename} was being uploaded to {server.upload} ({done.page} says "
             "whether it was)")
    body, headers = _form(candidate)
    answer = remote.send(server.upload, auth=auth, method="POST", body=body, headers=headers,
                         limit=remote.ANSWER_LIMIT, sending=int(headers["Content-Length"]))
    listed = remote.project_files(server.simple, record.project, auth)
    if not 200 <= answer.status < 300:
        if _decide(candidate, listed, server, answer):  # a concurrent publisher was first
            return done
        raise _refused(answer, auth, record.filename)
    _check_listed(candidate, listed.get(record.filename), server, answer)
    log.info("published %s to %s", record.filename, server.upload)
    return Uploaded(record.filename, record.channel, record.project, "published", done.page)


def _decide(candidate: Candidate, listed: dict[str, PageFile], server: Server,
            answer: remote.Answer | None = None) -> bool:
    """True when the server already has these bytes under this name; raises when it has
    other bytes (or another arch set of the version); False: not there yet."""
    record = candidate.record
    found = listed.get(record.filename)
    said = f" (the server answered HTTP {answer.status}: {answer.text()})" if answer else ""
    if found is None:
        _check_one_arch_set(record.filename, listed, server)
        return False
    if found.sha256 == record.sha256:
        return True
    has = f"sha256 {found.sha256}" if found.sha256 else "no sha256 listed"
    raise FileConflictError(
        f"{server.simple} already holds {record.filename} ({has}); this file has "
        f"{record.sha256}{said}",
        hint="published files never change: give the new build a new name (a build tag, a "
             ".postN version or another label)")


def _check_one_arch_set(filename: str, listed: dict[str, PageFile], server: Server) -> None:
    """pip picks among local labels by sorting, not by your GPU: one arch set per version."""
    ours = WheelName.parse(filename)
    code = _arch_code(ours)
    for other in listed:
        try:
            theirs = WheelName.parse(other)
        except ValueError:
            continue  # an sdist or another kind of file: no label to compare
        other_code = _arch_code(theirs)
        if theirs.version.public == ours.version.public and \
                None not in (code, other_code) and other_code != code:
            raise PublishError(
                f"{server.simple} already holds {ours.name} {ours.version.public} for another "
                f"arch set ({other}); this wheel is {filename}",
                hint="pip would pick between them by label, not by your GPU: publish one arch "
                     "set per version per channel (another --to index for this arch set)")


def _arch_code(name: WheelName) -> tuple[frozenset[str], frozenset[str]] | None:
    local = name.version.local
    return ArchSet.label_device_code(local) if local else None


def _check_listed(candidate: Candidate, found: PageFile | None, server: Server,
                  answer: remote.Answer) -> None:
    record = candidate.record
    if found is None or found.sha256 != record.sha256:
        shown = "does not list it" if found is None else f"lists sha256 {found.sha256}"
        raise PublishError(f"the server accepted {record.filename} (HTTP {answer.status}) but "
                           f"its simple API {server.simple} {shown}",
                           hint="check that --simple is the simple API of the --to index")
    if found.metadata_sha256 not in (None, record.metadata_sha256):
        raise PublishError(f"{server.simple} serves metadata for {record.filename} with "
                           f"sha256 {found.metadata_sha256}; its METADATA has "
                           f"{record.metadata_sha256}",
                           hint="the server rewrote the metadata: installers would resolve "
                                "with other requirements than the wheel's")


def _refused(answer: remote.Answer, auth: Auth | None, filename: str) -> PublishError:
    text = f"the server refused {filename}: HTTP {answer.status}: {answer.text()}"
    if answer.status in (401, 403):
        how = f"with credentials from {auth.origin}" if auth else "without credentials"
        return PublishError(f"{text} (sent {how})", hint=CREDENTIAL_HINT)
    return PublishError(text, hint="the server's answer says why; nothing was published")


def _form(candidate: Candidate) -> tuple[Iterator[bytes], dict[str, str]]:
    """The multipart body (streamed: the wheel is read in chunks) and its headers."""
    boundary = secrets.token_hex(16)
    fields = [(":action", "file_upload"), ("protocol_version", "1"), *_fields(candidate)]
    head = b"".join(_part(boundary, name, value.encode()) for name, value in fields)
    head += (f'--{boundary}\r\nContent-Disposition: form-data; name="content"; filename="'
             f'{candidate.record.filename}"\r\nContent-Type: application/octet-stream\r\n\r\n'
             ).encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    size = len(head) + candidate.record.size + len(tail)
    return _stream(head, candidate.wheel, tail), {
        "Content-Type": f"multipart/form-data; boundary={boundary}", "Content-Length": str(size)}


def _part(boundary: str, name: str, value: bytes) -> bytes:
    return (f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n'
            ).encode() + value + b"\r\n"


def _stream(head: bytes, wheel: Path, tail: bytes) -> Iterator[bytes]:
    yield head
    with local.open_regular(wheel) as handle:  # the regular file publish checked
        while chunk := handle.read(CHUNK):
            yield chunk
    yield tail


def _fields(candidate: Candidate) -> list[tuple[str, str]]:
    """What twine sends: the digests, the wheel's tags, and every METADATA field by its
    upload-API name (Requires-Dist -> requires_dist, Classifier -> classifiers, ...)."""
    message = BytesParser().parsebytes(candidate.metadata)
    name = WheelName.parse(candidate.record.filename)
    digest = hashlib.blake2b(digest_size=32)
    with local.open_regular(candidate.wheel) as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    fields = [("filetype", "bdist_wheel"), ("pyversion", name.tags.split("-")[0]),
              ("sha256_digest", candidate.record.sha256),
              ("blake2_256_digest", digest.hexdigest())]
    for key, value in message.items():
        field = key.lower().replace("-", "_")
        fields.append((_PLURAL.get(field, field), str(value)))
    body = message.get_payload()
    if isinstance(body, str) and body.strip() and "Description" not in message:
        fields.append(("description", body))
    return fields
