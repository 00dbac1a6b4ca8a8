"""CPUNormalization, ResourceAmplification and NUMA-level batch resources of the noderesource controller.

Golden arithmetic hand-computed from upstream's rules, then the controller against the
fake apiserver on a fake clock: the annotations it writes on the Node and the batch
entries it writes into the NodeResourceTopology's zones.

The node of the controller cases: capacity 16 cores / 64Gi, allocatable 15 / 60Gi (the
kubelet keeps 1 core / 4Gi), system usage 0.5 core / 2Gi, reclaim thresholds 50 % CPU and
75 % memory (``HALF``), two NUMA zones of 8 cores / 32Gi. Pods: ``prod-a`` (prod, requests
4 / 8Gi, uses 3 / 10Gi, not bound to a NUMA node), ``prod-b`` (prod, requests 2 / 4Gi, uses
1 / 2Gi, bound to NUMA node 1 by its ``resource-status``), ``batch-c`` (batch: never counts).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from controlplane.manager.controllers.noderesource.amplification import calculate_amplification, format_ratios
from controlplane.manager.controllers.noderesource.batch import safety_margin
from controlplane.manager.controllers.noderesource.calculator import calculate, normalized_batch_cpu
from controlplane.manager.controllers.noderesource.normalization import (
    calculate_normalization,
    normalization_changed,
)
from controlplane.manager.controllers.noderesource.numalevel import (
    calculate_zone_batch,
    nrt_view,
    scaled_zone_cpu,
    updated_zones,
    zone_quantities,
)
from controlplane.manager.controllers.noderesource.views import (
    CPUMemory,
    node_metric_view,
    node_view,
    pod_view,
)
from koordinator.api.extension.topology import CPUBasicInfo
from koordinator.api.quantity import Quantity
from koordinator.api.sloconfig.config import parse_config
from koordinator.api.sloconfig.types import (
    ColocationStrategy,
    CPUNormalizationStrategy,
    ResourceAmplificationStrategy,
)
from koordinator.kube import resources as res
from koordinator.kube.timeutil import parse_time
from tests.controlplane.manager.controllers.golden import HALF, NOW
from tests.controlplane.manager.controllers.harness import SLOHarness, running, seed, started_fake
from tests.controlplane.manager.controllers.objects import GI, config_map, node, node_metric, pod, pod_metric
from tests.polling import eventually

Obj = dict[str, Any]

NORMALIZATION = "node.koordinator.sh/cpu-normalization-ratio"
AMPLIFICATION = "node.koordinator.sh/resource-amplification-ratio"
ENABLED_LABEL = "node.koordinator.sh/cpu-normalization-enabled"
BATCH_CPU = "kubernetes.io/batch-cpu"
BATCH_MEMORY = "kubernetes.io/batch-memory"
MODEL = "Intel(R) Xeon(R) Platinum 8269CY CPU @ 2.50GHz"
RATIOS = {
    "baseRatio": 1.1,
    "hyperThreadEnabledRatio": 1.25,
    "turboEnabledRatio": 1.3,
    "hyperThreadTurboEnabledRatio": 1.5,
}


def normalization_strategy(enable: bool | None = True, **ratios: float) -> CPUNormalizationStrategy:
    data: Obj = {"ratioModel": {MODEL: ratios or RATIOS}}
    if enable is not None:
        data["enable"] = enable
    return CPUNormalizationStrategy.from_dict(data)


def info(ht: bool, turbo: bool, model: str = MODEL) -> CPUBasicInfo:
    return CPUBasicInfo(cpu_model=model, hyper_thread_enabled=ht, turbo_enabled=turbo)


# ---- CPUNormalization ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ht", "turbo", "ratio"),
    [
        pytest.param(False, False, "1.10", id="base"),
        pytest.param(True, False, "1.25", id="hyper-thread"),
        pytest.param(False, True, "1.30", id="turbo"),
        pytest.param(True, True, "1.50", id="hyper-thread-and-turbo"),
    ],
)
def test_the_ratio_is_the_models_field_for_the_cpus_state(ht, turbo, ratio):
    assert calculate_normalization(normalization_strategy(), {}, info(ht, turbo)).ratio == ratio


@pytest.mark.parametrize(
    ("strategy", "labels", "basic", "error"),
    [
        pytest.param(
            normalization_strategy(),
            {},
            info(True, False, "AMD EPYC"),
            "no ratio for CPU AMD EPYC",
            id="no-model",
        ),
        pytest.param(
            normalization_strategy(baseRatio=1.1),
            {},
            info(True, True),
            "missing HyperThreadTurboEnabledRatio",
            id="no-field",
        ),
        pytest.param(
            normalization_strategy(baseRatio=0.9), {}, info(False, False), "too small", id="below-1"
        ),
        pytest.param(normalization_strategy(baseRatio=5.5), {}, info(False, False), "too big", id="above-5"),
        pytest.param(normalization_strategy(), {}, None, "CPUBasicInfo is missing", id="no-basic-info"),
        pytest.param(
            normalization_strategy(), {ENABLED_LABEL: "yes"}, info(False, False), "ParseBool", id="bad-label"
        ),
    ],
)
def test_what_cannot_be_computed_leaves_the_annotation_as_it_is(strategy, labels, basic, error):
    result = calculate_normalization(strategy, labels, basic)
    assert result.ratio is None
    assert error in result.error


@pytest.mark.parametrize(
    ("enable", "labels", "ratio"),
    [
        pytest.param(None, {}, "1.00", id="default-disabled"),
        pytest.param(False, {}, "1.00", id="disabled"),
        pytest.param(False, {ENABLED_LABEL: "true"}, "1.10", id="label-enables"),
        pytest.param(True, {ENABLED_LABEL: "false"}, "1.00", id="label-disables"),
    ],
)
def test_the_node_label_takes_precedence_over_enable(enable, labels, ratio):
    """Disabled, the node holds 1.00, as upstream's plug-in writes: upstream's koordlet reads
    an absent ratio as "off" and would leave LS pods' quotas divided by the last ratio."""
    result = calculate_normalization(normalization_strategy(enable), labels, info(False, False))
    assert (result.ratio, result.error, result.disabled) == (ratio, "", ratio == "1.00")


