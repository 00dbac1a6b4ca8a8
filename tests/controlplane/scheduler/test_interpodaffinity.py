"""InterPodAffinity: required affinity (with the first-pod-of-a-group rule), required
anti-affinity, placed pods' anti-affinity, namespaces and namespace selectors, the reasons
and their order, the score (preferred terms both ways, hardPodAffinityWeight, float min-max
normalization) in both kernels, the args, and the plug-in through ``koord-scheduler
simulate`` and the live scheduler. Expected values are computed by hand from kube-scheduler
v1.34's rules; the comments show the arithmetic."""

from __future__ import annotations

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
from controlplane.scheduler.kernel.twin import MIN_MAX, Extra
from controlplane.scheduler.plugins.args import ArgsError
from controlplane.scheduler.plugins.interpodaffinity import (
    REASON_AFFINITY,
    REASON_ANTI_AFFINITY,
    REASON_EXISTING_ANTI_AFFINITY,
    AffinityArgs,
    InterPodAffinity,
    affinity_args,
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


def node(name: str, zone: str | None = None, cpu: str = "4") -> Obj:
    labels = {HOSTNAME: name}
    if zone is not None:
        labels[ZONE] = zone
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": {"cpu": cpu, "memory": "32Gi", "pods": "110"}},
    }


def term(app: str, key: str = ZONE, **extra: Any) -> Obj:
    return {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key, **extra}


def weighted(weight: int, app: str, key: str = ZONE, **extra: Any) -> Obj:
    return {"weight": weight, "podAffinityTerm": term(app, key, **extra)}


def affinity(
    required: Sequence[Obj] = (),
    anti: Sequence[Obj] = (),
    preferred: Sequence[Obj] = (),
    preferred_anti: Sequence[Obj] = (),
) -> Obj:
    req, pref = (
        "requiredDuringSchedulingIgnoredDuringExecution",
        "preferredDuringSchedulingIgnoredDuringExecution",
    )
    return {
        "podAffinity": {req: list(required), pref: list(preferred)},
        "podAntiAffinity": {req: list(anti), pref: list(preferred_anti)},
    }


def pod(
    name: str,
    app: str | None = None,
    *,
    on: str | None = None,
    namespace: str = "default",
    cpu: str = "100m",
    spec_affinity: Obj | None = None,
    scheduler: str = "koord-scheduler",
) -> Obj:
    spec: Obj = {
        "schedulerName": scheduler,
        "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}],
    }
    if on:
        spec["nodeName"] = on
    if spec_affinity:
        spec["affinity"] = spec_affinity
    labels = {"app": app} if app else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": spec,
    }


def cluster_of(nodes: Sequence[Obj], placed: Sequence[Obj] = ()) -> Cluster:
    cluster = Cluster()
    for obj in nodes:
        cluster.set_node(obj)
    for obj in placed:
        info = pod_info(obj)
        cluster.place(info, info.node_name)
    return cluster


NODES = [node("a1", "a"), node("a2", "a"), node("b1", "b"), node("x")]


def test_required_affinity_needs_a_matching_pod_in_the_domain():
    cluster = cluster_of(NODES, [pod("db", "db", on="a1")])
    plugin = InterPodAffinity()
    web = pod_info(pod("web", "web", spec_affinity=affinity(required=[term("db")])))
    # zone a holds the db pod; b has none; x lacks the zone label
    assert verdicts(plugin, web, cluster) == {
        "a1": None,
        "a2": None,
        "b1": REASON_AFFINITY,
        "x": REASON_AFFINITY,
    }
    # two terms: a pod must match both (the db pod does), and the node needs both domains
    both = pod_info(pod("both", "web", spec_affinity=affinity(required=[term("db"), term("db", HOSTNAME)])))
    assert verdicts(plugin, both, cluster) == {
        "a1": None,
        "a2": REASON_AFFINITY,
        "b1": REASON_AFFINITY,
        "x": REASON_AFFINITY,
    }


