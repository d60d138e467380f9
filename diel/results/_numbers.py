"""Whole numbers typed by a person (a command-line option, a dashboard query parameter),
read strictly and bounded before they reach a database.

SQLite and PostgreSQL store 64-bit integers: a larger Python int bound as a parameter
(a page's offset, a ``--top``) fails in the driver (SQLite: ``OverflowError: Python int
too large to convert to SQLite INTEGER``), so every such number is checked here first
and a mistake is one line naming what is expected. No SQLAlchemy: the CLIs import this
before they know whether they will open a database.
"""

from __future__ import annotations

import argparse
import re
from typing import Callable

__all__ = ["LARGEST", "whole_number", "whole_number_type"]

LARGEST = 2**63 - 1   # the largest integer SQLite and PostgreSQL store
_WHOLE = re.compile(r"[+-]?\d+", re.ASCII)


def whole_number(text: str, low: int = 0, high: int = LARGEST) -> int:
    """``text`` (ASCII digits, maybe a sign, maybe spaces around) as an int from ``low``
    to ``high``; :class:`ValueError` saying so otherwise (a fraction, ``nan``, an empty
    text, ``1e3``, a number of any length out of range)."""
    digits = text.strip()
    if _WHOLE.fullmatch(digits):
        size = len(digits.lstrip("+-").lstrip("0"))   # int() refuses very long texts
        if size <= len(str(max(abs(low), abs(high)))) and low <= int(digits) <= high:
            return int(digits)
    raise ValueError(f"expected a whole number from {low} to {high}, got {text!r}")


def whole_number_type(low: int = 0, high: int = LARGEST) -> Callable[[str], int]:
    """An argparse ``type`` for a whole number from ``low`` to ``high``: anything else is
    argparse's one-line usage error (exit status 2)."""
    def parse(text: str) -> int:
        try:
            return whole_number(text, low, high)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return parse