def test_the_default_ratio_is_not_used_for_a_model_without_an_entry():
    strategy = CPUNormalizationStrategy.from_dict({"enable": True, "defaultRatio": 1.5, "ratioModel": {}})
    assert calculate_normalization(strategy, {}, info(False, False)).error == "ratio model is nil"


@pytest.mark.parametrize(
    ("current", "desired", "changed"),
    [
        pytest.param(None, "1.20", True, id="absent"),
        pytest.param("1.20", "1.21", False, id="within-0.01"),
        pytest.param("1.20", "1.22", True, id="beyond-0.01"),
        pytest.param("x", "1.20", True, id="unreadable"),
    ],
)
def test_ratio_changes_below_one_hundredth_are_ignored(current, desired, changed):
    assert normalization_changed(current, desired) is changed


# ---- ResourceAmplification ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "normalization", "annotation"),
    [
        # 1.2 x 1.25 = 1.5
        pytest.param(
            {"enable": True, "resourceAmplificationRatio": {"cpu": 1.2}}, 1.25, '{"cpu":1.50}', id="x-norm"
        ),
        pytest.param(
            {"enable": True, "resourceAmplificationRatio": {"cpu": 1.2, "memory": 1.5}},
            None,
            '{"cpu":1.20,"memory":1.50}',
            id="configured",
        ),
        # disabled: only the normalization ratio, as cpu
        pytest.param(
            {"enable": False, "resourceAmplificationRatio": {"cpu": 2}}, 1.25, '{"cpu":1.25}', id="norm-only"
        ),
        # a memory ratio and no cpu ratio: cpu = 1 x 1.3
        pytest.param(
            {"enable": True, "resourceAmplificationRatio": {"memory": 1}},
            1.3,
            '{"cpu":1.30,"memory":1.00}',
            id="memory",
        ),
        pytest.param({"enable": False}, 1.0, None, id="nothing-removed"),
        pytest.param({"enable": False}, None, None, id="nothing"),
    ],
)
def test_the_cpu_ratio_is_multiplied_by_the_normalization_ratio(config, normalization, annotation):
    result = calculate_amplification(ResourceAmplificationStrategy.from_dict(config), normalization)
    assert (result.annotation, result.error) == (annotation, "")


def test_ratios_are_written_with_two_decimals_keys_sorted():
    assert format_ratios({"memory": 1.0, "cpu": 1.456}) == '{"cpu":1.46,"memory":1.00}'


