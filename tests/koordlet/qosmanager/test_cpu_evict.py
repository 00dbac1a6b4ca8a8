"""CPUEvict plans: BE satisfaction (with the data-sufficiency rule and both limit policies),
node CPU usage over eviction-enabled pods, batch/mid requests over allocatable."""

from __future__ import annotations

import json
from typing import Any

import pytest

from koordinator.api.extension.constants import (
    ANNOTATION_EVICTION_POLICY,
    ANNOTATION_EVICTION_PRIORITY,
    LABEL_POD_EVICT_ENABLE,
)
from koordlet.metriccache import Sample
from koordlet.metriccache.kinds import (
    BE_REAL_LIMIT,
    BE_REQUEST,
    BE_USAGE,
    NODE_BE,
    NODE_CPU_USAGE,
    POD_CPU_USAGE,
)
from koordlet.qosmanager.strategies.cpu_evict import (
    CPUEvict,
    be_usage_high_enough,
    release_by_satisfaction,
)
from tests.fakes.host import FakeHost
from tests.fakes.pods import PodBuilder, make_pod
from tests.koordlet.qosmanager.strategy_env import NOW, build_snapshot, node_obj

ALL = {"BECPUEvict": True, "CPUEvict": True, "CPUAllocatableEvict": True}


def thresholds(**fields: Any) -> dict[str, Any]:
    return {"resourceUsedThresholdWithBE": {"enable": True, **fields}}


SATISFACTION = {
    "cpuEvictBESatisfactionLowerPercent": 40,
    "cpuEvictBESatisfactionUpperPercent": 80,
    "cpuEvictTimeWindowSeconds": 10,
}


def be_series(
    usage: float,
    request: float,
    limit: float,
    *,
    count: int = 10,
    last: tuple[float, float, float] | None = None,
) -> list[Sample]:
    """``count`` samples a second apart ending now (the last one may differ)."""
    out = []
    for i in range(count):
        u, r, lim = last if (last is not None and i == count - 1) else (usage, request, limit)
        t = NOW - (count - 1 - i) - 0.5
        out += [
            NODE_BE.sample(u, t, be_resource="cpu", be_allocation=BE_USAGE),
            NODE_BE.sample(r, t, be_resource="cpu", be_allocation=BE_REQUEST),
            NODE_BE.sample(lim, t, be_resource="cpu", be_allocation=BE_REAL_LIMIT),
        ]
    return out


def be_pod(name: str, batch_cpu: int, *, priority: int | None = None) -> PodBuilder:
    builder = make_pod(name).qos("BE").container("main", requests={"kubernetes.io/batch-cpu": str(batch_cpu)})
    if priority is not None:
        builder.priority(priority)
    return builder


def usage_of(builder: PodBuilder, cores: float) -> Sample:
    return POD_CPU_USAGE.sample(cores, NOW - 0.5, pod_uid=builder.uid)


def victims(plan) -> list[tuple[str, str, str]]:
    return [(e.pod.name, e.feature, e.reason) for e in plan.evictions]


# --- formulas ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("usage", "limit", "threshold", "high"),
    [
        (1800, 2000, None, True),  # 90 %
        (1790, 2000, None, False),
        (1500, 2000, 75, True),
        (0, 999, None, True),  # under a core always counts
        (5000, 0, None, False),  # no limit never does
        (5000, -1, None, False),
    ],
)
def test_be_usage_high_enough(usage, limit, threshold, high):
    assert be_usage_high_enough(usage, limit, threshold) is high


@pytest.mark.parametrize(
    ("requested", "limit", "release"),
    [
        (5000, 2000, 2000),  # satisfaction 0.4 <= 40 %: 5000 * (0.8 - 0.4)
        (5000, 2050, 0),  # 0.41 > 40 %
        (5000, 500, 3500),
        (0, 500, 0),
    ],
)
def test_release_by_satisfaction(requested, limit, release):
    assert release_by_satisfaction(requested, limit, 40, 80) == release


# --- BECPUEvict -------------------------------------------------------------------------------------


def be_pods() -> tuple[list[dict[str, Any]], list[Sample]]:
    """c (priority 4000) first, then a and b (5000) by usage / request, d (no priority, idle) last."""
    a = be_pod("a", 1000, priority=5000)
    b = be_pod("b", 2000, priority=5000)
    c = be_pod("c", 1500, priority=4000)
    d = be_pod("d", 500)
    samples = [usage_of(a, 0.9), usage_of(b, 1.0), usage_of(c, 0.3)]
    return [p.build() for p in (a, b, c, d)], samples


