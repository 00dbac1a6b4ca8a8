"""NodeNUMAResource in the framework: ``simulate`` and the live scheduler pin LSR/LSE pods'
CPUs from the nodes' NodeResourceTopology, honour NUMA policies, book what bound pods hold
(restored from their ``resource-status``) and write the allocation on the pod. Figures
hand-computed from upstream's rules (LeastAllocated over cpu and memory, weight 1)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from controlplane.scheduler.plugins.args import ArgsError
from controlplane.scheduler.plugins.nodenumaresource import numa_args
from controlplane.scheduler.simulate import simulate
from koordinator.kube import resources as res
from tests.controlplane.scheduler.live import running
from tests.controlplane.scheduler.numa.builders import TOPO_2S4N, make_nrt, make_pod
from tests.controlplane.scheduler.profile import only_scoring
from tests.controlplane.scheduler.test_simulate import write
from tests.polling import eventually
from testsupport.fake import FakeApiServer

Obj = dict[str, Any]
CRDS = Path(__file__).resolve().parents[3] / "crds"
STATUS = "scheduling.koordinator.sh/resource-status"
SPEC = "scheduling.koordinator.sh/resource-spec"


def node(name: str, labels: Obj | None = None) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}},
        "status": {"allocatable": {"cpu": "32", "memory": "64Gi", "pods": "110"}},
    }


def nrt(name: str) -> Obj:
    """2 sockets x 2 NUMA nodes x 4 cores x 2 threads: NUMA node n holds CPUs 8n..8n+7."""
    builder = make_nrt(TOPO_2S4N, name)
    for zone in range(4):
        builder.zone(zone, cpu="8", memory="16Gi")
    return builder.build()


def scheduled(pod: Obj, node_name: str = "") -> Obj:
    pod["spec"]["schedulerName"] = "koord-scheduler"
    pod["spec"]["containers"][0]["image"] = "x"
    if node_name:
        pod["spec"]["nodeName"] = node_name
    return pod


def lsr(name: str, cpu: str = "4", memory: str = "4Gi") -> Any:
    requests = {"cpu": cpu, "memory": memory} if memory else {"cpu": cpu}
    return make_pod(name).qos("LSR").prod().requests(**requests)


def config() -> Any:
    return only_scoring("NodeNUMAResource")


def run(tmp_path: Path, pending: list[Obj], nodes: list[Obj] | None = None) -> list[dict[str, Any]]:
    """numa-a: free; numa-b: an LSR pod holds NUMA node 0's CPUs 0-7; plain: no topology
    (every other node has one)."""
    holder = scheduled(lsr("holder", cpu="8", memory="").resource_status({"cpuset": "0-7"}).build(), "numa-b")
    nodes = nodes or [node("numa-a"), node("numa-b"), node("plain")]
    nodes_path = write(tmp_path, "nodes.yaml", nodes)
    topologies = [nrt(n["metadata"]["name"]) for n in nodes if n["metadata"]["name"] != "plain"]
    objects = write(tmp_path, "objects.yaml", [*topologies, holder])
    pods = write(tmp_path, "pods.yaml", [scheduled(p) for p in pending])
    return simulate(config(), nodes_path, pods, [objects], seed=1)


def test_an_lsr_pod_gets_whole_cores_where_the_node_has_the_most_room(tmp_path):
    [result] = run(tmp_path, [lsr("lsr").build()])
    # no NUMA policy: the node's requests with the pod's, LeastAllocated over cpu and memory
    #   numa-a: cpu (32 - 4) * 100 / 32 = 87, memory (64 - 4) * 100 / 64 = 93 -> 90
    #   numa-b: the holder's 8 CPUs too: cpu (32 - 12) * 100 / 32 = 62, memory 93 -> 77
    assert result["scores"] == {
        "numa-a": {"NodeNUMAResource": 90, "total": 90},
        "numa-b": {"NodeNUMAResource": 77, "total": 77},
    }
    # a binding pod needs a CPU topology (upstream's message)
    assert result["filtered"] == {"plain": ["node(s) invalid CPU Topology"]}
    # FullPCPUs (the default): 4 CPUs are two whole cores, from one NUMA node (the first of
    # the equally free ones), no NUMA resources without a NUMA policy
    assert (result["node"], result["resourceStatus"]) == ("numa-a", {"cpuset": "0-3"})


def test_a_single_numa_node_pod_takes_cpus_and_memory_of_one_numa_node(tmp_path):
    pod = lsr("numa").numa_spec(numaTopologyPolicy="SingleNUMANode").build()
    [result] = run(tmp_path, [pod])
    # under a NUMA policy the score is over the NUMA node the pod gets, with every CPU held
    # by cpusets anywhere on the node counted as requested there, plus the pod's request:
    #   numa-a: NUMA node 0, nothing held: cpu (8 - 4) * 100 / 8 = 50, memory
    #           (16 - 4) * 100 / 16 = 75 -> 62
    #   numa-b: NUMA node 1, the holder's 8 CPUs + 4 > 8: cpu 0, memory 75 -> 37
    assert result["scores"]["numa-a"]["NodeNUMAResource"] == 62
    assert result["scores"]["numa-b"]["NodeNUMAResource"] == 37
    assert result["node"] == "numa-a"
    assert result["resourceStatus"] == {
        "cpuset": "0-3",
        "numaNodeResources": [{"node": 0, "resources": {"cpu": "4", "memory": "4Gi"}}],
    }


def test_pods_that_bind_no_cpus_are_left_alone(tmp_path):
    [result] = run(tmp_path, [make_pod("ls").qos("LS").requests(cpu="1500m").build()])
    assert result["status"] == "Scheduled"
    assert result["filtered"] == {}
    assert all("NodeNUMAResource" not in scores for scores in result["scores"].values())
    assert "resourceStatus" not in result


def test_a_fractional_cpu_request_with_a_bind_policy_is_refused_everywhere(tmp_path):
    [result] = run(tmp_path, [lsr("frac", cpu="1500m").build()])
    assert result["node"] is None
    assert result["status"].startswith("0/3 nodes are available: the requested CPUs must be integer.")


def test_node_bind_policies_and_numa_policies_filter_with_upstreams_reasons(tmp_path):
    nodes = [
        node("spread", {"node.koordinator.sh/cpu-bind-policy": "SpreadByPCPUs"}),
        node("numa-a"),
        node("numa-b", {"node.koordinator.sh/numa-topology-policy": "SingleNUMANode"}),
    ]
    pending = [
        lsr("required").resource_spec(requiredCPUBindPolicy="FullPCPUs").build(),
        lsr("odd", cpu="3").resource_spec(requiredCPUBindPolicy="FullPCPUs").build(),
        lsr("wide", cpu="12", memory="1Gi").build(),
    ]
    results = {r["pod"]: r for r in run(tmp_path, pending, nodes)}
    # a node forcing SpreadByPCPUs conflicts with a required FullPCPUs
    assert results["default/required"]["filtered"] == {
        "spread": ["node(s) cpu bind policy conflicts with pod's required cpu bind policy"]
    }
    # FullPCPUs needs whole cores: 3 CPUs on 2-thread cores cannot be
    assert set(results["default/odd"]["filtered"]) == {"spread", "numa-a", "numa-b"}
    assert results["default/odd"]["filtered"]["numa-a"] == [
        "node(s) requested cpus not multiple cpus per core"
    ]
    # 12 CPUs fit no single NUMA node of 8: numa-b's SingleNUMANode refuses; the others
    # (no NUMA policy) take them across NUMA nodes, and score alike
    [why] = results["default/wide"]["filtered"]["numa-b"]
    assert why.startswith("Unaligned NUMA Hint cause cpu prefer ")  # no single-node hint fits
    assert set(results["default/wide"]["filtered"]) == {"numa-b"}
    assert results["default/wide"]["node"] in ("spread", "numa-a")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"defaultCPUBindPolicy": "Static"}, "defaultCPUBindPolicy: Unsupported value: 'Static'"),
        ({"scoringStrategy": {"type": "Balanced"}}, "scoringStrategy.type: Unsupported value"),
        ({"numaScoringStrategy": {"resources": [{"name": "cpu", "weight": 0}]}}, "not in range [1-100]"),
        ({"other": 1}, "unknown field(s)"),
    ],
    ids=["bind-policy", "strategy", "weight", "unknown"],
)
def test_bad_args_are_refused_naming_the_field(args, message):
    with pytest.raises(ArgsError, match=re.escape(message)):
        numa_args(args)


def _status(fake: FakeApiServer, name: str) -> Obj | None:
    annotations = fake.get(res.PODS, name, "default")["metadata"].get("annotations") or {}
    return json.loads(annotations[STATUS]) if STATUS in annotations else None


async def test_the_live_scheduler_writes_the_cpuset_and_a_restart_keeps_it_booked():
    async with FakeApiServer() as fake:
        fake.register_crd(CRDS / "topology.node.k8s.io_noderesourcetopologies.yaml")
        small = make_nrt(TOPO_2S4N, "n1")
        for zone in range(4):
            small.zone(zone, cpu="8", memory="16Gi")
        fake.create(res.NODES, node("n1"))
        fake.create(res.NODE_RESOURCE_TOPOLOGIES, small.build())
        fake.create(res.PODS, scheduled(lsr("first", cpu="16", memory="").build()))
        async with running(fake, config()):
            await eventually(lambda: _status(fake, "first") is not None)
        assert _status(fake, "first") == {"cpuset": "0-15"}
        # the policy it was bound with is written back (upstream's appendResourceSpecIfMissed)
        spec = json.loads(fake.get(res.PODS, "first", "default")["metadata"]["annotations"][SPEC])
        assert spec == {"preferredCPUBindPolicy": "FullPCPUs"}
        # a new scheduler books "first" from its annotation: the next pod gets other CPUs
        fake.create(res.PODS, scheduled(lsr("second", cpu="8", memory="").build()))
        async with running(fake, config()):
            await eventually(lambda: _status(fake, "second") is not None)
        assert _status(fake, "second") == {"cpuset": "16-23"}


RATIO = "node.koordinator.sh/resource-amplification-ratio"
RAW_ALLOCATABLE = "node.koordinator.sh/raw-allocatable"


def amplified_node(name: str, ratio: str = '{"cpu": 1.5}', cpu: str = "48") -> Obj:
    """32 physical CPUs (``nrt``) shown as ``cpu`` to the scheduler by a cpu ratio."""
    built = node(name)
    built["metadata"]["annotations"] = {RATIO: ratio, RAW_ALLOCATABLE: '{"cpu": "32", "memory": "64Gi"}'}
    built["status"]["allocatable"]["cpu"] = cpu
    return built


def simulate_on(
    tmp_path: Path, nodes: list[Obj], placed: list[Obj], pending: list[Obj], args: Obj | None = None
) -> list[dict[str, Any]]:
    """Every node has ``nrt``'s topology; ``placed`` pods are bound already."""
    nodes_path = write(tmp_path, "nodes.yaml", nodes)
    objects = write(tmp_path, "objects.yaml", [*(nrt(n["metadata"]["name"]) for n in nodes), *placed])
    pods = write(tmp_path, "pods.yaml", [scheduled(p) for p in pending])
    return simulate(only_scoring("NodeNUMAResource", args=args), nodes_path, pods, [objects], seed=1)