# ---- batch-cpu x normalization ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("milli", "ratio", "scaled"),
    [
        pytest.param(3000, 1.25, 3750, id="exact"),
        # 4001 x 1000 x 1.25 = 5001250 milli-units of milli-cores, rounded up to 5002
        pytest.param(4001, 1.25, 5002, id="rounded-up"),
    ],
)
def test_batch_cpu_is_scaled_and_rounded_up(milli, ratio, scaled):
    assert normalized_batch_cpu(milli, ratio) == scaled


def resource_status(*numa: int) -> str:
    return json.dumps({"numaNodeResources": [{"node": n, "resources": {"cpu": "2"}} for n in numa]})


def pods() -> list[Obj]:
    bound = pod("prod-b", "2", "4Gi", priority_class="koord-prod", qos="LS")
    bound["metadata"]["annotations"] = {"scheduling.koordinator.sh/resource-status": resource_status(1)}
    return [
        pod("prod-a", "4", "8Gi", priority_class="koord-prod", qos="LS"),
        bound,
        pod("batch-c", "2", "4Gi", priority_class="koord-batch", qos="BE", batch=True),
    ]


def metric() -> Obj:
    return node_metric(
        pods=[
            pod_metric("prod-a", "3", "10Gi"),
            pod_metric("prod-b", "1", "2Gi"),
            pod_metric("batch-c", "1", "2Gi", priority="koord-batch"),
        ]
    )


def zones(cpu: str = "8", memory: str = "32Gi") -> list[Obj]:
    def entry(name: str, value: str) -> Obj:
        return {"name": name, "capacity": value, "allocatable": value, "available": value}

    return [
        {"name": f"node-{i}", "type": "Node", "resources": [entry("cpu", cpu), entry("memory", memory)]}
        for i in range(2)
    ]


def nrt(basic: Obj | None = None, zone_list: list[Obj] | None = None) -> Obj:
    meta: Obj = {"name": "node-1"}
    if basic is not None:
        meta["annotations"] = {"node.koordinator.sh/cpu-basic-info": json.dumps(basic)}
    return {
        "apiVersion": "topology.node.k8s.io/v1alpha1",
        "kind": "NodeResourceTopology",
        "metadata": meta,
        "topologyPolicies": ["None"],
        "zones": zones() if zone_list is None else zone_list,
    }


def strategy() -> Any:
    from controlplane.manager.controllers.noderesource.calculator import StrategyResolver

    config = parse_config({"colocation-config": json.dumps(HALF)})[0]
    return StrategyResolver(config).for_node(node_view(node()))[0]


def test_node_batch_cpu_is_scaled_by_the_nodes_ratio():
    config = parse_config({"colocation-config": json.dumps(HALF)})[0]
    pod_views = [pod_view(p) for p in pods()]
    now = parse_time(NOW)
    plain = calculate(config, node_view(node()), node_metric_view(metric()), pod_views, now)
    # 16000 - 8000 (margin) - max(500, 1000 kubelet reserved) - (3000 + 1000 used) = 3000
    # 64Gi - 16Gi (margin) - 4Gi - (10Gi + 2Gi) = 32Gi
    assert plain.batch is not None
    assert (plain.batch.cpu, plain.batch.memory) == (3000, 32 * GI)
    annotated = node_view(node(annotations={NORMALIZATION: "1.25"}))
    scaled = calculate(config, annotated, node_metric_view(metric()), pod_views, now)
    # 3000 x 1.25; mid and memory are not scaled
    assert scaled.batch is not None
    assert (scaled.batch.cpu, scaled.batch.memory) == (3750, 32 * GI)
    assert scaled.mid == plain.mid


# ---- NUMA level --------------------------------------------------------------------------------------