@pytest.mark.parametrize(
    ("case", "config", "series", "node", "expected"),
    [
        # satisfaction 2000 / 5000 = 0.4 <= 40 %: release 2000m; c (1500) + a (1000)
        ("release 2000", SATISFACTION, be_series(1900, 5000, 2000), None, ["c", "a"]),
        # limit under one core: 5000 * (0.8 - 0.1) = 3500; c + a + b
        ("small limit", SATISFACTION, be_series(100, 5000, 500), None, ["c", "a", "b"]),
        ("satisfied enough", SATISFACTION, be_series(1900, 5000, 2100), None, []),
        ("BE usage under 90 % of the limit", SATISFACTION, be_series(1700, 5000, 2000), None, []),
        (
            "usage threshold from the NodeSLO",
            {**SATISFACTION, "cpuEvictBEUsageThresholdPercent": 80},
            be_series(1700, 5000, 2000),
            None,
            ["c", "a"],
        ),
        # 3 samples in a 10 s window: 3 * 1 >= 10 // 3
        ("just enough samples", SATISFACTION, be_series(1900, 5000, 2000, count=3), None, ["c", "a"]),
        ("too few samples", SATISFACTION, be_series(1900, 5000, 2000, count=2), None, []),
        ("no BE metrics", SATISFACTION, [], None, []),
        # evictByAllocatable: batch-cpu allocatable 2000 stands for the limit (real limit ignored)
        (
            "by allocatable",
            {**SATISFACTION, "cpuEvictPolicy": "evictByAllocatable"},
            be_series(1900, 5000, 9000),
            node_obj(allocatable={"cpu": "8", "kubernetes.io/batch-cpu": "2000"}),
            ["c", "a"],
        ),
        # allocatable 0 counts as 1 milli-core: 5000 * (0.8 - 0.0002) = 3999 -> c + a + b
        (
            "by allocatable, none left",
            {**SATISFACTION, "cpuEvictPolicy": "evictByAllocatable"},
            be_series(1900, 5000, 9000),
            node_obj(allocatable={"cpu": "8", "kubernetes.io/batch-cpu": "0"}),
            ["c", "a", "b"],
        ),
        (
            "by allocatable, not reported",
            {**SATISFACTION, "cpuEvictPolicy": "evictByAllocatable"},
            be_series(1900, 5000, 2000),
            None,
            [],
        ),
        # average limit 2040 (release 6000 * 0.46 = 2760: c + a + b), last limit 2400
        # (release 2400): the smaller wins -> c + a
        (
            "the last values release less",
            {**SATISFACTION, "cpuEvictBESatisfactionLowerPercent": 50},
            be_series(1900, 6000, 2000, last=(2300, 6000, 2400)),
            None,
            ["c", "a"],
        ),
        # average limit 2100 (0.42 <= 45 %: release 1900), last limit 3000 (0.6): nothing
        (
            "the last values are satisfied",
            {**SATISFACTION, "cpuEvictBESatisfactionLowerPercent": 45},
            be_series(1900, 5000, 2000, last=(2900, 5000, 3000)),
            None,
            [],
        ),
    ],
)
def test_be_cpu_evict(fake_host: FakeHost, case, config, series, node, expected):
    pods, samples = be_pods()
    snapshot = build_snapshot(
        fake_host, pods=pods, node=node, slo=thresholds(**config), samples=series + samples, gates=ALL
    )
    plan = CPUEvict().plan(snapshot)
    assert victims(plan) == [(n, "BECPUEvict", "evictPodByBECPUSatisfaction") for n in expected], case


def test_be_cpu_evict_message_names_the_release(fake_host):
    pods, samples = be_pods()
    snapshot = build_snapshot(
        fake_host,
        pods=pods,
        slo=thresholds(**SATISFACTION),
        samples=be_series(1900, 5000, 2000) + samples,
        gates=ALL,
    )
    plan = CPUEvict().plan(snapshot)
    assert plan.evictions[0].message == (
        "BE CPU satisfaction 0.40 <= 40%, releasing 2000m batch-cpu towards 80%; koordlet feature BECPUEvict"
    )


