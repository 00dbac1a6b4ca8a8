"""PodTopologySpread: the filter's skew, minDomains and inclusion policies, its reasons and
their place in upstream's FitError, the score (log-weighted counts, rounding, ignored
nodes, NormalizeScore) in both kernels, default constraints and their args, and the plug-in
through ``koord-scheduler simulate`` and the live scheduler. Expected values are computed by
hand from kube-scheduler v1.34's rules; the comments show the arithmetic."""

from __future__ import annotations

import math
import random
from array import array
from collections.abc import Sequence
from typing import Any

import pytest

from controlplane.scheduler import kernel
from controlplane.scheduler.cluster import Cluster
from controlplane.scheduler.config import ConfigError, parse
from controlplane.scheduler.framework import Framework, fit_error
from controlplane.scheduler.kernel import twin
from controlplane.scheduler.kernel.twin import DEFAULT_NORMALIZE, SPREAD, Domains, Extra
from controlplane.scheduler.plugins.args import ArgsError
from controlplane.scheduler.plugins.podtopologyspread import (
    REASON,
    REASON_MISSING_LABEL,
    PodTopologySpread,
    spread_args,
)
from controlplane.scheduler.podinfo import PodInfo, pod_info
from koordinator.kube import resources as res
from tests.controlplane.scheduler.agreement import assert_fast_paths_agree, verdicts
from tests.controlplane.scheduler.live import running
from tests.controlplane.scheduler.test_scheduler import node_of
from tests.controlplane.scheduler.test_simulate import run
from tests.polling import eventually
from testsupport.fake import FakeApiServer

Obj = dict[str, Any]
ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"
WEB = {"app": "web"}


def node(
    name: str, zone: str | None = None, cpu: str = "4", taints: Sequence[Obj] = (), **labels: str
) -> Obj:
    all_labels = {HOSTNAME: name, **labels}
    if zone is not None:
        all_labels[ZONE] = zone
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": all_labels},
        "spec": {"taints": list(taints)},
        "status": {"allocatable": {"cpu": cpu, "memory": "32Gi", "pods": "110"}},
    }


def pod(
    name: str,
    labels: dict[str, str] | None = None,
    *,
    on: str | None = None,
    cpu: str = "100m",
    spread: Sequence[Obj] = (),
    owner: str | None = None,
    affinity: Obj | None = None,
    tolerations: Sequence[Obj] = (),
    scheduler: str = "koord-scheduler",
) -> Obj:
    spec: Obj = {
        "schedulerName": scheduler,
        "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}],
    }
    if on:
        spec["nodeName"] = on
    if spread:
        spec["topologySpreadConstraints"] = list(spread)
    if affinity:
        spec["affinity"] = affinity
    if tolerations:
        spec["tolerations"] = list(tolerations)
    meta: Obj = {"name": name, "namespace": "default", "labels": dict(labels or {})}
    if owner:
        meta["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": owner,
                "uid": f"uid-{owner}",
                "controller": True,
            }
        ]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def spread(
    key: str = ZONE, max_skew: int = 1, when: str = "DoNotSchedule", selector: Obj | None = None, **extra: Any
) -> Obj:
    return {
        "maxSkew": max_skew,
        "topologyKey": key,
        "whenUnsatisfiable": when,
        "labelSelector": {"matchLabels": WEB} if selector is None else selector,
        **extra,
    }


def cluster_of(nodes: Sequence[Obj], placed: Sequence[tuple[str, str, dict[str, str]]] = ()) -> Cluster:
    """Nodes, and pods (name, node, labels) placed on them."""
    cluster = Cluster()
    for obj in nodes:
        cluster.set_node(obj)
    for name, on, labels in placed:
        info = pod_info(pod(name, labels, on=on))
        cluster.place(info, on)
    return cluster


# zone a: a1 (2 web pods), a2 (1); zone b: b1 (1); zone c: c1 (none); x: no zone label
ZONES = [node("a1", "a"), node("a2", "a"), node("b1", "b"), node("c1", "c"), node("x")]
WEB_PODS = [
    ("w1", "a1", WEB),
    ("w2", "a1", WEB),
    ("w3", "a2", WEB),
    ("w4", "b1", WEB),
    ("o1", "c1", {"app": "db"}),
]


