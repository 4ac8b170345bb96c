"""Numbers a user gives, on the command line or in an environment variable: one parse, one
set of bounds, one message (nan, inf, 1e300, a fraction where a count belongs, a value out of
range, `abc`), whichever way the number came."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from wheelsmith.errors import UsageError


@dataclass(frozen=True, slots=True)
class Bounds:
    """What a number is for: finite, within [minimum, maximum], whole where a count is."""

    minimum: float
    maximum: float
    integer: bool = False
    unit: str = ""  # "seconds"
    most: str = ""  # how the maximum reads ("30 days")

    def parse(self, value: object) -> float:
        """`value` as such a number; ValueError saying why not."""
        text = str(value).strip()
        of = f" of {self.unit}" if self.unit else ""
        try:
            number = int(text) if self.integer else float(text)
        except ValueError:
            raise ValueError(f"'{value}' is not {'a whole number' if self.integer else 'a number'}"
                             f"{of}") from None
        if not math.isfinite(number):
            raise ValueError(f"'{value}' is not a finite number{of}")
        if not self.minimum <= number <= self.maximum:
            most = f" ({self.most})" if self.most else ""
            raise ValueError(f"{value} is not from {_shown(self.minimum)} to {_shown(self.maximum)}"
                             f"{' ' + self.unit if self.unit else ''}{most}")
        return number


def from_env(name: str, default: float, bounds: Bounds) -> float:
    """$name as a number within `bounds` (unset or empty: `default`); any other value is a
    usage error naming the variable, before anything is done with it."""
    value = os.environ.get(name, "")
    if not value:
        return default
    try:
        return bounds.parse(value)
    except ValueError as exc:
        raise UsageError(f"${name}: {exc}", hint=f"set {name} to such a number, or unset it "
                                                 "for the default") from None


def _shown(bound: float) -> str:
    return f"{bound:.0f}" if bound == int(bound) else str(bound)
