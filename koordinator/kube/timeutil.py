"""Kubernetes timestamps: ``metav1.Time`` (RFC 3339, seconds) and ``metav1.MicroTime``.

``Time`` is written ``2006-01-02T15:04:05Z``; ``MicroTime`` (Lease acquire/renew times,
events) is written with exactly six fractional digits. Both are always UTC on the wire;
parsing accepts any RFC 3339 offset and fraction length.
"""

from __future__ import annotations

import datetime
import re

_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:([Zz])|([+-])(\d{2}):(\d{2}))$"
)


#: the last second formatted and its text: a busy component stamps many objects per second
_last_time: tuple[int, str] = (-1, "")


def format_time(epoch_s: float) -> str:
    """``metav1.Time``: whole seconds, UTC."""
    global _last_time
    second = int(epoch_s)
    if _last_time[0] != second:
        text = datetime.datetime.fromtimestamp(second, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        _last_time = (second, text)
    return _last_time[1]


def format_micro_time(epoch_s: float) -> str:
    """``metav1.MicroTime``: microseconds, UTC."""
    dt = datetime.datetime.fromtimestamp(epoch_s, datetime.UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str) -> float:
    """Seconds since the epoch of an RFC 3339 timestamp (Time or MicroTime)."""
    match = _RFC3339.match(text)
    if not match:
        raise ValueError(f"not an RFC 3339 timestamp: {text!r}")
    year, month, day, hour, minute, second = (int(match.group(i)) for i in range(1, 7))
    fraction = match.group(7) or ""
    dt = datetime.datetime(year, month, day, hour, minute, second, tzinfo=datetime.UTC)
    epoch = dt.timestamp()
    if fraction:
        epoch += int(fraction) / 10 ** len(fraction)
    if match.group(9):
        offset = int(match.group(10)) * 3600 + int(match.group(11)) * 60
        epoch -= offset if match.group(9) == "+" else -offset
    return epoch