def test_skew_against_the_global_minimum_and_a_missing_label():
    cluster = cluster_of(ZONES, WEB_PODS)
    plugin = PodTopologySpread()
    incoming = pod_info(pod("new", WEB, spread=[spread()]))
    # counts a 3, b 1, c 0 (the db pod does not match) -> minimum 0; the pod matches itself:
    # a: 3 + 1 - 0 = 4 > 1, b: 1 + 1 - 0 = 2 > 1, c: 0 + 1 - 0 = 1 passes; x lacks the zone
    assert verdicts(plugin, incoming, cluster) == {
        "a1": REASON,
        "a2": REASON,
        "b1": REASON,
        "c1": None,
        "x": REASON_MISSING_LABEL,
    }
    rejected = plugin.mask(incoming, cluster)
    assert rejected is not None
    assert plugin.reasons(incoming, cluster, bytes(1 - b for b in rejected)) == {
        REASON: 3,
        REASON_MISSING_LABEL: 1,
    }
    # a pod the selector does not match: a: 3 + 0 - 0 > 1, b: 1 <= 1
    other = pod_info(pod("other", {"app": "db"}, spread=[spread()]))
    assert verdicts(plugin, other, cluster) == {
        "a1": REASON,
        "a2": REASON,
        "b1": None,
        "c1": None,
        "x": REASON_MISSING_LABEL,
    }
    # maxSkew 3: a: 4 > 3 still, b: 2 <= 3
    wide = pod_info(pod("wide", WEB, spread=[spread(max_skew=3)]))
    assert [n for n, why in verdicts(plugin, wide, cluster).items() if why is None] == ["b1", "c1"]


def test_terminating_and_other_namespace_pods_do_not_count():
    cluster = cluster_of(ZONES)
    gone = pod("gone", WEB, on="c1")
    gone["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    elsewhere = pod("elsewhere", WEB, on="c1")
    elsewhere["metadata"]["namespace"] = "other"
    for obj in (gone, elsewhere):
        info = pod_info(obj)
        cluster.place(info, "c1")
    cluster.place(pod_info(pod("w", WEB, on="a1")), "a1")
    # zone c still counts 0 -> minimum 0: a 1 + 1 - 0 = 2 > 1, b and c pass
    incoming = pod_info(pod("new", WEB, spread=[spread()]))
    assert verdicts(PodTopologySpread(), incoming, cluster) == {
        "a1": REASON,
        "a2": REASON,
        "b1": None,
        "c1": None,
        "x": REASON_MISSING_LABEL,
    }


def test_min_domains_makes_the_minimum_zero():
    nodes = [node("a1", "a"), node("b1", "b")]
    placed = [("w1", "a1", WEB), ("w2", "a1", WEB), ("w3", "b1", WEB), ("w4", "b1", WEB)]
    cluster = cluster_of(nodes, placed)
    plugin = PodTopologySpread()
    # two domains, 2 pods each: minimum 2, 2 + 1 - 2 = 1 <= 1
    assert verdicts(plugin, pod_info(pod("n", WEB, spread=[spread()])), cluster) == {"a1": None, "b1": None}
    # minDomains 3 > 2 eligible domains: minimum 0, 2 + 1 - 0 = 3 > 1 everywhere
    strict = pod_info(pod("s", WEB, spread=[spread(minDomains=3)]))
    assert verdicts(plugin, strict, cluster) == {"a1": REASON, "b1": REASON}
    # minDomains 2 is met
    assert set(
        verdicts(plugin, pod_info(pod("t", WEB, spread=[spread(minDomains=2)])), cluster).values()
    ) == {None}


def test_node_affinity_and_taints_policies_decide_the_eligible_domains():
    taint = {"key": "dedicated", "value": "x", "effect": "NoSchedule"}
    nodes = [node("a1", "a"), node("b1", "b"), node("c1", "c", taints=[taint])]
    placed = [("w1", "a1", WEB), ("w2", "a1", WEB), ("w3", "b1", WEB)]
    cluster = cluster_of(nodes, placed)
    plugin = PodTopologySpread()
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["a", "b"]}]}
                ]
            }
        }
    }
    # Honor (default): zone c is no eligible domain -> minimum 1: a 2 + 1 - 1 = 2 > 1, b 1 + 1 - 1 = 1
    honor = pod_info(pod("h", WEB, spread=[spread()], affinity=affinity))
    assert verdicts(plugin, honor, cluster) == {"a1": REASON, "b1": None, "c1": None}
    # Ignore: zone c counts with 0 -> minimum 0: b 1 + 1 - 0 = 2 > 1
    ignore = pod_info(pod("i", WEB, spread=[spread(nodeAffinityPolicy="Ignore")], affinity=affinity))
    assert verdicts(plugin, ignore, cluster) == {"a1": REASON, "b1": REASON, "c1": None}
    # taints: Ignore (default) counts the tainted zone c (minimum 0); Honor leaves it out
    assert verdicts(plugin, pod_info(pod("t", WEB, spread=[spread()])), cluster)["b1"] == REASON
    honor_taints = pod_info(pod("u", WEB, spread=[spread(nodeTaintsPolicy="Honor")]))
    assert verdicts(plugin, honor_taints, cluster) == {"a1": REASON, "b1": None, "c1": None}
    # a toleration makes zone c eligible again under Honor
    tolerated = pod_info(
        pod(
            "v",
            WEB,
            spread=[spread(nodeTaintsPolicy="Honor")],
            tolerations=[{"key": "dedicated", "operator": "Exists"}],
        )
    )
    assert verdicts(plugin, tolerated, cluster)["b1"] == REASON


