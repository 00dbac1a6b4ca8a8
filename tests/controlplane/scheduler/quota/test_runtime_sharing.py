"""The per-parent sharing arithmetic: Hamilton apportionment, caps, lending, min scaling."""

from __future__ import annotations

import pytest

from controlplane.scheduler.quota import ShareRequest, distribute, hamilton_deltas, scale_min
from koordinator.api.quantity import Quantity


def share(name: str, request: int, min: int = 0, weight: int = 1, lent: bool = True, guarantee: int = 0):
    return ShareRequest(name, request, min, guarantee=guarantee, weight=weight, allow_lent=lent)


@pytest.mark.parametrize(
    ("total", "weights", "expected"),
    [
        # 10 / 3: base 3 each, remainder 1 each; the one unit left goes to the first name
        pytest.param(10, {"c": 1, "a": 1, "b": 1}, {"a": 4, "b": 3, "c": 3}, id="three-way-tie-by-name"),
        # 7 * 2/3 = 4 rem 2, 7 * 1/3 = 2 rem 1: the larger remainder wins the unit
        pytest.param(7, {"a": 2, "b": 1}, {"a": 5, "b": 2}, id="largest-remainder"),
        # weight 0 gets nothing, but the sum still divides by the full weight
        pytest.param(5, {"a": 0, "b": 2, "c": 2}, {"a": 0, "b": 3, "c": 2}, id="zero-weight"),
        pytest.param(0, {"a": 1}, {"a": 0}, id="nothing-to-share"),
    ],
)
def test_hamilton_shares_add_up(total, weights, expected):
    nodes = [share(name, 100, weight=w) for name, w in weights.items()]
    deltas = hamilton_deltas(total, sum(weights.values()), nodes)
    assert dict(zip(weights, deltas, strict=True)) == expected
    if total:
        assert sum(deltas) == total


def test_hamilton_is_exact_for_bytes_beyond_float_precision():
    big = (1 << 62) + 1  # w * T exceeds 2**53 many times over
    deltas = hamilton_deltas(big, 3, [share("a", 0, weight=1), share("b", 0, weight=2)])
    assert deltas == [big // 3 + 1, 2 * big // 3]  # remainders 2 and 1: a has the larger one
    assert sum(deltas) == big


def test_children_above_their_request_are_capped_and_the_excess_shared_again():
    # round 1: 100 by weights 1:1:2 -> 25, 25, 50; a asked 10 so 15 go back
    # round 2: 15 by weights 1:2 -> b +5, c +10
    runtime = distribute(100, [share("a", 10), share("b", 100), share("c", 100, weight=2)])
    assert runtime == {"a": 10, "b": 30, "c": 60}


def test_lending_quota_gets_its_request_and_keeping_one_its_min():
    runtime = distribute(
        100,
        [share("lends", 10, min=40), share("keeps", 10, min=40, lent=False), share("asks", 100, weight=1)],
    )
    assert runtime == {"lends": 10, "keeps": 40, "asks": 50}


def test_guarantee_raises_the_floor():
    runtime = distribute(100, [share("a", 80, min=10, guarantee=30), share("b", 100)])
    # a starts from 30, b from 0; 70 left split 1:1 -> a 65, b 35
    assert runtime == {"a": 65, "b": 35}


def test_oversubscribed_mins_are_not_cut_by_distribute():
    assert distribute(10, [share("a", 20, min=8), share("b", 20, min=4)]) == {"a": 8, "b": 4}


def test_mins_scale_down_when_they_exceed_the_total():
    total = {"cpu": Quantity.parse("10"), "memory": Quantity.parse("100Gi")}
    mins = {
        "a": {"cpu": Quantity.parse("8"), "memory": Quantity.parse("10Gi")},
        "b": {"cpu": Quantity.parse("4"), "memory": Quantity.parse("10Gi")},
    }
    scaled = scale_min(total, mins, True)
    # cpu: 10000m * 8000 / 12000 = 6666.67 -> 6666m; 10000 * 4000 / 12000 -> 3333m; memory fits
    assert scaled["a"] == {"cpu": Quantity.parse("6666m"), "memory": Quantity.parse("10Gi")}
    assert scaled["b"] == {"cpu": Quantity.parse("3333m"), "memory": Quantity.parse("10Gi")}
    assert scale_min(total, mins, False) == mins


def test_scaling_to_a_non_positive_total_gives_zero():
    scaled = scale_min({"cpu": Quantity.parse("0")}, {"a": {"cpu": Quantity.parse("2")}}, True)
    assert scaled == {"a": {"cpu": Quantity()}}
