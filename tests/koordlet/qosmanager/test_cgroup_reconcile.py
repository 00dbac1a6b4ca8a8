"""CgroupReconcile plans: memory.min/low/high and the Anolis knobs per QoS directory, pod and
container, class configs and the memoryQOS annotation, on Anolis v1 and on v2 with and
without the optional files."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from koordinator.api.extension.constants import ANNOTATION_POD_MEMORY_QOS
from koordinator.api.kubeqos import KubeQOSClass
from koordlet.executor import ResourceUpdateExecutor
from koordlet.qosmanager.strategies.cgroup_reconcile import MAX_INT64, CgroupReconcile
from koordlet.system.cgroup.cgroupfs import CgroupFS
from koordlet.system.cgroup.registry import (
    MEMORY_HIGH,
    MEMORY_LOW,
    MEMORY_MIN,
    MEMORY_OOM_GROUP,
    MEMORY_PRIORITY,
    MEMORY_USE_PRIORITY_OOM,
    MEMORY_WMARK_MIN_ADJ,
    MEMORY_WMARK_RATIO,
    MEMORY_WMARK_SCALE_FACTOR,
)
from tests.fakes.host import FakeHost
from tests.fakes.pods import make_pod
from tests.koordlet.qosmanager.strategy_env import build_snapshot, leveled_writes

GI = 1 << 30
MI = 1 << 20
ORDER = [
    MEMORY_MIN,
    MEMORY_LOW,
    MEMORY_HIGH,
    MEMORY_WMARK_RATIO,
    MEMORY_WMARK_SCALE_FACTOR,
    MEMORY_WMARK_MIN_ADJ,
    MEMORY_PRIORITY,
    MEMORY_USE_PRIORITY_OOM,
    MEMORY_OOM_GROUP,
]
ANOLIS = set(ORDER)
V2_PLAIN = {MEMORY_MIN, MEMORY_LOW, MEMORY_HIGH}
V2_WMARK = V2_PLAIN | {MEMORY_WMARK_RATIO, MEMORY_PRIORITY, MEMORY_USE_PRIORITY_OOM}
HOSTS = {
    "anolis-v1": ("v1", ("memory_qos", "wmark"), ANOLIS),
    "v2": ("v2", (), V2_PLAIN),
    "v2-wmark": ("v2", ("wmark",), V2_WMARK),
}

ENABLED = {
    "resourceQOSStrategy": {
        "lsrClass": {"memoryQOS": {"enable": True, "minLimitPercent": 100}},
        "lsClass": {
            "memoryQOS": {
                "enable": True,
                "minLimitPercent": 50,
                "lowLimitPercent": 80,
                "throttlingPercent": 80,
                "priorityEnable": 1,
                "priority": 6,
            }
        },
    }
}


class Node:
    """An LS pod (1Gi request, 2Gi limit), a Guaranteed pod (512Mi) and a BE pod (256Mi batch)."""

    def __init__(self, root: Path, host: str) -> None:
        version, features, self.supported = HOSTS[host]
        self.host = FakeHost(root, version, features=features)  # type: ignore[arg-type]
        ls = make_pod("ls").container(
            "main", cid="containerd://ls1", requests={"memory": "1Gi"}, limits={"memory": "2Gi"}
        )
        lsr = make_pod("lsr").container(
            "main",
            cid="containerd://lsr1",
            requests={"cpu": "1", "memory": "512Mi"},
            limits={"cpu": "1", "memory": "512Mi"},
        )
        be = (
            make_pod("be")
            .qos("BE")
            .container(
                "main",
                cid="containerd://be1",
                requests={"kubernetes.io/batch-memory": "256Mi"},
                limits={"kubernetes.io/batch-memory": "512Mi"},
            )
        )
        self.pods = [ls.build(), lsr.build(), be.build()]
        self.dirs: dict[str, tuple[str, str]] = {}
        for builder, kube_qos, cid in (
            (ls, "Burstable", "containerd://ls1"),
            (lsr, "Guaranteed", "containerd://lsr1"),
            (be, "BestEffort", "containerd://be1"),
        ):
            pod_dir = self.host.add_pod(kube_qos, builder.uid, [cid])
            self.dirs[builder.build()["metadata"]["name"]] = (
                pod_dir,
                self.host.container_dir(kube_qos, builder.uid, cid),
            )

    def qos_dir(self, kube_qos: str) -> str:
        return self.host.layout.qos_dir(KubeQOSClass(kube_qos))

    def knobs(self, relative: str, values: Sequence[int | None]) -> list[tuple[str, str, object]]:
        """(key, relative, value) in the plan's order for the knobs this host has."""
        return [
            (key, relative, value)
            for key, value in zip(ORDER, values, strict=True)
            if value is not None and key in self.supported
        ]

    def plan(self, slo: dict[str, Any] | None = None):
        return CgroupReconcile().plan(build_snapshot(self.host, pods=self.pods, slo=slo))