def test_match_label_keys_narrow_the_selector_to_the_pods_value():
    v1, v2 = {"app": "web", "version": "1"}, {"app": "web", "version": "2"}
    nodes = [node("a1", "a"), node("b1", "b")]
    placed = [("p1", "a1", v1), ("p2", "a1", v1), ("p3", "b1", v2)]
    cluster = cluster_of(nodes, placed)
    plugin = PodTopologySpread()
    # all web pods: a 2, b 1 -> a 2 + 1 - 1 = 2 > 1
    plain = pod_info(pod("n", v2, spread=[spread()]))
    assert verdicts(plugin, plain, cluster) == {"a1": REASON, "b1": None}
    # version 2 only: a 0, b 1 -> minimum 0: b 1 + 1 - 0 = 2 > 1, a passes
    keyed = pod_info(pod("k", v2, spread=[spread(matchLabelKeys=["version"])]))
    assert verdicts(plugin, keyed, cluster) == {"a1": None, "b1": REASON}


def test_fit_error_counts_resources_first_and_the_missing_label_is_not_helpful():
    # a2 and c1 are too small: NodeResourcesFit runs before PodTopologySpread upstream, so
    # a2 counts as "Insufficient cpu" although its zone is also too full
    nodes = [node("a1", "a"), node("a2", "a", cpu="1"), node("b1", "b"), node("c1", "c", cpu="1"), node("x")]
    cluster = cluster_of(nodes, WEB_PODS[:4])
    framework = Framework(parse(None).profiles[0], cluster, seed=1)
    incoming = pod_info(pod("new", WEB, cpu="2", spread=[spread()]))
    result = framework.schedule(incoming)
    assert result.node is None
    assert result.reasons == {"Insufficient cpu": 2, REASON: 2, REASON_MISSING_LABEL: 1}
    assert fit_error(5, result.reasons) == (
        "0/5 nodes are available: "
        "1 node(s) didn't match pod topology spread constraints (missing required label), "
        "2 Insufficient cpu, 2 node(s) didn't match pod topology spread constraints."
    )
    assert result.message.startswith(fit_error(5, result.reasons) + " preemption: ")
    assert "PodTopologySpread" in result.rejected_by
    # preemption: only x (missing label, UnschedulableAndUnresolvable) is not helpful
    assert "1 Preemption is not helpful for scheduling" in result.message
    static = framework.static_mask(framework.masks(incoming), incoming)
    assert cluster.names_of(static) == {"a1", "a2", "b1", "c1"}
    explained = framework.explain(incoming)["filtered"]
    assert explained == {
        "a1": [REASON],
        "a2": ["Insufficient cpu"],
        "b1": [REASON],
        "c1": ["Insufficient cpu"],
        "x": [REASON_MISSING_LABEL],
    }