def test_the_first_pod_of_a_group_may_go_anywhere_with_the_key():
    cluster = cluster_of(NODES, [pod("db", "db", on="a1")])
    plugin = InterPodAffinity()
    # no "cache" pod anywhere, and the pod matches its own term: any node with the zone key
    first = pod_info(pod("cache", "cache", spec_affinity=affinity(required=[term("cache")])))
    assert verdicts(plugin, first, cluster) == {"a1": None, "a2": None, "b1": None, "x": REASON_AFFINITY}
    # a pod that does not match its own term has nowhere to go
    stranger = pod_info(pod("s", "web", spec_affinity=affinity(required=[term("cache")])))
    assert set(verdicts(plugin, stranger, cluster).values()) == {REASON_AFFINITY}
    # once one cache pod is placed (in zone b), the rule no longer applies
    cluster.place(pod_info(pod("cache0", "cache", on="b1")), "b1")
    assert verdicts(plugin, first, cluster) == {
        "a1": REASON_AFFINITY,
        "a2": REASON_AFFINITY,
        "b1": None,
        "x": REASON_AFFINITY,
    }


def test_anti_affinity_both_ways_and_the_reasons_order():
    lonely = pod("lonely", "batch", on="b1", spec_affinity=affinity(anti=[term("web", HOSTNAME)]))
    cluster = cluster_of(NODES, [pod("db", "db", on="a1"), lonely])
    plugin = InterPodAffinity()
    # the pod's own anti-affinity to db in its zone: zone a is out; x has no zone, no pair
    away = pod_info(pod("away", "web", spec_affinity=affinity(anti=[term("db")])))
    assert verdicts(plugin, away, cluster) == {
        "a1": REASON_ANTI_AFFINITY,
        "a2": REASON_ANTI_AFFINITY,
        "b1": REASON_EXISTING_ANTI_AFFINITY,  # the batch pod there keeps web pods off its node
        "x": None,
    }
    # a pod the placed term does not select is welcome on b1
    other = pod_info(pod("other", "api"))
    assert plugin.mask(other, cluster) is None
    assert plugin.extra(other, cluster, 2) is None
    # required affinity is checked first, then the pod's anti-affinity, then the placed pods'
    picky = pod_info(pod("picky", "web", spec_affinity=affinity(required=[term("batch")], anti=[term("db")])))
    assert verdicts(plugin, picky, cluster) == {
        "a1": REASON_AFFINITY,
        "a2": REASON_AFFINITY,
        "b1": REASON_EXISTING_ANTI_AFFINITY,
        "x": REASON_AFFINITY,
    }
    mask = plugin.mask(picky, cluster)
    assert mask is not None
    assert plugin.reasons(picky, cluster, bytes(1 - b for b in mask)) == {
        REASON_AFFINITY: 3,
        REASON_EXISTING_ANTI_AFFINITY: 1,
    }


def test_namespaces_and_namespace_selectors():
    nodes = [node("a1", "a"), node("b1", "b")]
    placed = [pod("db", "db", on="a1", namespace="team-blue"), pod("db2", "db", on="b1")]
    cluster = cluster_of(nodes, placed)
    plugin = InterPodAffinity()

    def placed_zones(extra: Obj) -> dict[str, str | None]:
        target = pod_info(pod("w", "web", spec_affinity=affinity(required=[term("db", **extra)])))
        return verdicts(plugin, target, cluster)

    # the pod's own namespace by default: only db2 (zone b)
    assert placed_zones({}) == {"a1": REASON_AFFINITY, "b1": None}
    assert placed_zones({"namespaces": ["team-blue"]}) == {"a1": None, "b1": REASON_AFFINITY}
    # {} selects every namespace
    assert placed_zones({"namespaceSelector": {}}) == {"a1": None, "b1": None}
    # a namespace unknown to the scheduler carries its name label only
    by_name = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "team-blue"}}}
    assert placed_zones(by_name) == {"a1": None, "b1": REASON_AFFINITY}
    by_team = {"namespaceSelector": {"matchLabels": {"team": "blue"}}}
    assert placed_zones(by_team) == {"a1": REASON_AFFINITY, "b1": REASON_AFFINITY}
    cluster.set_namespace("team-blue", {"team": "blue"})
    assert placed_zones(by_team) == {"a1": None, "b1": REASON_AFFINITY}
    # a placed pod's namespaceSelector is matched against the incoming pod's namespace labels
    guard = pod(
        "guard",
        "guard",
        on="b1",
        namespace="team-blue",
        spec_affinity=affinity(
            anti=[term("web", HOSTNAME, namespaceSelector={"matchLabels": {"team": "blue"}})]
        ),
    )
    info = pod_info(guard)
    cluster.place(info, "b1")
    incoming = pod_info(pod("w", "web", namespace="team-blue"))
    assert verdicts(plugin, incoming, cluster) == {"a1": None, "b1": REASON_EXISTING_ANTI_AFFINITY}
    assert plugin.mask(pod_info(pod("w", "web")), cluster) is None  # "default" is not team blue


