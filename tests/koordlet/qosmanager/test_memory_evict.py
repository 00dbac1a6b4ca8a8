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
    assert plan.notes == ["MemoryEvict: candidates release 629145600 of the 1202590842 bytes needed"]


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


ALLOCATABLE = {
    "enable": True,
    "memoryAllocatableEvictThresholdPercent": 90,
    "memoryAllocatableEvictLowerPercent": 80,
    "allocatableEvictPriorityThreshold": 7999,
}
ALLOCATABLE_NODE = {
    "metadata": {"name": "node-1"},
    "status": {
        "capacity": {"cpu": "8", "memory": "16Gi"},
        "allocatable": {
            "cpu": "8",
            "memory": "16Gi",
            "kubernetes.io/batch-memory": "8Gi",
            "kubernetes.io/mid-memory": "8Gi",
        },
    },
}


def _requesting(name: str, resource: str, amount: str, priority: int, *, enabled: bool = True) -> PodBuilder:
    builder = make_pod(name).priority(priority).container("main", requests={resource: amount})
    if resource != "memory":
        builder.qos("BE").kube_qos("BestEffort")
    return builder.label(LABEL_POD_EVICT_ENABLE, "true") if enabled else builder


def _allocatable_plan(
    host: FakeHost, pods: list[dict[str, Any]], usage: Mapping[str, float], **config: Any
) -> Plan:
    slo = {"resourceUsedThresholdWithBE": {**ALLOCATABLE, **config}}
    return _plan(
        host, pods, 2 * GI, usage, slo=slo, gates={"MemoryAllocatableEvict": True}, node_obj=ALLOCATABLE_NODE
    )


def test_memory_allocatable_evict_per_resource_over_eviction_enabled_pods(fake_host):
    """As upstream: batch-memory requests (9Gi, every pod up to the priority threshold) are
    112.5 % of the 8Gi batch allocatable, over 90 %: release 9Gi - 80 % * 8Gi = 2.6Gi.
    Candidates are eviction-enabled and have a memory sample; the larger request goes first
    among equals. mid-memory (2Gi of 8Gi) is under its threshold; prod is above the priority
    threshold."""
    pods = [
        _requesting("unlabelled", "kubernetes.io/batch-memory", "1Gi", 5000, enabled=False).build(),
        _requesting("quiet", "kubernetes.io/batch-memory", "3Gi", 5000).build(),  # no sample
        _requesting("b-small", "kubernetes.io/batch-memory", "1Gi", 5100).build(),
        _requesting("b-big", "kubernetes.io/batch-memory", "4Gi", 5100).build(),
        _requesting("m1", "kubernetes.io/mid-memory", "2Gi", 7100).build(),
        _requesting("prod", "memory", "8Gi", 9000).build(),
    ]
    usage = dict.fromkeys(("unlabelled", "b-small", "b-big", "m1", "prod"), 100 * MI)
    plan = _allocatable_plan(fake_host, pods, usage)
    assert _victims(plan) == ["b-big"]
    assert [(e.feature, e.reason) for e in plan.evictions] == [
        ("MemoryAllocatableEvict", "evictPodByNodeMemoryAllocatable")
    ]
    assert plan.evictions[0].message == (
        "requests exceed 90% of allocatable kubernetes.io/batch-memory (releasing 2791728742); "
        "koordlet feature MemoryAllocatableEvict"
    )
    assert plan.notes == []


def test_memory_allocatable_evict_passes_over_pods_that_release_nothing_short(fake_host):
    """Only batch-memory is over: the koord-free pod (first by priority) and the koord-mid
    pod release none of it and are passed over; upstream evicts them too (its release counts
    as nothing) and still falls short."""
    pods = [
        _requesting("free", "memory", "1Gi", 3500).build(),
        _requesting("b1", "kubernetes.io/batch-memory", "9Gi", 5000, enabled=False).build(),
        _requesting("b2", "kubernetes.io/batch-memory", "1Gi", 5000).build(),
        _requesting("m1", "kubernetes.io/mid-memory", "1Gi", 7100).build(),
    ]
    plan = _allocatable_plan(fake_host, pods, {"free": MI, "b1": MI, "b2": MI, "m1": MI})
    assert _victims(plan) == ["b2"]
    assert plan.notes == [
        "MemoryAllocatableEvict: candidates release 1073741824 of the 3865470566 "
        "kubernetes.io/batch-memory needed"
    ]


def test_memory_allocatable_evict_plain_memory_requests_are_only_noted(fake_host):
    """A koord-free pod's 15Gi memory request is over 90 % of the 16Gi allocatable, but
    upstream releases only koord-batch and koord-mid requests (for plain memory it would evict
    every candidate): nothing is evicted and a note says why."""
    pods = [_requesting("free", "memory", "15Gi", 3500).build()]
    plan = _allocatable_plan(fake_host, pods, {"free": GI})
    assert plan.evictions == []
    assert plan.notes == [
        "MemoryAllocatableEvict: memory requests of pods outside koord-batch and koord-mid "
        "(16106127360) exceed 90% of allocatable 17179869184: nothing evicted for them "
        "(upstream releases only koord-batch and koord-mid requests)"
    ]