def test_preemption_helper_recounts_without_the_victims():
    cluster = cluster_of(ZONES, WEB_PODS)
    plugin = PodTopologySpread()
    incoming = pod_info(pod("new", WEB, spread=[spread()]))
    # b1 fails with b 1 + 1 - 0 = 2; without w4 zone b counts 0
    assert plugin.rejects_without(incoming, cluster, "b1", ()) is not None
    assert plugin.rejects_without(incoming, cluster, "b1", {"default/w4"}) is None
    assert plugin.rejects_without(incoming, cluster, "a2", {"default/w3"}) is not None  # a still 2 + 1 - 0
    assert plugin.rejects_without(incoming, cluster, "x", {"default/w1"}) is not None


# --- score -----------------------------------------------------------------------------


def soft(key: str, max_skew: int) -> Obj:
    return spread(key, max_skew, "ScheduleAnyway")


def test_score_weights_counts_by_the_log_of_the_window_domains():
    cluster = cluster_of(ZONES, WEB_PODS)
    plugin = PodTopologySpread()
    incoming = pod_info(pod("new", WEB, spread=[soft(ZONE, 1), soft(HOSTNAME, 2)]))
    extra = plugin.extra(incoming, cluster, 2)
    assert extra is not None
    assert extra.normalize == SPREAD
    rows = [cluster.nodes[n].row for n in ("a1", "a2", "b1", "c1", "x")]
    # x lacks the zone: ignored (score 0). Window zones a, b, c -> log(3 + 2); hostname: the
    # 4 scored nodes -> log(4 + 2)
    za, zh = math.log(5), math.log(6)
    raw = {
        "a1": round(3 * za + 0 + 2 * zh + 1),  # 4.83 + 4.58 = 9.41 -> 9
        "a2": round(3 * za + 1 * zh + 1),  # 4.83 + 2.79 = 7.62 -> 8
        "b1": round(1 * za + 1 * zh + 1),  # 1.61 + 2.79 = 4.40 -> 4
        "c1": round(0 * za + 0 * zh + 1),  # 1
    }
    assert raw == {"a1": 9, "a2": 8, "b1": 4, "c1": 1}
    # NormalizeScore: 100 * (max + min - s) / max with max 9, min 1
    expected = [100 * (10 - 9) // 9, 100 * (10 - 8) // 9, 100 * (10 - 4) // 9, 100, 0]
    assert expected == [11, 22, 66, 100, 0]
    assert twin.window_scores(extra, rows) == expected
    assert plugin.window_scores(incoming, cluster, rows) == expected
    # a smaller window: without c1 and x, zones a, b -> log(4), hostname 3 nodes -> log(5):
    # a1 3 * 1.386 + 2 * 1.609 + 1 = 8.38 -> 8; a2 4.16 + 2.61 = 6.77 -> 7; b1 1.39 + 2.61 = 4.0 -> 4
    window = rows[:3]
    assert twin.window_scores(extra, window) == [100 * 4 // 8, 100 * 5 // 8, 100] == [50, 62, 100]
    assert plugin.window_scores(incoming, cluster, window) == [50, 62, 100]


def test_spread_normalization_in_the_kernel(backend):
    """The kernel (either backend) picks by the same SPREAD scores: hand-made domain
    lookups, a window narrowed by the mask, ignored rows, and a boost revealing a non-top score."""
    table = kernel.NodeTable()
    for name in ("a1", "a2", "b1", "c1", "x"):
        table.set_node(name, {"cpu": 4000, "memory": 32 << 30}, 110)
    cfg = table.score_config()
    vector = table.pod_vector({"cpu": 100})
    base = kernel.find(table, vector, cfg, table.live(), 0, 5, array("Q", [7]))[3]  # same on every row
    zone = Domains(array("q", [0, 0, 1, 2, -1]), array("q", [3, 1, 0]), max_skew=1)
    host = Domains(array("q", [0, 1, 2, 3, 4]), array("q", [2, 1, 1, 0, 0]), max_skew=2, by_row=True)
    extra = Extra(
        "PodTopologySpread", 2, False, normalize=SPREAD, domains=[zone, host], ignored=b"\0\0\0\0\1"
    )
    # scores 11, 22, 66, 100, 0 (see above): c1 wins with 2 * 100
    chosen, feasible, processed, best = kernel.find(
        table, vector, cfg, table.live(), 0, 5, array("Q", [7]), [extra]
    )
    assert (chosen, feasible, processed, best) == (3, 5, 5, base + 200)
    # without c1 and x the window scores 50, 62, 100: b1 wins
    mask = bytes([1, 1, 1, 0, 0])
    assert kernel.find(table, vector, cfg, mask, 0, 5, array("Q", [7]), [extra])[::3] == (2, base + 200)
    # a boost of 100 (weight 1) on a2 beats b1: a2 2 * 62 + 100 = 224 > 200
    boost = Extra("Boost", 1, False, [(bytes([0, 1, 0, 0, 0]), 5)])
    assert kernel.find(table, vector, cfg, mask, 0, 5, array("Q", [7]), [extra, boost])[::3] == (
        1,
        base + 224,
    )
    # every scored row ignored: all 0 (the boost decides)
    ignore_all = Extra("PodTopologySpread", 2, False, normalize=SPREAD, domains=[zone], ignored=b"\1" * 5)
    assert kernel.find(table, vector, cfg, table.live(), 0, 5, array("Q", [7]), [ignore_all, boost])[::3] == (
        1,
        base + 100,
    )
    # nothing matches anywhere and maxSkew 1: raw 0 everywhere -> max 0 -> 100 each
    empty = Domains(array("q", [0, 0, 1, 2, -1]), array("q", [0, 0, 0]), max_skew=1)
    flat = Extra("PodTopologySpread", 3, False, normalize=SPREAD, domains=[empty])
    assert kernel.find(table, vector, cfg, table.live(), 0, 5, array("Q", [7]), [flat])[3] == base + 300


def test_both_backends_agree_on_random_spread_and_min_max_extras():
    if kernel.native() is None:
        pytest.skip("the compiled kernel is not built")
    rng = random.Random(11)
    for _ in range(200):
        n = rng.randint(1, 40)
        table = kernel.NodeTable()
        for i in range(n):
            table.set_node(
                f"n{i}", {"cpu": rng.randint(1, 8) * 1000, "memory": rng.randint(1, 32) << 30}, 110
            )
        cfg = table.score_config()
        vector = table.pod_vector({"cpu": rng.randint(0, 2000)})
        extras = []
        for _ in range(rng.randint(1, 3)):
            mode = rng.choice([DEFAULT_NORMALIZE, twin.MIN_MAX, SPREAD, twin.NO_NORMALIZE])
            domains = []
            for _ in range(rng.randint(0, 3)):
                size = rng.randint(1, 6)
                by_row = mode == SPREAD and rng.random() < 0.3
                ids = array("q", (rng.randint(-1, size - 1) for _ in range(rng.randint(0, n))))
                low = 0 if mode == SPREAD else -30
                values = array("q", (rng.randint(low, 30) for _ in range(n if by_row else size)))
                absent = rng.randint(-1, size - 1)
                domains.append(Domains(ids, values, rng.randint(1, 5), by_row, absent))
            ignored = bytes(rng.random() < 0.2 for _ in range(rng.randint(0, n)))
            parts = (
                [(bytes(rng.randint(0, 1) for _ in range(n)), rng.randint(1, 9))] if mode != SPREAD else []
            )
            extras.append(Extra("e", rng.randint(1, 5), rng.random() < 0.5, parts, mode, domains, ignored))
        mask = bytes(rng.random() < 0.8 for _ in range(n))
        start, want, value = rng.randrange(n), rng.randint(1, n), rng.getrandbits(63) | 1
        native = kernel.find(table, vector, cfg, mask, start, want, array("Q", [value]), extras)
        python = twin.find(table, vector, cfg, mask, start, want, array("Q", [value]), extras)
        assert native == python


def test_system_default_constraints_spread_a_replica_sets_pods():
    # n3 has no zone: System defaulting does not ignore it (hostname spreading still applies)
    nodes = [node("n1", "a"), node("n2", "a"), node("n3")]
    cluster = Cluster()
    for obj in nodes:
        cluster.set_node(obj)
    for name, on in (("r1", "n1"), ("r2", "n1"), ("r3", "n3")):
        cluster.place(pod_info(pod(name, WEB, on=on, owner="rs")), on)
    cluster.place(pod_info(pod("stranger", WEB, on="n2", owner="other")), "n2")
    plugin = PodTopologySpread()
    incoming = pod_info(pod("r4", WEB, owner="rs"))
    assert plugin.mask(incoming, cluster) is None  # both defaults are ScheduleAnyway
    rows = [cluster.nodes[n].row for n in ("n1", "n2", "n3")]
    # zones in the window: a and "" (n3) -> log(4); hostname: 3 nodes -> log(5)
    # n1: 2 * 1.609 + 2 + (2 * 1.386 + 4) = 11.99 -> 12; n2: 2 + 6.77 -> 9; n3: 1.609 + 2 -> 4
    # (the pod of another ReplicaSet on n2 does not count)
    assert (
        plugin.window_scores(incoming, cluster, rows) == [100 * 4 // 12, 100 * 7 // 12, 100] == [33, 58, 100]
    )
    extra = plugin.extra(incoming, cluster, 2)
    assert extra is not None
    assert twin.window_scores(extra, rows) == [33, 58, 100]
    # List defaulting with the same constraints requires every key: n3 is ignored
    listed = PodTopologySpread(
        spread_args(
            {
                "defaultingType": "List",
                "defaultConstraints": [
                    {"maxSkew": 3, "topologyKey": HOSTNAME, "whenUnsatisfiable": "ScheduleAnyway"},
                    {"maxSkew": 5, "topologyKey": ZONE, "whenUnsatisfiable": "ScheduleAnyway"},
                ],
            }
        )
    )
    # zone a -> log(3); hostname 2 scored nodes -> log(4)
    # n1: 2 * 1.386 + 2 + 2 * 1.099 + 4 = 10.97 -> 11; n2: 2 + 6.20 = 8.20 -> 8
    assert listed.window_scores(incoming, cluster, rows) == [100 * 8 // 11, 100, 0] == [72, 100, 0]
    extra = listed.extra(incoming, cluster, 2)
    assert extra is not None
    assert twin.window_scores(extra, rows) == [72, 100, 0]
    # a pod without a controller (or with its own constraints) gets no defaults
    assert plugin.extra(pod_info(pod("bare", WEB)), cluster, 2) is None
    own = pod_info(pod("own", WEB, owner="rs", spread=[spread(HOSTNAME)]))
    assert plugin.extra(own, cluster, 2) is None
    assert plugin.mask(own, cluster) is not None


def test_list_default_do_not_schedule_constraints_filter():
    cluster = cluster_of([node("a1", "a"), node("b1", "b")])
    for name, on in (("r1", "a1"), ("r2", "a1")):
        cluster.place(pod_info(pod(name, on=on, owner="rs")), on)
    args = spread_args(
        {
            "defaultingType": "List",
            "defaultConstraints": [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}],
        }
    )
    plugin = PodTopologySpread(args)
    # a 2 + 1 - 0 = 3 > 1
    assert verdicts(plugin, pod_info(pod("r3", owner="rs")), cluster) == {"a1": REASON, "b1": None}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            {"defaultingType": "Zone"},
            'PodTopologySpread.defaultingType: Unsupported value: "Zone": supported values: "System", "List"',
        ),
        (
            {
                "defaultConstraints": [
                    {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}
                ]
            },
            'PodTopologySpread.defaultingType: Invalid value: "System": '
            "when .defaultConstraints are not empty",
        ),
        (
            {
                "defaultingType": "List",
                "defaultConstraints": [
                    {"maxSkew": 0, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}
                ],
            },
            "PodTopologySpread.defaultConstraints[0].maxSkew: Invalid value: 0: not in valid range (0, inf)",
        ),
        (
            {
                "defaultingType": "List",
                "defaultConstraints": [{"maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule"}],
            },
            "PodTopologySpread.defaultConstraints[0].topologyKey: Required value: can not be empty",
        ),
        (
            {
                "defaultingType": "List",
                "defaultConstraints": [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "Maybe"}],
            },
            'PodTopologySpread.defaultConstraints[0].whenUnsatisfiable: Unsupported value: "Maybe": '
            'supported values: "DoNotSchedule", "ScheduleAnyway"',
        ),
        (
            {
                "defaultingType": "List",
                "defaultConstraints": [
                    {
                        "maxSkew": 1,
                        "topologyKey": ZONE,
                        "whenUnsatisfiable": "DoNotSchedule",
                        "labelSelector": {},
                    }
                ],
            },
            "PodTopologySpread.defaultConstraints[0].labelSelector: Forbidden: constraint must not define a "
            "selector, as they deduced for each pod",
        ),
        (
            {
                "defaultingType": "List",
                "defaultConstraints": [
                    {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"},
                    {"maxSkew": 2, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"},
                ],
            },
            "PodTopologySpread.defaultConstraints[1]: Duplicate value: "
            '"{topology.kubernetes.io/zone, DoNotSchedule}"',
        ),
    ],
    ids=["defaulting-type", "system-with-list", "max-skew", "topology-key", "when", "selector", "duplicate"],
)
def test_args_validation_as_upstream(args, message):
    with pytest.raises(ArgsError) as err:
        spread_args(args)
    assert str(err.value) == message


def test_bad_args_are_a_config_error():
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [
            {
                "schedulerName": "koord-scheduler",
                "pluginConfig": [{"name": "PodTopologySpread", "args": {"defaultingType": "Zone"}}],
            }
        ],
    }
    with pytest.raises(ConfigError) as err:
        parse(config)
    assert str(err.value).startswith(
        'profiles[0].pluginConfig[0].args.defaultingType: Unsupported value: "Zone"'
    )