def test_fit_error_and_preemption_only_for_anti_affinity():
    lonely = pod("lonely", "batch", on="b1", spec_affinity=affinity(anti=[term("web", HOSTNAME)]))
    cluster = cluster_of([*NODES, node("c1", "c", cpu="1")], [pod("db", "db", on="a1"), lonely])
    framework = Framework(parse(None).profiles[0], cluster, seed=1)
    # affinity to zone a's db pod, anti-affinity to the db pod's node: a1 out (anti), b1 out
    # (affinity first), x out (no zone), c1 too small (NodeResourcesFit counts first)
    target = pod_info(
        pod("web", "web", cpu="2", spec_affinity=affinity(required=[term("db")], anti=[term("db", HOSTNAME)]))
    )
    result = framework.schedule(target)
    assert result.node == "a2"  # the only node left; now fill it
    cluster.place(pod_info(pod("hog", on="a2", cpu="3")), "a2")
    result = framework.schedule(target)
    assert result.node is None
    assert result.reasons == {
        "Insufficient cpu": 2,
        REASON_AFFINITY: 2,
        REASON_ANTI_AFFINITY: 1,
    }
    assert fit_error(5, result.reasons) == (
        "0/5 nodes are available: 1 node(s) didn't match pod anti-affinity rules, "
        "2 Insufficient cpu, 2 node(s) didn't match pod affinity rules."
    )
    assert result.message.startswith(fit_error(5, result.reasons) + " preemption: ")
    assert "InterPodAffinity" in result.rejected_by
    # eviction cannot satisfy required affinity: b1, x and c1 (short of cpu too) are not
    # helpful; a1 (anti-affinity) and a2 (cpu) are tried
    static = framework.static_mask(framework.masks(target), target)
    assert cluster.names_of(static) == {"a1", "a2"}
    assert "3 Preemption is not helpful for scheduling" in result.message
    plugin = InterPodAffinity()
    assert plugin.rejects_without(target, cluster, "a1", ()) is not None
    assert (
        plugin.rejects_without(target, cluster, "a1", {"default/db"}) is not None
    )  # no db left: affinity fails
    assert framework.explain(target)["filtered"] == {
        "a1": [REASON_ANTI_AFFINITY],
        "a2": ["Insufficient cpu"],
        "b1": [REASON_AFFINITY],
        "c1": ["Insufficient cpu"],
        "x": [REASON_AFFINITY],
    }


def test_existing_anti_affinity_lifts_once_the_pod_is_gone():
    lonely = pod("lonely", "batch", on="b1", spec_affinity=affinity(anti=[term("web", HOSTNAME)]))
    cluster = cluster_of(NODES, [lonely])
    plugin = InterPodAffinity()
    web = pod_info(pod("web", "web"))
    assert plugin.rejects_without(web, cluster, "b1", ()) is not None
    assert plugin.rejects_without(web, cluster, "b1", {"default/lonely"}) is None


# --- score -----------------------------------------------------------------------------


def scored_cluster() -> Cluster:
    nodes = [node("a1", "a"), node("a2", "a"), node("b1", "b"), node("c1", "c")]
    placed = [
        pod("db1", "db", on="a1"),
        pod("db2", "db", on="b1"),
        pod("web1", "web", on="a2", spec_affinity=affinity(preferred_anti=[weighted(5, "cache")])),
        pod("web2", "web", on="c1", spec_affinity=affinity(required=[term("cache", HOSTNAME)])),
    ]
    return cluster_of(nodes, placed)


CACHE = affinity(preferred=[weighted(10, "db")], preferred_anti=[weighted(3, "web", HOSTNAME)])


