"""The per-pod eviction gates (upstream's DefaultEvictor checks, namespaces, the maximum
eviction cost and the expected-replicas rule), each with its message; the
``descheduler.alpha.kubernetes.io/evict`` override; ``skipEvictionGates``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from controlplane.descheduler.migration.args import parse_args
from controlplane.descheduler.migration.gates import GateContext, refusal
from controlplane.descheduler.migration.workloads import Workload
from controlplane.descheduler.nodefit import fits_any
from tests.controlplane.descheduler.builders import node, pod

Obj = dict[str, Any]
EVICT = "descheduler.alpha.kubernetes.io/evict"


def context(replicas: int = 10, nodes: Sequence[Obj] = (), pods: Mapping[str, Sequence[Obj]] | None = None):
    def misfit(p: Mapping[str, Any]) -> str | None:
        return None if fits_any(p, nodes, lambda n: (pods or {}).get(n, ())) is not None else "no node"

    def expected(workload: Workload) -> int:
        return replicas

    return GateContext(misfit, expected)


def why(p: Obj, raw: Mapping[str, Any] | None = None, **ctx: Any) -> str | None:
    return refusal(p, parse_args(raw), context(**ctx))


def with_meta(p: Obj, **fields: Any) -> Obj:
    p["metadata"].update(fields)
    return p


def test_an_ordinary_pod_passes() -> None:
    assert why(pod("p", node="n1")) is None


@pytest.mark.parametrize(
    ("p", "raw", "message"),
    [
        (pod("p", node="n1", owner=("DaemonSet", "ds", "ds-uid")), None, "pod is a DaemonSet pod"),
        (
            pod("p", node="n1", annotations={"kubernetes.io/config.mirror": "x"}),
            None,
            "pod is a mirror pod",
        ),
        (
            pod("p", node="n1", annotations={"kubernetes.io/config.source": "file"}),
            None,
            "pod is a static pod",
        ),
        (
            with_meta(pod("p", node="n1"), deletionTimestamp="2026-01-01T00:00:00Z"),
            None,
            "pod is terminating",
        ),
        (pod("p", node="n1", owner=None), None, "pod does not have any ownerRefs"),
        (
            pod("p", node="n1", owner=None),
            {"evictFailedBarePods": True},
            "pod does not have any ownerRefs and is not in failed phase",
        ),
        (pod("p", node="n1", priority=2_000_000_000), None, "pod has system critical priority"),
        (
            pod("p", node="n1", priority=100),
            {"priorityThreshold": {"value": 100}},
            "pod has higher priority than specified priority class threshold",
        ),
        (
            pod("p", node="n1", volumes=[{"name": "tmp", "emptyDir": {}}]),
            None,
            "pod has local storage and descheduler is not configured with evictLocalStoragePods",
        ),
        (
            pod("p", node="n1", volumes=[{"name": "h", "hostPath": {"path": "/data"}}]),
            None,
            "pod has local storage and descheduler is not configured with evictLocalStoragePods",
        ),
        (
            pod("p", node="n1", volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "c"}}]),
            {"ignorePvcPods": True},
            "pod has a PVC and descheduler is configured to ignore PVC pods",
        ),
        (
            pod("p", node="n1", labels={"app": "db"}),
            {"labelSelector": {"matchLabels": {"app": "web"}}},
            "pod labels do not match the labelSelector filter in the policy parameter",
        ),
        (pod("p", node="n1"), {"namespaces": {"include": ["prod"]}}, "namespace default is not included"),
        (pod("p", node="n1"), {"namespaces": {"exclude": ["default"]}}, "namespace default is excluded"),
        (
            pod("p", node="n1", annotations={"scheduling.koordinator.sh/eviction-cost": "2147483647"}),
            None,
            "pod has the maximum eviction cost",
        ),
    ],
)
def test_refusals(p: Obj, raw: Mapping[str, Any] | None, message: str) -> None:
    assert why(p, raw) == message


@pytest.mark.parametrize(
    ("p", "raw"),
    [
        (pod("p", node="n1", owner=None, phase="Failed"), {"evictFailedBarePods": True}),
        (pod("p", node="n1", owner=None), {"evictAllBarePods": True}),
        (pod("p", node="n1", priority=2_000_000_000), {"evictSystemCriticalPods": True}),
        # evictSystemCriticalPods ignores the threshold too
        (
            pod("p", node="n1", priority=500),
            {"evictSystemCriticalPods": True, "priorityThreshold": {"value": 100}},
        ),
        (pod("p", node="n1", priority=99), {"priorityThreshold": {"value": 100}}),
        (pod("p", node="n1"), {"priorityThreshold": {"value": 100}}),
        (pod("p", node="n1", volumes=[{"name": "tmp", "emptyDir": {}}]), {"evictLocalStoragePods": True}),
        (pod("p", node="n1", volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "c"}}]), None),
        (pod("p", node="n1", volumes=[{"name": "cm", "configMap": {"name": "c"}}]), None),
        (
            pod("p", node="n1", labels={"app": "web"}),
            {"labelSelector": {"matchLabels": {"app": "web"}}},
        ),
        (pod("p", namespace="prod", node="n1"), {"namespaces": {"include": ["prod"]}}),
        (pod("p", node="n1", annotations={"scheduling.koordinator.sh/eviction-cost": "2147483646"}), None),
    ],
)
def test_allowed(p: Obj, raw: Mapping[str, Any] | None) -> None:
    assert why(p, raw) is None


def test_the_first_failing_gate_is_reported() -> None:
    p = with_meta(
        pod("p", node="n1", owner=("DaemonSet", "ds", "ds-uid")), deletionTimestamp="2026-01-01T00:00:00Z"
    )
    assert why(p) == "pod is a DaemonSet pod"


def test_node_fit() -> None:
    raw = {"nodeFit": True}
    p = pod("p", node="n1")
    message = (
        "pod does not fit on any other node because of nodeSelector(s), Taint(s), "
        "or nodes marked as unschedulable"
    )
    tainted = node("n2", taints=[{"key": "dedicated", "value": "db", "effect": "NoSchedule"}])
    assert why(p, raw, nodes=[node("n1"), tainted]) == message
    assert why(p, raw, nodes=[node("n1"), node("n2", unschedulable=True)]) == message
    assert why(p, raw, nodes=[node("n1"), node("n2", cpu="500m")]) == message
    assert why(p, raw, nodes=[node("n1"), node("n2")]) is None
    # without nodeFit, no node needs to fit
    assert why(p, None, nodes=[node("n1")]) is None


@pytest.mark.parametrize(
    ("replicas", "raw", "message"),
    [
        (1, None, "workload ReplicaSet default/rs expects 1 replica"),
        (
            2,
            {"maxMigratingPerWorkload": 2},
            "workload ReplicaSet default/rs expects as many replicas as it may migrate at once",
        ),
        (
            4,
            {"maxUnavailablePerWorkload": "100%"},
            "workload ReplicaSet default/rs expects as many replicas as may be unavailable",
        ),
    ],
)
def test_expected_replicas(replicas: int, raw: Mapping[str, Any] | None, message: str) -> None:
    assert why(pod("p", node="n1"), raw, replicas=replicas) == message
    assert (
        why(pod("p", node="n1"), {**(raw or {}), "skipCheckExpectedReplicas": True}, replicas=replicas)
        is None
    )


def test_two_or_three_replicas_may_migrate_one_pod() -> None:
    # max_unavailable(2) = max_unavailable(3) = 1: neither equals the replicas
    assert why(pod("p", node="n1"), replicas=2) is None
    assert why(pod("p", node="n1"), replicas=3) is None


def test_a_limit_over_the_replicas_refuses_like_upstream() -> None:
    message = "workload ReplicaSet default/rs expects as many replicas as may be unavailable"
    assert why(pod("p", node="n1"), {"maxUnavailablePerWorkload": 5}, replicas=3) == message


def test_the_evict_annotation_overrides_the_evictor_checks() -> None:
    evict = {EVICT: "true"}
    overridden = [
        pod("p", node="n1", owner=("DaemonSet", "ds", "ds-uid"), annotations=evict),
        pod("p", node="n1", owner=None, annotations=evict),
        pod("p", node="n1", priority=2_000_000_000, annotations=evict),
        pod("p", node="n1", volumes=[{"name": "tmp", "emptyDir": {}}], annotations=evict),
        with_meta(pod("p", node="n1", annotations=evict), deletionTimestamp="2026-01-01T00:00:00Z"),
    ]
    for p in overridden:
        assert why(p) is None
    # any value counts
    assert why(pod("p", node="n1", owner=None, annotations={EVICT: ""})) is None
    assert (
        why(
            pod("p", node="n1", labels={"app": "db"}, annotations=evict),
            {"labelSelector": {"matchLabels": {"app": "web"}}},
        )
        is None
    )
    assert why(pod("p", node="n1", annotations=evict), {"nodeFit": True}, nodes=[node("n1")]) is None


def test_the_evict_annotation_does_not_override_namespaces_cost_or_replicas() -> None:
    evict = {EVICT: "true"}
    assert why(pod("p", node="n1", annotations=evict), {"namespaces": {"exclude": ["default"]}}) == (
        "namespace default is excluded"
    )
    cost = {**evict, "scheduling.koordinator.sh/eviction-cost": "2147483647"}
    assert why(pod("p", node="n1", annotations=cost)) == "pod has the maximum eviction cost"
    assert why(pod("p", node="n1", annotations=evict), replicas=1) == (
        "workload ReplicaSet default/rs expects 1 replica"
    )


@pytest.mark.parametrize(
    ("gate", "p", "raw", "ctx"),
    [
        ("BarePods", pod("p", node="n1", owner=None), None, {}),
        ("SystemCritical", pod("p", node="n1", priority=2_000_000_000), None, {}),
        ("PriorityThreshold", pod("p", node="n1", priority=100), {"priorityThreshold": {"value": 1}}, {}),
        ("LocalStorage", pod("p", node="n1", volumes=[{"name": "t", "emptyDir": {}}]), None, {}),
        (
            "PVC",
            pod("p", node="n1", volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "c"}}]),
            {"ignorePvcPods": True},
            {},
        ),
        ("NodeFit", pod("p", node="n1"), {"nodeFit": True}, {"nodes": [node("n1")]}),
        ("LabelSelector", pod("p", node="n1"), {"labelSelector": {"matchLabels": {"app": "web"}}}, {}),
        ("Namespaces", pod("p", node="n1"), {"namespaces": {"exclude": ["default"]}}, {}),
        (
            "EvictionCost",
            pod("p", node="n1", annotations={"scheduling.koordinator.sh/eviction-cost": "2147483647"}),
            None,
            {},
        ),
        ("ExpectedReplicas", pod("p", node="n1"), None, {"replicas": 1}),
    ],
)
def test_skip_eviction_gates(gate: str, p: Obj, raw: Mapping[str, Any] | None, ctx: dict[str, Any]) -> None:
    assert why(p, raw, **ctx) is not None
    assert why(p, {**(raw or {}), "skipEvictionGates": [gate]}, **ctx) is None


def test_skipping_one_gate_keeps_the_others() -> None:
    p = pod("p", node="n1", owner=None, volumes=[{"name": "t", "emptyDir": {}}])
    assert why(p, {"skipEvictionGates": ["BarePods"]}) == (
        "pod has local storage and descheduler is not configured with evictLocalStoragePods"
    )
