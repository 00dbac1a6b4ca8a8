"""ResourceList arithmetic (quotav1 semantics) and pod request/limit aggregation."""

from __future__ import annotations

import pytest

from koordinator.api import resourcelist as rl
from koordinator.api.quantity import parse_quantity


def res(**values: str) -> rl.ResourceList:
    return {name.replace("_", "-"): parse_quantity(v) for name, v in values.items()}


def text(resources: rl.ResourceList) -> dict[str, str]:
    return rl.to_json(resources)


def test_parse_and_to_json_round_trip():
    parsed = rl.parse({"cpu": "500m", "memory": 1073741824, "pods": "110"})
    assert text(parsed) == {"cpu": "500m", "memory": "1073741824", "pods": "110"}
    assert rl.parse(None) == {}
    with pytest.raises(rl.ResourceListError, match="cpu"):
        rl.parse({"cpu": "lots"})


def test_add_unions_keys():
    assert text(rl.add(res(cpu="1"), res(cpu="500m", memory="1Gi"))) == {"cpu": "1500m", "memory": "1Gi"}


def test_subtract_negates_keys_only_in_b():
    assert text(rl.subtract(res(cpu="1"), res(cpu="2", memory="1Gi"))) == {"cpu": "-1", "memory": "-1Gi"}
    assert text(rl.subtract_non_negative(res(cpu="1"), res(cpu="2", memory="1Gi"))) == {
        "cpu": "0",
        "memory": "0",
    }


def test_max_min_and_mask():
    a, b = res(cpu="1", memory="2Gi"), res(cpu="2", pods="10")
    assert text(rl.max_of(a, b)) == {"cpu": "2", "memory": "2Gi", "pods": "10"}
    assert text(rl.min_of(a, b)) == {"cpu": "1", "memory": "2Gi", "pods": "10"}
    assert text(rl.mask(a, ["cpu", "gpu"])) == {"cpu": "1"}


@pytest.mark.parametrize(
    ("request_", "free", "short"),
    [
        pytest.param({"cpu": "1"}, {"cpu": "2"}, [], id="fits"),
        pytest.param({"cpu": "3"}, {"cpu": "2"}, ["cpu"], id="too-much-cpu"),
        pytest.param({"nvidia.com/gpu": "1"}, {"cpu": "2"}, ["nvidia.com/gpu"], id="missing-resource"),
        pytest.param({"nvidia.com/gpu": "0"}, {}, [], id="zero-request-always-fits"),
    ],
)
def test_fits(request_, free, short):
    assert rl.fits(rl.parse(request_), rl.parse(free)) == short


def test_less_than_or_equal_and_equal():
    assert rl.less_than_or_equal(res(cpu="1", memory="4Gi"), res(cpu="2")) == (True, [])
    assert rl.less_than_or_equal(res(cpu="3"), res(cpu="2")) == (False, ["cpu"])
    assert rl.equal(res(cpu="1"), res(cpu="1000m"))
    assert not rl.equal(res(cpu="1"), res(cpu="1", memory="0"))
    assert rl.is_zero(res(cpu="0", memory="0"))
    assert rl.is_zero({})
    assert not rl.is_zero(res(cpu="1m"))


def _container(name: str, requests: dict[str, str], limits: dict[str, str] | None = None, **extra):
    return {"name": name, "resources": {"requests": requests, "limits": limits or {}}, **extra}


def test_pod_requests_take_init_container_peak_and_overhead():
    pod = {
        "spec": {
            "containers": [_container("a", {"cpu": "1", "memory": "1Gi"}), _container("b", {"cpu": "500m"})],
            "initContainers": [_container("init", {"cpu": "2", "memory": "512Mi"})],
            "overhead": {"cpu": "100m"},
        }
    }
    assert text(rl.pod_requests(pod)) == {"cpu": "2100m", "memory": "1Gi"}
    assert text(rl.pod_requests(pod, include_overhead=False)) == {"cpu": "2", "memory": "1Gi"}


def test_sidecars_add_to_everything_after_them():
    pod = {
        "spec": {
            "containers": [_container("app", {"cpu": "1"})],
            "initContainers": [
                _container("sidecar", {"cpu": "500m"}, restartPolicy="Always"),
                _container("setup", {"cpu": "2"}),
            ],
        }
    }
    # regular containers run with the sidecar: 1 + 0.5; the setup step runs with it: 2 + 0.5
    assert text(rl.pod_requests(pod)) == {"cpu": "2500m"}


def test_pod_limits_overhead_only_raises_existing_limits():
    pod = {
        "spec": {
            "containers": [_container("a", {"cpu": "1"}, {"cpu": "2"})],
            "overhead": {"cpu": "100m", "memory": "64Mi"},
        }
    }
    assert text(rl.pod_limits(pod)) == {"cpu": "2100m"}