def test_zone_batch_splits_system_and_reservation_evenly_and_pods_by_their_numa_allocation():
    batch = calculate_zone_batch(
        strategy(),
        node_view(node()),
        node_metric_view(metric()),
        [pod_view(p) for p in pods()],
        nrt_view(nrt()).zones,
    )
    # per zone: margin 8000 x 0.5 = 4000m, 32Gi x 0.25 = 8Gi; system 250m / 1Gi and reserved
    # 500m / 2Gi (halves) -> max 500m / 2Gi; prod-a halves: 1500m / 5Gi used.
    # node-0: 8000 - 4000 - 500 - 1500 = 2000;   32Gi - 8Gi - 2Gi - 5Gi = 17Gi
    # node-1 also holds prod-b (1000m / 2Gi used): 1000;   15Gi
    assert {name: (b.cpu, b.memory) for name, b in batch.items()} == {
        "node-0": (2000, 17 * GI),
        "node-1": (1000, 15 * GI),
    }


def test_a_pod_without_numa_allocation_and_without_a_metric_is_split_evenly_by_its_request():
    unreported = node_metric(pods=[])
    batch = calculate_zone_batch(
        strategy(),
        node_view(node()),
        node_metric_view(unreported),
        [pod_view(pod("prod-a", "4", "8Gi", priority_class="koord-prod"))],
        nrt_view(nrt()).zones,
    )
    # request halves 2000m / 4Gi: 8000 - 4000 - 500 - 2000 = 1500; 32Gi - 8Gi - 2Gi - 4Gi = 18Gi
    assert {name: (b.cpu, b.memory) for name, b in batch.items()} == {
        "node-0": (1500, 18 * GI),
        "node-1": (1500, 18 * GI),
    }


def _zone_batch(pod_list: list[Obj], metric_obj: Obj) -> dict[str, tuple[int, int]]:
    batch = calculate_zone_batch(
        strategy(),
        node_view(node()),
        node_metric_view(metric_obj),
        [pod_view(p) for p in pod_list],
        nrt_view(nrt()).zones,
    )
    return {name: (b.cpu, b.memory) for name, b in batch.items()}


def test_zone_batch_takes_the_system_usage_where_it_exceeds_the_reservation():
    # system 3 cores / 8Gi: halves 1500m / 4Gi, above the reserved 500m / 2Gi per zone
    # 8000 - 4000 - 1500 = 2500; 32Gi - 8Gi - 4Gi = 20Gi
    busy_system = node_metric(system_usage=("3", "8Gi"), pods=[])
    assert _zone_batch([], busy_system) == {"node-0": (2500, 20 * GI), "node-1": (2500, 20 * GI)}


def test_zone_batch_counts_an_lse_pods_cpu_request_whatever_it_uses():
    lse = pod("lse", "4", "8Gi", priority_class="koord-prod", qos="LSE")
    # CPU: its request halves (2000m), not its usage (500m); memory: its usage halves (1Gi)
    # 8000 - 4000 - 500 - 2000 = 1500; 32Gi - 8Gi - 2Gi - 1Gi = 21Gi
    got = _zone_batch([lse], node_metric(pods=[pod_metric("lse", "1", "2Gi")]))
    assert got == {"node-0": (1500, 21 * GI), "node-1": (1500, 21 * GI)}


def test_zone_batch_splits_the_usage_of_pods_no_longer_listed_evenly():
    # a prod pod's metric without the pod (deleted, its replacement not reported yet): halves
    # 8000 - 4000 - 500 - 1000 = 2500; 32Gi - 8Gi - 2Gi - 2Gi = 20Gi
    got = _zone_batch([], node_metric(pods=[pod_metric("gone", "2", "4Gi")]))
    assert got == {"node-0": (2500, 20 * GI), "node-1": (2500, 20 * GI)}


def test_zone_entries_are_added_kept_and_rewritten_beyond_the_threshold():
    current = nrt_view(nrt()).zones_json
    desired = {"node-0": zone_quantities(calculate_zone_batch_fixture(2000, 17), 1.25)}
    written = updated_zones(current, desired, threshold=0.1, force=False)
    assert written is not None
    names = [r["name"] for r in written[0]["resources"]]
    assert names == ["cpu", BATCH_CPU, BATCH_MEMORY, "memory"]
    cpu_entry = next(r for r in written[0]["resources"] if r["name"] == BATCH_CPU)
    assert cpu_entry == {"name": BATCH_CPU, "capacity": "2500", "allocatable": "2500", "available": "2500"}
    assert written[1] == current[1]
    # 5 % more: within resourceDiffThreshold 0.1, no write unless the time threshold passed
    smaller = {"node-0": {BATCH_CPU: Quantity.from_int(2625), BATCH_MEMORY: Quantity.parse("17Gi")}}
    assert updated_zones(written, smaller, threshold=0.1, force=False) is None
    forced = updated_zones(written, smaller, threshold=0.1, force=True)
    assert forced is not None
    assert next(r for r in forced[0]["resources"] if r["name"] == BATCH_CPU)["allocatable"] == "2625"