@pytest.mark.parametrize(
    ("filler_cpu", "expected"),
    [
        # 40 of 48 requested: the pod's 8 CPUs count 8 x 1.5 = 12 > 8 left
        ("40", {"n1": ["Insufficient amplified cpu"]}),
        # 36 requested: 12 <= 12 left, and the cpuset still takes 8 CPUs
        ("36", {}),
    ],
    ids=["short", "fits"],
)
def test_a_binding_pod_needs_its_cpu_amplified_on_an_amplified_node(tmp_path, filler_cpu, expected):
    filler = scheduled(make_pod("filler").qos("LS").requests(cpu=filler_cpu, memory="1Gi").build(), "n1")
    [result] = simulate_on(tmp_path, [amplified_node("n1")], [filler], [lsr("p", cpu="8", memory="").build()])
    assert result["filtered"] == expected
    if expected:
        assert result["node"] is None
        assert result["status"].startswith("0/1 nodes are available: 1 Insufficient amplified cpu.")
    else:
        assert (result["node"], result["resourceStatus"]) == ("n1", {"cpuset": "0-7"})


def test_cpus_held_by_cpusets_count_amplified_for_pods_binding_none(tmp_path):
    # n1 requests 8 (holder) + 30 = 38 of 48, but the holder's 8 bound CPUs count 12:
    # 42, and an LS pod asking 7 finds 6 left; NodeResourcesFit alone (45 <= 48) would pass
    holder = scheduled(lsr("holder", cpu="8", memory="").resource_status({"cpuset": "0-7"}).build(), "n1")
    filler = scheduled(make_pod("filler").qos("LS").requests(cpu="30").build(), "n1")
    results = simulate_on(
        tmp_path,
        [amplified_node("n1")],
        [holder, filler],
        [
            make_pod("seven").qos("LS").requests(cpu="7").build(),
            make_pod("six").qos("LS").requests(cpu="6").build(),
        ],
    )
    by_pod = {r["pod"]: r for r in results}
    assert by_pod["default/seven"]["filtered"] == {"n1": ["Insufficient amplified cpu"]}
    assert by_pod["default/six"]["node"] == "n1"
    assert "resourceStatus" not in by_pod["default/six"]  # it binds no CPUs


