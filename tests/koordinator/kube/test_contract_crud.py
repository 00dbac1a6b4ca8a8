"""Contract: create, read, list, update and delete behave the same on the fake and a real apiserver."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from koordinator.api.selectors import field_selector
from koordinator.kube import resources as res
from koordinator.kube.client import Preconditions, PropagationPolicy
from koordinator.kube.errors import (
    AlreadyExistsError,
    BadRequestError,
    ConflictError,
    ForbiddenError,
    InvalidError,
    NotFoundError,
)
from tests.koordinator.kube.builders import config_map, node, pod, widget
from tests.koordinator.kube.conftest import WIDGETS, Backend


async def test_create_fills_system_metadata(backend: Backend):
    created = await backend.client.create(res.CONFIG_MAPS, config_map("c", backend.namespace, {"a": "1"}))
    meta = created["metadata"]
    assert meta["uid"]
    assert meta["resourceVersion"]
    assert meta["creationTimestamp"].endswith("Z")
    assert "generation" not in meta
    assert created["data"] == {"a": "1"}
    fetched = await backend.client.get(res.CONFIG_MAPS, "c", backend.namespace)
    assert fetched["metadata"]["uid"] == meta["uid"]
    assert fetched["metadata"]["resourceVersion"] == meta["resourceVersion"]


async def test_pod_create_is_defaulted_like_the_apiserver(backend: Backend):
    created = await backend.client.create(res.PODS, pod("p", backend.namespace))
    spec, container = created["spec"], created["spec"]["containers"][0]
    assert created["metadata"]["generation"] == 1
    assert (spec["restartPolicy"], spec["dnsPolicy"], spec["schedulerName"]) == (
        "Always",
        "ClusterFirst",
        "default-scheduler",
    )
    assert spec["terminationGracePeriodSeconds"] == 30
    assert spec["priority"] == 0
    assert container["imagePullPolicy"] == "IfNotPresent"
    assert container["terminationMessagePath"] == "/dev/termination-log"
    assert {t["key"] for t in spec["tolerations"]} == {
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    }
    assert created["status"] == {"phase": "Pending", "qosClass": "BestEffort"}


@pytest.mark.parametrize(
    ("resources", "qos"),
    [
        pytest.param({"limits": {"cpu": "1", "memory": "1Gi"}}, "Guaranteed", id="limits-only-guaranteed"),
        pytest.param({"requests": {"cpu": "500m"}}, "Burstable", id="requests-burstable"),
        pytest.param({}, "BestEffort", id="none-besteffort"),
    ],
)
async def test_pod_qos_class(backend: Backend, resources, qos):
    body = pod("q", backend.namespace)
    body["spec"]["containers"][0]["resources"] = resources
    created = await backend.client.create(res.PODS, body)
    assert created["status"]["qosClass"] == qos


async def test_generate_name(backend: Backend):
    body = config_map("", backend.namespace)
    body["metadata"] = {"generateName": "gen-", "namespace": backend.namespace}
    created = await backend.client.create(res.CONFIG_MAPS, body)
    name = created["metadata"]["name"]
    assert name.startswith("gen-")
    assert len(name) == len("gen-") + 5


async def test_create_twice_is_already_exists(backend: Backend):
    await backend.client.create(res.CONFIG_MAPS, config_map("dup", backend.namespace))
    with pytest.raises(AlreadyExistsError) as info:
        await backend.client.create(res.CONFIG_MAPS, config_map("dup", backend.namespace))
    assert info.value.code == 409
    assert info.value.message == 'configmaps "dup" already exists'


async def test_missing_object_is_not_found(backend: Backend):
    with pytest.raises(NotFoundError) as info:
        await backend.client.get(WIDGETS, "nope", backend.namespace)
    assert info.value.message == 'widgets.contract.koordinator.sh "nope" not found'
    assert info.value.details["name"] == "nope"


@pytest.mark.parametrize(
    ("body_fn", "fields"),
    [
        pytest.param(
            lambda ns: {"metadata": {"name": "bad", "namespace": ns}, "spec": {}},
            ["spec.containers"],
            id="no-containers",
        ),
        pytest.param(lambda ns: pod("", ns), ["metadata.name"], id="no-name"),
        pytest.param(lambda ns: pod("Bad_Name", ns), ["metadata.name"], id="bad-name"),
        pytest.param(
            lambda ns: {"metadata": {"name": "x", "namespace": ns}, "spec": {"containers": [{"name": "c"}]}},
            ["spec.containers[0].image"],
            id="no-image",
        ),
    ],
)
async def test_invalid_pod_is_rejected_with_causes(backend: Backend, body_fn, fields):
    with pytest.raises(InvalidError) as info:
        await backend.client.create(res.PODS, body_fn(backend.namespace))
    assert info.value.code == 422
    assert [c.field for c in info.value.causes] == fields
    assert info.value.causes[0].reason in ("FieldValueRequired", "FieldValueInvalid")


async def test_namespace_mismatch_is_bad_request(backend: Backend):
    body = config_map("m", "somewhere-else")
    with pytest.raises(BadRequestError):
        await backend.client._call(
            "POST", res.CONFIG_MAPS.path(backend.namespace), body=body, idempotent=False
        )


async def test_create_in_missing_namespace_is_not_found(backend: Backend):
    with pytest.raises(NotFoundError) as info:
        await backend.client.create(res.CONFIG_MAPS, config_map("x", f"missing-{uuid.uuid4().hex[:6]}"))
    assert info.value.details["kind"] == "namespaces"


async def test_create_in_terminating_namespace_is_forbidden(backend: Backend):
    namespace = await backend.new_namespace()
    deleted = await backend.client.delete(res.NAMESPACES, namespace)
    assert deleted["status"]["phase"] == "Terminating"
    with pytest.raises(ForbiddenError) as info:
        await backend.client.create(res.CONFIG_MAPS, config_map("x", namespace))
    assert [c.reason for c in info.value.causes] == ["NamespaceTerminating"]


async def test_stale_update_conflicts(backend: Backend):
    created = await backend.client.create(res.CONFIG_MAPS, config_map("c", backend.namespace, {"v": "1"}))
    first = {**created, "data": {"v": "2"}}
    updated = await backend.client.replace(res.CONFIG_MAPS, first)
    assert int(updated["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    stale = {**created, "data": {"v": "3"}}
    with pytest.raises(ConflictError) as info:
        await backend.client.replace(res.CONFIG_MAPS, stale)
    assert info.value.reason == "Conflict"
    assert "the object has been modified" in info.value.message
    assert (await backend.client.get(res.CONFIG_MAPS, "c", backend.namespace))["data"] == {"v": "2"}


async def test_update_without_resource_version(backend: Backend):
    await backend.client.create(res.CONFIG_MAPS, config_map("c", backend.namespace))
    body = config_map("c", backend.namespace, {"k": "v"})
    assert (await backend.client.replace(res.CONFIG_MAPS, body))["data"] == {"k": "v"}
    await backend.client.create(WIDGETS, widget("w", backend.namespace, size=1))
    with pytest.raises(InvalidError) as info:
        await backend.client.replace(WIDGETS, widget("w", backend.namespace, size=2))
    assert [c.field for c in info.value.causes] == ["metadata.resourceVersion"]


async def test_noop_update_keeps_resource_version(backend: Backend):
    created = await backend.client.create(res.CONFIG_MAPS, config_map("c", backend.namespace, {"a": "1"}))
    again = await backend.client.replace(res.CONFIG_MAPS, created)
    assert again["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


async def test_update_of_missing_object_is_not_found(backend: Backend):
    with pytest.raises(NotFoundError):
        await backend.client.replace(res.CONFIG_MAPS, config_map("ghost", backend.namespace))


async def test_pod_spec_is_immutable(backend: Backend):
    created = await backend.client.create(res.PODS, pod("p", backend.namespace))
    changed = {**created, "spec": {**created["spec"], "restartPolicy": "Never"}}
    with pytest.raises(InvalidError) as info:
        await backend.client.replace(res.PODS, changed)
    assert info.value.causes[0].field == "spec"
    image = {
        **created,
        "spec": {
            **created["spec"],
            "containers": [{**created["spec"]["containers"][0], "image": "registry.example/app:2.0"}],
        },
    }
    assert (await backend.client.replace(res.PODS, image))["spec"]["containers"][0][
        "image"
    ] == "registry.example/app:2.0"


async def test_list_pages_are_consistent(backend: Backend):
    for i in range(7):
        await backend.client.create(res.CONFIG_MAPS, config_map(f"c{i}", backend.namespace))
    first = await backend.client.list(res.CONFIG_MAPS, backend.namespace, limit=3)
    assert [i["metadata"]["name"] for i in first["items"]] == ["c0", "c1", "c2"]
    assert first["metadata"]["remainingItemCount"] == 4
    await backend.client.create(res.CONFIG_MAPS, config_map("c10", backend.namespace))
    second = await backend.client.list(
        res.CONFIG_MAPS, backend.namespace, limit=3, continue_token=first["metadata"]["continue"]
    )
    third = await backend.client.list(
        res.CONFIG_MAPS, backend.namespace, limit=3, continue_token=second["metadata"]["continue"]
    )
    names = [i["metadata"]["name"] for page in (first, second, third) for i in page["items"]]
    assert names == [f"c{i}" for i in range(7)]
    assert "continue" not in third["metadata"]
    assert second["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    everything = await backend.client.list_all(res.CONFIG_MAPS, backend.namespace, page_size=2)
    assert len(everything["items"]) == 8


async def test_list_at_exact_old_resource_version(backend: Backend):
    await backend.client.create(res.CONFIG_MAPS, config_map("a", backend.namespace))
    before = (await backend.client.list(res.CONFIG_MAPS, backend.namespace))["metadata"]["resourceVersion"]
    await backend.client.create(res.CONFIG_MAPS, config_map("b", backend.namespace))
    await backend.client.delete(res.CONFIG_MAPS, "a", backend.namespace)
    old = await backend.client.list(
        res.CONFIG_MAPS, backend.namespace, resource_version=before, resource_version_match="Exact"
    )
    assert [i["metadata"]["name"] for i in old["items"]] == ["a"]
    assert old["metadata"]["resourceVersion"] == before


async def test_label_and_field_selectors(backend: Backend):
    client, ns = backend.client, backend.namespace
    await client.create(res.PODS, pod("a", ns, labels={"app": "web", "tier": "fe"}))
    await client.create(res.PODS, pod("b", ns, labels={"app": "web", "tier": "be"}))
    await client.create(res.PODS, pod("c", ns, labels={"app": "db"}))
    await client.bind(ns, "b", "node-1")

    async def names(**kw: Any) -> list[str]:
        return [i["metadata"]["name"] for i in (await client.list(res.PODS, ns, **kw))["items"]]

    assert await names(label_selector="app=web") == ["a", "b"]
    assert await names(label_selector="app in (web,db),tier!=be") == ["a", "c"]
    assert await names(label_selector="!tier") == ["c"]
    assert await names(field_selector=field_selector(**{"spec.nodeName": "node-1"})) == ["b"]
    assert await names(field_selector="spec.nodeName=") == ["a", "c"]
    assert await names(field_selector="metadata.name!=a,status.phase=Pending") == ["b", "c"]
    with pytest.raises(BadRequestError) as info:
        await names(field_selector="spec.foo=1")
    assert info.value.message == "field label not supported: spec.foo"


async def test_cluster_scoped_objects(backend: Backend):
    name = f"node-{uuid.uuid4().hex[:8]}"
    created = await backend.client.create(res.NODES, node(name))
    assert "namespace" not in created["metadata"]
    assert created["status"]["allocatable"]["cpu"] == "4"
    result = await backend.client.delete(res.NODES, name)
    assert result["kind"] == "Status"
    assert result["status"] == "Success"


async def test_delete_preconditions(backend: Backend):
    created = await backend.client.create(res.CONFIG_MAPS, config_map("c", backend.namespace))
    with pytest.raises(ConflictError) as info:
        await backend.client.delete(
            res.CONFIG_MAPS, "c", backend.namespace, preconditions=Preconditions(uid="wrong")
        )
    assert "the UID in the precondition (wrong)" in info.value.message
    with pytest.raises(ConflictError):
        await backend.client.delete(
            res.CONFIG_MAPS, "c", backend.namespace, preconditions=Preconditions(resource_version="1")
        )
    meta = created["metadata"]
    result = await backend.client.delete(
        res.CONFIG_MAPS,
        "c",
        backend.namespace,
        preconditions=Preconditions(meta["uid"], meta["resourceVersion"]),
    )
    assert result["status"] == "Success"
    assert result["details"]["uid"] == meta["uid"]
    with pytest.raises(NotFoundError):
        await backend.client.get(res.CONFIG_MAPS, "c", backend.namespace)


async def test_finalizers_hold_deletion_until_removed(backend: Backend):
    body = config_map("c", backend.namespace, finalizers=["example.com/hold"])
    await backend.client.create(res.CONFIG_MAPS, body)
    deleting = await backend.client.delete(res.CONFIG_MAPS, "c", backend.namespace)
    assert deleting["metadata"]["deletionTimestamp"]
    assert deleting["metadata"]["deletionGracePeriodSeconds"] == 0
    with pytest.raises(InvalidError):
        await backend.client.patch(
            res.CONFIG_MAPS,
            "c",
            {"metadata": {"finalizers": ["example.com/hold", "example.com/more"]}},
            backend.namespace,
        )
    await backend.client.patch(res.CONFIG_MAPS, "c", {"metadata": {"finalizers": None}}, backend.namespace)
    with pytest.raises(NotFoundError):
        await backend.client.get(res.CONFIG_MAPS, "c", backend.namespace)


async def test_foreground_deletion_adds_its_finalizer(backend: Backend):
    await backend.client.create(res.CONFIG_MAPS, config_map("c", backend.namespace))
    deleting = await backend.client.delete(
        res.CONFIG_MAPS, "c", backend.namespace, propagation_policy=PropagationPolicy.FOREGROUND
    )
    assert deleting["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert (await backend.client.get(res.CONFIG_MAPS, "c", backend.namespace))["metadata"][
        "deletionTimestamp"
    ]


async def test_pod_deletion_is_graceful_only_when_scheduled(backend: Backend):
    client, ns = backend.client, backend.namespace
    await client.create(res.PODS, pod("unscheduled", ns))
    gone = await client.delete(res.PODS, "unscheduled", ns)
    assert gone["kind"] == "Pod"
    assert gone["metadata"]["deletionGracePeriodSeconds"] == 0
    with pytest.raises(NotFoundError):
        await client.get(res.PODS, "unscheduled", ns)
    await client.create(res.PODS, pod("running", ns, node="node-1"))
    graceful = await client.delete(res.PODS, "running", ns, grace_period_seconds=30)
    assert graceful["metadata"]["deletionGracePeriodSeconds"] == 30
    assert (await client.get(res.PODS, "running", ns))["metadata"]["deletionTimestamp"]
    await client.delete(res.PODS, "running", ns, grace_period_seconds=0)
    with pytest.raises(NotFoundError):
        await client.get(res.PODS, "running", ns)
