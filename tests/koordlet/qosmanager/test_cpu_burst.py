"""CPUBurst plans: static cfs burst, CFS quota scaling by node state and throttling, the
limiter, annotation overrides, on cgroup v1 and v2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from koordinator.api.extension.constants import ANNOTATION_POD_CPU_BURST
from koordlet.executor import ResourceUpdateExecutor
from koordlet.metriccache import Sample
from koordlet.metriccache.kinds import (
    CONTAINER_CPU_THROTTLED,
    CONTAINER_CPU_USAGE,
    NODE_CPU_USAGE,
    POD_CPU_USAGE,
)
from koordlet.metrics import KoordletMetrics
from koordlet.qosmanager.framework import QoSManager
from koordlet.qosmanager.strategies.cpu_burst import (
    BurstLimiter,
    CPUBurst,
    NodeState,
    Operation,
    adjust_by_node,
    base_quota,
)
from koordlet.system.cgroup.cgroupfs import CgroupFS
from koordlet.system.cgroup.registry import CPU_CFS_BURST, CPU_CFS_QUOTA
from tests.fakes.host import FakeHost
from tests.fakes.pods import make_pod
from tests.koordlet.qosmanager.strategy_env import NOW, build_snapshot, cgroup_writes, leveled_writes, running

CID = "containerd://aaa"
SIDE = "containerd://bbb"


class Node:
    """A 4-CPU host with one Burstable LS pod ``web`` (container ``main``: request 1, limit 2)."""

    def __init__(self, tmp_path: Path, version: str, *, burst: bool = True, quota: int = 200_000) -> None:
        self.host = FakeHost(tmp_path, version, features=("cfs_burst",) if burst else ())  # type: ignore[arg-type]
        self.host.set_cpu_topology(1, 2, 2)
        builder = make_pod("web").container("main", cid=CID, requests={"cpu": "1"}, limits={"cpu": "2"})
        self.uid = builder.uid
        self.pod = running(builder.build())
        self.pod_dir = self.host.add_pod("Burstable", self.uid, [CID])
        self.container_dir = self.host.container_dir("Burstable", self.uid, CID)
        self.set_quota(quota, quota)

    def set_quota(self, pod: int, container: int) -> None:
        self.host.set(CPU_CFS_QUOTA, self.pod_dir, pod)
        self.host.set(CPU_CFS_QUOTA, self.container_dir, container)


def policy(name: str, **extra: int) -> dict[str, Any]:
    return {"cpuBurstStrategy": {"policy": name, **extra}}


@pytest.fixture(params=["v1", "v2"])
def version(request):
    return request.param


# --- pure helpers ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "operation", "expected"),
    [
        (NodeState.OVERLOAD, Operation.SCALE_UP, Operation.SCALE_DOWN),
        (NodeState.OVERLOAD, Operation.REMAIN, Operation.SCALE_DOWN),
        (NodeState.OVERLOAD, Operation.RESET, Operation.RESET),
        (NodeState.COOLING, Operation.SCALE_UP, Operation.REMAIN),
        (NodeState.COOLING, Operation.SCALE_DOWN, Operation.SCALE_DOWN),
        (NodeState.UNKNOWN, Operation.SCALE_UP, Operation.REMAIN),
        (NodeState.IDLE, Operation.SCALE_UP, Operation.SCALE_UP),
    ],
)
def test_node_state_overrides_the_container_operation(state, operation, expected):
    assert adjust_by_node(state, operation) is expected


@pytest.mark.parametrize(("milli", "quota"), [(0, 0), (5, 1000), (500, 50_000), (2000, 200_000)])
def test_base_quota(milli, quota):
    assert base_quota(milli) == quota


def test_limiter_consumes_above_the_limit_and_saves_below_60_percent():
    limiter = BurstLimiter.new(10, 300, NOW, 0.25)  # capacity 10 * 200 = 2000, starts with 500
    assert (limiter.capacity, limiter.tokens) == (2000, 500)
    assert limiter.allow(NOW + 2.9, 150)  # int(2.9) = 2 s at 150 %: -100
    assert limiter.tokens == 400
    assert limiter.allow(NOW + 3.9, 80)  # between 60 % and 100 %: unchanged
    assert limiter.tokens == 400
    assert limiter.allow(NOW + 13.9, 50)  # 10 s at 50 %: +500
    assert limiter.tokens == 900
    assert not limiter.allow(NOW + 23.9, 300)  # 10 s at 300 %: -2000
    assert limiter.tokens == -1100
    assert not limiter.allow(NOW + 33.9, 300)  # another -2000, floored at -capacity
    assert limiter.tokens == -2000
    assert not limiter.expired(NOW + 53)  # 2 * period after the last round
    assert limiter.expired(NOW + 54.5)


def test_limiter_carries_the_fraction_of_a_second_to_the_next_round():
    """Upstream bug fixed: upstream counts whole seconds since the last round and drops the
    rest, so rounds less than a second apart (a collection brought forward) never
    consume; here the bucket's clock keeps the fraction."""
    limiter = BurstLimiter.new(10, 300, NOW, 0.25)  # 500 tokens
    for quarter in range(1, 9):  # two seconds of rounds every 250 ms at 150 %
        limiter.allow(NOW + quarter * 0.25, 150)
    assert limiter.tokens == 500 - 2 * 50
    limiter.allow(NOW + 2.99, 150)  # 0.99 s since the bucket's clock: nothing yet
    assert limiter.tokens == 400
    limiter.allow(NOW + 3.01, 150)  # the second completes
    assert limiter.tokens == 350
    limiter.allow(NOW + 1.0, 150)  # the clock went back: nothing counted, restarts there
    assert limiter.tokens == 350
    limiter.allow(NOW + 2.0, 150)
    assert limiter.tokens == 300