def test_score_sums_both_sides_terms_per_domain():
    cluster = scored_cluster()
    rows = [cluster.nodes[n].row for n in ("a1", "a2", "b1", "c1")]
    target = pod_info(pod("cache", "cache", spec_affinity=CACHE))
    # zone a: +10 (db1) - 5 (web1's preferred anti-affinity to cache); zone b: +10 (db2);
    # host a2: -3 (web1), host c1: -3 (web2) + 1 (web2's required affinity, hardPodAffinityWeight 1)
    # a1 5, a2 2, b1 10, c1 -2 -> 100 * (s + 2) / 12 in float64, truncated: 58, 33, 100, 0
    plugin = InterPodAffinity()
    extra = plugin.extra(target, cluster, 2)
    assert extra is not None
    assert extra.normalize == MIN_MAX
    assert twin.window_scores(extra, rows) == [58, 33, 100, 0]
    assert plugin.window_scores(target, cluster, rows) == [58, 33, 100, 0]
    # hardPodAffinityWeight 0: c1 -3 -> diff 13: 100 * 8 / 13 = 61.5, 100 * 5 / 13 = 38.5
    unweighted = InterPodAffinity(AffinityArgs(hard_pod_affinity_weight=0))
    extra = unweighted.extra(target, cluster, 2)
    assert extra is not None
    assert twin.window_scores(extra, rows) == [61, 38, 100, 0]
    assert unweighted.window_scores(target, cluster, rows) == [61, 38, 100, 0]
    # a window without b1: min -2, max 5 -> a1 100, a2 100 * 4 / 7 = 57.1, c1 0
    extra = plugin.extra(target, cluster, 2)
    assert extra is not None
    assert twin.window_scores(extra, rows[:2] + rows[3:]) == [100, 57, 0]


def test_placed_pods_terms_score_a_pod_without_terms():
    cluster = scored_cluster()
    rows = [cluster.nodes[n].row for n in ("a1", "a2", "b1", "c1")]
    plain = pod_info(pod("cache", "cache"))
    # zone a -5 (web1), host c1 +1 (web2): a1 -5, a2 -5, b1 0, c1 1 -> diff 6
    plugin = InterPodAffinity()
    extra = plugin.extra(plain, cluster, 2)
    assert extra is not None
    assert twin.window_scores(extra, rows) == [0, 0, 83, 100]
    assert plugin.window_scores(plain, cluster, rows) == [0, 0, 83, 100]
    # ignorePreferredTermsOfExistingPods: a pod without preferred terms is not scored
    ignoring = InterPodAffinity(AffinityArgs(ignore_preferred_terms_of_existing_pods=True))
    assert ignoring.extra(plain, cluster, 2) is None
    # nobody's terms match: skipped
    assert plugin.extra(pod_info(pod("api", "api")), cluster, 2) is None


def test_min_max_normalization_in_the_kernel(backend):
    """Float64 min-max as upstream: 100 * (29 / 100) = 28.999... truncates to 28, which a
    boost on that row reveals in the best total (both backends)."""
    cluster = cluster_of(
        [node("p"), node("q"), node("r")],
        [pod("pa", "a", on="p"), pod("qb", "b", on="q")],
    )
    target = pod_info(
        pod(
            "t", spec_affinity=affinity(preferred=[weighted(29, "a", HOSTNAME), weighted(100, "b", HOSTNAME)])
        )
    )
    extra = InterPodAffinity().extra(target, cluster, 1)
    assert extra is not None
    rows = [cluster.nodes[n].row for n in ("p", "q", "r")]
    assert twin.window_scores(extra, rows) == [28, 100, 0]
    table = kernel.NodeTable()  # the same rows, empty and alike: the base scores are equal
    for name in ("p", "q", "r"):
        table.set_node(name, {"cpu": 4000, "memory": 32 << 30}, 110)
    cfg = table.score_config()
    vector = table.pod_vector({"cpu": 100})
    base = kernel.find(table, vector, cfg, table.live(), 0, 3, array("Q", [5]))[3]
    boost = Extra("Boost", 1, False, [(bytes([1, 0, 0]), 1)])
    # p: 28 + 100 = 128 > q: 100
    assert kernel.find(table, vector, cfg, table.live(), 0, 3, array("Q", [5]), [extra, boost])[::3] == (
        0,
        base + 128,
    )
    # all equal in the window (q alone): 0
    only_q = bytes([0, 1, 0])
    assert kernel.find(table, vector, cfg, only_q, 0, 3, array("Q", [5]), [extra])[::3] == (1, base)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            {"hardPodAffinityWeight": 101},
            "InterPodAffinity.hardPodAffinityWeight: Invalid value: 101: not in valid range [0-100]",
        ),
        (
            {"hardPodAffinityWeight": -1},
            "InterPodAffinity.hardPodAffinityWeight: Invalid value: -1: not in valid range [0-100]",
        ),
        (
            {"hardPodAffinityWeight": "1"},
            "InterPodAffinity.hardPodAffinityWeight: Invalid value: '1': must be an integer",
        ),
        (
            {"ignorePreferredTermsOfExistingPods": "yes"},
            "InterPodAffinity.ignorePreferredTermsOfExistingPods: Invalid value: 'yes': must be a boolean",
        ),
        ({"hardPodWeight": 1}, "InterPodAffinity: unknown field(s) ['hardPodWeight']"),
    ],
    ids=["too-high", "negative", "not-int", "not-bool", "unknown"],
)
def test_args_validation_as_upstream(args, message):
    with pytest.raises(ArgsError) as err:
        affinity_args(args)
    assert str(err.value) == message


