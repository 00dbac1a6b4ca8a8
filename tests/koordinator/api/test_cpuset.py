"""Linux CPU list parsing and formatting."""

from __future__ import annotations

import pytest

from koordinator.api.cpuset import CPUSetError, format_cpuset, parse_cpuset


@pytest.mark.parametrize(
    ("text", "cpus", "canonical"),
    [
        ("0-3", [0, 1, 2, 3], "0-3"),
        ("0-1,4,6-7", [0, 1, 4, 6, 7], "0-1,4,6-7"),
        ("3,1,2", [1, 2, 3], "1-3"),
        ("", [], ""),
        (" 5 ", [5], "5"),
        ("0-1,1-2", [0, 1, 2], "0-2"),
    ],
)
def test_round_trip(text, cpus, canonical):
    assert parse_cpuset(text) == cpus
    assert format_cpuset(cpus) == canonical


@pytest.mark.parametrize("text", ["a", "3-1", "-1", "1-", "1-2-3", "1,,x"])
def test_refused(text):
    with pytest.raises(CPUSetError):
        parse_cpuset(text)