# --- cpuBurstOnly -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("slo", "annotation", "burst"),
    [
        # 2 cores * 50 % * 100000
        (policy("cpuBurstOnly", cpuBurstPercent=50), None, 100_000),
        # default 1000 %: 2,000,000 capped at the 200,000 quota
        (policy("cpuBurstOnly"), None, 200_000),
        (policy("auto", cpuBurstPercent=30), None, 60_000),
        # policy none (the default) resets the burst
        (None, None, 0),
        (policy("cfsQuotaBurstOnly"), None, 0),
        # the pod annotation overrides the node policy
        (None, {"policy": "cpuBurstOnly", "cpuBurstPercent": 50}, 100_000),
        (policy("cpuBurstOnly", cpuBurstPercent=50), {"cpuBurstPercent": 20}, 40_000),
        (policy("cpuBurstOnly", cpuBurstPercent=50), {"policy": "none"}, 0),
    ],
)
def test_static_burst_per_container_and_pod_sum(tmp_path, version, slo, annotation, burst):
    node = Node(tmp_path, version)
    if annotation is not None:
        node.pod["metadata"]["annotations"][ANNOTATION_POD_CPU_BURST] = json.dumps(annotation)
    plan = CPUBurst().plan(build_snapshot(node.host, pods=[node.pod], slo=slo))
    assert cgroup_writes(plan.updates) == [
        (CPU_CFS_BURST, node.container_dir, burst),
        (CPU_CFS_BURST, node.pod_dir, burst),
    ]
    assert plan.leveled == []
    assert plan.gauges == [("container_scaled_cfs_burst_us", ("default", "web", CID, "main"), burst)]


def test_pod_burst_is_the_sum_of_its_containers(tmp_path, version):
    host = FakeHost(tmp_path, version, features=("cfs_burst",))
    host.set_cpu_topology(1, 2, 2)
    builder = (
        make_pod("web")
        .container("main", cid=CID, requests={"cpu": "1"}, limits={"cpu": "2"})
        .container("side", cid=SIDE, limits={"cpu": "500m"})
        .container("free", cid="containerd://ccc")  # no limit: burst 0
    )
    pod = running(builder.build())
    pod_dir = host.add_pod("Burstable", builder.uid, [CID, SIDE, "containerd://ccc"])
    host.set(CPU_CFS_QUOTA, pod_dir, -1)
    host.set(CPU_CFS_QUOTA, f"{pod_dir}/{host.layout.container_dir_name(CID)}", 200_000)
    host.set(CPU_CFS_QUOTA, f"{pod_dir}/{host.layout.container_dir_name(SIDE)}", 50_000)
    plan = CPUBurst().plan(build_snapshot(host, pods=[pod], slo=policy("cpuBurstOnly", cpuBurstPercent=50)))
    assert [v for _, _, v in cgroup_writes(plan.updates)] == [100_000, 25_000, 0, 125_000]


