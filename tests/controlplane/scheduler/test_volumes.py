"""VolumeBinding and NodeVolumeLimits on the scheduler's storage view: bound claims and
their volumes' node affinity, WaitForFirstConsumer claims matched to available volumes or
provisioned, immediate and missing claims, the hosts of bound local volumes, CSI attach
limits per driver; upstream's reasons and FitError text, Reserve's assumptions, PreBind's
writes, ``koord-scheduler simulate``, and the live scheduler against the fake apiserver.
Every mask is checked against the per-node explanation."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest

from controlplane.scheduler.cluster import Cluster
from controlplane.scheduler.config import parse
from controlplane.scheduler.framework import Framework
from controlplane.scheduler.plugins import nodevolumelimits
from controlplane.scheduler.plugins.interface import PreFilterResult
from controlplane.scheduler.plugins.nodevolumelimits import NodeVolumeLimits
from controlplane.scheduler.podinfo import pod_info
from controlplane.scheduler.process import ProcessOptions, SchedulerProcess
from controlplane.scheduler.volumes import (
    ANN_BOUND_BY_CONTROLLER,
    ANN_SELECTED_NODE,
    ClaimRef,
    pv_record,
    pvc_record,
    storage_class_record,
)
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordinator.kube.errors import ConflictError
from tests.controlplane.scheduler.live import running
from tests.controlplane.scheduler.test_scheduler import node_of
from tests.controlplane.scheduler.test_simulate import run
from tests.polling import eventually, eventually_awaited
from testsupport.fake import FakeApiServer

Obj = dict[str, Any]
GI = 1024**3
NO_PROVISIONER = "kubernetes.io/no-provisioner"
HOSTNAME = "kubernetes.io/hostname"
BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
NODE_CONFLICT = "node(s) had volume node affinity conflict"
NOT_HELPFUL = "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.."


# --- builders ------------------------------------------------------------------------------


def node(name: str, zone: str, cpu: str = "4") -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"zone": zone, HOSTNAME: name}},
        "status": {"allocatable": {"cpu": cpu, "memory": "32Gi", "pods": "110"}},
    }


def storage_class(name: str, provisioner: str, mode: str = "WaitForFirstConsumer", **zones: Any) -> Obj:
    sc: Obj = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
        "volumeBindingMode": mode,
    }
    if zones:
        sc["allowedTopologies"] = [{"matchLabelExpressions": [{"key": "zone", "values": zones["values"]}]}]
    return sc


def affinity(key: str, *values: str) -> Obj:
    return {
        "required": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": key, "operator": "In", "values": list(values)}]}
            ]
        }
    }


def pv(
    name: str,
    size: str,
    cls: str = "local",
    *,
    zone: str | None = None,
    host: str | None = None,
    claim: str | None = None,
    phase: str = "Available",
    csi: tuple[str, str] | None = None,
    modes: tuple[str, ...] = ("ReadWriteOnce",),
) -> Obj:
    spec: Obj = {"capacity": {"storage": size}, "storageClassName": cls, "accessModes": list(modes)}
    if zone is not None:
        spec["nodeAffinity"] = affinity("zone", zone)
    if host is not None:
        spec["nodeAffinity"] = affinity(HOSTNAME, host)
    if claim is not None:
        spec["claimRef"] = {"namespace": "default", "name": claim}
    if csi is not None:
        spec["csi"] = {"driver": csi[0], "volumeHandle": csi[1]}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": spec,
        "status": {"phase": phase},
    }


def pvc(
    name: str,
    size: str = "1Gi",
    cls: str | None = "local",
    *,
    volume: str | None = None,
    owner: str | None = None,
    selected: str | None = None,
) -> Obj:
    meta: Obj = {"name": name, "namespace": "default", "uid": f"uid-{name}"}
    spec: Obj = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}
    if cls is not None:
        spec["storageClassName"] = cls
    if volume is not None:  # bound by the PV controller
        spec["volumeName"] = volume
        meta["annotations"] = {"pv.kubernetes.io/bind-completed": "yes"}
    if selected is not None:
        meta["annotations"] = {ANN_SELECTED_NODE: selected}
    if owner is not None:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": owner, "controller": True}
        ]
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta, "spec": spec}


def csi_node(name: str, **limits: int) -> Obj:
    drivers = [
        {"name": d.replace("_", "."), "nodeID": name, "allocatable": {"count": n}} for d, n in limits.items()
    ]
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSINode",
        "metadata": {"name": name},
        "spec": {"drivers": drivers},
    }


def pod(name: str = "p", *claims: str, ephemeral: str | None = None, node_name: str | None = None) -> Obj:
    volumes: list[Obj] = [
        {"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)
    ]
    if ephemeral is not None:
        volumes.append({"name": ephemeral, "ephemeral": {"volumeClaimTemplate": {"spec": {}}}})
    volumes.append({"name": "config", "configMap": {"name": "c"}})  # no claim: not counted
    spec: Obj = {
        "schedulerName": "koord-scheduler",
        "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}],
        "volumes": volumes,
    }
    if node_name is not None:
        spec["nodeName"] = node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": spec,
    }


ZONES = (("n1", "a"), ("n2", "b"), ("n3", "a"))


def cluster_with(*objects: Obj, nodes: tuple[tuple[str, str], ...] = ZONES) -> tuple[Cluster, Framework]:
    cluster = Cluster()
    for name, zone in nodes:
        cluster.set_node(node(name, zone))
    for obj in objects:
        if obj["kind"] == "Pod":
            info = pod_info(obj)
            cluster.place(info, info.node_name)
        else:
            assert cluster.volumes.add_object(obj)
    return cluster, Framework(parse(None).profiles[0], cluster, seed=1)


def feasible(framework: Framework, obj: Obj) -> tuple[set[str], dict[str, list[str]]]:
    """The nodes the filters pass and why the others fail; the masks and the per-node
    explanation agree."""
    info = pod_info(obj)
    explained = framework.explain(info)
    passing = framework.cluster.names_of(framework.candidates(info))
    assert passing == set(framework.cluster.nodes) - set(explained["filtered"])
    return passing, explained["filtered"]


def without(name: str) -> Any:
    """The default profile less one plug-in."""
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [
            {"schedulerName": "koord-scheduler", "plugins": {"multiPoint": {"disabled": [{"name": name}]}}}
        ],
    }
    return parse(config).profiles[0]


def plugin(framework: Framework, name: str) -> Any:
    return next(p for p in framework.filters if name == p.NAME)


# --- records -------------------------------------------------------------------------------


def test_records_keep_what_the_plugins_read():
    volume = pv_record(
        {**pv("v", "10Gi", zone="a", claim="c"), "metadata": {"name": "v", "resourceVersion": "7"}}
    )
    assert (volume.name, volume.resource_version, volume.storage_class, volume.capacity) == (
        "v",
        "7",
        "local",
        10 * GI * 10**9,
    )
    assert volume.claim_ref == ClaimRef("default", "c", "")
    assert volume.volume_mode == "Filesystem"
    assert volume.phase == "Available"
    # the beta annotation names the class before spec.storageClassName, as upstream reads it
    claim = pvc("c", "3Gi")
    claim["metadata"]["annotations"] = {"volume.beta.kubernetes.io/storage-class": "beta"}
    record = pvc_record(claim)
    assert (record.key, record.storage_class, record.request) == ("default/c", "beta", 3 * GI * 10**9)
    assert not record.fully_bound
    assert record.selected_node is None
    assert pvc_record(pvc("b", volume="v")).fully_bound
    # a claim naming its volume without bind-completed is pre-bound, not bound
    prebound = pvc("b")
    prebound["spec"]["volumeName"] = "v"
    assert not pvc_record(prebound).fully_bound
    sc = storage_class_record({"metadata": {"name": "s"}, "provisioner": "p"})
    assert sc.binding_mode == "Immediate"  # the apiserver's default


# --- VolumeBinding ---------------------------------------------------------------------------


def test_a_bound_claim_needs_its_volume_reachable_from_the_node():
    sc = storage_class("local", NO_PROVISIONER)
    _, framework = cluster_with(sc, pv("in-a", "10Gi", zone="a", claim="data"), pvc("data", volume="in-a"))
    assert feasible(framework, pod("p", "data")) == ({"n1", "n3"}, {"n2": [NODE_CONFLICT]})
    # no node reaches it: upstream's FitError, and preemption cannot help
    _, framework = cluster_with(sc, pv("in-c", "10Gi", zone="c", claim="data"), pvc("data", volume="in-c"))
    result = framework.schedule(pod_info(pod("p", "data")))
    assert result.node is None
    assert result.message == f"0/3 nodes are available: 3 {NODE_CONFLICT}. {NOT_HELPFUL}"
    assert result.rejected_by == {"VolumeBinding"}
    # a bound claim whose volume is gone
    _, framework = cluster_with(sc, pvc("data", volume="gone"))
    result = framework.schedule(pod_info(pod("p", "data")))
    assert result.message == (
        "0/3 nodes are available: 3 node(s) unavailable due to one or more pvc(s) bound to "
        f"non-existent pv(s). {NOT_HELPFUL}"
    )


def test_a_bound_local_volume_narrows_the_nodes_to_its_host():
    sc = storage_class("local", NO_PROVISIONER)
    _, framework = cluster_with(sc, pv("disk", "10Gi", host="n2", claim="data"), pvc("data", volume="disk"))
    elsewhere = "node(s) didn't satisfy plugin(s) [VolumeBinding]"
    assert feasible(framework, pod("p", "data")) == ({"n2"}, {"n1": [elsewhere], "n3": [elsewhere]})
    vb = plugin(framework, "VolumeBinding")
    pre = vb.pre_filter(pod_info(pod("p", "data")), framework.cluster)
    assert pre == PreFilterResult(rows=1 << framework.cluster.nodes["n2"].row)
    # a host that is too small: it says why; the others are outside the volume's hosts
    cluster = Cluster()
    for name, zone, cpu in (("n1", "a", "4"), ("n2", "b", "500m"), ("n3", "a", "4")):
        cluster.set_node(node(name, zone, cpu))
    for obj in (sc, pv("disk", "10Gi", host="n2", claim="data"), pvc("data", volume="disk")):
        cluster.volumes.add_object(obj)
    result = Framework(parse(None).profiles[0], cluster, seed=1).schedule(pod_info(pod("p", "data")))
    assert result.message.startswith(
        f"0/3 nodes are available: 1 Insufficient cpu, 2 {elsewhere}. preemption: "
    )


def test_claims_the_pod_cannot_be_scheduled_with():
    sc = storage_class("local", NO_PROVISIONER)
    immediate = storage_class("fast", "csi.example.com", mode="Immediate")
    cases = [
        ((sc,), pod("p", "missing"), 'persistentvolumeclaim "missing" not found'),
        (
            (immediate, pvc("data", cls="fast")),
            pod("p", "data"),
            "pod has unbound immediate PersistentVolumeClaims",
        ),
        # no class at all: the PV controller binds it, so it counts as immediate
        ((pvc("data", cls=None),), pod("p", "data"), "pod has unbound immediate PersistentVolumeClaims"),
        (
            (sc,),
            pod("p", ephemeral="scratch"),
            'waiting for ephemeral volume controller to create the persistentvolumeclaim "p-scratch"',
        ),
        (
            (sc, pvc("p-scratch", owner="someone-else")),
            pod("p", ephemeral="scratch"),
            "PVC default/p-scratch was not created for pod default/p (pod is not owner)",
        ),
    ]
    for objects, obj, message in cases:
        cluster, framework = cluster_with(*objects)
        vb = plugin(framework, "VolumeBinding")
        assert vb.pre_filter(pod_info(obj), cluster) == PreFilterResult(message=message)
        # upstream's FitError with a PreFilter message: the message alone, no node counts,
        # even where NodeVolumeLimits (a filter) would have named the claim its own way
        result = framework.schedule(pod_info(obj))
        assert result.node is None
        assert result.message == f"0/3 nodes are available: {message}. {NOT_HELPFUL}"
        assert result.rejected_by == frozenset({"VolumeBinding"})
        # each node, as VolumeBinding alone says it (NodeVolumeLimits, before it in filter
        # order, would name a missing claim its own way)
        alone = Framework(without("NodeVolumeLimits"), cluster, seed=1)
        assert feasible(alone, obj) == (set(), {n: [message] for n in ("n1", "n2", "n3")})
    # the ephemeral claim the pod controls is an ordinary claim
    _, framework = cluster_with(sc, pv("v", "5Gi"), pvc("p-scratch", owner="uid-p"))
    assert feasible(framework, pod("p", ephemeral="scratch"))[0] == {"n1", "n2", "n3"}
    # a pod without claims is skipped
    cluster, framework = cluster_with(sc)
    assert plugin(framework, "VolumeBinding").mask(pod_info(pod("p")), cluster) is None


def test_waiting_claims_take_the_smallest_volume_left_on_each_node():
    sc = storage_class("local", NO_PROVISIONER)
    volumes = (pv("a5", "5Gi", zone="a"), pv("a10", "10Gi", zone="a"), pv("b10", "10Gi", zone="b"))
    # smallest claim first: on zone a 4Gi takes a5 and 8Gi a10; on zone b 4Gi takes b10 and
    # 8Gi finds nothing left, and the class cannot provision
    _, framework = cluster_with(sc, *volumes, pvc("small", "4Gi"), pvc("large", "8Gi"))
    assert feasible(framework, pod("p", "large", "small")) == ({"n1", "n3"}, {"n2": [BIND_CONFLICT]})
    # two claims, one volume per zone a node: the second finds the first's taken
    _, framework = cluster_with(sc, pv("a5", "5Gi", zone="a"), pvc("x", "4Gi"), pvc("y", "4Gi"))
    passing, filtered = feasible(framework, pod("p", "x", "y"))
    assert passing == set()
    assert filtered == {n: [BIND_CONFLICT] for n in ("n1", "n2", "n3")}
    # what rules a volume out: too small, another class, another claim's, not Available,
    # access modes it lacks, another volume mode, a selector it fails
    claim = pvc("c", "4Gi")
    claim["spec"]["selector"] = {"matchLabels": {"tier": "gold"}}
    claim["spec"]["accessModes"] = ["ReadWriteOnce", "ReadOnlyMany"]
    gold = pv("gold", "5Gi", zone="b", modes=("ReadWriteOnce", "ReadOnlyMany"))
    gold["metadata"]["labels"] = {"tier": "gold"}
    block = pv("block", "5Gi", zone="a", modes=("ReadWriteOnce", "ReadOnlyMany"))
    block["spec"]["volumeMode"] = "Block"
    block["metadata"]["labels"] = {"tier": "gold"}
    others = [
        pv("tiny", "1Gi", zone="a"),
        pv("other-class", "5Gi", cls="other", zone="a"),
        pv("taken", "5Gi", zone="a", claim="someone"),
        pv("released", "5Gi", zone="a", phase="Released"),
        pv("rwo-only", "5Gi", zone="a"),
        block,
    ]
    _, framework = cluster_with(sc, gold, *others, claim)
    assert feasible(framework, pod("p", "c"))[0] == {"n2"}
    # a volume pre-bound to the claim wins outright, and only where it is reachable
    _, framework = cluster_with(
        sc, pv("mine", "50Gi", zone="b", claim="c"), pv("a5", "5Gi", zone="a"), pvc("c", "4Gi")
    )
    assert feasible(framework, pod("p", "c")) == ({"n2"}, {"n1": [BIND_CONFLICT], "n3": [BIND_CONFLICT]})


def test_claims_left_without_a_volume_are_provisioned_where_the_class_allows():
    zoned = storage_class("zonal", "csi.example.com", values=["b"])
    _, framework = cluster_with(zoned, pvc("c", "4Gi", cls="zonal"))
    assert feasible(framework, pod("p", "c")) == ({"n2"}, {"n1": [BIND_CONFLICT], "n3": [BIND_CONFLICT]})
    # a claim the scheduler already chose a node for stays there
    anywhere = storage_class("any", "csi.example.com")
    _, framework = cluster_with(anywhere, pvc("c", cls="any", selected="n3"))
    assert feasible(framework, pod("p", "c")) == ({"n3"}, {"n1": [BIND_CONFLICT], "n2": [BIND_CONFLICT]})
    # a bound claim elsewhere and a waiting one: a node can fail for both
    both = cluster_with(
        anywhere,
        storage_class("local", NO_PROVISIONER),
        pv("in-b", "1Gi", zone="b", claim="bound"),
        pvc("bound", volume="in-b"),
        pvc("c", cls="any", selected="n1"),
    )[1]
    passing, filtered = feasible(both, pod("p", "bound", "c"))
    assert passing == set()
    assert filtered == {
        "n1": [NODE_CONFLICT],
        "n2": [BIND_CONFLICT],
        "n3": [f"{NODE_CONFLICT}, {BIND_CONFLICT}"],
    }
    result = both.schedule(pod_info(pod("p", "bound", "c")))
    assert result.message == f"0/3 nodes are available: 2 {BIND_CONFLICT}, 2 {NODE_CONFLICT}. {NOT_HELPFUL}"


def test_reserve_assumes_the_choice_for_the_next_pods_and_unreserve_drops_it():
    sc = storage_class("local", NO_PROVISIONER)
    provisioned = storage_class("any", "csi.example.com")
    cluster, framework = cluster_with(
        sc,
        provisioned,
        pv("a5", "5Gi", zone="a"),
        pvc("first", "4Gi"),
        pvc("second", "4Gi"),
        pvc("new", cls="any"),
    )
    vb = plugin(framework, "VolumeBinding")
    first = pod_info(pod("p1", "first", "new"))
    assert framework.schedule(first).node in {"n1", "n3"}
    assert vb.reserve({}, first, "n3") is None
    assumed = cluster.volumes.pv("a5")
    assert assumed is not None
    assert assumed.claim_ref == ClaimRef("default", "first", "uid-first")
    assert assumed.bound_by_controller
    assert cluster.volumes.pvc("default/new").selected_node == "n3"  # type: ignore[union-attr]
    # the volume is taken for the next claim; the claim to provision is pinned to n3
    assert feasible(framework, pod("p2", "second"))[0] == set()
    assert feasible(framework, pod("p3", "new"))[0] == {"n3"}
    vb.unreserve({}, first, "n3")
    assert cluster.volumes.pv("a5").claim_ref is None  # type: ignore[union-attr]
    assert feasible(framework, pod("p2", "second"))[0] == {"n1", "n3"}
    # the informer's next word replaces an assumption
    assert vb.reserve({}, first, "n1") is None
    cluster.volumes.set_pv(pv_record(pv("a5", "5Gi", zone="a")))
    assert cluster.volumes.pv("a5").claim_ref is None  # type: ignore[union-attr]


class RecordingClient:
    """Records PreBind's patches; fails the ones named in ``fail``."""

    def __init__(self, fail: str = "") -> None:
        self.patches: list[tuple[str, str, Obj, str | None]] = []
        self.fail = fail

    async def patch(self, resource: Any, name: str, body: Obj, namespace: str | None = None, **_: Any) -> Obj:
        if name == self.fail:
            raise ConflictError(
                {"code": 409, "reason": "Conflict", "message": "the object has been modified"}
            )
        self.patches.append((resource.plural, name, body, namespace))
        return body