def test_be_cpu_evict_honours_the_eviction_policy_and_skips_finished_pods(fake_host):
    pods, samples = be_pods()
    pods[2]["metadata"]["annotations"][ANNOTATION_EVICTION_POLICY] = json.dumps(["BEMemoryEvict"])  # c
    pods[0]["status"]["phase"] = "Succeeded"  # a
    snapshot = build_snapshot(
        fake_host,
        pods=pods,
        slo=thresholds(**SATISFACTION),
        samples=be_series(1900, 5000, 2000) + samples,
        gates=ALL,
    )
    # b (2000) alone releases 2000
    assert victims(CPUEvict().plan(snapshot)) == [("b", "BECPUEvict", "evictPodByBECPUSatisfaction")]


def test_be_cpu_evict_without_be_pods(fake_host):
    ls = make_pod("web").container("main", requests={"cpu": "1"}).build()
    snapshot = build_snapshot(
        fake_host, pods=[ls], slo=thresholds(**SATISFACTION), samples=be_series(1900, 5000, 2000), gates=ALL
    )
    plan = CPUEvict().plan(snapshot)
    assert plan.evictions == []
    assert "BECPUEvict: candidates release 0 of the 2000 kubernetes.io/batch-cpu needed" in plan.notes


def test_stale_be_metrics_do_not_count(fake_host):
    pods, samples = be_pods()
    old = [s._replace(timestamp=s.timestamp - 30) for s in be_series(1900, 5000, 2000)]
    snapshot = build_snapshot(
        fake_host, pods=pods, slo=thresholds(**SATISFACTION), samples=old + samples, gates=ALL
    )
    plan = CPUEvict().plan(snapshot)
    assert plan.evictions == []
    assert "BECPUEvict: 0 BE samples in 10s are not enough" in plan.notes


@pytest.mark.parametrize(
    ("config", "note"),
    [
        (
            {"cpuEvictBESatisfactionUpperPercent": 80},
            "BECPUEvict: invalid config: cpuEvictBESatisfactionLowerPercent or "
            "cpuEvictBESatisfactionUpperPercent not set",
        ),
        (
            {
                **SATISFACTION,
                "cpuEvictBESatisfactionLowerPercent": 70,
                "cpuEvictBESatisfactionUpperPercent": 90,
            },
            "BECPUEvict: invalid config: cpuEvictBESatisfactionLowerPercent 70 not in (0, 60]",
        ),
    ],
)
def test_invalid_satisfaction_config(fake_host, config, note):
    pods, samples = be_pods()
    snapshot = build_snapshot(
        fake_host,
        pods=pods,
        slo=thresholds(**config),
        samples=be_series(1900, 5000, 2000) + samples,
        gates=ALL,
    )
    plan = CPUEvict().plan(snapshot)
    assert plan.evictions == []
    assert note in plan.notes


@pytest.mark.parametrize("enable", [False, None])
def test_node_slo_switch_off(fake_host, enable):
    pods, samples = be_pods()
    config = {
        "resourceUsedThresholdWithBE": {**SATISFACTION, **({} if enable is None else {"enable": enable})}
    }
    snapshot = build_snapshot(
        fake_host, pods=pods, slo=config, samples=be_series(1900, 5000, 2000) + samples, gates=ALL
    )
    plan = CPUEvict().plan(snapshot)
    assert plan.evictions == []
    assert "BECPUEvict disabled by NodeSLO: enable=false" in plan.notes


def test_gates(fake_host):
    assert CPUEvict().enabled(build_snapshot(fake_host)) == (
        False,
        "feature gates BECPUEvict, CPUAllocatableEvict, CPUEvict are off",
    )
    assert CPUEvict().enabled(build_snapshot(fake_host, gates={"CPUEvict": True})) == (True, "")
    assert (CPUEvict().interval, CPUEvict().cooldown) == (1.0, 20.0)


def test_only_enabled_features_run(fake_host):
    pods, samples = be_pods()
    snapshot = build_snapshot(
        fake_host,
        pods=pods,
        slo=thresholds(**SATISFACTION),
        samples=be_series(1900, 5000, 2000) + samples,
        gates={"CPUEvict": True},
    )
    plan = CPUEvict().plan(snapshot)
    assert plan.evictions == []
    assert "CPUEvict: invalid config: cpuEvictThresholdPercent not set" in plan.notes


# --- CPUEvict -------------------------------------------------------------------------------------------

USAGE = {"cpuEvictThresholdPercent": 60, "evictEnabledPriorityThreshold": 6000}


def enabled_pod(name: str, *, qos: str = "BE", priority: int = 5000, enable: bool = True) -> PodBuilder:
    builder = make_pod(name).qos(qos).priority(priority).container("main")
    if enable:
        builder.label(LABEL_POD_EVICT_ENABLE, "true")
    return builder