# --- random clusters: the fast paths against upstream's node-by-node code --------------


def random_cluster(rng: random.Random) -> tuple[Cluster, list[PodInfo]]:
    cluster = Cluster()
    count = rng.randint(1, 14)
    for i in range(count):
        node_labels = {}
        if rng.random() < 0.85:
            node_labels["zone"] = rng.choice(["z1", "z2", "z3"])
        if rng.random() < 0.8:
            node_labels["rack"] = rng.choice(["r1", "r2", "r3", "r4"])
        taints = [{"key": "t", "value": "v", "effect": "NoSchedule"}] if rng.random() < 0.2 else []
        cluster.set_node(node(f"n{i}", taints=taints, **node_labels))
    names = list(cluster.nodes)

    def labels() -> dict[str, str]:
        return {
            k: rng.choice(vs) for k, vs in (("app", ["a", "b"]), ("tier", ["x", "y"])) if rng.random() < 0.8
        }

    for i in range(rng.randint(0, 25)):
        obj = pod(f"p{i}", labels(), on=rng.choice(names))
        if rng.random() < 0.1:
            obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        info = pod_info(obj)
        cluster.place(info, info.node_name)
    incoming = []
    for i in range(6):
        constraints = []
        for _ in range(rng.randint(1, 3)):
            selector: Obj = {"matchLabels": {"app": rng.choice(["a", "b"])}}
            if rng.random() < 0.3:
                selector = {
                    "matchExpressions": [
                        {"key": "tier", "operator": rng.choice(["In", "NotIn"]), "values": ["x"]}
                    ]
                }
            extra: Obj = {}
            if rng.random() < 0.3:
                extra["minDomains"] = rng.randint(1, 4)
            if rng.random() < 0.3:
                extra["nodeAffinityPolicy"] = rng.choice(["Honor", "Ignore"])
            if rng.random() < 0.3:
                extra["nodeTaintsPolicy"] = rng.choice(["Honor", "Ignore"])
            if rng.random() < 0.2:
                extra["matchLabelKeys"] = ["tier"]
            constraints.append(
                spread(
                    rng.choice(["zone", "rack", HOSTNAME]),
                    rng.randint(1, 3),
                    rng.choice(["DoNotSchedule", "ScheduleAnyway"]),
                    selector,
                    **extra,
                )
            )
        obj = pod(f"in{i}", labels(), spread=constraints)
        if rng.random() < 0.3:
            obj["spec"]["nodeSelector"] = {"zone": rng.choice(["z1", "z2"])}
        if rng.random() < 0.3:
            obj["spec"]["tolerations"] = [{"key": "t", "operator": "Exists"}]
        incoming.append(pod_info(obj))
    return cluster, incoming