def test_pre_bind_writes_the_claim_references_then_the_selected_nodes():
    sc = storage_class("local", NO_PROVISIONER)
    provisioned = storage_class("any", "csi.example.com")
    volume = pv("a5", "5Gi", zone="a")
    volume["metadata"]["resourceVersion"] = "11"
    new = pvc("new", cls="any")
    new["metadata"]["resourceVersion"] = "12"
    claim = pvc("first", "4Gi")
    claim["metadata"]["resourceVersion"] = "13"
    cluster, framework = cluster_with(sc, provisioned, volume, claim, new)
    vb = plugin(framework, "VolumeBinding")
    first = pod_info(pod("p1", "first", "new"))
    framework.schedule(first)
    assert vb.reserve({}, first, "n1") is None
    client = RecordingClient()
    asyncio.run(vb.pre_bind(client, first, "n1"))
    assert client.patches == [
        (
            "persistentvolumes",
            "a5",
            {
                "metadata": {"resourceVersion": "11", "annotations": {ANN_BOUND_BY_CONTROLLER: "yes"}},
                "spec": {
                    "claimRef": {
                        "kind": "PersistentVolumeClaim",
                        "apiVersion": "v1",
                        "namespace": "default",
                        "name": "first",
                        "uid": "uid-first",
                        "resourceVersion": "13",
                    }
                },
            },
            None,
        ),
        (
            "persistentvolumeclaims",
            "new",
            {"metadata": {"resourceVersion": "12", "annotations": {ANN_SELECTED_NODE: "n1"}}},
            "default",
        ),
    ]
    # a conflict stops it: what was not written is no longer assumed, and the error rises
    assert vb.reserve({}, first, "n1") is None
    with pytest.raises(ConflictError):
        asyncio.run(vb.pre_bind(RecordingClient(fail="new"), first, "n1"))
    assert cluster.volumes.pvc("default/new").selected_node is None  # type: ignore[union-attr]
    # every claim bound: nothing to reserve or write
    _, framework = cluster_with(sc, pv("b", "1Gi", claim="done"), pvc("done", volume="b"))
    vb = plugin(framework, "VolumeBinding")
    done = pod_info(pod("p", "done"))
    framework.schedule(done)
    assert vb.reserve({}, done, "n1") is None
    client = RecordingClient()
    asyncio.run(vb.pre_bind(client, done, "n1"))
    assert client.patches == []


