"""A wheel's torch span: the consecutive torch minors its torch range proved, around the one it
was built with, as its local version label, its torch requirement and the index state them.

`1.6.0+cu.13.0.torch.2.14.sm.120` was built with torch 2.14 and claims 2.14 alone
(`Requires-Dist: torch==2.14.*`); `1.6.0+cu.13.0.torch.2.14.range.2.12.2.14.sm.120` was built
with 2.14 and proven (its symbols, an import and the recipe's smoke test: builder/torchrange.py)
under 2.12, 2.13 and 2.14: `Requires-Dist: torch>=2.12,<2.15`, and publishing lists it in the
channel of each (`cu130-torch2.12`, `cu130-torch2.13` besides its own `cu130-torch2.14`).
A minor the range did not try, or where it failed, ends the span: nothing is claimed past it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

Minor = tuple[int, int]

_SPAN = re.compile(r"(?:^|\.)range\.(\d{1,4})\.(\d{1,4})\.(\d{1,4})\.(\d{1,4})(?=\.|$)")
_CHANNEL = re.compile(r"^(?P<cuda>cu\d+)-torch(?P<major>\d{1,4})\.(?P<minor>\d{1,4})$")


@dataclass(frozen=True, slots=True)
class Span:
    """Torch minors `low` to `high` (one major), both proven, and every one between."""

    low: Minor
    high: Minor

    def minors(self) -> list[Minor]:
        return [(self.low[0], m) for m in range(self.low[1], self.high[1] + 1)]

    def contains(self, minor: Minor) -> bool:
        return minor[0] == self.low[0] and self.low[1] <= minor[1] <= self.high[1]

    def label(self) -> str:
        """The local-label segments: `range.2.12.2.14`."""
        return f"range.{self.low[0]}.{self.low[1]}.{self.high[0]}.{self.high[1]}"

    def requirement(self) -> str:
        """`torch>=2.12,<2.15`."""
        return f"torch>={self.low[0]}.{self.low[1]},<{self.high[0]}.{self.high[1] + 1}"

    def __str__(self) -> str:
        return f"{self.low[0]}.{self.low[1]} to {self.high[0]}.{self.high[1]}"


def minor(text: str) -> Minor | None:
    """(2, 14) of "2.14" or "2.14.1+cu130"; None for what is not a version."""
    try:
        release = Version(text).release
    except InvalidVersion:
        return None
    return (release[0], release[1] if len(release) > 1 else 0)


def span_of(proven: Iterable[str], built: Minor) -> Span | None:
    """The span the `proven` minors give a wheel built with `built`: the consecutive minors of
    its major around it, each proven. None where that is `built` alone, or where `built` itself
    is not proven (nothing around it is then claimed)."""
    found = {m for m in (minor(text) for text in proven) if m is not None}
    if built not in found:
        return None
    low = high = built[1]
    while (built[0], low - 1) in found:
        low -= 1
    while (built[0], high + 1) in found:
        high += 1
    return None if low == high else Span((built[0], low), (built[0], high))


def label_span(local: str) -> Span | None:
    """The span a local version label states (`…torch.2.14.range.2.12.2.14.sm.120`); None where
    it states none, or one that is not a span (two majors, or low above high)."""
    found = _SPAN.search(local.lower())
    if found is None:
        return None
    a, b, c, d = (int(g) for g in found.groups())
    return Span((a, b), (c, d)) if a == c and b < d else None


def span_channels(channel: str, span: Span) -> list[str]:
    """The other channels of `channel`'s CUDA that `span` covers: `cu130-torch2.14` with
    2.12 to 2.14 gives `cu130-torch2.12` and `cu130-torch2.13`; none for a channel not named
    `cu<N>-torch<X.Y>`, or one the span does not hold."""
    found = _CHANNEL.match(channel)
    if found is None or not span.contains((int(found["major"]), int(found["minor"]))):
        return []
    own = f"{found['major']}.{found['minor']}"
    return [f"{found['cuda']}-torch{a}.{b}" for a, b in span.minors() if f"{a}.{b}" != own]


def without_span(local: str) -> str:
    """A local version label less the span it states (what the build's plan names)."""
    return _SPAN.sub("", local.lower()).strip(".") if label_span(local) is not None else local