def calculate_zone_batch_fixture(cpu: int, memory_gi: int) -> Any:
    from controlplane.manager.controllers.noderesource.batch import BatchAllocatable

    return BatchAllocatable(cpu, memory_gi * GI)


def test_zone_cpu_keeps_milli_precision_when_scaled():
    assert str(scaled_zone_cpu(1001, 1.25)) == "1251250m"
    assert scaled_zone_cpu(1000, None) == Quantity.parse("1000")


# ---- the controller ------------------------------------------------------------------------------------


NORMALIZATION_CONFIG = {"enable": True, "ratioModel": {MODEL: RATIOS}}
AMPLIFICATION_CONFIG = {"enable": True, "resourceAmplificationRatio": {"cpu": 1.2, "memory": 1.5}}


def cluster(**keys: Obj) -> list[Obj]:
    return [
        node(),
        *pods(),
        metric(),
        config_map(
            HALF,
            cpu_normalization_config=keys.get("normalization", NORMALIZATION_CONFIG),
            resource_amplification_config=keys.get("amplification", AMPLIFICATION_CONFIG),
        ),
    ]


class Running:
    def __init__(self, harness: SLOHarness) -> None:
        self.harness = harness

    def annotations(self) -> dict[str, str]:
        return dict(self.harness.fake.get(res.NODES, "node-1")["metadata"].get("annotations") or {})

    def batch_cpu(self) -> int | None:
        value = self.harness.fake.get(res.NODES, "node-1")["status"]["allocatable"].get(BATCH_CPU)
        return None if value is None else Quantity.parse(value).value()

    def zone_batch(self) -> dict[str, tuple[int, int]]:
        """Zone -> (batch-cpu milli-cores, batch-memory bytes)."""
        topology = self.harness.fake.get(res.NODE_RESOURCE_TOPOLOGIES, "node-1")
        out = {}
        for zone in topology["zones"]:
            entries = {r["name"]: r for r in zone["resources"]}
            if BATCH_CPU in entries:
                for entry in (entries[BATCH_CPU], entries[BATCH_MEMORY]):
                    assert entry["capacity"] == entry["allocatable"] == entry["available"]
                out[zone["name"]] = (
                    Quantity.parse(entries[BATCH_CPU]["allocatable"]).value(),
                    Quantity.parse(entries[BATCH_MEMORY]["allocatable"]).value(),
                )
        return out

    def set_config(self, key: str, value: Any) -> None:
        fake = self.harness.fake
        cm = fake.get(res.CONFIG_MAPS, "slo-controller-config", "koordinator-system")
        cm["data"][key] = value if isinstance(value, str) else json.dumps(value)
        fake.update(res.CONFIG_MAPS, cm)


async def run(objects: list[Obj], topology: Obj | None) -> tuple[Any, Any]:
    fake = await started_fake()
    seed(fake, objects)
    if topology is not None:
        fake.create(res.NODE_RESOURCE_TOPOLOGIES, topology)
    client_cm = fake.client()
    client = await client_cm.__aenter__()
    harness = SLOHarness(fake, client, NOW, ("noderesource",))
    await harness.start()

    async def close() -> None:
        await harness.stop()
        await client_cm.__aexit__(None, None, None)
        await fake.stop()

    return Running(harness), close


BASIC = {"cpuModel": MODEL, "hyperThreadEnabled": True, "turboEnabled": False}