@pytest.mark.parametrize(
    ("config", "note"),
    [
        pytest.param(
            {"allocatableEvictPriorityThreshold": None},
            "allocatableEvictPriorityThreshold not set",
            id="no-priority-threshold",
        ),
        pytest.param(
            {"memoryAllocatableEvictLowerPercent": None},
            "memoryAllocatableEvictLowerPercent not set",
            id="no-lower-percent",  # upstream dereferences it: a crash
        ),
        pytest.param(
            {"memoryAllocatableEvictLowerPercent": 95},
            "memoryAllocatableEvictLowerPercent 95 is not below the threshold 90",
            id="lower-not-below",
        ),
        pytest.param(
            {"allocatableEvictPriorityThreshold": 9000},
            "allocatableEvictPriorityThreshold 9000 is above 7999 (prod pods)",
            id="prod-priority",
        ),
    ],
)
def test_memory_allocatable_evict_refuses_an_incomplete_config(fake_host, config, note):
    pods = [_requesting("b", "kubernetes.io/batch-memory", "12Gi", 5000).build()]
    config = {k: v for k, v in {**ALLOCATABLE, **config}.items() if v is not None}
    slo = {"resourceUsedThresholdWithBE": config}
    plan = _plan(
        fake_host,
        pods,
        2 * GI,
        {"b": GI},
        slo=slo,
        gates={"MemoryAllocatableEvict": True},
        node_obj=ALLOCATABLE_NODE,
    )
    assert plan.evictions == []
    assert plan.notes == [f"MemoryAllocatableEvict: invalid config: {note}"]


def test_a_pod_chosen_by_another_feature_counts_even_if_not_a_candidate(fake_host):
    """BEMemoryEvict evicts be-x (2Gi, not eviction-enabled); as upstream, its use counts
    towards MemoryEvict's 1.12Gi too, so MemoryEvict evicts nobody else."""
    pods = [
        _be("be-x").build(),
        make_pod("y").kube_qos("BestEffort").label(LABEL_POD_EVICT_ENABLE, "true").priority(100).build(),
    ]
    gates = {"BEMemoryEvict": True, "MemoryEvict": True}
    plan = _plan(fake_host, pods, 12 * GI, {"be-x": 2 * GI, "y": GI}, slo=MEMORY_EVICT, gates=gates)
    assert [(e.pod.name, e.feature) for e in plan.evictions] == [("be-x", "BEMemoryEvict")]


@pytest.mark.parametrize(
    ("pods", "expected"),
    [
        pytest.param(
            # no spec.priority: a BE pod is koord-batch, 5500 > 1000: not a candidate
            [_enabled("a").build(), _be("no-priority").label(LABEL_POD_EVICT_ENABLE, "true").build()],
            ["a"],
            id="priority-defaults-to-the-class-value",
        ),
        pytest.param(
            # koordinator.sh/priority defaults to the priority (100), so "10" goes first
            [_enabled("a").build(), _enabled("b").label("koordinator.sh/priority", "10").build()],
            ["b"],
            id="sub-priority-defaults-to-the-priority",
        ),
        pytest.param(
            # an eviction-priority outside int32 counts as 0, before 1
            [
                _enabled("a").annotation("koordinator.sh/eviction-priority", "1").build(),
                _enabled("b").annotation("koordinator.sh/eviction-priority", "3000000000").build(),
            ],
            ["b"],
            id="eviction-priority-is-an-int32",
        ),
    ],
)
def test_memory_evict_candidates_and_order_as_upstream(fake_host, pods, expected):
    names = [p["metadata"]["name"] for p in pods]
    usage = dict.fromkeys(names, 2 * GI)  # one victim releases the 1.12Gi
    plan = _plan(fake_host, pods, 12 * GI, usage, slo=MEMORY_EVICT, gates={"MemoryEvict": True})
    assert _victims(plan) == expected


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


def test_be_memory_evict_passes_over_finished_pods(fake_host):
    """A Succeeded BE pod (a completed Job) releases nothing: it is not a victim."""
    pods = [_be("done").phase("Succeeded").build(), _be("running").build()]
    plan = _plan(fake_host, pods, 12 * GI, {"done": 4 * GI, "running": 2 * GI})
    assert _victims(plan) == ["running"]


def test_a_negative_memory_threshold_is_refused(fake_host):
    """Upstream refuses a negative memoryEvictThresholdPercent; evicting at any usage would
    follow from it."""
    pods = [_be("be-a").build()]
    slo = {"resourceUsedThresholdWithBE": {"enable": True, "memoryEvictThresholdPercent": -1}}
    plan = _plan(fake_host, pods, 1 * GI, {"be-a": GI}, slo=slo)
    assert plan.evictions == []
    assert "memoryEvictThresholdPercent -1 is negative" in " ".join(plan.notes)


def test_memory_allocatable_evict_counts_only_active_pods_requests(fake_host):
    """Completed pods' requests hold nothing: 6Gi running of 8Gi is 75 %, under the 90 %
    threshold, however many finished pods requested before (upstream counts them)."""
    pods = [
        _requesting("running", "kubernetes.io/batch-memory", "6Gi", 5000).build(),
        *(
            _requesting(f"done-{i}", "kubernetes.io/batch-memory", "2Gi", 5000).phase("Succeeded").build()
            for i in range(3)
        ),
    ]
    usage = {"running": GI, **{f"done-{i}": 0.0 for i in range(3)}}
    assert _victims(_allocatable_plan(fake_host, pods, usage)) == []


def test_a_pod_whose_eviction_was_refused_is_passed_over_for_the_next(fake_host):
    """The biggest BE pod's eviction was refused (a PodDisruptionBudget): the next plan
    chooses the next candidate instead of asking for it again and relieving nothing."""
    pods = [_be("big").build(), _be("small").build()]
    usage = {"big": 4 * GI, "small": 2 * GI}
    assert _victims(_plan(fake_host, pods, 12 * GI, usage)) == ["big"]
    big = pods[0]["metadata"]["uid"]
    plan = _plan(fake_host, pods, 12 * GI, usage, unevictable=frozenset({big}))
    assert _victims(plan) == ["small"]
    assert "BEMemoryEvict: passed over default/big: their eviction was refused lately" in plan.notes
