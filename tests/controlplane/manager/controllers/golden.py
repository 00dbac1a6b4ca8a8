"""Hand-computed cases of the batch and mid formulas, shared by the explain-node and controller tests.

Every case starts from one node: capacity 16 cores / 64Gi, allocatable 15 / 60Gi (the
kubelet keeps 1 core / 4Gi), system usage 0.5 core / 2Gi, evaluated one minute after the
NodeMetric's report. Its pods:

* ``prod-a``: prod, Running, requests 4 / 8Gi, uses 3 / 10Gi;
* ``batch-b``: batch, Running, requests 2 / 4Gi of batch resources, uses 1 / 2Gi (never counts);
* ``prod-c``: prod, Pending, requests 1 / 1Gi, no metric yet (counts with its request);
* ``prod-d``: prod, Succeeded, requests 2 / 2Gi (not running: never counts).

The arithmetic of each expectation is written next to it: CPU in milli-cores, memory in
bytes (``GI`` = 2**30).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tests.controlplane.manager.controllers.objects import GI, config_map, node, node_metric, pod, pod_metric

Obj = dict[str, Any]
NOW = "2026-01-01T00:01:00Z"
NODE = "node-1"


def base_pods() -> list[Obj]:
    return [
        pod("prod-a", "4", "8Gi", priority_class="koord-prod", qos="LS"),
        pod("batch-b", "2", "4Gi", priority_class="koord-batch", qos="BE", batch=True),
        pod("prod-c", "1", "1Gi", priority_class="koord-prod", qos="LS", phase="Pending"),
        pod("prod-d", "2", "2Gi", priority_class="koord-prod", qos="LS", phase="Succeeded"),
    ]


def base_metrics() -> list[Obj]:
    return [pod_metric("prod-a", "3", "10Gi"), pod_metric("batch-b", "1", "2Gi", priority="koord-batch")]


#: reclaim thresholds that keep the hand arithmetic in whole units: margin 50 % CPU, 25 % memory
HALF = {"enable": True, "cpuReclaimThresholdPercent": 50, "memoryReclaimThresholdPercent": 75}


@dataclass
class Golden:
    id: str
    batch: tuple[int, int] | None
    mid: tuple[int, int] | None
    colocation: Obj | None = field(default_factory=lambda: {"enable": True})
    node: Obj = field(default_factory=node)
    metric: Obj | None = field(default_factory=lambda: node_metric(pods=base_metrics()))
    pods: list[Obj] = field(default_factory=base_pods)
    now: str = NOW

    def config(self) -> Obj | None:
        return config_map(self.colocation) if self.colocation is not None else None

    def expected(self) -> dict[str, Any]:
        """``{"batch": {name: value} | None, "mid": ...}`` with integer values (milli-cores, bytes)."""
        out: dict[str, Any] = {"batch": None, "mid": None}
        if self.batch is not None:
            out["batch"] = {
                "kubernetes.io/batch-cpu": self.batch[0],
                "kubernetes.io/batch-memory": self.batch[1],
            }
        if self.mid is not None:
            out["mid"] = {"kubernetes.io/mid-cpu": self.mid[0], "kubernetes.io/mid-memory": self.mid[1]}
        return out


def metric_with(**changes: Any) -> Obj:
    return node_metric(**{"pods": base_metrics(), **changes})


CASES = [
    Golden(
        "usage-policy-defaults",
        # margin: 16000 x 0.4 = 6400; 64Gi x 0.35 = 24051816857 (float, truncated)
        # max(system 500 / 2Gi, kubelet reserved 1000 / 4Gi) = 1000 / 4Gi
        # HP used: prod-a 3000 / 10Gi + prod-c request 1000 / 1Gi = 4000 / 11Gi
        batch=(16000 - 6400 - 1000 - 4000, 64 * GI - 24051816857 - 4 * GI - 11 * GI),
        mid=(0, 0),  # no prod-reclaimable reported, midUnallocatedPercent 0
    ),
    Golden(
        "request-policy-memory",
        colocation={**HALF, "memoryCalculatePolicy": "request"},
        # cpu by usage: 16000 - 8000 - 1000 - 4000
        # memory by request: 64Gi - 16Gi - kubelet reserved 4Gi - HP requests (8Gi + 1Gi)
        batch=(3000, 35 * GI),
        mid=(0, 0),
    ),
    Golden(
        "max-usage-request-counts-unreported-pods",
        colocation={
            **HALF,
            "cpuCalculatePolicy": "maxUsageRequest",
            "memoryCalculatePolicy": "maxUsageRequest",
        },
        # HP max(request, used): prod-a max(4000, 3000) / max(8Gi, 10Gi) + prod-c request 1000 / 1Gi
        # (upstream leaves prod-c out and would offer 3000 / 34Gi)
        batch=(16000 - 8000 - 1000 - 5000, 64 * GI - 16 * GI - 4 * GI - 11 * GI),
        mid=(0, 0),
    ),
    Golden(
        "reserved-above-system-usage",
        colocation=HALF,
        node=node(
            annotations={"node.koordinator.sh/reservation": '{"resources": {"cpu": "2", "memory": "6Gi"}}'}
        ),
        # reserved max(kubelet 1000 / 4Gi, annotation 2000 / 6Gi) = 2000 / 6Gi, above system usage 500 / 2Gi
        batch=(16000 - 8000 - 2000 - 4000, 64 * GI - 16 * GI - 6 * GI - 11 * GI),
        mid=(0, 0),
    ),
    Golden(
        "system-usage-above-reserved",
        colocation=HALF,
        metric=metric_with(system_usage=("3", "8Gi")),
        # max(system 3000 / 8Gi, reserved 1000 / 4Gi) = 3000 / 8Gi
        batch=(16000 - 8000 - 3000 - 4000, 64 * GI - 16 * GI - 8 * GI - 11 * GI),
        mid=(0, 0),
    ),
    Golden(
        "lse-pod-counts-cpu-request-and-memory-usage",
        colocation=HALF,
        pods=[
            pod("lse-e", "4", "8Gi", priority_class="koord-prod", qos="LSE"),
            pod("batch-b", "2", "4Gi", priority_class="koord-batch", qos="BE", batch=True),
        ],
        metric=node_metric(
            pods=[pod_metric("lse-e", "1", "6Gi"), pod_metric("batch-b", "1", "2Gi", priority="koord-batch")]
        ),
        # lse-e counts its CPU request 4000 (not its usage 1000) and its memory usage 6Gi
        batch=(16000 - 8000 - 1000 - 4000, 64 * GI - 16 * GI - 4 * GI - 6 * GI),
        mid=(0, 0),
    ),
    Golden(
        "pods-without-metrics-and-dangling-metrics",
        colocation=HALF,
        metric=node_metric(
            pods=[
                pod_metric("gone", "1", "1Gi"),  # not listed any more, no priority: counts as HP
                pod_metric("gone-batch", "2", "2Gi", priority="koord-batch"),  # reported as batch: ignored
            ]
        ),
        # HP used = requests (prod-a 4000 / 8Gi, prod-c 1000 / 1Gi) + dangling 1000 / 1Gi
        batch=(16000 - 8000 - 1000 - 6000, 64 * GI - 16 * GI - 4 * GI - 10 * GI),
        mid=(0, 0),
    ),
    Golden(
        "host-applications-above-batch",
        colocation=HALF,
        metric=metric_with(
            host_apps=[
                {
                    "name": "agent",
                    "priority": "koord-prod",
                    "usage": {"resources": {"cpu": "1", "memory": "2Gi"}},
                },
                {
                    "name": "yarn",
                    "priority": "koord-batch",
                    "usage": {"resources": {"cpu": "4", "memory": "8Gi"}},
                },
            ]
        ),
        # system used = 500 / 2Gi + prod app 1000 / 2Gi = 1500 / 4Gi; max with reserved 1000 / 4Gi
        batch=(16000 - 8000 - 1500 - 4000, 64 * GI - 16 * GI - 4 * GI - 11 * GI),
        mid=(0, 0),
    ),
    Golden(
        "batch-threshold-caps",
        colocation={"enable": True, "batchCPUThresholdPercent": 20, "batchMemoryThresholdPercent": 30},
        # as usage-policy-defaults (4600 / 28561532519), capped at 16000 x 0.2 and int(64Gi x 0.3)
        batch=(3200, 20615843020),
        mid=(0, 0),
    ),
    Golden(
        "node-label-and-annotation-overrides",
        node=node(
            labels={"node.koordinator.sh/cpu-reclaim-ratio": "0.5"},
            annotations={"node.koordinator.sh/colocation-strategy": '{"memoryReclaimThresholdPercent": 75}'},
        ),
        # the label sets cpuReclaimThresholdPercent 50, the annotation memory 75: margins 8000 / 16Gi
        batch=(16000 - 8000 - 1000 - 4000, 64 * GI - 16 * GI - 4 * GI - 11 * GI),
        mid=(0, 0),
    ),
    Golden(
        "mid-dynamic-capped-by-threshold",
        colocation={"enable": True, "midUnallocatedPercent": 50, "midCPUThresholdPercent": 50},
        metric=metric_with(node_usage=("10", "40Gi"), prod_reclaimable=("4", "16Gi")),
        batch=(4600, 28561532519),  # as usage-policy-defaults
        # reclaimable min(4000 / 16Gi, unused 6000 / 24Gi) = 4000 / 16Gi
        # unallocated: 16000 - reserved 1000 - prod requests 5000 = 10000; 64Gi - 4Gi - 9Gi = 51Gi
        # + 50 %: 9000 / 41.5Gi; cpu capped at 16000 x 50 % = 8000 (upstream's code would give 9000)
        mid=(8000, 16 * GI + 51 * GI // 2),
    ),
    Golden(
        "mid-static",
        colocation={
            "enable": True,
            "midReclaimMode": "static",
            "midStaticCPUReservedPercent": 25,
            "midStaticMemoryReservedPercent": 10,
        },
        batch=(4600, 28561532519),
        mid=(16000 // 4, 6871947673),  # int(64Gi x 0.1)
    ),
    Golden("no-nodemetric-degrades", metric=None, batch=None, mid=None),
    Golden(
        "stale-nodemetric-degrades",
        metric=metric_with(update_time="2025-12-31T23:45:59Z"),  # 15m01s before NOW, degradeTimeMinutes 15
        batch=None,
        mid=None,
    ),
    Golden(
        "nodemetric-exactly-at-the-degrade-time-is-fresh",
        metric=metric_with(update_time="2025-12-31T23:46:00Z"),
        batch=(4600, 28561532519),
        mid=(0, 0),
    ),
    Golden("never-reported-degrades", metric=metric_with(update_time=None), batch=None, mid=None),
    Golden("colocation-disabled-by-default", colocation=None, batch=None, mid=None),
    Golden(
        "colocation-disabled-for-the-node",
        colocation={
            "enable": True,
            "nodeConfigs": [
                {"name": "offline", "nodeSelector": {"matchLabels": {"pool": "offline"}}, "enable": False}
            ],
        },
        node=node(labels={"pool": "offline"}),
        batch=None,
        mid=None,
    ),
]