# --- NodeVolumeLimits --------------------------------------------------------------------------


EBS = "ebs.csi.aws.com"
EXCEEDS = "node(s) exceed max volume count"


def attached_world(*extra: Obj) -> tuple[Cluster, Framework]:
    """n1 allows 2 EBS volumes and has 1 attached; n2 allows 1 and has 1; n3 has no CSINode."""
    sc = storage_class("ebs", EBS)
    objects = [sc, csi_node("n1", ebs_csi_aws_com=2), csi_node("n2", ebs_csi_aws_com=1)]
    for name in ("v1", "v2", "v3"):
        objects += [
            pv(name, "1Gi", cls="ebs", claim=name, csi=(EBS, f"vol-{name}")),
            pvc(name, cls="ebs", volume=name),
        ]
    objects += [pod("on-n1", "v1", node_name="n1"), pod("on-n2", "v2", node_name="n2"), *extra]
    return cluster_with(*objects)


def test_attach_limits_per_driver_count_each_volume_once():
    cluster, framework = attached_world()
    assert feasible(framework, pod("p", "v3")) == ({"n1", "n3"}, {"n2": [EXCEEDS]})
    # a volume already attached to n2 takes no new slot there
    assert feasible(framework, pod("p", "v2"))[0] == {"n1", "n2", "n3"}
    # two new volumes: n1 has one slot left
    cluster.volumes.add_object(pv("v4", "1Gi", cls="ebs", claim="v4", csi=(EBS, "vol-v4")))
    cluster.volumes.add_object(pvc("v4", cls="ebs", volume="v4"))
    assert feasible(framework, pod("p", "v3", "v4")) == ({"n3"}, {"n1": [EXCEEDS], "n2": [EXCEEDS]})
    # a claim used twice, and by two pods on the node, is one volume
    cluster.place(pod_info(pod("again", "v1", "v1", node_name="n1")), "n1")
    assert feasible(framework, pod("p", "v3"))[0] == {"n1", "n3"}
    # the pod on n2 goes: its slot is free again
    cluster.unplace("default/on-n2")
    assert feasible(framework, pod("p", "v3"))[0] == {"n1", "n2", "n3"}
    # preemption is not offered for it here
    cluster.place(pod_info(pod("on-n2", "v2", node_name="n2")), "n2")
    vl = plugin(framework, "NodeVolumeLimits")
    assert isinstance(vl, NodeVolumeLimits)
    assert not vl.PREEMPTION_HELPS


