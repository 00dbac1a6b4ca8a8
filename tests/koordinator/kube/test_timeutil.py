"""Time and MicroTime formatting and parsing."""

from __future__ import annotations

import pytest

from koordinator.kube.timeutil import format_micro_time, format_time, parse_time


def test_formats():
    assert format_time(1767225600.9) == "2026-01-01T00:00:00Z"
    assert format_micro_time(1767225600.25) == "2026-01-01T00:00:00.250000Z"


@pytest.mark.parametrize(
    ("text", "epoch"),
    [
        pytest.param("2026-01-01T00:00:00Z", 1767225600.0, id="time"),
        pytest.param("2026-01-01T00:00:00.500000Z", 1767225600.5, id="micro-time"),
        pytest.param("2026-01-01T01:00:00+01:00", 1767225600.0, id="offset"),
    ],
)
def test_parse(text, epoch):
    assert parse_time(text) == pytest.approx(epoch)


def test_parse_rejects_garbage():
    with pytest.raises(ValueError, match="RFC 3339"):
        parse_time("yesterday")