def test_random_clusters_fast_path_equals_node_by_node():
    rng = random.Random(3)
    plugin = PodTopologySpread()
    for _ in range(150):
        cluster, incoming = random_cluster(rng)
        for target in incoming:
            assert_fast_paths_agree(plugin, target, cluster, rng)


# --- simulate and the live scheduler ---------------------------------------------------


def test_simulate_reports_spread_reasons_and_scores(tmp_path, capsys):
    nodes = [node("a1", "a"), node("b1", "b"), node("x")]
    placed = [pod("w1", WEB, on="a1"), pod("w2", WEB, on="a1")]
    pods = [
        pod("hard", WEB, spread=[spread()]),
        pod("soft", WEB, spread=[soft(ZONE, 1)]),
    ]
    out = run(tmp_path, capsys, nodes, pods, placed)
    hard = out["default/hard"]
    # a: 2 + 1 - 0 = 3 > 1; x lacks the zone
    assert hard["node"] == "b1"
    assert hard["filtered"] == {"a1": [REASON], "x": [REASON_MISSING_LABEL]}
    assert hard["scores"]["b1"].get("PodTopologySpread") is None  # no ScheduleAnyway constraint
    soft_result = out["default/soft"]
    # "hard" went to b1 first (assumed). Window a1, b1, x; x is ignored: zones a, b -> log(4):
    # a1 2 * 1.386 = 2.77 -> 3, b1 1.39 -> 1; normalized 100 * (3 + 1 - s) / 3: a1 33, b1 100
    assert {n: s["PodTopologySpread"] for n, s in soft_result["scores"].items()} == {
        "a1": 33,
        "b1": 100,
        "x": 0,
    }
    assert soft_result["node"] == "b1"