def test_unbound_claims_count_as_volumes_of_their_class_provisioner():
    cluster, framework = attached_world(pvc("fresh", cls="ebs"))
    assert feasible(framework, pod("p", "fresh")) == ({"n1", "n3"}, {"n2": [EXCEEDS]})
    # placed with an unbound claim on n1, it fills n1; bound later, it stays one volume
    cluster.place(pod_info(pod("user", "fresh", node_name="n1")), "n1")
    assert feasible(framework, pod("p", "v3"))[0] == {"n3"}
    cluster.volumes.add_object(pv("fresh-pv", "1Gi", cls="ebs", claim="fresh", csi=(EBS, "vol-fresh")))
    cluster.volumes.add_object(pvc("fresh", cls="ebs", volume="fresh-pv"))
    assert feasible(framework, pod("p", "v3"))[0] == {"n3"}
    assert set(cluster.volumes.attached("n1", EBS)) == {f"{EBS}/vol-v1", f"{EBS}/vol-fresh"}
    # a raised limit lets it in
    cluster.volumes.add_object(csi_node("n1", ebs_csi_aws_com=3))
    assert feasible(framework, pod("p", "v3"))[0] == {"n1", "n3"}


def test_a_missing_claim_fails_every_node_with_upstreams_lookup_text():
    # upstream's VolumeBinding PreFilter reports it first: NodeVolumeLimits alone
    cluster, _ = attached_world()
    framework = Framework(without("VolumeBinding"), cluster, seed=1)
    message = 'looking up PVC default/nope: persistentvolumeclaim "nope" not found'
    assert feasible(framework, pod("p", "nope")) == (set(), {n: [message] for n in ("n1", "n2", "n3")})
    result = framework.schedule(pod_info(pod("p", "nope")))
    assert result.message == f"0/3 nodes are available: 3 {message}. {NOT_HELPFUL}"
    assert nodevolumelimits.NAME in result.rejected_by