NONE_POD = [0, 0, None, 0, 50, 0, 0, 0, 0]  # the "none" config: min, low, -, wmark 0/50/0, off
NONE_CONTAINER = [0, 0, MAX_INT64, 0, 50, 0, 0, 0, 0]


@pytest.mark.parametrize("host", sorted(HOSTS))
def test_enabled_classes(tmp_path, host):
    node = Node(tmp_path, host)
    (ls_pod, ls_c), (lsr_pod, lsr_c), (be_pod, be_c) = node.dirs["ls"], node.dirs["lsr"], node.dirs["be"]
    qos, pods, containers = leveled_writes(node.plan(ENABLED))[0]
    # Guaranteed: Σ min = 512Mi (ls) + 512Mi (lsr) + 0 (be), Σ low = 858993459 (ls); its class (LSR) knobs
    assert qos == [
        *node.knobs(node.qos_dir("Guaranteed"), [GI, 858_993_459, None, None, None, None, 0, 0, 0]),
        *node.knobs(node.qos_dir("Burstable"), [512 * MI, 858_993_459, None, None, None, None, 6, 1, 0]),
        *node.knobs(node.qos_dir("BestEffort"), [0, 0, None, None, None, None, 0, 0, 0]),
    ]
    assert pods == [
        # 1Gi: min 50 %, low 80 % = 858993459; LS wmark defaults 95/20/-25, priority 6 with priority OOM
        *node.knobs(ls_pod, [512 * MI, 858_993_459, None, 95, 20, -25, 6, 1, 0]),
        # 512Mi: min 100 %, low 0 (not raised: 0 means unset)
        *node.knobs(lsr_pod, [512 * MI, 0, None, 95, 20, -25, 0, 0, 0]),
        # BE class disabled: the none config
        *node.knobs(be_pod, NONE_POD),
    ]
    assert containers == [
        # high = floor((1Gi + (2Gi - 1Gi) * 80 / 100) / 4096) * 4096 = 1932734464
        *node.knobs(ls_c, [512 * MI, 858_993_459, 1_932_734_464, 95, 20, -25, 6, 1, 0]),
        # throttling 0: memory.high unlimited
        *node.knobs(lsr_c, [512 * MI, 0, MAX_INT64, 95, 20, -25, 0, 0, 0]),
        *node.knobs(be_c, NONE_CONTAINER),
    ]


@pytest.mark.parametrize("host", sorted(HOSTS))
def test_node_slo_disabled_resets_everything(tmp_path, host):
    node = Node(tmp_path, host)
    qos, pods, containers = leveled_writes(node.plan(None))[0]
    assert qos == [
        k
        for q in ("Guaranteed", "Burstable", "BestEffort")
        for k in node.knobs(node.qos_dir(q), [0, 0, None, None, None, None, 0, 0, 0])
    ]
    assert pods == [k for name in ("ls", "lsr", "be") for k in node.knobs(node.dirs[name][0], NONE_POD)]
    assert containers == [
        k for name in ("ls", "lsr", "be") for k in node.knobs(node.dirs[name][1], NONE_CONTAINER)
    ]


def test_be_pods_use_batch_memory(tmp_path):
    node = Node(tmp_path, "anolis-v1")
    slo = {
        "resourceQOSStrategy": {
            "beClass": {"memoryQOS": {"enable": True, "minLimitPercent": 50, "throttlingPercent": 50}}
        }
    }
    _, pods, containers = leveled_writes(node.plan(slo))[0]
    be_pod, be_c = node.dirs["be"]
    # request 256Mi batch-memory: min 128Mi; BE defaults wmark 95/20/50
    assert [k for k in pods if k[1] == be_pod] == node.knobs(be_pod, [128 * MI, 0, None, 95, 20, 50, 0, 0, 0])
    # high = 256Mi + (512Mi - 256Mi) * 50 % = 384Mi
    assert [k for k in containers if k[1] == be_c] == node.knobs(
        be_c, [128 * MI, 0, 384 * MI, 95, 20, 50, 0, 0, 0]
    )


def test_without_a_limit_memory_high_uses_node_allocatable(tmp_path):
    node = Node(tmp_path, "v2")
    del node.pods[0]["spec"]["containers"][0]["resources"]["limits"]
    _, _, containers = leveled_writes(node.plan(ENABLED))[0]
    ls_c = node.dirs["ls"][1]
    # node allocatable 16Gi: floor((1Gi + 15Gi * 80 / 100) / 4096) * 4096
    assert (MEMORY_HIGH, ls_c, 13_958_643_712) in containers


