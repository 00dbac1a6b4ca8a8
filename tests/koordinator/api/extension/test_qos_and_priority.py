"""Pod QoS class (label or Kubernetes-QoS fallback) and priority class (label or spec.priority)."""

from __future__ import annotations

from typing import Any

import pytest

from koordinator.api.extension.annotations import AnnotationError
from koordinator.api.extension.priority import (
    DEFAULT_PRIORITY_VALUE,
    LABEL_POD_PRIORITY,
    LABEL_POD_PRIORITY_CLASS,
    PriorityClass,
    get_pod_priority_class_raw,
    get_pod_priority_class_with_default,
    get_pod_sub_priority,
    priority_class_of_value,
)
from koordinator.api.extension.qos import (
    LABEL_POD_QOS,
    QoSClass,
    get_pod_qos_class_raw,
    get_pod_qos_class_with_default,
)
from koordinator.api.kubeqos import KubeQOSClass, compute_pod_qos, get_pod_qos


def container(requests: dict[str, str] | None = None, limits: dict[str, str] | None = None) -> dict[str, Any]:
    return {"name": "c", "resources": {"requests": requests or {}, "limits": limits or {}}}


def pod(
    *containers: dict[str, Any],
    labels: dict[str, str] | None = None,
    priority: int | None = None,
    init: list[dict[str, Any]] | None = None,
    status_qos: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init:
        spec["initContainers"] = init
    if priority is not None:
        spec["priority"] = priority
    obj: dict[str, Any] = {"metadata": {"name": "p", "labels": labels or {}}, "spec": spec}
    if status_qos:
        obj["status"] = {"qosClass": status_qos}
    return obj


GUARANTEED = container({"cpu": "1", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})
BURSTABLE = container({"cpu": "500m"}, {"cpu": "1"})
BEST_EFFORT = container()


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param(pod(GUARANTEED), KubeQOSClass.GUARANTEED, id="guaranteed"),
        pytest.param(pod(BURSTABLE), KubeQOSClass.BURSTABLE, id="burstable"),
        pytest.param(pod(BEST_EFFORT), KubeQOSClass.BEST_EFFORT, id="best-effort"),
        pytest.param(
            pod(container({"nvidia.com/gpu": "1"}, {"nvidia.com/gpu": "1"})),
            KubeQOSClass.BEST_EFFORT,
            id="only-extended-resources",
        ),
        pytest.param(
            pod(container({"cpu": "0"}, {"cpu": "0"})), KubeQOSClass.BEST_EFFORT, id="zero-values-ignored"
        ),
        pytest.param(
            pod(container(limits={"cpu": "1", "memory": "1Gi"})),
            KubeQOSClass.BURSTABLE,
            id="limits-without-defaulted-requests",
        ),
        pytest.param(
            pod(container({"cpu": "1", "memory": "1Gi"}, {"cpu": "2", "memory": "1Gi"})),
            KubeQOSClass.BURSTABLE,
            id="request-below-limit",
        ),
        pytest.param(
            pod(container({"cpu": "1"}, {"cpu": "1"})), KubeQOSClass.BURSTABLE, id="memory-limit-missing"
        ),
        pytest.param(pod(GUARANTEED, init=[BURSTABLE]), KubeQOSClass.BURSTABLE, id="init-container-counts"),
        pytest.param(
            pod(GUARANTEED, container({"cpu": "1000m", "memory": "1024Mi"}, {"cpu": "1", "memory": "1Gi"})),
            KubeQOSClass.GUARANTEED,
            id="quantities-compared-by-value",
        ),
    ],
)
def test_kubernetes_qos_is_computed_like_the_kubelet(obj, expected):
    assert compute_pod_qos(obj) is expected


def test_status_qos_class_wins():
    assert get_pod_qos(pod(GUARANTEED, status_qos="BestEffort")) is KubeQOSClass.BEST_EFFORT
    assert get_pod_qos(pod(GUARANTEED, status_qos="Nonsense")) is KubeQOSClass.GUARANTEED