def test_a_ratio_that_does_not_parse_refuses_pods_asking_for_cpu(tmp_path):
    bad = amplified_node("n1", ratio='{"cpu": "many"}')
    results = simulate_on(
        tmp_path,
        [bad, node("n2")],
        [],
        [
            make_pod("ls").qos("LS").requests(cpu="1").build(),
            make_pod("mem").qos("LS").requests(memory="1Gi").build(),
        ],
    )
    by_pod = {r["pod"]: r for r in results}
    assert by_pod["default/ls"]["filtered"] == {"n1": ["node(s) invalid CPU amplification ratio"]}
    assert by_pod["default/ls"]["node"] == "n2"
    assert by_pod["default/mem"]["filtered"] == {}  # no cpu asked: the ratio is not read


def test_numa_zones_are_amplified_by_the_nodes_ratio(tmp_path):
    # each NUMA node has 8 CPUs, 12 amplified: a SingleNUMANode pod asking 10 CPUs (binding
    # none, so asking them unamplified) fits one amplified zone only
    pending = [
        make_pod("ten")
        .qos("LS")
        .requests(cpu="10", memory="1Gi")
        .numa_spec(numaTopologyPolicy="SingleNUMANode")
        .build()
    ]
    [amplified] = simulate_on(tmp_path, [amplified_node("n1")], [], pending)
    assert amplified["node"] == "n1"
    assert amplified["resourceStatus"] == {
        "numaNodeResources": [{"node": 0, "resources": {"cpu": "10", "memory": "1Gi"}}]
    }
    [plain] = simulate_on(tmp_path, [node("n1")], [], pending)
    assert plain["node"] is None
    assert plain["filtered"]["n1"][0].startswith("Unaligned NUMA Hint cause cpu")


