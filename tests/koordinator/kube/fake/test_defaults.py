"""Pod defaulting, admission and QoS in the fake apiserver."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from testsupport.fake.defaults import prepare_pod, qos_class, quantity


@pytest.mark.parametrize(
    ("text", "value"),
    [
        pytest.param("500m", Decimal("0.5"), id="milli"),
        pytest.param("1Gi", Decimal(1024**3), id="binary"),
        pytest.param("2e3", Decimal(2000), id="exponent"),
        pytest.param("1M", Decimal(10**6), id="decimal-suffix"),
    ],
)
def test_quantity(text, value):
    assert quantity(text) == value


def test_quantity_rejects_garbage():
    with pytest.raises(ValueError, match="invalid quantity"):
        quantity("lots")


@pytest.mark.parametrize(
    ("containers", "qos"),
    [
        pytest.param(
            [
                {
                    "resources": {
                        "limits": {"cpu": "1", "memory": "1Gi"},
                        "requests": {"cpu": "1000m", "memory": "1Gi"},
                    }
                }
            ],
            "Guaranteed",
            id="equal-units-differ",
        ),
        pytest.param(
            [{"resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}, {"resources": {}}],
            "Burstable",
            id="one-best-effort-container",
        ),
        pytest.param([{"resources": {}}], "BestEffort", id="nothing"),
    ],
)
def test_qos_class(containers, qos):
    assert qos_class({"containers": containers}) == qos


def test_priority_class_lookup():
    pod: dict[str, Any] = {
        "spec": {"containers": [{"name": "c", "image": "i:1"}], "priorityClassName": "koord-prod"}
    }
    prepare_pod(pod, {"koord-prod": 9000}.get)
    assert pod["spec"]["priority"] == 9000
    system: dict[str, Any] = {
        "spec": {"containers": [{"name": "c", "image": "i"}], "priorityClassName": "system-node-critical"}
    }
    prepare_pod(system, lambda name: None)
    assert system["spec"]["priority"] == 2000001000
    with pytest.raises(LookupError):
        prepare_pod({"spec": {"containers": [], "priorityClassName": "nope"}}, lambda name: None)


def test_existing_toleration_for_a_default_key_is_kept():
    own = {
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 5,
    }
    pod: dict[str, Any] = {
        "spec": {"containers": [{"name": "c", "image": "i@sha256:abc"}], "tolerations": [own]}
    }
    prepare_pod(pod, lambda name: None)
    assert [t["key"] for t in pod["spec"]["tolerations"]] == [
        "node.kubernetes.io/unreachable",
        "node.kubernetes.io/not-ready",
    ]
    assert pod["spec"]["tolerations"][0]["tolerationSeconds"] == 5
    assert pod["spec"]["containers"][0]["imagePullPolicy"] == "IfNotPresent"
