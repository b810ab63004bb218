"""Argument types the commands share, so every count and duration is refused in the same words."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def at_least(minimum: int) -> Callable[[str], int]:
    """A whole number >= `minimum`: counts take 1, durations 0. argparse names the option."""

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {value!r}") from None
        if number < minimum:
            raise argparse.ArgumentTypeError(f"expected at least {minimum}, got {number}")
        return number

    return parse


positive = at_least(1)
non_negative = at_least(0)
