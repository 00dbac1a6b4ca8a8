"""DefaultPreemption: victims of lower priority only, the fewest by reprieving the most
important first, upstream's node choice, preemptionPolicy Never, waiting for earlier
victims, PodDisruptionBudgets (reprieved first, fewest violations chosen first); and the
live scheduler deleting the victims and binding the preemptor."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from controlplane.scheduler.cluster import Cluster
from controlplane.scheduler.config import parse
from controlplane.scheduler.framework import Framework
from controlplane.scheduler.pdbs import PDBRecord, pdb_record, split_by_pdb_violation
from controlplane.scheduler.plugins.defaultpreemption import Candidate, select_victims
from controlplane.scheduler.podinfo import pod_info
from koordinator.kube import resources as res
from tests.controlplane.scheduler.live import running
from tests.controlplane.scheduler.test_scheduler import node_of
from tests.controlplane.scheduler.test_simulate import run
from tests.polling import eventually
from testsupport.fake import FakeApiServer

Obj = dict[str, Any]


def node(name: str, cpu: str = "4") -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {"allocatable": {"cpu": cpu, "memory": "32Gi", "pods": "110"}},
    }


def pod(
    name: str,
    cpu: str,
    priority: int = 0,
    node_name: str = "",
    created: str = "2026-01-01T00:00:00Z",
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> Obj:
    body: Obj = {
        "schedulerName": "koord-scheduler",
        "priority": priority,
        "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}],
        **spec,
    }
    if node_name:
        body["nodeName"] = node_name
    meta: Obj = {"name": name, "namespace": "default", "uid": f"uid-{name}", "creationTimestamp": created}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body}


def pdb(
    name: str,
    selector: Obj | None,
    allowed: int = 0,
    disrupted: tuple[str, ...] = (),
    namespace: str = "default",
) -> Obj:
    """A PodDisruptionBudget with its status as the disruption controller would write it."""
    status: Obj = {"disruptionsAllowed": allowed, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1}
    if disrupted:
        status["disruptedPods"] = dict.fromkeys(disrupted, "2026-01-01T00:00:00Z")
    spec: Obj = {"minAvailable": 1}
    if selector is not None:
        spec["selector"] = selector
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
        "status": status,
    }


WEB = {"app": "web"}
PROTECT_WEB = {"matchLabels": WEB}


def framework(nodes: list[Obj], placed: list[Obj], pdbs: Sequence[Obj] = ()) -> Framework:
    cluster = Cluster()
    for n in nodes:
        cluster.set_node(n)
    for p in placed:
        info = pod_info(p)
        cluster.place(info, info.node_name)
    for budget in pdbs:
        cluster.set_pdb(pdb_record(budget))
    return Framework(parse(None).profiles[0], cluster, seed=1)


def victims(result: Any) -> tuple[str, list[str]] | None:
    if result.preemption is None:
        return None
    return result.preemption.node, [v.name for v in result.preemption.victims]


def test_the_fewest_least_important_victims():
    fw = framework(
        [node("a")],
        [
            pod("low-1", "1", 1, "a"),
            pod("low-2", "1", 2, "a"),
            pod("mid", "1", 5, "a"),
            pod("high", "1", 100, "a"),
        ],
    )
    result = fw.schedule(pod_info(pod("p", "2", 50)))
    assert result.node is None
    # remove every pod below 50 (low-1, low-2, mid), then reprieve the most important first:
    # mid stays (2 CPUs free with low-1 and low-2 gone), low-2 and low-1 cannot both stay
    assert victims(result) == ("a", ["low-2", "low-1"])
    assert "preemption" not in result.message  # a candidate was found: no PostFilter message


def test_the_node_choice_follows_upstream():
    fw = framework(
        [node("a"), node("b"), node("c")],
        [
            pod("a-10", "4", 10, "a"),  # one victim of priority 10
            pod("b-1", "2", 1, "b"),  # two victims of priority 1: lower highest priority wins
            pod("b-2", "2", 1, "b"),
            pod("c-1", "4", 1, "c", created="2026-01-02T00:00:00Z"),  # one of priority 1, started later
        ],
    )
    # b and c both have highest victim priority 1; c's sum of priorities is smaller (one victim)
    assert victims(fw.schedule(pod_info(pod("p", "4", 50)))) == ("c", ["c-1"])


def test_no_preemption_when_it_cannot_help_or_is_not_allowed():
    fw = framework([node("a"), node("b", cpu="1")], [pod("same", "4", 50, "a")])
    result = fw.schedule(pod_info(pod("p", "4", 50)))
    assert result.preemption is None
    assert result.message == (
        "0/2 nodes are available: 2 Insufficient cpu. "
        "preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod.."
    )
    never = fw.schedule(pod_info(pod("never", "4", 100, preemptionPolicy="Never")))
    assert never.preemption is None
    assert never.message.endswith("preemption: not eligible due to preemptionPolicy=Never..")


def test_a_nominated_pod_waits_for_its_terminating_victims():
    leaving = pod("leaving", "4", 1, "a")
    leaving["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    fw = framework([node("a"), node("b")], [leaving, pod("other", "4", 1, "b")])
    waiting = pod("p", "4", 50)
    waiting["status"] = {"nominatedNodeName": "a"}
    result = fw.schedule(pod_info(waiting))
    assert result.preemption is None  # b's pod is not evicted as well
    assert result.message.endswith(
        "preemption: not eligible due to a terminating pod on the nominated node.."
    )


async def test_the_scheduler_evicts_the_victim_and_binds_the_preemptor():
    async with FakeApiServer() as fake:
        fake.create(res.NODES, node("only"))
        fake.create(res.PODS, pod("batch", "3", 1))
        async with running(fake) as scheduler:
            await eventually(lambda: node_of(fake, "batch") == "only")
            fake.create(res.PODS, pod("critical", "3", 1000))
            # the victim is deleted (gracefully: it is bound); the preemptor is nominated
            await eventually(
                lambda: fake.get(res.PODS, "batch", "default")["metadata"].get("deletionTimestamp")
            )
            await eventually(
                lambda: (
                    fake.get(res.PODS, "critical", "default").get("status", {}).get("nominatedNodeName")
                    == "only"
                )
            )
            (target,) = [
                c
                for c in fake.get(res.PODS, "batch", "default")["status"]["conditions"]
                if c["type"] == "DisruptionTarget"
            ]
            assert target == {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "PreemptionByScheduler",
                "message": "koord-scheduler: preempting to accommodate a higher priority pod",
            } | {k: v for k, v in target.items() if k == "lastTransitionTime"}
            events = [e for e in fake.list_objects(res.EVENTS, "default") if e["reason"] == "Preempted"]
            assert [e["involvedObject"]["name"] for e in events] == ["batch"]
            uid = fake.get(res.PODS, "critical", "default")["metadata"]["uid"]
            assert events[0]["message"] == f"Preempted by pod {uid} on node only"
            # the kubelet finishes the deletion: the preemptor binds where it was nominated
            fake.delete(res.PODS, "batch", "default", gracePeriodSeconds=0)
            await eventually(lambda: node_of(fake, "critical") == "only")
            assert scheduler.metrics.registry.get_sample_value("scheduler_preemption_attempts_total") == 1


# --- PodDisruptionBudgets ---------------------------------------------------------------


def pdb_victims(result: Any) -> tuple[str, list[str], int] | None:
    if result.preemption is None:
        return None
    c = result.preemption
    return c.node, [v.name for v in c.victims], c.pdb_violations


def test_a_pdb_with_no_disruptions_left_sends_preemption_to_another_node():
    placed = [pod("web", "4", 1, "a", labels=WEB), pod("batch", "4", 10, "b")]
    preemptor = pod_info(pod("p", "4", 50))
    # without a budget: a's victim has the lower priority (1 < 10)
    assert pdb_victims(framework([node("a"), node("b")], placed).schedule(preemptor)) == ("a", ["web"], 0)
    # web's budget allows no disruption: a has one violation, b none, and fewer violations come first
    fw = framework([node("a"), node("b")], placed, [pdb("web", PROTECT_WEB, allowed=0)])
    assert pdb_victims(fw.schedule(preemptor)) == ("b", ["batch"], 0)


def test_when_every_node_violates_the_fewest_violations_win():
    placed = [
        pod("web-1", "2", 1, "a", labels=WEB, created="2026-01-01T00:00:00Z"),
        pod("web-2", "2", 1, "a", labels=WEB, created="2026-01-02T00:00:00Z"),
        pod("web-3", "4", 5, "b", labels=WEB),
    ]
    preemptor = pod_info(pod("p", "4", 50))
    # without a budget: a's highest victim priority (1) is below b's (5)
    assert pdb_victims(framework([node("a"), node("b")], placed).schedule(preemptor)) == (
        "a",
        ["web-1", "web-2"],
        0,
    )
    # allowance 0: on a both evictions violate (0 -> -1 -> -2), on b one does
    fw = framework([node("a"), node("b")], placed, [pdb("web", PROTECT_WEB, allowed=0)])
    assert pdb_victims(fw.schedule(preemptor)) == ("b", ["web-3"], 1)


def test_the_allowance_is_spent_in_importance_order_on_each_node():
    placed = [
        pod("web-old", "2", 1, "a", labels=WEB, created="2026-01-01T00:00:00Z"),
        pod("web-new", "2", 1, "a", labels=WEB, created="2026-01-02T00:00:00Z"),
        pod("batch", "4", 10, "b"),
    ]
    preemptor = pod_info(pod("p", "4", 50))
    # allowance 1: web-old (the more important) takes it (1 -> 0), web-new violates (-1)
    fw = framework([node("a"), node("b")], placed, [pdb("web", PROTECT_WEB, allowed=1)])
    found = select_victims(fw.cluster, "a", preemptor, fw.pod_vector(preemptor))
    assert isinstance(found, Candidate)
    assert ([v.name for v in found.victims], found.pdb_violations) == (["web-old", "web-new"], 1)
    assert pdb_victims(fw.schedule(preemptor)) == ("b", ["batch"], 0)
    # allowance 2 covers both: a has no violation and the lower priority
    fw = framework([node("a"), node("b")], placed, [pdb("web", PROTECT_WEB, allowed=2)])
    assert pdb_victims(fw.schedule(preemptor)) == ("a", ["web-old", "web-new"], 0)


def test_a_pod_already_in_disrupted_pods_does_not_consume_the_allowance():
    placed = [
        pod("web-1", "2", 1, "a", labels=WEB, created="2026-01-01T00:00:00Z"),
        pod("web-2", "2", 1, "a", labels=WEB, created="2026-01-02T00:00:00Z"),
        pod("batch", "4", 10, "b"),
    ]
    preemptor = pod_info(pod("p", "4", 50))
    # one disruption allowed: web-2's eviction would violate, so b is preferred
    fw = framework([node("a"), node("b")], placed, [pdb("web", PROTECT_WEB, allowed=1)])
    assert pdb_victims(fw.schedule(preemptor)) == ("b", ["batch"], 0)
    # web-1's eviction was already admitted: only web-2 takes the one disruption allowed
    fw = framework([node("a"), node("b")], placed, [pdb("web", PROTECT_WEB, allowed=1, disrupted=("web-1",))])
    assert pdb_victims(fw.schedule(preemptor)) == ("a", ["web-1", "web-2"], 0)
    # and with nothing allowed, a listed pod still violates nothing
    only = [pod("web-1", "4", 1, "a", labels=WEB), pod("batch", "4", 10, "b")]
    fw = framework([node("a"), node("b")], only, [pdb("web", PROTECT_WEB, allowed=0, disrupted=("web-1",))])
    assert pdb_victims(fw.schedule(preemptor)) == ("a", ["web-1"], 0)


def test_protected_pods_are_reprieved_first_and_evicted_only_when_nothing_else_makes_room():
    placed = [pod("guarded", "2", 1, "a", labels=WEB), pod("plain", "2", 5, "a")]
    budgets = [pdb("web", PROTECT_WEB, allowed=0)]
    # without a budget the more important plain pod is reprieved and guarded evicted
    assert pdb_victims(framework([node("a")], placed).schedule(pod_info(pod("p", "2", 50)))) == (
        "a",
        ["guarded"],
        0,
    )
    # with it, guarded is reprieved first (2 of 4 CPUs free after it is back): plain goes
    fw = framework([node("a")], placed, budgets)
    assert pdb_victims(fw.schedule(pod_info(pod("p", "2", 50)))) == ("a", ["plain"], 0)
    # best effort: when both must go, the protected one goes too, and counts
    assert pdb_victims(fw.schedule(pod_info(pod("p", "4", 50)))) == ("a", ["plain", "guarded"], 1)


def test_victims_stay_in_importance_order_after_both_reprieve_passes():
    placed = [
        pod("guarded", "2", 3, "a", labels=WEB),
        pod("x", "2", 5, "a"),
        pod("y", "2", 1, "a"),
    ]
    fw = framework([node("a", cpu="6")], placed, [pdb("web", PROTECT_WEB, allowed=0)])
    # all three must go: found as guarded, x, y (violating pass first), listed by importance
    assert pdb_victims(fw.schedule(pod_info(pod("p", "6", 50)))) == ("a", ["x", "guarded", "y"], 1)


def _records(*budgets: Obj) -> dict[str, dict[str, PDBRecord]]:
    out: dict[str, dict[str, PDBRecord]] = {}
    for budget in budgets:
        record = pdb_record(budget)
        out.setdefault(record.namespace, {})[record.name] = record
    return out


@pytest.mark.parametrize(
    ("budget", "labels", "violates"),
    [
        pytest.param(pdb("b", PROTECT_WEB), WEB, True, id="match-labels"),
        pytest.param(
            pdb("b", {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "api"]}]}),
            WEB,
            True,
            id="match-expressions",
        ),
        pytest.param(pdb("b", PROTECT_WEB), {"app": "api"}, False, id="other-labels"),
        pytest.param(pdb("b", PROTECT_WEB), None, False, id="pod-without-labels"),
        # policy/v1 gives {} every pod of the namespace; the scheduler skips it, as upstream
        pytest.param(pdb("b", {}), WEB, False, id="empty-selector-matches-nothing"),
        pytest.param(pdb("b", None), WEB, False, id="nil-selector-matches-nothing"),
        pytest.param(
            pdb("b", {"matchExpressions": [{"key": "app", "operator": "Bogus", "values": ["web"]}]}),
            WEB,
            False,
            id="invalid-selector-matches-nothing",
        ),
        pytest.param(pdb("b", PROTECT_WEB, namespace="other"), WEB, False, id="other-namespace"),
        pytest.param(pdb("b", PROTECT_WEB, allowed=1), WEB, False, id="allowance-left"),
    ],
)
def test_which_pods_a_pdb_protects(budget: Obj, labels: dict[str, str] | None, violates: bool):
    victim = pod_info(pod("v", "1", 1, "a", labels=labels))
    violating, others = split_by_pdb_violation([victim], _records(budget))
    assert (violating, others) == (([victim], []) if violates else ([], [victim]))


def test_every_matching_pdb_is_charged():
    a, b = pod_info(pod("a", "1", 1, "n", labels=WEB)), pod_info(pod("b", "1", 1, "n", labels=WEB))
    # "one" allows a single disruption: a spends it on both budgets, then b violates "one"
    budgets = _records(pdb("one", PROTECT_WEB, allowed=1), pdb("many", {"matchLabels": WEB}, allowed=5))
    assert split_by_pdb_violation([a, b], budgets) == ([b], [a])


def test_the_search_goes_on_past_the_wanted_number_until_a_candidate_violates_no_pdb():
    # 120 nodes: 100 candidates are wanted; 119 nodes only offer a protected victim
    nodes = [node(f"n{i:03}") for i in range(120)]
    placed = [pod(f"web-{i:03}", "4", 1, f"n{i:03}", labels=WEB) for i in range(119)]
    placed.append(pod("batch", "4", 10, "n119"))
    # the offsets: 108, 17, 13; from 17 or 13, the first 100 nodes tried end before n119
    for seed in (0, 1, 14):
        fw = framework(nodes, placed, [pdb("web", PROTECT_WEB, allowed=0)])
        fw.rng.seed(seed)
        assert pdb_victims(fw.schedule(pod_info(pod("p", "4", 50)))) == ("n119", ["batch"], 0)


def test_a_node_that_eviction_cannot_free_keeps_the_filter_reasons():
    placed = [pod("low", "1", 1, "a"), pod("peer", "3", 50, "a")]
    fw = framework([node("a"), node("b", cpu="2")], placed)
    result = fw.schedule(pod_info(pod("p", "4", 50)))
    assert result.preemption is None
    # a: without "low" 1 CPU is free (upstream's filter status); b: nothing of lower priority
    assert result.message == (
        "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: "
        "1 Insufficient cpu, 1 No preemption victims found for incoming pod.."
    )


def test_simulate_takes_pdbs_from_the_objects(tmp_path, capsys):
    objects = [
        pod("web", "4", 1, "a", labels=WEB),
        pod("batch", "4", 10, "b"),
        pdb("web", PROTECT_WEB, allowed=0),
    ]
    out = run(tmp_path, capsys, [node("a"), node("b")], [pod("p", "4", 50)], objects)
    assert out["default/p"]["node"] is None
    assert out["default/p"]["preemption"] == {"node": "b", "victims": ["default/batch"]}


async def test_the_scheduler_follows_pdbs_from_the_apiserver():
    async with FakeApiServer() as fake:
        for name in ("a", "b"):
            fake.create(res.NODES, node(name))
        fake.create(res.PODS, pod("web", "4", 1, "a", labels=WEB))
        fake.create(res.PODS, pod("batch", "4", 10, "b"))
        budget = pdb("web", PROTECT_WEB)
        del budget["status"]
        fake.create(res.POD_DISRUPTION_BUDGETS, budget)
        created = fake.get(res.POD_DISRUPTION_BUDGETS, "web", "default")
        created["status"] = pdb("web", PROTECT_WEB, allowed=0)["status"]
        fake.update(res.POD_DISRUPTION_BUDGETS, created, "status")
        async with running(fake) as scheduler:
            await eventually(
                lambda: (
                    {"default/web", "default/batch"} <= scheduler.cluster.placed.keys()
                    and "web" in scheduler.cluster.pdbs.get("default", {})
                )
            )
            assert scheduler.cluster.pdbs["default"]["web"].disruptions_allowed == 0
            fake.create(res.PODS, pod("critical", "4", 1000))
            # web's budget is spent: batch on b is preempted instead of the lower-priority web
            await eventually(
                lambda: fake.get(res.PODS, "batch", "default")["metadata"].get("deletionTimestamp")
            )
            await eventually(
                lambda: (
                    fake.get(res.PODS, "critical", "default").get("status", {}).get("nominatedNodeName")
                    == "b"
                )
            )
            assert not fake.get(res.PODS, "web", "default")["metadata"].get("deletionTimestamp")
            # the scheduler leaves the budget alone (its victims are deleted, not evicted)
            assert fake.get(res.POD_DISRUPTION_BUDGETS, "web", "default")["status"]["disruptionsAllowed"] == 0
            fake.delete(res.PODS, "batch", "default", gracePeriodSeconds=0)
            await eventually(lambda: node_of(fake, "critical") == "b")
            # the budget's status and deletion reach the cluster's records
            updated = fake.get(res.POD_DISRUPTION_BUDGETS, "web", "default")
            updated["status"]["disruptionsAllowed"] = 2
            fake.update(res.POD_DISRUPTION_BUDGETS, updated, "status")
            await eventually(lambda: scheduler.cluster.pdbs["default"]["web"].disruptions_allowed == 2)
            fake.delete(res.POD_DISRUPTION_BUDGETS, "web", "default")
            await eventually(lambda: not scheduler.cluster.pdbs)


# --- filters eviction can satisfy: anti-affinity, topology spread -----------------------------

APP_X = {"app": "x"}
AVOID_X = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": APP_X}, "topologyKey": "kubernetes.io/hostname"}
        ]
    }
}


def labelled(name: str, cpu: str = "4", **labels: str) -> Obj:
    """A node with the labels the kubelet sets (its hostname) and ``labels``."""
    obj = node(name, cpu)
    obj["metadata"]["labels"] = {"kubernetes.io/hostname": name, **labels}
    return obj


def test_preemption_evicts_the_pod_an_anti_affinity_rejects_and_only_where_that_is_lower_priority():
    nodes = [labelled("a"), labelled("b")]
    placed = [
        pod("x-low", "1", 1, "a", labels=APP_X),
        pod("filler", "1", 1, "a"),  # lower priority too, but in nobody's way
        pod("x-high", "1", 2000, "b", labels=APP_X),
    ]
    preemptor = pod_info(pod("p", "1", 1000, affinity=AVOID_X))
    result = framework(nodes, placed).schedule(preemptor)
    assert result.node is None
    assert result.message == "0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules."
    assert victims(result) == ("a", ["x-low"])
    # only more important pods are in the way: evicting the filler does not help on a,
    # and b has nothing of lower priority
    crowded = [pod("x-high-a", "1", 2000, "a", labels=APP_X), *placed[1:]]
    result = framework(nodes, crowded).schedule(preemptor)
    assert result.preemption is None
    assert result.message == (
        "0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules. "
        "preemption: 0/2 nodes are available: 1 No preemption victims found for incoming pod, "
        "1 node(s) didn't match pod anti-affinity rules.."
    )


def test_preemption_lifts_a_topology_spread_skew_by_evicting_a_pod_of_the_crowded_zone():
    zone = "topology.kubernetes.io/zone"
    nodes = [labelled("a1", **{zone: "a"}), labelled("b1", **{zone: "b"})]
    web = {"app": "web"}
    placed = [
        pod("w1", "1", 1, "a1", labels=web, created="2026-01-01T00:00:00Z"),
        pod("big-a", "3", 1, "a1", created="2026-01-05T00:00:00Z"),
        pod("w2", "1", 1, "b1", labels=web, created="2026-01-02T00:00:00Z"),
        pod("w3", "1", 1, "b1", labels=web, created="2026-01-03T00:00:00Z"),
        pod("small-b", "1", 1, "b1", created="2026-01-04T00:00:00Z"),
    ]
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": zone,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": web},
        }
    ]
    incoming = pod_info(pod("w4", "1", 1000, labels=web, topologySpreadConstraints=spread))
    fw = framework(nodes, placed)
    result = fw.schedule(incoming)
    # a1 is full; b1 has room but zone b would have two web pods more than zone a
    assert result.message.startswith(
        "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match pod topology spread constraints."
    )
    # a1: w1 is reprieved (the skew holds with it), big-a must go; b1: w2 is reprieved, w3
    # must go (b would lead by 2), small-b is reprieved (resources suffice)
    on_b = select_victims(fw.cluster, "b1", incoming, fw.pod_vector(incoming), fw.eviction_checks)
    assert isinstance(on_b, Candidate)
    assert [v.name for v in on_b.victims] == ["w3"]
    # one victim of priority 1 each: the later start of the most important victim wins
    assert victims(result) == ("a1", ["big-a"])
