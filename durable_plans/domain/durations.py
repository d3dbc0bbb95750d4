"""Durations as an operator writes them: ``1d``, ``12h``, ``30m``, ``90s``, ``1h30m``, ``0``.

Read from ``DPLAN_TREE_RETENTION`` and ``dplan gc --older-than``. A bare number other
than ``0`` is refused rather than guessed at: ``2`` could mean two seconds or two days,
and a retention read the wrong way removes trees an operator meant to keep.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import re
from datetime import timedelta

from durable_plans._errors import DurationError

__all__ = ["DurationError", "format_duration", "parse_duration"]

_UNITS = {"w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1}
_PART = re.compile(r"(\d+(?:\.\d+)?)([wdhms])")
_WHOLE = re.compile(r"^(?:\d+(?:\.\d+)?[wdhms])+$")


def parse_duration(text: str) -> timedelta:
    """``text`` as a duration: numbers with units ``w d h m s`` (``1d``, ``1h30m``,
    ``0.5h``), or ``0`` for none at all; blanks and case are ignored."""
    raw = text.strip().lower().replace(" ", "")
    if raw in ("0", "0.0"):
        return timedelta(0)
    if not raw or not _WHOLE.match(raw):
        raise DurationError(
            f"{text!r} is not a duration: write a number and a unit (s, m, h, d, w), "
            "e.g. 1d, 12h, 30m, 1h30m, or 0"
        )
    seconds = sum(float(n) * _UNITS[unit] for n, unit in _PART.findall(raw))
    return timedelta(seconds=seconds)


def format_duration(delta: timedelta) -> str:
    """``delta`` the way ``parse_duration`` reads it, largest units first (``1d2h``)."""
    left = int(delta.total_seconds())
    if left <= 0:
        return "0"
    parts: list[str] = []
    for unit in ("d", "h", "m", "s"):
        count, left = divmod(left, _UNITS[unit])
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)
