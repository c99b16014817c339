"""Figures as people read them (report tables, terminal tables, one-line summaries): a missing figure is the
empty-cell mark, never the store's NULL, Python's None or a float's nan.
"""

from __future__ import annotations

import math
from typing import Any

EMPTY = "–"
"""The empty-cell mark (an en dash) of every table and line a person reads."""


def missing(value: Any) -> bool:
    """None (a NULL from the store, a figure never computed) or a nan (an empty mean, a degenerate interval)."""
    if value is None:
        return True
    if isinstance(value, str):
        return False
    try:  # floats of every kind (numpy's float32 is no `float`), Decimal; not a number at all: not missing
        return math.isnan(value)
    except (TypeError, ValueError, OverflowError):
        return False


def cell(value: Any, fmt: str = "{}") -> str:
    """`value` formatted with `fmt`, or `EMPTY` when it is missing."""
    return EMPTY if missing(value) else fmt.format(value)