def usage_pods() -> tuple[list[dict[str, Any]], list[Sample]]:
    """Victim order c (priority 4000), b (eviction-priority 0), a (eviction-priority 5); the
    others are not candidates."""
    a = enabled_pod("a").annotation(ANNOTATION_EVICTION_PRIORITY, "5")
    b = enabled_pod("b")
    c = enabled_pod("c", priority=4000)
    high = enabled_pod("high", priority=7000)  # above evictEnabledPriorityThreshold
    unlabelled = enabled_pod("unlabelled", enable=False)
    ls = enabled_pod("ls", qos="LS")  # never a victim
    quiet = enabled_pod("quiet")  # no CPU sample
    other = enabled_pod("other").annotation(ANNOTATION_EVICTION_POLICY, json.dumps(["MemoryEvict"]))
    samples = [
        usage_of(a, 0.5),
        usage_of(b, 0.8),
        usage_of(c, 0.2),
        usage_of(high, 3.0),
        usage_of(unlabelled, 3.0),
        usage_of(ls, 3.0),
        usage_of(other, 3.0),
    ]
    return [p.build() for p in (a, b, c, high, unlabelled, ls, quiet, other)], samples


@pytest.mark.parametrize(
    ("case", "config", "node_cores", "expected"),
    [
        # 5.6 of 8 cores: 70 % >= 60 %; release 8000 * (70 - 58) / 100 = 960m: c (200) + b (800)
        ("over the threshold", USAGE, 5.6, ["c", "b"]),
        # lower 50: release 8000 * 20 / 100 = 1600: c + b + a (500)
        ("explicit lower percent", {**USAGE, "cpuEvictLowerPercent": 50}, 5.6, ["c", "b", "a"]),
        ("under the threshold", USAGE, 4.7, []),  # int(4700) * 100 // 8000 = 58
        ("no node usage", USAGE, None, []),
    ],
)
def test_cpu_evict_by_node_usage(fake_host, case, config, node_cores, expected):
    pods, samples = usage_pods()
    if node_cores is not None:
        samples.append(NODE_CPU_USAGE.sample(node_cores, NOW - 0.5))
    snapshot = build_snapshot(fake_host, pods=pods, slo=thresholds(**config), samples=samples, gates=ALL)
    plan = CPUEvict().plan(snapshot)
    assert victims(plan) == [(n, "CPUEvict", "evictPodByNodeCPUUsage") for n in expected], case


def test_cpu_evict_averages_over_the_window(fake_host):
    pods, samples = usage_pods()
    # average over 4 s: (8.0 + 3.2) / 2 = 5.6 -> 70 %; the 8.0 sample is outside a 1 s window
    samples += [NODE_CPU_USAGE.sample(8.0, NOW - 3), NODE_CPU_USAGE.sample(3.2, NOW - 0.5)]
    config = {**USAGE, "cpuEvictTimeWindowSeconds": 4}
    plan = CPUEvict().plan(
        build_snapshot(fake_host, pods=pods, slo=thresholds(**config), samples=samples, gates=ALL)
    )
    assert [e.pod.name for e in plan.evictions] == ["c", "b"]
    plan = CPUEvict().plan(
        build_snapshot(fake_host, pods=pods, slo=thresholds(**USAGE), samples=samples, gates=ALL)
    )
    assert plan.evictions == []


def test_cpu_evict_needs_the_priority_threshold(fake_host):
    pods, samples = usage_pods()
    samples.append(NODE_CPU_USAGE.sample(5.6, NOW - 0.5))
    config = {"cpuEvictThresholdPercent": 60}
    plan = CPUEvict().plan(
        build_snapshot(fake_host, pods=pods, slo=thresholds(**config), samples=samples, gates=ALL)
    )
    assert plan.evictions == []
    assert "CPUEvict: invalid config: evictEnabledPriorityThreshold not set" in plan.notes


def test_a_negative_cpu_threshold_is_refused(fake_host):
    """Upstream refuses a negative cpuEvictThresholdPercent; evicting at any usage would
    follow from it."""
    pods, samples = usage_pods()
    samples.append(NODE_CPU_USAGE.sample(0.1, NOW - 0.5))
    config = {"cpuEvictThresholdPercent": -1, "evictEnabledPriorityThreshold": 6000}
    plan = CPUEvict().plan(
        build_snapshot(fake_host, pods=pods, slo=thresholds(**config), samples=samples, gates=ALL)
    )
    assert plan.evictions == []
    assert "CPUEvict: invalid config: cpuEvictThresholdPercent -1 is negative" in plan.notes