def test_args_defaults_and_config():
    assert affinity_args(None) == AffinityArgs(1, False)
    config: Obj = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [
            {
                "schedulerName": "koord-scheduler",
                "pluginConfig": [{"name": "InterPodAffinity", "args": {"hardPodAffinityWeight": 5}}],
            }
        ],
    }
    (only,) = parse(config).profiles
    assert only.args["InterPodAffinity"] == AffinityArgs(5, False)
    config["profiles"][0]["pluginConfig"][0]["args"] = {"hardPodAffinityWeight": 500}
    with pytest.raises(ConfigError) as err:
        parse(config)
    assert str(err.value) == (
        "profiles[0].pluginConfig[0].args.hardPodAffinityWeight: "
        "Invalid value: 500: not in valid range [0-100]"
    )


# --- random clusters: the fast paths against upstream's node-by-node code --------------


def random_cluster(rng: random.Random) -> tuple[Cluster, list[PodInfo]]:
    cluster = Cluster()
    for i in range(rng.randint(1, 12)):
        obj = node(f"n{i}", rng.choice(["z1", "z2", "z3", None]))
        if rng.random() < 0.7:
            obj["metadata"]["labels"]["rack"] = rng.choice(["r1", "r2", "r3"])
        cluster.set_node(obj)
    names = list(cluster.nodes)
    apps = ["a", "b", "c"]
    keys = [ZONE, HOSTNAME, "rack"]

    def terms(count: int) -> list[Obj]:
        out = []
        for _ in range(count):
            extra: Obj = {}
            if rng.random() < 0.2:
                extra["namespaces"] = [rng.choice(["default", "other"])]
            elif rng.random() < 0.2:
                extra["namespaceSelector"] = rng.choice([{}, {"matchLabels": {"team": "x"}}])
            out.append(term(rng.choice(apps), rng.choice(keys), **extra))
        return out

    def random_affinity() -> Obj:
        return affinity(
            required=terms(rng.choice([0, 0, 1, 2])),
            anti=terms(rng.choice([0, 0, 1])),
            preferred=[
                {"weight": rng.randint(1, 100), "podAffinityTerm": t} for t in terms(rng.randint(0, 2))
            ],
            preferred_anti=[
                {"weight": rng.randint(1, 100), "podAffinityTerm": t} for t in terms(rng.randint(0, 2))
            ],
        )

    if rng.random() < 0.5:
        cluster.set_namespace("other", {"team": "x"})
    for i in range(rng.randint(0, 20)):
        obj = pod(
            f"p{i}",
            rng.choice(apps),
            on=rng.choice(names),
            namespace=rng.choice(["default", "default", "other"]),
            spec_affinity=random_affinity() if rng.random() < 0.4 else None,
        )
        info = pod_info(obj)
        cluster.place(info, info.node_name)
    incoming = [
        pod_info(
            pod(
                f"in{i}",
                rng.choice(apps),
                namespace=rng.choice(["default", "other"]),
                spec_affinity=random_affinity(),
            )
        )
        for i in range(6)
    ]
    return cluster, incoming