async def test_the_live_scheduler_spreads_over_zones_and_waits_for_a_domain():
    async with FakeApiServer() as fake:
        for obj in (node("a1", "a"), node("a2", "a"), node("b1", "b")):
            fake.create(res.NODES, obj)
        async with running(fake) as scheduler:
            for i in range(4):  # each waits for the one before: 1 + 1 - 0 > 1 forces the other zone
                name = f"w{i}"
                fake.create(res.PODS, pod(name, WEB, spread=[spread()]))
                await eventually(lambda: node_of(fake, name))  # noqa: B023 (awaited at once)
            zones = [
                fake.get(res.NODES, node_of(fake, f"w{i}") or "")["metadata"]["labels"][ZONE]
                for i in range(4)
            ]
            assert sorted(zones) == ["a", "a", "b", "b"]
            # a cordoned node in zone c still makes c an eligible domain: minimum 0, so zones a
            # and b (2 + 1 - 0 > 1) are out and the pod waits
            cordoned = node("c1", "c")
            cordoned["spec"]["unschedulable"] = True
            fake.create(res.NODES, cordoned)
            await eventually(lambda: "c1" in scheduler.cluster.nodes)
            fake.create(res.PODS, pod("w4", WEB, spread=[spread()]))
            await eventually(lambda: scheduler.queue.pending()["unschedulable"] == 1)
            (failed,) = [
                e for e in fake.list_objects(res.EVENTS, "default") if e["reason"] == "FailedScheduling"
            ]
            assert failed["message"].startswith(
                "0/4 nodes are available: 1 node(s) were unschedulable, "
                "3 node(s) didn't match pod topology spread constraints. preemption: "
            )
            # uncordoned: the node update moves it, and zone c takes it
            uncordoned = fake.get(res.NODES, "c1")
            uncordoned["spec"]["unschedulable"] = False
            fake.update(res.NODES, uncordoned)
            await eventually(lambda: node_of(fake, "w4") == "c1")