async def test_a_node_gets_its_ratio_amplification_scaled_batch_and_zone_batch():
    state, close = await run(cluster(), nrt(BASIC))
    try:
        # hyper-threading on, turbo off: 1.25; cpu 1.2 x 1.25 = 1.5
        await eventually(lambda: state.annotations().get(NORMALIZATION) == "1.25")
        await eventually(lambda: state.annotations().get(AMPLIFICATION) == '{"cpu":1.50,"memory":1.50}')
        # node batch-cpu 3000 x 1.25
        await eventually(lambda: state.batch_cpu() == 3750)
        # zones 2000 and 1000 x 1.25; memory 17Gi, 15Gi
        await eventually(lambda: state.zone_batch() == {"node-0": (2500, 17 * GI), "node-1": (1250, 15 * GI)})
        topology = state.harness.fake.get(res.NODE_RESOURCE_TOPOLOGIES, "node-1")
        assert [r["name"] for r in topology["zones"][0]["resources"]] == [
            "cpu",
            BATCH_CPU,
            BATCH_MEMORY,
            "memory",
        ]

        # a broken cpu-normalization-config keeps the last good one
        state.set_config("cpu-normalization-config", "{not json")
        state.set_config(
            "resource-amplification-config", {"enable": True, "resourceAmplificationRatio": {"cpu": 2}}
        )
        await eventually(lambda: state.annotations().get(AMPLIFICATION) == '{"cpu":2.50}')
        assert state.annotations()[NORMALIZATION] == "1.25"

        # disabled: the ratio is 1.00, amplification keeps only its own ratios, batch unscaled
        state.set_config("cpu-normalization-config", {"enable": False})
        await eventually(lambda: state.annotations().get(NORMALIZATION) == "1.00")
        await eventually(lambda: state.annotations().get(AMPLIFICATION) == '{"cpu":2.00}')
        await eventually(lambda: state.batch_cpu() == 3000)

        # amplification disabled too: its annotation is removed
        state.set_config("resource-amplification-config", {"enable": False})
        await eventually(lambda: AMPLIFICATION not in state.annotations())
    finally:
        await close()


async def test_a_changed_cpu_basic_info_re_enqueues_the_node():
    state, close = await run(cluster(), nrt(BASIC))
    try:
        await eventually(lambda: state.annotations().get(NORMALIZATION) == "1.25")
        fake = state.harness.fake
        topology = fake.get(res.NODE_RESOURCE_TOPOLOGIES, "node-1")
        turbo = {**BASIC, "turboEnabled": True}
        topology["metadata"]["annotations"]["node.koordinator.sh/cpu-basic-info"] = json.dumps(turbo)
        fake.update(res.NODE_RESOURCE_TOPOLOGIES, topology)
        await eventually(lambda: state.annotations().get(NORMALIZATION) == "1.50")
        await eventually(lambda: state.annotations().get(AMPLIFICATION) == '{"cpu":1.80,"memory":1.50}')
    finally:
        await close()


async def test_without_a_topology_the_ratio_is_left_and_amplification_uses_the_configured_ratios():
    state, close = await run(cluster(), None)
    try:
        await eventually(lambda: state.annotations().get(AMPLIFICATION) == '{"cpu":1.20,"memory":1.50}')
        await eventually(lambda: state.batch_cpu() == 3000)
        assert NORMALIZATION not in state.annotations()
    finally:
        await close()


async def test_zones_are_zeroed_when_colocation_is_disabled():
    state, close = await run(cluster(), nrt(BASIC))
    try:
        await eventually(lambda: state.zone_batch().get("node-0", (0, 0))[0] == 2500)
        state.set_config("colocation-config", {"enable": False})
        await eventually(lambda: state.zone_batch() == {"node-0": (0, 0), "node-1": (0, 0)})
        await eventually(lambda: state.batch_cpu() is None)
    finally:
        await close()


def test_node_entries_select_the_strategies_by_label():
    from controlplane.manager.controllers.noderesource.controller import NodeStrategies

    data = {
        "cpu-normalization-config": json.dumps(
            {
                "enable": False,
                "ratioModel": {MODEL: RATIOS},
                "nodeConfigs": [
                    {"name": "fast", "nodeSelector": {"matchLabels": {"pool": "fast"}}, "enable": True}
                ],
            }
        ),
        "resource-amplification-config": json.dumps(
            {
                "enable": True,
                "resourceAmplificationRatio": {"cpu": 1.2},
                "nodeConfigs": [
                    {
                        "name": "fast",
                        "nodeSelector": {"matchLabels": {"pool": "fast"}},
                        "resourceAmplificationRatio": {"cpu": 2},
                    }
                ],
            }
        ),
    }
    config, errors = parse_config(data)
    assert errors == []
    strategies = NodeStrategies(config)
    fast_norm, fast_amp = strategies.for_node(node_view(node("fast-1", labels={"pool": "fast"})))
    slow_norm, slow_amp = strategies.for_node(node_view(node("slow-1")))
    # the entry is merged over the cluster fields: ratioModel comes from the cluster
    assert calculate_normalization(fast_norm, {}, info(False, False)).ratio == "1.10"
    assert calculate_normalization(slow_norm, {}, info(False, False)).disabled
    assert calculate_amplification(fast_amp, 1.1).annotation == '{"cpu":2.20}'
    assert calculate_amplification(slow_amp, None).annotation == '{"cpu":1.20}'


