"""MemoryEvict plans, hand-computed.

Capacity 16Gi, usage 12Gi: 75 % >= 70 %, lower 68 %, so the plan must release
16Gi * 7 / 100 = 1.12Gi.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from koordinator.api.extension.constants import ANNOTATION_EVICTION_POLICY, LABEL_POD_EVICT_ENABLE
from koordlet.metriccache import Sample, kinds
from koordlet.qosmanager.framework import Eviction, Plan
from koordlet.qosmanager.strategies.memory_evict import MemoryEvict
from tests.fakes.host import FakeHost
from tests.fakes.pods import PodBuilder, make_pod
from tests.koordlet.qosmanager.conftest import NOW, snapshot

GI, MI = 1 << 30, 1 << 20
ENABLED = {"resourceUsedThresholdWithBE": {"enable": True}}
BE_GATE = {"BEMemoryEvict": True}


def _usage(node: float, pods: dict[str, float]) -> list[Sample]:
    samples = [kinds.NODE_MEMORY_USAGE.sample(node, NOW - 0.5)]
    samples += [kinds.POD_MEMORY_USAGE.sample(v, NOW - 0.5, pod_uid=uid) for uid, v in pods.items()]
    return samples


def _be(name: str, priority: int | None = None) -> PodBuilder:
    builder = make_pod(name).qos("BE").kube_qos("BestEffort")
    return builder.priority(priority) if priority is not None else builder


def _victims(plan: Plan) -> list[str]:
    return [e.pod.name for e in plan.evictions]


def _plan(
    host: FakeHost, pods: list[dict[str, Any]], node_used: float, usage: Mapping[str, float], **kw: Any
) -> Plan:
    by_name = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}
    samples = _usage(node_used, {by_name[n]: v for n, v in usage.items()})
    return MemoryEvict().plan(
        snapshot(
            host,
            pods=pods,
            samples=samples,
            slo=kw.pop("slo", ENABLED),
            gates=kw.pop("gates", BE_GATE),
            topology=False,
            **kw,
        )
    )


def test_be_victims_by_priority_then_usage(fake_host):
    pods = [
        _be("be-a", 5000).build(),
        _be("be-b", 5000).build(),
        _be("be-c", 5000).build(),
        _be("be-d", 4000).build(),
        make_pod("web").qos("LS").kube_qos("Burstable").build(),
    ]
    usage = {"be-a": 1 * GI, "be-b": 512 * MI, "be-d": 100 * MI, "web": 5 * GI}
    plan = _plan(fake_host, pods, 12 * GI, usage)
    # be-d (lowest priority) 100Mi + be-a 1Gi = 1124Mi < 1.12Gi (1146.88Mi), so be-b too
    assert _victims(plan) == ["be-d", "be-a", "be-b"]
    eviction = plan.evictions[0]
    assert isinstance(eviction, Eviction)
    assert eviction.feature == "BEMemoryEvict"
    assert eviction.reason == "evictPodByNodeMemoryUsage"
    assert "75% >= 70%" in eviction.message


def test_below_the_threshold_nothing_happens(fake_host):
    pods = [_be("be-a").build()]
    assert _plan(fake_host, pods, 11 * GI, {"be-a": GI}).empty  # 68 %


def test_lower_percent(fake_host):
    pods = [_be("be-a").build(), _be("be-b").build()]
    slo = {
        "resourceUsedThresholdWithBE": {
            "enable": True,
            "memoryEvictThresholdPercent": 75,
            "memoryEvictLowerPercent": 74,
        }
    }
    # release 16Gi * 1% = 163.84Mi: the biggest BE pod is enough
    plan = _plan(fake_host, pods, 12 * GI, {"be-a": 100 * MI, "be-b": 200 * MI}, slo=slo)
    assert _victims(plan) == ["be-b"]


def test_unknown_usage_goes_last_by_name_descending(fake_host):
    pods = [_be("be-a").build(), _be("be-z").build(), _be("be-m").build()]
    plan = _plan(fake_host, pods, 15 * GI, {"be-m": MI})
    assert _victims(plan) == ["be-m", "be-z", "be-a"]
    assert any("release" in n for n in plan.notes)  # not enough to release


def test_eviction_policy_annotation_is_honoured(fake_host):
    pods = [
        _be("be-a").annotation(ANNOTATION_EVICTION_POLICY, '["BECPUEvict"]').build(),
        _be("be-b").annotation(ANNOTATION_EVICTION_POLICY, '["BEMemoryEvict"]').build(),
        _be("be-c").annotation(ANNOTATION_EVICTION_POLICY, "not json").build(),
    ]
    plan = _plan(fake_host, pods, 12 * GI, {"be-a": 4 * GI, "be-b": 2 * GI, "be-c": 3 * GI})
    assert _victims(plan) == ["be-b"]


def test_node_slo_switch_off(fake_host):
    pods = [_be("be-a").build()]
    plan = _plan(
        fake_host, pods, 15 * GI, {"be-a": GI}, slo={"resourceUsedThresholdWithBE": {"enable": False}}
    )
    assert plan.empty
    assert any("disabled by NodeSLO" in n for n in plan.notes)


def test_missing_node_usage(fake_host):
    pods = [_be("be-a").build()]
    plan = MemoryEvict().plan(snapshot(fake_host, pods=pods, slo=ENABLED, gates=BE_GATE, topology=False))
    assert plan.empty
    assert any("no node memory usage" in n for n in plan.notes)


def _enabled(name: str, qos: str = "BE", priority: int = 100) -> PodBuilder:
    return make_pod(name).qos(qos).label(LABEL_POD_EVICT_ENABLE, "true").priority(priority)


MEMORY_EVICT = {"resourceUsedThresholdWithBE": {"enable": True, "evictEnabledPriorityThreshold": 1000}}


def test_memory_evict_credits_bytes_not_bytes_times_1000(fake_host):
    """Upstream's MemoryEvict multiplies each victim's usage by 1000, so one victim always
    'releases' enough; here two are needed to release 1.12Gi."""
    pods = [
        _enabled("a").build(),
        _enabled("b").build(),
        make_pod("c").qos("BE").priority(100).build(),  # not eviction-enabled
    ]
    plan = _plan(
        fake_host,
        pods,
        12 * GI,
        {"a": 600 * MI, "b": 700 * MI, "c": 4 * GI},
        slo=MEMORY_EVICT,
        gates={"MemoryEvict": True},
    )
    assert _victims(plan) == ["b", "a"]
    assert {e.feature for e in plan.evictions} == {"MemoryEvict"}


def test_memory_evict_without_a_priority_threshold_evicts_nothing(fake_host):
    """Upstream refuses MemoryEvict without evictEnabledPriorityThreshold (as CPUEvict)."""
    pods = [_enabled("a", priority=9500).build(), _enabled("b").build()]
    plan = _plan(
        fake_host,
        pods,
        15 * GI,
        {"a": 4 * GI, "b": 4 * GI},
        slo=ENABLED,
        gates={"MemoryEvict": True},
    )
    assert plan.evictions == []
    assert plan.notes == ["MemoryEvict: invalid config: evictEnabledPriorityThreshold not set"]


@pytest.mark.parametrize("gate", ["BEMemoryEvict", "MemoryEvict"])
def test_a_lower_percent_not_below_the_threshold_evicts_nothing(fake_host, gate):
    pods = [_enabled("a").build()]
    slo = {
        "resourceUsedThresholdWithBE": {
            **MEMORY_EVICT["resourceUsedThresholdWithBE"],
            "memoryEvictThresholdPercent": 70,
            "memoryEvictLowerPercent": 72,
        }
    }
    plan = _plan(fake_host, pods, 15 * GI, {"a": 4 * GI}, slo=slo, gates={gate: True})
    assert plan.evictions == []
    assert plan.notes == [
        f"{gate}: invalid config: memoryEvictLowerPercent 72 is not below memoryEvictThresholdPercent 70"
    ]


def test_memory_evict_skips_pods_without_a_usage_sample(fake_host):
    """Upstream leaves a pod without a memory sample out of MemoryEvict's candidates; it is
    neither counted as using nothing nor evicted to make up the release."""
    pods = [_enabled("a").build(), _enabled("quiet").build()]
    plan = _plan(fake_host, pods, 12 * GI, {"a": 600 * MI}, slo=MEMORY_EVICT, gates={"MemoryEvict": True})
    assert _victims(plan) == ["a"]
    assert plan.notes == ["MemoryEvict: candidates release 629145600 of the 1202590843 bytes needed"]


def test_memory_evict_skips_inactive_pods(fake_host):
    pods = [_enabled("done").phase("Succeeded").build(), _enabled("a").build()]
    plan = _plan(
        fake_host, pods, 12 * GI, {"done": 4 * GI, "a": 2 * GI}, slo=MEMORY_EVICT, gates={"MemoryEvict": True}
    )
    assert _victims(plan) == ["a"]


def test_protected_pods_are_passed_over_for_the_next_candidate(fake_host):
    """The evictor never evicts LS, LSR or LSE pods: the plan takes the next candidate
    instead of counting their memory as released."""
    pods = [
        _enabled("web", qos="LS", priority=10).build(),  # first in MemoryEvict's order
        _enabled("db", qos="LSR", priority=10).build(),
        _enabled("batch").build(),
    ]
    usage = {"web": 4 * GI, "db": 4 * GI, "batch": 2 * GI}
    plan = _plan(fake_host, pods, 12 * GI, usage, slo=MEMORY_EVICT, gates={"MemoryEvict": True})
    assert _victims(plan) == ["batch"]
    assert plan.notes == [
        "MemoryEvict: passed over default/web (LS), default/db (LSR): LSE, LSR and LS pods are never evicted"
    ]


def test_memory_allocatable_evict(fake_host):
    pods = [
        _be("be-a", 5000).container("c", requests={"kubernetes.io/batch-memory": "6Gi"}).build(),
        _be("be-b", 5000).container("c", requests={"kubernetes.io/batch-memory": "6Gi"}).build(),
        make_pod("prod")
        .kube_qos("Burstable")
        .priority(9000)
        .container("c", requests={"memory": "8Gi"})
        .build(),
    ]
    slo = {
        "resourceUsedThresholdWithBE": {
            "enable": True,
            "memoryAllocatableEvictThresholdPercent": 70,
            "memoryAllocatableEvictLowerPercent": 60,
        }
    }
    # requests of pods up to priority 7999: 12Gi = 75% of 16Gi; release to 60% = 9.6Gi -> 2.4Gi: one pod
    plan = _plan(fake_host, pods, 2 * GI, {}, slo=slo, gates={"MemoryAllocatableEvict": True})
    assert len(plan.evictions) == 1
    assert plan.evictions[0].reason == "evictPodByNodeMemoryAllocatable"


def test_gates_off():
    from koordinator.api.features import KOORDLET_FEATURES, FeatureGates

    class Stub:
        gates = FeatureGates(KOORDLET_FEATURES)

    assert not MemoryEvict().enabled(Stub())[0]  # type: ignore[arg-type]


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_same_plan_on_both_cgroup_versions(tmp_path, version):
    host = FakeHost(tmp_path, version)
    pods = [_be("be-a").build()]
    assert _victims(_plan(host, pods, 12 * GI, {"be-a": 2 * GI})) == ["be-a"]