@pytest.mark.parametrize(
    ("annotation", "expected_pod", "expected_container"),
    [
        ({"policy": "none"}, NONE_POD, NONE_CONTAINER),
        # auto: the default LS config (no protection, no throttling, wmark 95/20/-25)
        ({"policy": "auto"}, [0, 0, None, 95, 20, -25, 0, 0, 0], [0, 0, MAX_INT64, 95, 20, -25, 0, 0, 0]),
        # fields override the class config: min 20 % of 1Gi = 214748364
        (
            {"minLimitPercent": 20, "oomKillGroup": 1},
            [214_748_364, 858_993_459, None, 95, 20, -25, 6, 1, 1],
            [214_748_364, 858_993_459, 1_932_734_464, 95, 20, -25, 6, 1, 1],
        ),
        (
            {"policy": "auto", "wmarkRatio": 80},
            [0, 0, None, 80, 20, -25, 0, 0, 0],
            [0, 0, MAX_INT64, 80, 20, -25, 0, 0, 0],
        ),
    ],
)
def test_memory_qos_annotation(tmp_path, annotation, expected_pod, expected_container):
    node = Node(tmp_path, "anolis-v1")
    node.pods[0]["metadata"]["annotations"][ANNOTATION_POD_MEMORY_QOS] = json.dumps(annotation)
    _, pods, containers = leveled_writes(node.plan(ENABLED))[0]
    ls_pod, ls_c = node.dirs["ls"]
    assert [k for k in pods if k[1] == ls_pod] == node.knobs(ls_pod, expected_pod)
    assert [k for k in containers if k[1] == ls_c] == node.knobs(ls_c, expected_container)


def test_malformed_annotation_is_ignored(tmp_path):
    node = Node(tmp_path, "v2")
    node.pods[0]["metadata"]["annotations"][ANNOTATION_POD_MEMORY_QOS] = "{not json"
    plan = node.plan(ENABLED)
    assert (MEMORY_MIN, node.dirs["ls"][0], 512 * MI) in leveled_writes(plan)[0][1]
    assert any(n.startswith("default/ls: memoryQOS annotation ignored") for n in plan.notes)


def test_no_pods_only_the_qos_directories(tmp_path):
    node = Node(tmp_path, "anolis-v1")
    node.pods = []
    assert leveled_writes(node.plan(ENABLED)) == [
        [
            [
                (MEMORY_PRIORITY, node.qos_dir("Guaranteed"), 0),
                (MEMORY_USE_PRIORITY_OOM, node.qos_dir("Guaranteed"), 0),
                (MEMORY_OOM_GROUP, node.qos_dir("Guaranteed"), 0),
                (MEMORY_PRIORITY, node.qos_dir("Burstable"), 6),
                (MEMORY_USE_PRIORITY_OOM, node.qos_dir("Burstable"), 1),
                (MEMORY_OOM_GROUP, node.qos_dir("Burstable"), 0),
                (MEMORY_PRIORITY, node.qos_dir("BestEffort"), 0),
                (MEMORY_USE_PRIORITY_OOM, node.qos_dir("BestEffort"), 0),
                (MEMORY_OOM_GROUP, node.qos_dir("BestEffort"), 0),
            ],
            [],
            [],
        ]
    ]


def test_finished_pods_are_not_counted(tmp_path):
    node = Node(tmp_path, "v2")
    node.pods[0]["status"]["phase"] = "Failed"
    qos, pods, _ = leveled_writes(node.plan(ENABLED))[0]
    assert not any(k[1] == node.dirs["ls"][0] for k in pods)
    assert qos[:2] == [
        (MEMORY_MIN, node.qos_dir("Guaranteed"), 512 * MI),
        (MEMORY_LOW, node.qos_dir("Guaranteed"), 0),
    ]


def test_a_kernel_without_memory_qos_gets_no_plan(tmp_path):
    host = FakeHost(tmp_path, "v1")
    pod = make_pod("ls").container("main", cid="containerd://ls1", requests={"memory": "1Gi"}).build()
    host.add_pod("Burstable", pod["metadata"]["uid"], ["containerd://ls1"])
    plan = CgroupReconcile().plan(build_snapshot(host, pods=[pod], slo=ENABLED))
    assert plan.empty
    assert plan.notes == ["none of the memory QoS knobs is provided by this kernel"]


def test_gate(tmp_path):
    host = FakeHost(tmp_path, "v2")
    assert CgroupReconcile().enabled(build_snapshot(host)) == (False, "feature gate CgroupReconcile is off")
    assert CgroupReconcile().enabled(build_snapshot(host, gates={"CgroupReconcile": True})) == (True, "")


@pytest.mark.parametrize("host", sorted(HOSTS))
def test_the_plan_applies_on_the_host(tmp_path, host):
    node = Node(tmp_path, host)
    plan = node.plan(ENABLED)
    executor = ResourceUpdateExecutor(CgroupFS.detect(node.host.paths))
    outcomes = [o for batch in plan.leveled for o in executor.leveled(batch)]
    assert [o.error for o in outcomes if o.error is not None] == []
    ls_pod, ls_c = node.dirs["ls"]
    assert node.host.get(MEMORY_LOW, ls_pod) == 858_993_459
    assert node.host.get(MEMORY_HIGH, ls_c) == 1_932_734_464
    assert node.host.get(MEMORY_MIN, node.qos_dir("Guaranteed")) == GI