def test_a_binding_pod_scores_amplified_cpu_on_an_amplified_node(tmp_path):
    # both nodes show 48 CPUs and hold an 8-CPU cpuset; the pod binds 4 (no memory asked:
    # memory scores 100). LeastAllocated over cpu and memory:
    #   amp:   the held 8 count 12 and the pod's 4 count 6: (48 - 18) * 100 / 48 = 62 -> 81
    #   plain: 8 + 4 = 12: (48 - 12) * 100 / 48 = 75 -> 87
    plain = node("plain")
    plain["status"]["allocatable"]["cpu"] = "48"
    holders = [
        scheduled(lsr(f"holder-{n}", cpu="8", memory="").resource_status({"cpuset": "0-7"}).build(), n)
        for n in ("amp", "plain")
    ]
    [result] = simulate_on(
        tmp_path, [amplified_node("amp"), plain], holders, [lsr("p", cpu="4", memory="").build()]
    )
    assert {n: s["NodeNUMAResource"] for n, s in result["scores"].items()} == {"amp": 81, "plain": 87}
    assert result["node"] == "plain"


@pytest.mark.parametrize(
    ("args", "labels", "cpuset"),
    [
        # LeastAllocated: a NUMA node with the most free CPUs (the holder's NUMA node 1 has 4)
        (None, {}, "16-17"),
        # MostAllocated NUMA scoring packs: NUMA node 1, next to the holder
        ({"numaScoringStrategy": {"type": "MostAllocated"}}, {}, "12-13"),
        # the node's label wins over the default either way
        (
            {"numaScoringStrategy": {"type": "MostAllocated"}},
            {"node.koordinator.sh/numa-allocate-strategy": "LeastAllocated"},
            "16-17",
        ),
        (None, {"node.koordinator.sh/numa-allocate-strategy": "MostAllocated"}, "12-13"),
    ],
    ids=["least", "most", "label-least", "label-most"],
)
def test_the_numa_scoring_strategy_sets_the_default_numa_allocate_strategy(tmp_path, args, labels, cpuset):
    holder = scheduled(lsr("holder", cpu="4", memory="").resource_status({"cpuset": "8-11"}).build(), "n1")
    [result] = simulate_on(
        tmp_path, [node("n1", labels)], [holder], [lsr("p", cpu="2", memory="").build()], args
    )
    assert (result["node"], result["resourceStatus"]) == ("n1", {"cpuset": cpuset})