@pytest.mark.parametrize(
    ("label", "containers", "raw", "with_default"),
    [
        pytest.param("LSE", [GUARANTEED], QoSClass.LSE, QoSClass.LSE, id="label-lse"),
        pytest.param("BE", [GUARANTEED], QoSClass.BE, QoSClass.BE, id="label-wins-over-kube-qos"),
        pytest.param("SYSTEM", [BEST_EFFORT], QoSClass.SYSTEM, QoSClass.SYSTEM, id="label-system"),
        pytest.param("be", [GUARANTEED], QoSClass.NONE, QoSClass.LSR, id="lowercase-is-unknown"),
        pytest.param(None, [GUARANTEED], QoSClass.NONE, QoSClass.LSR, id="guaranteed-to-lsr"),
        pytest.param(None, [BURSTABLE], QoSClass.NONE, QoSClass.LS, id="burstable-to-ls"),
        pytest.param(None, [BEST_EFFORT], QoSClass.NONE, QoSClass.BE, id="besteffort-to-be"),
    ],
)
def test_koordinator_qos_class(label, containers, raw, with_default):
    obj = pod(*containers, labels={LABEL_POD_QOS: label} if label is not None else {})
    assert get_pod_qos_class_raw(obj) is raw
    assert get_pod_qos_class_with_default(obj) is with_default


@pytest.mark.parametrize(
    ("value", "cls"),
    [
        (9000, PriorityClass.PROD),
        (9999, PriorityClass.PROD),
        (10000, PriorityClass.NONE),
        (7000, PriorityClass.MID),
        (7999, PriorityClass.MID),
        (5000, PriorityClass.BATCH),
        (5999, PriorityClass.BATCH),
        (3000, PriorityClass.FREE),
        (3999, PriorityClass.FREE),
        (8999, PriorityClass.NONE),
        (0, PriorityClass.NONE),
        (None, PriorityClass.NONE),
    ],
)
def test_priority_ranges(value, cls):
    assert priority_class_of_value(value) is cls


def test_default_values_lie_inside_their_ranges():
    for cls, value in DEFAULT_PRIORITY_VALUE.items():
        assert priority_class_of_value(value) is cls


@pytest.mark.parametrize(
    ("labels", "priority", "containers", "raw", "with_default"),
    [
        pytest.param(
            {LABEL_POD_PRIORITY_CLASS: "koord-batch"},
            9500,
            [GUARANTEED],
            "koord-batch",
            "koord-batch",
            id="label-beats-spec",
        ),
        pytest.param(
            {LABEL_POD_PRIORITY_CLASS: "bogus"},
            9500,
            [GUARANTEED],
            "",
            "koord-prod",
            id="unknown-label-is-none-then-qos",
        ),
        pytest.param({}, 5500, [GUARANTEED], "koord-batch", "koord-batch", id="spec-priority"),
        pytest.param({}, None, [BEST_EFFORT], "", "koord-batch", id="be-defaults-to-batch"),
        pytest.param(
            {LABEL_POD_QOS: "LSR"}, None, [BEST_EFFORT], "", "koord-prod", id="lsr-defaults-to-prod"
        ),
        pytest.param(
            {LABEL_POD_QOS: "SYSTEM"}, 0, [BEST_EFFORT], "", "koord-prod", id="system-defaults-to-prod"
        ),
        pytest.param({}, 100, [BURSTABLE], "", "koord-prod", id="burstable-is-ls-so-prod"),
    ],
)
def test_priority_class(labels, priority, containers, raw, with_default):
    obj = pod(*containers, labels=labels, priority=priority)
    assert get_pod_priority_class_raw(obj) == raw
    assert get_pod_priority_class_with_default(obj) == with_default


@pytest.mark.parametrize(
    ("value", "expected"),
    [("100", 100), ("-5", -5), ("0x10", 16), ("010", 8), ("1_000", 1000), (None, 0)],
)
def test_sub_priority_uses_go_base0_int32(value, expected):
    labels = {} if value is None else {LABEL_POD_PRIORITY: value}
    assert get_pod_sub_priority(labels) == expected


@pytest.mark.parametrize("value", ["2147483648", "abc", "1.5", "", "08"])
def test_bad_sub_priority_names_the_label(value):
    with pytest.raises(AnnotationError, match=r"koordinator\.sh/priority"):
        get_pod_sub_priority({LABEL_POD_PRIORITY: value})