def test_without_kernel_support_no_burst_is_planned(tmp_path, version):
    node = Node(tmp_path, version, burst=False)
    plan = CPUBurst().plan(build_snapshot(node.host, pods=[node.pod], slo=policy("cpuBurstOnly")))
    assert plan.empty
    assert any("no cfs burst" in n for n in plan.notes)


@pytest.mark.parametrize("qos", ["LSR", "LSE", "BE"])
def test_lsr_lse_and_be_pods_never_burst(tmp_path, version, qos):
    node = Node(tmp_path, version)
    node.pod["metadata"]["labels"]["koordinator.sh/qosClass"] = qos
    plan = CPUBurst().plan(build_snapshot(node.host, pods=[node.pod], slo=policy("cpuBurstOnly")))
    assert plan.empty
    assert "no burstable (LS or unlabelled, pending or running) pods" in plan.notes


def test_no_pods(tmp_path, version):
    node = Node(tmp_path, version)
    plan = CPUBurst().plan(build_snapshot(node.host, slo=policy("auto")))
    assert plan.empty


def test_finished_pods_are_left_alone(tmp_path, version):
    node = Node(tmp_path, version)
    node.pod["status"]["phase"] = "Succeeded"
    plan = CPUBurst().plan(build_snapshot(node.host, pods=[node.pod], slo=policy("cpuBurstOnly")))
    assert plan.empty


# --- cfsQuotaBurstOnly ---------------------------------------------------------------------------


def quota_samples(node_cores: float | None, throttled: float | None, *, age: float = 1.0) -> list[Sample]:
    samples = []
    if node_cores is not None:
        samples.append(NODE_CPU_USAGE.sample(node_cores, NOW - 1))
    if throttled is not None:
        samples.append(CONTAINER_CPU_THROTTLED.sample(throttled, NOW - age, container_id=CID))
    return samples


# 4 CPUs, share-pool threshold 50 %: Overload from 2 cores used, Cooling from 1.8.
@pytest.mark.parametrize(
    ("case", "node_cores", "throttled", "quota", "expected"),
    [
        ("idle and throttled: x1.2", 1.0, 0.3, 200_000, 240_000),
        ("idle, not throttled: remain", 1.0, 0.0, 240_000, None),
        ("no throttling sample: remain", 1.0, None, 240_000, None),
        ("cooling turns up into remain", 1.9, 0.3, 200_000, None),
        ("overload turns up into down: x0.8", 2.0, 0.3, 400_000, 320_000),
        ("overload turns remain into down", 2.5, 0.0, 400_000, 320_000),
        ("down is floored at base", 3.0, 0.0, 220_000, 200_000),
        ("up is capped at base * 300 %", 1.0, 0.5, 560_000, 600_000),
        ("unknown node state (no node usage) turns up into remain", None, 0.3, 200_000, None),
        ("an unlimited container quota is left alone", 1.0, 0.3, -1, None),
    ],
)
def test_cfs_quota_scaling(tmp_path, version, case, node_cores, throttled, quota, expected):
    node = Node(tmp_path, version, burst=False, quota=quota)
    snapshot = build_snapshot(
        node.host,
        pods=[node.pod],
        slo=policy("cfsQuotaBurstOnly"),
        samples=quota_samples(node_cores, throttled),
    )
    plan = CPUBurst().plan(snapshot)
    assert plan.updates == []
    if expected is None:
        assert plan.leveled == [], case
        return
    assert leveled_writes(plan) == [
        [[(CPU_CFS_QUOTA, node.pod_dir, expected)], [(CPU_CFS_QUOTA, node.container_dir, expected)]]
    ], case
    assert plan.gauges == [("container_scaled_cfs_quota_us", ("default", "web", CID, "main"), expected)]


