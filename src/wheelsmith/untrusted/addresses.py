"""URLs from outside: `server_url` reads every URL a server gives (a redirect's Location, a
link's href, a page's `url`) into a valid http(s) URL or one located error; `given_url` holds a
URL the user gives (an option, a variable) to the same reading; `redact` is how every message
shows a URL."""

from __future__ import annotations

import ipaddress
import re
import urllib.parse

from wheelsmith.errors import UntrustedDataError, UsageError
from wheelsmith.untrusted.text import clip, control_in

WEB = ("http", "https")
URL_HINT = ("a server may send a reader only to a valid http(s) URL; nothing was read there: "
            "the page or the server is damaged or hostile, check the URL and the server")
BRACKETS = "is not a valid URL (its host in brackets is not an IPv6 address)"
_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*:)?//[^/?#]*@")
_LABEL = re.compile(r"(?!-)[A-Za-z0-9_-]{1,63}(?<!-)")
_KEPT = "!#$%&'()*+,/:;=?@[]~"  # what a path, query or fragment keeps as it is


def redact(url: str) -> str:
    """`url` as messages and logs show it: credentials in it become `***` (any text, one that
    no URL parser takes included)."""
    return _USERINFO.sub(r"\1//***@", url, count=1)


def server_url(value: str, base: str, *, source: str, where: str | None,
               schemes: tuple[str, ...] = WEB, hint: str | None = None) -> str:
    """`value`, a URL a server gave (a redirect's Location, a link's href, a page's `url`),
    joined with `base` (the URL it came from) into an absolute URL of one of `schemes` that
    a connection can take: a host name or IP address, a port from 1 to 65535, no control
    characters (spaces and what else a request line cannot carry percent-encoded). Anything
    else is one UntrustedDataError naming `source` and `where` in it (None: `value` is the
    source itself). The one reader of URLs from outside."""
    text = value.strip(" \t\n\r\f")
    try:
        parts = urllib.parse.urlsplit(urllib.parse.urljoin(base, text))
        why = _problem(text, parts, schemes)
    except ValueError:  # an unclosed or unknown [IPv6] host, a host NFKC would change
        parts, why = None, BRACKETS if "[" in text or "]" in text else \
            "is not a valid URL (it cannot be parsed)"
    if why is None and parts is not None:
        return _encoded(parts)
    problem = f"{where}: '{clip(redact(text))}' {why}" if where else str(why)
    raise UntrustedDataError(source, problem, hint=hint or URL_HINT)


def given_url(value: str, option: str, *, hint: str, placeholder: str = "",
              schemes: tuple[str, ...] = WEB) -> str:
    """`value`, a URL the user gave with `option` (a `placeholder` in it, such as
    `{channel}`, read as a plain word), when `server_url` would take it: else one usage error
    naming the option and the value (an unclosed [IPv6 host, a port over 65535, no host),
    before anything is sent there. `value` is returned as given."""
    sample = value.replace(placeholder, "x") if placeholder else value
    try:
        server_url(sample, "", source=option, where=None, schemes=schemes)
    except UntrustedDataError as exc:
        raise UsageError(f"{option}: '{clip(redact(value), 200)}' {exc.problem}",
                         hint=hint) from None
    return value


def _problem(text: str, parts: urllib.parse.SplitResult,
             schemes: tuple[str, ...]) -> str | None:
    """What makes `parts` (of `text`) no URL of `schemes` to connect to; None: nothing."""
    char = control_in(text, lines=True)
    if char is not None:
        return f"is not a valid URL (it holds the control character {char})"
    if parts.scheme not in schemes:
        shown = [f"{scheme}://" for scheme in schemes]
        return f"is not an {', '.join(shown[:-1])} or {shown[-1]} URL" \
            if len(shown) > 1 else f"is not a {shown[0]} URL"
    if parts.scheme == "file":
        return None if parts.netloc in ("", "localhost") else \
            "is not a valid URL (a file URL names no other host)"
    return _netloc_problem(parts.netloc)


def _netloc_problem(netloc: str) -> str | None:
    host, port = _host_and_port(netloc)
    if not host:
        return "is not a valid URL (it names no host)"
    if host.startswith("[") and not _host_ok(host):
        return BRACKETS
    if not _host_ok(host):
        return f"is not a valid URL (its host '{clip(host, 40)}' is not a host name or IP " \
               "address)"
    if port and not (port.isascii() and port.isdigit() and 0 < int(port) < 1 << 16):
        return f"is not a valid URL (its port '{clip(port, 20)}' is not a number from 1 to " \
               "65535)"
    return None


def _host_and_port(netloc: str) -> tuple[str, str]:
    """The host (an IPv6 address in its brackets) and the port's text of `netloc`."""
    hostport = netloc.rpartition("@")[2]
    if hostport.startswith("["):
        address, _, port = hostport.partition("]")
        return address + "]", port.removeprefix(":")
    host, _, port = hostport.partition(":")
    return host, port


def _host_ok(host: str) -> bool:
    if host.startswith("["):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            return False
        return True
    try:
        ascii_host = host.encode("idna").decode("ascii")
    except UnicodeError:
        return False
    labels = ascii_host.removesuffix(".").split(".")
    return len(ascii_host) <= 253 and all(_LABEL.fullmatch(label) for label in labels)


def _encoded(parts: urllib.parse.SplitResult) -> str:
    """`parts` as one URL a request line carries: an IDN host in its ASCII form, spaces and
    non-ASCII characters percent-encoded."""
    user, at, hostport = parts.netloc.rpartition("@")
    if not hostport.isascii():
        host, colon, port = hostport.partition(":")
        hostport = host.encode("idna").decode("ascii") + colon + port
    netloc = urllib.parse.quote(user, safe=_KEPT) + at + hostport
    return urllib.parse.urlunsplit(parts._replace(
        netloc=netloc, path=urllib.parse.quote(parts.path, safe=_KEPT),
        query=urllib.parse.quote(parts.query, safe=_KEPT),
        fragment=urllib.parse.quote(parts.fragment, safe=_KEPT)))
