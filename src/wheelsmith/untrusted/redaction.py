"""Secrets are never shown: `redacted` is the one redaction, applied where text leaves
wheelsmith (the console's streams, `cli/console.py`; a command's log file, `cmd.run`) and
before text from outside is cut to a line (`text.clip`, a server's answer as one line), so
that no cut leaves half a secret.

It hides two kinds of thing:
- every secret in play, in every form a message could carry it (as it is, escaped as a
  message shows text, in HTML, in JSON, percent-encoded, in base64, and inside the `Basic`
  header it was sent in): what `keep` and `keep_header` were given (an upload token or
  password from the environment or the keyring, a URL's `user:password@`, a proxy's, the
  compile farm's token), and the values of environment variables named as secrets are
  (`keep_environment`: `*_TOKEN`, `*_PASSWORD`, `*_SECRET`, `*_API_KEY`, ..., of SHORT
  characters or more);
- whatever stands where credentials stand, known or not: a URL's userinfo, the value of an
  `Authorization`, `Proxy-Authorization`, `Cookie` or `Set-Cookie` header (or a JSON key of that
  name: a server that echoes the headers it was sent), `Basic` credentials, a `Bearer` token.

A secret shorter than SHORT characters is hidden where it stands alone (not inside a word);
every other form anywhere.
"""

from __future__ import annotations

import base64
import binascii
import html
import json
import os
import re
import threading
import urllib.parse
from collections.abc import Mapping

HIDDEN = "***"
SHORT = 6
SECRET_VARIABLE = re.compile(r"(?:^|_)(?:TOKEN|PASSWORD|PASSWD|SECRET|SECRET_KEY|API_KEY|"
                             r"ACCESS_KEY|PRIVATE_KEY|CREDENTIALS?)$", re.IGNORECASE)
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^\s/?#@\"'<>]+@")
_HEADER_NAMES = (r"proxy-authorization|authorization|set-cookie|cookie|x-api-key|x-auth-token|"
                 r"private-token|job-token|x-amz-security-token")
_SCHEMES = r"basic|bearer|token|digest|negotiate|ntlm|aws4-hmac-sha256"
_HEADER = re.compile(
    rf"(?i)\b({_HEADER_NAMES})(\\?[\"']?\s*[:=]\s*\\?[\"']?)"
    rf"((?:(?:{_SCHEMES})\s+)?[^\s\"',;\\]+(?:;\s?[^\s\"',;\\]+)*)")
_BASIC = re.compile(r"(?i)\bBasic\s+([A-Za-z0-9+/]{4,}={0,2})")
_BEARER = re.compile(r"(?i)\bBearer\s+[A-Za-z0-9._~+/=-]{16,}")

_lock = threading.Lock()
_kept: set[str] = set()
_known: re.Pattern[str] | None = None


def keep(secret: str | None) -> None:
    """`secret` is never shown from now on, in any of its forms."""
    if not secret:
        return
    forms = _forms(secret)
    global _known  # noqa: PLW0603 - one registry: a secret once seen is hidden everywhere
    with _lock:
        if forms <= _kept:
            return
        _kept.update(forms)
        _known = _pattern(_kept)


def keep_header(name: str, value: str) -> None:
    """A credential header sent to a server: its value, and for Basic credentials the
    password and the `user:password` pair it encodes, for a Bearer token the token."""
    keep(value)
    scheme, _, credentials = value.strip().partition(" ")
    if scheme.lower() == "basic":
        pair = _decoded(credentials)
        if pair is not None and ":" in pair:
            keep(pair)
            keep(pair.partition(":")[2])
    elif scheme.lower() in ("bearer", "token"):
        keep(credentials.strip())
    elif name.lower() in ("cookie", "set-cookie"):
        for cookie in value.split(";"):
            keep(cookie.partition("=")[2].strip())


def keep_environment(environ: Mapping[str, str] = os.environ) -> None:
    """The value of each variable named as a secret is (SECRET_VARIABLE), when it is SHORT
    characters or more: a shorter one is a switch (`HF_HUB_DISABLE_TOKEN=1`), not a secret,
    and hiding it would hide every `1` that stands alone."""
    for name, value in environ.items():
        if SECRET_VARIABLE.search(name) and len(value) >= SHORT:
            keep(value)


def redacted(text: str) -> str:
    """`text` with every secret in play, and whatever stands where credentials stand, as
    HIDDEN (see the module's docstring)."""
    known = _known
    if known is not None:
        text = known.sub(HIDDEN, text)
    text = _USERINFO.sub(rf"\1{HIDDEN}@", text)
    text = _HEADER.sub(rf"\1\2{HIDDEN}", text)
    text = _BASIC.sub(_basic, text)
    return _BEARER.sub(f"Bearer {HIDDEN}", text)


def _basic(match: re.Match[str]) -> str:
    pair = _decoded(match[1])
    return f"Basic {HIDDEN}" if pair is not None and ":" in pair else match[0]


def _decoded(text: str) -> str | None:
    try:
        return base64.b64decode(text.strip(), validate=True).decode("utf-8", "replace")
    except (binascii.Error, ValueError):
        return None


def _forms(secret: str) -> set[str]:
    """`secret` as text may carry it."""
    raw = secret.encode("utf-8", "surrogateescape")
    encoded = {base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode()}
    return {form for form in {
        secret, secret.encode("unicode_escape").decode("ascii"), html.escape(secret),
        json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1],
        urllib.parse.quote(secret, safe=""), urllib.parse.quote_plus(secret, safe=""),
        *encoded, *(form.rstrip("=") for form in encoded)} if form}


def _pattern(forms: set[str]) -> re.Pattern[str]:
    longest_first = sorted(forms, key=lambda form: (-len(form), form))
    long = [re.escape(form) for form in longest_first if len(form) >= SHORT]
    short = [re.escape(form) for form in longest_first if len(form) < SHORT]
    parts = [*long, *([rf"(?<![\w])(?:{'|'.join(short)})(?![\w])"] if short else [])]
    return re.compile("|".join(parts))