def test_gauges_follow_the_containers_on_the_node(tmp_path, version):
    node = Node(tmp_path, version, quota=200_000)
    registry = CollectorRegistry()
    executor = ResourceUpdateExecutor(CgroupFS.detect(node.host.paths))
    metrics = KoordletMetrics(registry, "node-1")
    manager = QoSManager([], lambda: build_snapshot(node.host), executor, None, metrics)
    labels = {
        "node": "node-1",
        "pod_namespace": "default",
        "pod_name": "web",
        "container_id": CID,
        "container_name": "main",
    }
    strategy = CPUBurst()
    slo = policy("auto", cpuBurstPercent=50)
    manager.apply(
        strategy.plan(build_snapshot(node.host, pods=[node.pod], slo=slo, samples=quota_samples(1.0, 0.3)))
    )
    assert registry.get_sample_value("koordlet_container_scaled_cfs_quota_us", labels) == 240_000
    assert registry.get_sample_value("koordlet_container_scaled_cfs_burst_us", labels) == 100_000
    # the quota remains (not throttled): the gauge keeps its last value
    manager.apply(
        strategy.plan(build_snapshot(node.host, pods=[node.pod], slo=slo, samples=quota_samples(1.0, 0.0)))
    )
    assert registry.get_sample_value("koordlet_container_scaled_cfs_quota_us", labels) == 240_000
    # the pod goes away: so do its series
    manager.apply(strategy.plan(build_snapshot(node.host, pods=[], slo=slo)))
    assert registry.get_sample_value("koordlet_container_scaled_cfs_quota_us", labels) is None
    assert registry.get_sample_value("koordlet_container_scaled_cfs_burst_us", labels) is None


def test_stale_throttling_is_not_used(tmp_path, version):
    node = Node(tmp_path, version, burst=False)
    samples = quota_samples(1.0, 0.3, age=5.0)  # older than two collect intervals
    plan = CPUBurst().plan(build_snapshot(node.host, pods=[node.pod], slo=policy("auto"), samples=samples))
    assert plan.empty


def test_node_usage_outside_the_window_is_unknown(tmp_path, version):
    node = Node(tmp_path, version, burst=False)
    samples = [
        NODE_CPU_USAGE.sample(0.5, NOW - 11),
        CONTAINER_CPU_THROTTLED.sample(0.3, NOW - 1, container_id=CID),
    ]
    plan = CPUBurst().plan(build_snapshot(node.host, pods=[node.pod], slo=policy("auto"), samples=samples))
    assert plan.empty
    assert "node state unknown: no node CPU usage in the last 5s" in plan.notes


def test_share_pool_leaves_out_lsr_requests_and_lsr_be_usage(tmp_path, version):
    node = Node(tmp_path, version, burst=False)
    lsr = make_pod("db").qos("LSR").container("db", requests={"cpu": "2"}, limits={"cpu": "2"}).build()
    be = make_pod("batch").qos("BE").container("job").build()
    lsr_uid, be_uid = lsr["metadata"]["uid"], be["metadata"]["uid"]
    # share pool: 4 - 2 = 2 CPUs; used 2.5 - 0.5 (LSR) - 1.0 (BE) = 1.0 -> 50 %: Overload
    samples = [
        *quota_samples(2.5, 0.3),
        POD_CPU_USAGE.sample(0.5, NOW - 1, pod_uid=lsr_uid),
        POD_CPU_USAGE.sample(1.0, NOW - 1, pod_uid=be_uid),
    ]
    node.set_quota(400_000, 400_000)
    snapshot = build_snapshot(node.host, pods=[node.pod, lsr, be], slo=policy("auto"), samples=samples)
    plan = CPUBurst().plan(snapshot)
    assert leveled_writes(plan) == [
        [[(CPU_CFS_QUOTA, node.pod_dir, 320_000)], [(CPU_CFS_QUOTA, node.container_dir, 320_000)]]
    ]
    # more BE use leaves the pool idle: 2.5 - 0.5 - 1.9 = 0.1 of 2 CPUs -> throttled scales up
    samples[-1] = POD_CPU_USAGE.sample(1.9, NOW - 1, pod_uid=be_uid)
    node.set_quota(200_000, 200_000)
    plan = CPUBurst().plan(
        build_snapshot(node.host, pods=[node.pod, lsr, be], slo=policy("auto"), samples=samples)
    )
    assert leveled_writes(plan) == [
        [[(CPU_CFS_QUOTA, node.pod_dir, 240_000)], [(CPU_CFS_QUOTA, node.container_dir, 240_000)]]
    ]


def test_policy_without_quota_burst_resets_to_base_with_burst_first(tmp_path, version):
    node = Node(tmp_path, version, quota=300_000)
    plan = CPUBurst().plan(build_snapshot(node.host, pods=[node.pod], slo=policy("cpuBurstOnly")))
    # burst 2,000,000 capped at the new quota; pod burst capped at the pod's new quota
    assert plan.updates == []
    assert leveled_writes(plan) == [
        [
            [(CPU_CFS_BURST, node.pod_dir, 200_000), (CPU_CFS_QUOTA, node.pod_dir, 200_000)],
            [(CPU_CFS_BURST, node.container_dir, 200_000), (CPU_CFS_QUOTA, node.container_dir, 200_000)],
        ]
    ]