# --- CPUAllocatableEvict ---------------------------------------------------------------------------------

ALLOCATABLE = {
    "cpuAllocatableEvictThresholdPercent": 80,
    "cpuAllocatableEvictLowerPercent": 70,
    "allocatableEvictPriorityThreshold": 7999,
}


def batch_pod(name: str, resource: str, milli: int, *, priority: int = 5000) -> PodBuilder:
    return (
        make_pod(name)
        .qos("BE")
        .priority(priority)
        .label(LABEL_POD_EVICT_ENABLE, "true")
        .container("main", requests={resource: str(milli)})
    )


@pytest.mark.parametrize(
    ("case", "allocatable", "expected"),
    [
        # 4000 requested of 4000 > 80 %: release 4000 - 0.7 * 4000 = 1200 -> x (largest request, 2000)
        ("over allocatable", {"kubernetes.io/batch-cpu": "4000"}, ["x"]),
        # 4000 of 5000 = 80 %: not above
        ("at the threshold", {"kubernetes.io/batch-cpu": "5000"}, []),
        # 4000 of 4400 > 80 %: release 4000 - 3080 = 920 -> x
        ("just over", {"kubernetes.io/batch-cpu": "4400"}, ["x"]),
        # none allocatable: everything requested is released
        ("no batch allocatable", {"kubernetes.io/batch-cpu": "0"}, ["x", "y", "z"]),
    ],
)
def test_cpu_allocatable_evict(fake_host, case, allocatable, expected):
    pods = [
        batch_pod("x", "kubernetes.io/batch-cpu", 2000),
        batch_pod("y", "kubernetes.io/batch-cpu", 1500),
        batch_pod("z", "kubernetes.io/batch-cpu", 500),
        batch_pod("prod", "cpu", 4000, priority=9000),  # above the priority threshold
    ]
    samples = [usage_of(p, 0.1) for p in pods]
    node = node_obj(allocatable={"cpu": "8", **allocatable})
    snapshot = build_snapshot(
        fake_host,
        pods=[p.build() for p in pods],
        node=node,
        slo=thresholds(**ALLOCATABLE),
        samples=samples,
        gates=ALL,
    )
    plan = CPUEvict().plan(snapshot)
    assert victims(plan) == [(n, "CPUAllocatableEvict", "evictPodByNodeCPUAllocatable") for n in expected], (
        case
    )


def test_cpu_allocatable_evict_per_resource(fake_host):
    # mid: 3000 of 2000 allocatable -> release 3000 - 1400 = 1600 (m1 2000); batch within its allocatable
    pods = [
        batch_pod("m1", "kubernetes.io/mid-cpu", 2000, priority=7100),
        batch_pod("m2", "kubernetes.io/mid-cpu", 1000, priority=7100),
        batch_pod("b1", "kubernetes.io/batch-cpu", 3000),
    ]
    node = node_obj(
        allocatable={"cpu": "8", "kubernetes.io/batch-cpu": "8000", "kubernetes.io/mid-cpu": "2000"}
    )
    snapshot = build_snapshot(
        fake_host,
        pods=[p.build() for p in pods],
        node=node,
        slo=thresholds(**ALLOCATABLE),
        samples=[usage_of(p, 0.1) for p in pods],
        gates=ALL,
    )
    assert [e.pod.name for e in CPUEvict().plan(snapshot).evictions] == ["m1"]


def test_cpu_allocatable_priority_threshold_must_spare_prod(fake_host):
    snapshot = build_snapshot(
        fake_host, slo=thresholds(**{**ALLOCATABLE, "allocatableEvictPriorityThreshold": 9000}), gates=ALL
    )
    assert (
        "CPUAllocatableEvict: invalid config: "
        "allocatableEvictPriorityThreshold 9000 is above 7999 (prod pods)" in CPUEvict().plan(snapshot).notes
    )


# --- features together ---------------------------------------------------------------------------------