# --- koord-scheduler simulate -----------------------------------------------------------------


def test_simulate_binds_each_local_volume_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    nodes = [node("n1", "a"), node("n2", "b")]
    objects = [
        storage_class("local", NO_PROVISIONER),
        pv("disk-1", "10Gi", host="n1"),
        pv("disk-2", "10Gi", host="n2"),
        *(pvc(name, "5Gi") for name in ("c1", "c2", "c3")),
    ]
    pods = [pod("p1", "c1"), pod("p2", "c2"), pod("p3", "c3")]
    out = run(tmp_path, capsys, nodes, pods, objects)
    first, second = out["default/p1"]["node"], out["default/p2"]["node"]
    assert {first, second} == {"n1", "n2"}  # each local volume went to one claim
    assert out["default/p2"]["filtered"] == {first: [BIND_CONFLICT]}
    assert out["default/p3"]["node"] is None
    assert out["default/p3"]["status"] == (
        f"0/2 nodes are available: 2 {BIND_CONFLICT}. "
        "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.."
    )


# --- the live scheduler -------------------------------------------------------------------------


async def test_the_scheduler_binds_volumes_and_waits_for_immediate_claims():
    async with FakeApiServer() as fake:
        fake.create(res.NODES, node("n1", "a"))
        fake.create(res.NODES, node("n2", "b"))
        for obj, resource in (
            (storage_class("local", NO_PROVISIONER), res.STORAGE_CLASSES),
            (storage_class("zonal", "csi.example.com", values=["b"]), res.STORAGE_CLASSES),
            (storage_class("fast", "csi.example.com", mode="Immediate"), res.STORAGE_CLASSES),
            (pv("disk", "10Gi", zone="a"), res.PERSISTENT_VOLUMES),
            (pvc("static", "5Gi"), res.PERSISTENT_VOLUME_CLAIMS),
            (pvc("dynamic", cls="zonal"), res.PERSISTENT_VOLUME_CLAIMS),
            (pvc("later", cls="fast"), res.PERSISTENT_VOLUME_CLAIMS),
        ):
            fake.create(resource, obj)
        fake.create(res.PODS, pod("uses-static", "static"))
        fake.create(res.PODS, pod("uses-dynamic", "dynamic"))
        fake.create(res.PODS, pod("waits", "later"))
        async with running(fake) as scheduler:
            # the static volume is only reachable from zone a: bound there, pre-bound to its claim
            await eventually(lambda: node_of(fake, "uses-static") == "n1")
            claim_ref = fake.get(res.PERSISTENT_VOLUMES, "disk")["spec"]["claimRef"]
            assert (claim_ref["name"], claim_ref["uid"]) == (
                "static",
                fake.get(res.PERSISTENT_VOLUME_CLAIMS, "static", "default")["metadata"]["uid"],
            )
            assert fake.get(res.PERSISTENT_VOLUMES, "disk")["metadata"]["annotations"] == {
                ANN_BOUND_BY_CONTROLLER: "yes"
            }
            # the class provisions in zone b only: the claim names the node it was bound to
            await eventually(lambda: node_of(fake, "uses-dynamic") == "n2")
            dynamic = fake.get(res.PERSISTENT_VOLUME_CLAIMS, "dynamic", "default")
            assert dynamic["metadata"]["annotations"] == {ANN_SELECTED_NODE: "n2"}
            # an unbound immediate claim: unschedulable until the PV controller binds it
            await eventually(lambda: scheduler.queue.pending()["unschedulable"] == 1)
            assert node_of(fake, "waits") is None
            fake.create(
                res.PERSISTENT_VOLUMES, pv("fast-pv", "1Gi", cls="fast", claim="later", phase="Bound")
            )
            bound = fake.get(res.PERSISTENT_VOLUME_CLAIMS, "later", "default")
            bound["spec"]["volumeName"] = "fast-pv"
            bound["metadata"]["annotations"] = {"pv.kubernetes.io/bind-completed": "yes"}
            fake.update(res.PERSISTENT_VOLUME_CLAIMS, bound)
            await eventually(lambda: node_of(fake, "waits") is not None)
            assert scheduler.bind_failures == 0