def test_auto_scales_quota_and_caps_burst_at_the_new_quota(tmp_path, version):
    node = Node(tmp_path, version)
    samples = quota_samples(1.0, 0.3)
    plan = CPUBurst().plan(build_snapshot(node.host, pods=[node.pod], slo=policy("auto"), samples=samples))
    assert leveled_writes(plan) == [
        [
            [(CPU_CFS_BURST, node.pod_dir, 240_000), (CPU_CFS_QUOTA, node.pod_dir, 240_000)],
            [(CPU_CFS_BURST, node.container_dir, 240_000), (CPU_CFS_QUOTA, node.container_dir, 240_000)],
        ]
    ]
    assert sorted(plan.gauges) == [
        ("container_scaled_cfs_burst_us", ("default", "web", CID, "main"), 240_000),
        ("container_scaled_cfs_quota_us", ("default", "web", CID, "main"), 240_000),
    ]


def test_a_container_that_is_not_running_keeps_its_quota(tmp_path, version):
    node = Node(tmp_path, version, burst=False)
    del node.pod["status"]["containerStatuses"][0]["state"]
    samples = quota_samples(1.0, 0.3)
    plan = CPUBurst().plan(build_snapshot(node.host, pods=[node.pod], slo=policy("auto"), samples=samples))
    assert plan.empty


def test_unlimited_pod_quota_is_left_alone(tmp_path, version):
    node = Node(tmp_path, version, burst=False)
    node.set_quota(-1, 200_000)
    samples = quota_samples(1.0, 0.3)
    plan = CPUBurst().plan(build_snapshot(node.host, pods=[node.pod], slo=policy("auto"), samples=samples))
    assert leveled_writes(plan) == [[[], [(CPU_CFS_QUOTA, node.container_dir, 240_000)]]]


def test_containers_without_a_cpu_limit_burst_nothing_and_their_quota_is_not_read(tmp_path, version):
    """Idle and throttled (a limited container would be scaled x1.2): a pod whose
    containers have no CPU limit gets a burst of 0 and no quota change; neither its
    containers' quotas nor the pod's is read, since none of them could change the plan."""
    host = FakeHost(tmp_path, version, features=("cfs_burst",))
    host.set_cpu_topology(1, 2, 2)
    builder = make_pod("free").container("main", cid=CID, requests={"cpu": "1"})
    pod_dir = host.add_pod("Burstable", builder.uid, [CID])
    container_dir = f"{pod_dir}/{host.layout.container_dir_name(CID)}"
    host.set(CPU_CFS_QUOTA, pod_dir, 200_000)
    host.set(CPU_CFS_QUOTA, container_dir, 200_000)
    snapshot = build_snapshot(
        host,
        pods=[running(builder.build())],
        slo=policy("auto", cpuBurstPercent=50),
        samples=quota_samples(1.0, 0.3),
    )
    plan = CPUBurst().plan(snapshot)
    assert plan.leveled == []
    assert cgroup_writes(plan.updates) == [(CPU_CFS_BURST, container_dir, 0), (CPU_CFS_BURST, pod_dir, 0)]
    # what the round read, as its view captured it
    assert [key for key, _ in snapshot.cgroups._values if key == CPU_CFS_QUOTA] == []


def test_kubelet_static_policy_plans_the_same(tmp_path, version):
    node = Node(tmp_path, version)
    samples = quota_samples(1.0, 0.3)
    plans = [
        CPUBurst().plan(
            build_snapshot(
                node.host, pods=[node.pod], slo=policy("auto"), samples=samples, kubelet_cpu_policy=p
            )
        )
        for p in ("none", "static")
    ]
    assert plans[0].leveled == plans[1].leveled
    assert plans[0].updates == plans[1].updates


# --- the limiter across rounds ------------------------------------------------------------------