def test_a_pod_chosen_by_one_feature_counts_for_the_next(fake_host):
    """BECPUEvict takes c and a; CPUEvict needs 960m and is credited a (500) and c (200) first,
    then takes b (800)."""
    a = be_pod("a", 1000, priority=5000).label(LABEL_POD_EVICT_ENABLE, "true")
    b = be_pod("b", 2000, priority=5000).label(LABEL_POD_EVICT_ENABLE, "true")
    c = be_pod("c", 1500, priority=4000).label(LABEL_POD_EVICT_ENABLE, "true")
    samples = [
        usage_of(a, 0.5),
        usage_of(b, 0.8),
        usage_of(c, 0.2),
        NODE_CPU_USAGE.sample(5.6, NOW - 0.5),
        *be_series(1900, 5000, 2000),
    ]
    config = {**SATISFACTION, **USAGE}
    # BE order by usage / request: a 0.5, c 0.133, b 0.4 -> c (priority 4000), a, b
    snapshot = build_snapshot(
        fake_host, pods=[p.build() for p in (a, b, c)], slo=thresholds(**config), samples=samples, gates=ALL
    )
    plan = CPUEvict().plan(snapshot)
    assert victims(plan) == [
        ("c", "BECPUEvict", "evictPodByBECPUSatisfaction"),
        ("a", "BECPUEvict", "evictPodByBECPUSatisfaction"),
        ("b", "CPUEvict", "evictPodByNodeCPUUsage"),
    ]


def test_capacity_unknown(fake_host):
    node = {"metadata": {"name": "node-1"}, "status": {}}
    plan = CPUEvict().plan(build_snapshot(fake_host, node=node, slo=thresholds(**SATISFACTION), gates=ALL))
    assert plan.notes == ["node CPU capacity unknown"]


def test_cpu_allocatable_priority_defaults_to_the_class_value(fake_host):
    """A BE pod without spec.priority is koord-batch, priority 5500 (upstream's value with
    default): above a threshold of 5000 it is neither summed nor a candidate, so x's 2000 of
    4000 batch-cpu is under 80 %."""
    pods = [
        batch_pod("x", "kubernetes.io/batch-cpu", 2000),
        make_pod("no-priority")
        .qos("BE")
        .label(LABEL_POD_EVICT_ENABLE, "true")
        .container("main", requests={"kubernetes.io/batch-cpu": "3000"}),
    ]
    config = {**ALLOCATABLE, "allocatableEvictPriorityThreshold": 5000}
    snapshot = build_snapshot(
        fake_host,
        pods=[p.build() for p in pods],
        node=node_obj(allocatable={"cpu": "8", "kubernetes.io/batch-cpu": "4000"}),
        slo=thresholds(**config),
        samples=[usage_of(p, 0.1) for p in pods],
        gates={"CPUAllocatableEvict": True},
    )
    plan = CPUEvict().plan(snapshot)
    assert plan.evictions == []
    assert plan.notes == []


def test_cpu_allocatable_plain_cpu_requests_are_only_noted(fake_host):
    """The koord-free pod's 8 cores are over 80 % of the 8 allocatable, but upstream releases
    only koord-batch and koord-mid requests (for plain cpu it would evict every candidate)."""
    free = (
        make_pod("free")
        .priority(3500)
        .label(LABEL_POD_EVICT_ENABLE, "true")
        .container("main", requests={"cpu": "8"})
    )
    snapshot = build_snapshot(
        fake_host,
        pods=[free.build()],
        node=node_obj(allocatable={"cpu": "8", "kubernetes.io/batch-cpu": "4000"}),
        slo=thresholds(**ALLOCATABLE),
        samples=[usage_of(free, 0.1)],
        gates={"CPUAllocatableEvict": True},
    )
    plan = CPUEvict().plan(snapshot)
    assert plan.evictions == []
    assert plan.notes == [
        "CPUAllocatableEvict: cpu requests of pods outside koord-batch and koord-mid (8000) exceed "
        "80% of allocatable 8000: nothing evicted for them (upstream releases only koord-batch and "
        "koord-mid requests)"
    ]


@pytest.mark.parametrize(
    ("config", "note"),
    [
        ({"cpuAllocatableEvictLowerPercent": None}, "cpuAllocatableEvictLowerPercent not set"),
        ({"allocatableEvictPriorityThreshold": None}, "allocatableEvictPriorityThreshold not set"),
        ({"cpuAllocatableEvictThresholdPercent": None}, "cpuAllocatableEvictThresholdPercent not set"),
    ],
)
def test_cpu_allocatable_refuses_an_incomplete_config(fake_host, config, note):
    fields = {k: v for k, v in {**ALLOCATABLE, **config}.items() if v is not None}
    snapshot = build_snapshot(fake_host, slo=thresholds(**fields), gates={"CPUAllocatableEvict": True})
    assert CPUEvict().plan(snapshot).notes == [f"CPUAllocatableEvict: invalid config: {note}"]