def test_a_negative_pod_usage_counts_as_zero_and_is_reported():
    """A NodeMetric with a negative pod usage (a broken reporter) would add batch resources;
    it counts as no usage, and the problem is reported."""
    view = node_metric_view(node_metric(pods=[pod_metric("web", "-8", "-1Gi"), pod_metric("db", "1", "1Gi")]))
    assert (view.pods["default/web"].cpu, view.pods["default/web"].memory) == (0, 0)
    assert view.pods["default/db"].cpu > 0
    assert list(view.problems) == ["status.podsMetric[default/web]: negative usage counted as 0"]


@pytest.mark.parametrize(("percent", "margin_cores"), [(65, 5.6), (100, 0), (500, 0)])
def test_a_reclaim_percent_above_100_leaves_no_negative_margin(percent, margin_cores):
    """A ``cpu-reclaim-ratio`` label of 5 (500 %) would make the margin negative and batch-cpu
    exceed the node; it counts as 100 %."""
    strategy = ColocationStrategy(
        cpu_reclaim_threshold_percent=percent, memory_reclaim_threshold_percent=percent
    )
    cores = 10**9  # nano-units
    assert safety_margin(strategy, CPUMemory(16 * cores, 16 * GI)).cpu == margin_cores * cores


def test_an_amplified_nodes_kubelet_reservation_comes_from_its_raw_allocatable():
    """The node webhook writes ``raw x ratio`` into ``status.allocatable`` (here 15 x 1.5 cores,
    60Gi x 1.2), above capacity: upstream's ``capacity - allocatable`` then loses the kubelet's
    1 core / 4Gi and batch grows by the difference to the system usage (4.5 cores, 36Gi).
    The kubelet's figure kept in ``raw-allocatable`` is subtracted instead, so batch is what
    it is without amplification: 16 - 8 (margin) - max(0.5, 1) - 3 = 4 cores,
    64Gi - 16Gi - max(2Gi, 4Gi) - 10Gi = 34Gi."""
    config = parse_config({"colocation-config": json.dumps(HALF)})[0]
    pods = [pod_view(pod("prod-a", "4", "8Gi", priority_class="koord-prod", qos="LS"))]
    metric = node_metric_view(node_metric(pods=[pod_metric("prod-a", "3", "10Gi")]))
    amplified = node(
        annotations={
            "node.koordinator.sh/resource-amplification-ratio": '{"cpu":1.50,"memory":1.20}',
            "node.koordinator.sh/raw-allocatable": '{"cpu":"15","memory":"60Gi"}',
        }
    )
    amplified["status"]["allocatable"].update({"cpu": "22500m", "memory": "72Gi"})
    view = node_view(amplified)
    assert view.kubelet_reserved == CPUMemory(10**9, 4 * GI * 10**9)  # nano-units
    for node_of in (node_view(node()), view):
        batch = calculate(config, node_of, metric, pods, parse_time(NOW)).batch
        assert batch is not None
        assert (batch.cpu, batch.memory) == (4000, 34 * GI)


async def test_without_the_normalization_plugin_a_left_over_ratio_scales_nothing():
    """``--noderesource-plugins=-CPUNormalization``: nothing refreshes the node's ratio, so it
    does not scale batch-cpu (upstream's plug-in scales only with the ratio it computed in
    the same reconcile); the annotation itself is left alone."""
    stale = cluster()
    stale[0]["metadata"].setdefault("annotations", {})[NORMALIZATION] = "2.00"
    plugins = ("ResourceAmplification", "MidResource", "BatchResource")
    async with running(stale, NOW, plugins=plugins) as harness:
        state = Running(harness)
        await harness.settle("noderesource")
        assert state.batch_cpu() == 3000  # unscaled, not 6000
        assert state.annotations()[NORMALIZATION] == "2.00"