def test_random_clusters_fast_path_equals_node_by_node():
    rng = random.Random(8)
    for _ in range(150):
        cluster, incoming = random_cluster(rng)
        plugin = InterPodAffinity(AffinityArgs(rng.randint(0, 3), rng.random() < 0.2))
        for target in incoming:
            assert_fast_paths_agree(plugin, target, cluster, rng)


# --- simulate and the live scheduler ---------------------------------------------------


def test_simulate_keeps_replicas_apart(tmp_path, capsys):
    nodes = [node("n1", "a"), node("n2", "a"), node("n3", "b")]
    apart = affinity(anti=[term("web", HOSTNAME)], preferred=[weighted(10, "db")])
    pods = [pod(f"w{i}", "web", spec_affinity=apart) for i in range(4)]
    placed = [pod("db", "db", on="n3")]
    out = run(tmp_path, capsys, nodes, pods, placed)
    # the preferred affinity to the db pod's zone b scores n3 100, n1 and n2 0
    first = out["default/w0"]
    assert {n: s["InterPodAffinity"] for n, s in first["scores"].items()} == {"n1": 0, "n2": 0, "n3": 100}
    assert first["node"] == "n3"
    placed_on = {out[f"default/w{i}"]["node"] for i in range(3)}
    assert placed_on == {"n1", "n2", "n3"}
    last = out["default/w3"]
    assert last["node"] is None
    assert last["filtered"] == {n: [REASON_ANTI_AFFINITY] for n in ("n1", "n2", "n3")}
    assert last["status"].startswith(
        "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules. preemption: "
    )


def failures(fake: FakeApiServer, name: str) -> list[str]:
    return [
        e["message"]
        for e in fake.list_objects(res.EVENTS, "default")
        if e["reason"] == "FailedScheduling" and e["involvedObject"]["name"] == name
    ]


async def test_the_live_scheduler_waits_for_the_pods_a_pod_needs_and_avoids():
    async with FakeApiServer() as fake:
        for obj in (node("n1", "a"), node("n2", "b")):
            fake.create(res.NODES, obj)
        apart = affinity(anti=[term("web", HOSTNAME)])
        async with running(fake) as scheduler:
            # a pod that needs a db pod in its zone and is none itself waits
            fake.create(res.PODS, pod("follower", "api", spec_affinity=affinity(required=[term("db")])))
            await eventually(lambda: failures(fake, "follower"))
            assert failures(fake, "follower")[0].startswith(
                "0/2 nodes are available: 2 node(s) didn't match pod affinity rules. preemption: "
            )
            # the db pod arrives and binds: its arrival moves the follower, which joins its zone
            fake.create(res.PODS, pod("db", "db"))
            await eventually(lambda: node_of(fake, "db") and node_of(fake, "follower"))
            db_zone = fake.get(res.NODES, node_of(fake, "db") or "")["metadata"]["labels"][ZONE]
            follower_zone = fake.get(res.NODES, node_of(fake, "follower") or "")["metadata"]["labels"][ZONE]
            assert follower_zone == db_zone
            # replicas that keep apart: two nodes, three replicas
            for i in range(3):
                fake.create(res.PODS, pod(f"r{i}", "web", spec_affinity=apart))
            await eventually(lambda: sum(1 for i in range(3) if node_of(fake, f"r{i}")) == 2)
            waiting = next(f"r{i}" for i in range(3) if not node_of(fake, f"r{i}"))
            await eventually(lambda: failures(fake, waiting))
            assert failures(fake, waiting)[0].startswith(
                "0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules. preemption: "
            )
            # a replica goes away: the deletion moves the waiting one, which takes its node
            gone = next(f"r{i}" for i in range(3) if node_of(fake, f"r{i}"))
            freed = node_of(fake, gone)
            fake.delete(res.PODS, gone, "default", gracePeriodSeconds=0)
            await eventually(lambda: node_of(fake, waiting) == freed)
            assert scheduler.queue.pending()["unschedulable"] == 0