# --- a real kube-apiserver (envtest) -----------------------------------------------------------


async def test_pre_bind_writes_are_accepted_by_a_real_apiserver(
    envtest_client: ApiClient, envtest_namespace: str
):
    """The claim reference and the selected-node annotation as merge patches conditional on
    the resourceVersion, on upstream's validation (no PV controller runs here: the test marks
    the volume Available as it would)."""
    client, ns, tag = envtest_client, envtest_namespace, uuid.uuid4().hex[:6]
    zone = "topology.kubernetes.io/zone"
    created = await client.create(
        res.NODES,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": f"vol-{tag}", "labels": {"test-tag": tag, zone: f"z-{tag}"}},
        },
    )
    created["status"] = {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}
    created["status"]["capacity"] = created["status"]["allocatable"]
    created = await client.replace(res.NODES, created, subresource="status")
    created["spec"]["taints"] = []  # the lifecycle controller's not-ready taint
    await client.replace(res.NODES, created)
    await client.create(res.STORAGE_CLASSES, storage_class(f"local-{tag}", NO_PROVISIONER))
    await client.create(res.STORAGE_CLASSES, storage_class(f"dyn-{tag}", "csi.example.com"))
    volume = pv(f"disk-{tag}", "10Gi", cls=f"local-{tag}", csi=("csi.example.com", f"h-{tag}"))
    volume["spec"]["nodeAffinity"] = affinity(zone, f"z-{tag}")
    volume = await client.create(res.PERSISTENT_VOLUMES, volume)
    volume["status"] = {"phase": "Available"}
    await client.replace(res.PERSISTENT_VOLUMES, volume, subresource="status")
    for name, cls in (("static", f"local-{tag}"), ("dynamic", f"dyn-{tag}")):
        claim = pvc(name, "1Gi", cls=cls)
        claim["metadata"] = {"name": name, "namespace": ns}
        await client.create(res.PERSISTENT_VOLUME_CLAIMS, claim, ns)
    body = pod("p", "static", "dynamic")
    body["metadata"] = {"name": "p", "namespace": ns}
    body["spec"]["nodeSelector"] = {"test-tag": tag}
    process = SchedulerProcess(client, parse(None), ProcessOptions(leader_elect=False, secure_port=0))
    task = asyncio.create_task(process.run())
    try:
        await client.create(res.PODS, body, ns)

        async def bound() -> bool:
            placed: str | None = (await client.get(res.PODS, "p", ns))["spec"].get("nodeName")
            return placed == f"vol-{tag}"

        await eventually_awaited(bound, 30)
        disk = await client.get(res.PERSISTENT_VOLUMES, f"disk-{tag}")
        static = await client.get(res.PERSISTENT_VOLUME_CLAIMS, "static", ns)
        ref = disk["spec"]["claimRef"]
        assert (ref["namespace"], ref["name"], ref["uid"]) == (ns, "static", static["metadata"]["uid"])
        assert disk["metadata"]["annotations"][ANN_BOUND_BY_CONTROLLER] == "yes"
        dynamic = await client.get(res.PERSISTENT_VOLUME_CLAIMS, "dynamic", ns)
        assert dynamic["metadata"]["annotations"][ANN_SELECTED_NODE] == f"vol-{tag}"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await process.stop()
        await client.delete(res.PERSISTENT_VOLUMES, f"disk-{tag}")
        for cls in (f"local-{tag}", f"dyn-{tag}"):
            await client.delete(res.STORAGE_CLASSES, cls)