def test_limiter_scales_down_once_the_budget_is_spent(tmp_path, version):
    slo = policy("cfsQuotaBurstOnly", cfsQuotaBurstPeriodSeconds=10)  # capacity 10 * (300 - 100) = 2000
    node = Node(tmp_path, version, burst=False)
    strategy = CPUBurst(random_fill=lambda: 0.25)  # starts with 500 tokens

    def round_at(now: float, usage: float):
        samples = [
            NODE_CPU_USAGE.sample(1.0, now - 1),
            CONTAINER_CPU_THROTTLED.sample(0.3, now - 1, container_id=CID),
            CONTAINER_CPU_USAGE.sample(usage, now - 1, container_id=CID),
        ]
        return strategy.plan(build_snapshot(node.host, pods=[node.pod], slo=slo, samples=samples, now=now))

    # round 1: a new bucket (500 tokens) allows: throttled -> up
    assert leveled_writes(round_at(NOW, 4.0)) == [
        [[(CPU_CFS_QUOTA, node.pod_dir, 240_000)], [(CPU_CFS_QUOTA, node.container_dir, 240_000)]]
    ]
    assert strategy.limiters[CID].tokens == 500
    node.set_quota(240_000, 240_000)
    # round 2, 4 s later at 200 % of the limit: 500 - 100 * 4 = 100 tokens left: still up
    assert leveled_writes(round_at(NOW + 4, 4.0)) == [
        [[(CPU_CFS_QUOTA, node.pod_dir, 288_000)], [(CPU_CFS_QUOTA, node.container_dir, 288_000)]]
    ]
    node.set_quota(288_000, 288_000)
    # round 3, 1 s later: 100 - 100 = 0 tokens: the limiter says no -> down, even though throttled
    assert leveled_writes(round_at(NOW + 5, 4.0)) == [
        [[(CPU_CFS_QUOTA, node.pod_dir, 230_400)], [(CPU_CFS_QUOTA, node.container_dir, 230_400)]]
    ]
    assert strategy.limiters[CID].tokens == 0
    # round 4, 10 s later at 25 %: +750 tokens -> allowed again
    node.set_quota(230_400, 230_400)
    assert leveled_writes(round_at(NOW + 15, 0.5)) == [
        [[(CPU_CFS_QUOTA, node.pod_dir, 276_480)], [(CPU_CFS_QUOTA, node.container_dir, 276_480)]]
    ]
    assert strategy.limiters[CID].tokens == 750


def test_limiter_is_remade_on_a_new_capacity_and_dropped_when_idle(tmp_path, version):
    node = Node(tmp_path, version, burst=False)
    strategy = CPUBurst(random_fill=lambda: 0.25)
    slo = policy("auto", cfsQuotaBurstPeriodSeconds=10)
    strategy.plan(build_snapshot(node.host, pods=[node.pod], slo=slo))
    assert strategy.limiters[CID].capacity == 2000
    slo = policy("auto", cfsQuotaBurstPeriodSeconds=10, cfsQuotaBurstPercent=200)
    strategy.plan(build_snapshot(node.host, pods=[node.pod], slo=slo, now=NOW + 1))
    assert (strategy.limiters[CID].capacity, strategy.limiters[CID].tokens) == (1000, 250)
    # the pod is gone: its limiter expires 2 * period after its last round
    strategy.plan(build_snapshot(node.host, slo=slo, now=NOW + 21))
    assert CID in strategy.limiters
    strategy.plan(build_snapshot(node.host, slo=slo, now=NOW + 21.5))
    assert strategy.limiters == {}


def test_a_bucket_without_capacity_denies(tmp_path, version):
    node = Node(tmp_path, version, burst=False, quota=400_000)
    slo = policy("cfsQuotaBurstOnly", cfsQuotaBurstPeriodSeconds=10)
    node.pod["metadata"]["annotations"][ANNOTATION_POD_CPU_BURST] = json.dumps({"cfsQuotaBurstPercent": 100})
    samples = quota_samples(1.0, 0.3)
    plan = CPUBurst().plan(build_snapshot(node.host, pods=[node.pod], slo=slo, samples=samples))
    # percent 100: a bucket of 0 tokens refuses, and the ceiling is the base
    assert leveled_writes(plan) == [
        [[(CPU_CFS_QUOTA, node.pod_dir, 200_000)], [(CPU_CFS_QUOTA, node.container_dir, 200_000)]]
    ]


def test_gate(tmp_path):
    node = Node(tmp_path, "v1")
    assert CPUBurst().enabled(build_snapshot(node.host)) == (True, "")
    assert CPUBurst().enabled(build_snapshot(node.host, gates={"CPUBurst": False})) == (
        False,
        "feature gate CPUBurst is off",
    )
