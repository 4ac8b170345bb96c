"""HTML from outside: the links of a page (PEP 503's `<a>` elements, its `<base>` and PEP 629's
`pypi:repository-version`), read with the standard library's `html.parser` within bounds.

A page within its byte cap cannot cost many times its size: one that could hold more links
than a page of the most files wheelsmith reads, or more tags than such a page needs, is refused
before the parser runs; the page is fed to the parser in pieces, with the page's deadline
looked at after each, and the parser may hold at most MAX_HELD of what it has not finished (a
tag, a comment or a script left open; html.parser's time on what it holds grows with its
square). An attribute wheelsmith reads given twice in one element is refused, as JSON's key
twice in one object is: readers differ on which one counts. Entities are resolved as HTML
says (an unknown or invalid one is kept as text or replaced with U+FFFD); what a link's text
or attributes then hold is the caller's to check, like any other text from outside.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable
from dataclasses import dataclass
from html.parser import HTMLParser

from wheelsmith.errors import UntrustedDataError
from wheelsmith.untrusted import clip, plain_utf8

PIECE = 64 << 10  # characters fed to the parser between looks at the deadline
MAX_HELD = 32 << 10  # the most of an unfinished tag, comment or script the parser may hold
TAGS_PER_LINK = 8  # `<` a page may hold for each link it may hold (a link is 2 to 4 tags)
MAX_TEXT = 4 << 10  # of a link's text, what is kept (no file name is longer than 255 bytes)
KEPT = frozenset({"href", "data-core-metadata", "data-dist-info-metadata", "data-yanked",
                  "data-requires-python"})  # what an <a> is read for
HTML_SPACE = " \t\n\f\r"  # what HTML takes for white space
_ANCHOR = re.compile(rb"<a[\s/>]", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Anchor:
    """One `<a href>` of a page: its place (1 for the first link), href and text (entities
    resolved, the text stripped of surrounding white space; a text longer than MAX_TEXT cut
    there) and the attributes in KEPT."""

    number: int
    href: str
    text: str
    attributes: tuple[tuple[str, str], ...]

    @property
    def where(self) -> str:
        return f"its link {self.number}"

    def get(self, name: str) -> str | None:
        return next((value for key, value in self.attributes if key == name), None)


@dataclass(frozen=True, slots=True)
class Links:
    """What a page links and says about itself."""

    anchors: tuple[Anchor, ...]
    base: str | None  # its first <base href>: what its hrefs are relative to, when given
    repository_version: str | None  # PEP 629's <meta name="pypi:repository-version">


def parse_links(data: bytes, source: str, *, max_links: int,
                check: Callable[[], None] = lambda: None) -> Links:
    """The links of the HTML page `data` from `source` (plain UTF-8; a UTF-8 byte order mark
    is skipped, as HTML allows); anything past the bounds above is one UntrustedDataError
    naming `source`. `check` is called after each piece the parser reads (the deadline)."""
    anchors = len(_ANCHOR.findall(data))
    if anchors > max_links:
        raise UntrustedDataError(source, f"lists {anchors:,} links, more than the "
                                         f"{max_links:,} wheelsmith reads")
    tags = data.count(b"<")
    if tags > TAGS_PER_LINK * max_links:
        raise UntrustedDataError(source, f"holds {tags:,} tags, more than a page of the "
                                         f"{max_links:,} links wheelsmith reads needs")
    text = plain_utf8(data.removeprefix(codecs.BOM_UTF8), source)
    parser = _Parser(source)
    for start in range(0, len(text), PIECE):
        parser.feed(text[start:start + PIECE])
        if len(parser.rawdata) > MAX_HELD:
            raise UntrustedDataError(source, f"holds a tag, comment, script or character "
                                             f"reference left open for more than "
                                             f"{MAX_HELD >> 10} KiB ({clip(parser.rawdata, 40)})")
        check()
    parser.close()
    return Links(tuple(parser.anchors), parser.base, parser.version)


class _Parser(HTMLParser):
    def __init__(self, source: str) -> None:
        super().__init__(convert_charrefs=True)
        self.source = source
        self.anchors: list[Anchor] = []
        self.base: str | None = None
        self.version: str | None = None
        self._open: tuple[int, str, dict[str, str]] | None = None  # number, href, attributes
        self._text: list[str] = []
        self._kept_text = 0
        self._links = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._close()
            self._start_link(attrs)
        elif tag == "base" and self.base is None:
            self.base = dict(attrs).get("href")
        elif tag == "meta" and self.version is None:
            found = dict(attrs)
            if found.get("name") == "pypi:repository-version":
                self.version = found.get("content") or ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "a":
            self._close()

    def handle_data(self, data: str) -> None:
        if self._open is not None and self._kept_text <= MAX_TEXT:
            self._text.append(data[:MAX_TEXT + 1])
            self._kept_text += len(data)

    def close(self) -> None:
        super().close()
        self._close()

    def _start_link(self, attrs: list[tuple[str, str | None]]) -> None:
        """An <a>: a link when it has an href (pip reads no other), its attributes in KEPT."""
        kept: dict[str, str] = {}
        twice = None
        for name, value in attrs:
            if name in KEPT:
                twice = twice or (name if name in kept else None)
                kept.setdefault(name, value or "")
        if "href" not in kept:
            return
        self._links += 1
        if twice is not None:
            raise UntrustedDataError(self.source, f"its link {self._links}: holds the attribute "
                                                  f"{twice} twice (readers differ on which one "
                                                  "counts)")
        self._open = (self._links, kept.pop("href"), kept)

    def _close(self) -> None:
        if self._open is not None:
            number, href, kept = self._open
            self.anchors.append(Anchor(number, href, "".join(self._text).strip(HTML_SPACE),
                                       tuple(kept.items())))
        self._open, self._text, self._kept_text = None, [], 0
