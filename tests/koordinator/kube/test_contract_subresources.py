"""Contract: status subresources, binding, eviction with PodDisruptionBudgets, and discovery."""

from __future__ import annotations

from typing import Any

import pytest

from koordinator.kube import resources as res
from koordinator.kube.client import is_pdb_refusal
from koordinator.kube.discovery import Discovery, ResourceNotFoundError
from koordinator.kube.errors import ConflictError, NotFoundError, TooManyRequestsError
from tests.koordinator.kube.builders import pod, widget
from tests.koordinator.kube.conftest import WIDGETS, Backend


async def test_custom_resource_status_is_separate_from_spec(backend: Backend):
    client, ns = backend.client, backend.namespace
    body = widget("w", ns, size=1)
    body["status"] = {"ready": True}
    created = await client.create(WIDGETS, body)
    assert "status" not in created, "status is dropped on create when the status subresource is on"
    assert created["metadata"]["generation"] == 1
    with_status = await client.replace_status(
        WIDGETS, {**created, "status": {"ready": True, "observedGeneration": 1}}
    )
    assert with_status["status"] == {"ready": True, "observedGeneration": 1}
    assert with_status["metadata"]["generation"] == 1, "a status update never bumps generation"
    ignored = await client.patch(
        WIDGETS, "w", {"spec": {"size": 9}, "metadata": {"labels": {"x": "y"}}}, ns, subresource="status"
    )
    assert ignored["spec"]["size"] == 1
    assert "labels" not in ignored["metadata"]
    respec = await client.patch(WIDGETS, "w", {"spec": {"size": 2}, "status": {"ready": False}}, ns)
    assert respec["metadata"]["generation"] == 2
    assert respec["status"]["ready"] is True, "the main resource cannot change status"
    labelled = await client.patch(WIDGETS, "w", {"metadata": {"labels": {"x": "y"}}}, ns)
    assert labelled["metadata"]["generation"] == 2, "metadata changes do not bump generation"


async def test_unknown_fields_are_pruned_from_custom_resources(backend: Backend):
    client, ns = backend.client, backend.namespace
    body = widget("w", ns, size=1)
    body["spec"]["bogus"] = True
    body["extra"] = {"a": 1}
    created = await client.create(WIDGETS, body)
    assert created["spec"] == {"size": 1}
    assert "extra" not in created


async def test_pod_status_update_keeps_spec(backend: Backend):
    client, ns = backend.client, backend.namespace
    created = await client.create(res.PODS, pod("p", ns))
    status = {"phase": "Running", "podIP": "10.0.0.7", "qosClass": "BestEffort"}
    updated = await client.replace_status(res.PODS, {**created, "status": status})
    assert updated["status"]["phase"] == "Running"
    assert updated["spec"] == created["spec"]
    assert updated["metadata"]["generation"] == 1


async def test_binding_assigns_a_node_once(backend: Backend):
    client, ns = backend.client, backend.namespace
    created = await client.create(res.PODS, pod("p", ns))
    await client.bind(
        ns, "p", "node-1", uid=created["metadata"]["uid"], annotations={"example.com/bound-by": "test"}
    )
    bound = await client.get(res.PODS, "p", ns)
    assert bound["spec"]["nodeName"] == "node-1"
    assert bound["metadata"]["annotations"] == {"example.com/bound-by": "test"}
    scheduled = [c for c in bound["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert scheduled
    assert scheduled[0]["status"] == "True"
    with pytest.raises(ConflictError) as info:
        await client.bind(ns, "p", "node-2")
    assert info.value.message.endswith('pod p is already assigned to node "node-1"')
    with pytest.raises(NotFoundError):
        await client.bind(ns, "ghost", "node-1")


async def _running_pod(backend: Backend, name: str, labels: dict[str, str]) -> dict[str, Any]:
    client, ns = backend.client, backend.namespace
    await client.create(res.PODS, pod(name, ns, labels=labels))
    await client.bind(ns, name, "node-1")
    current = await client.get(res.PODS, name, ns)
    status = {**current["status"], "phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    return await client.replace_status(res.PODS, {**current, "status": status})


async def _pdb(
    backend: Backend, name: str, labels: dict[str, str], allowed: int, observed: bool = True
) -> dict[str, Any]:
    client, ns = backend.client, backend.namespace
    body = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}},
    }
    created = await client.create(res.POD_DISRUPTION_BUDGETS, body)
    status = {
        "observedGeneration": created["metadata"]["generation"] if observed else 0,
        "disruptionsAllowed": allowed,
        "currentHealthy": 1 + allowed,
        "desiredHealthy": 1,
        "expectedPods": 1 + allowed,
    }
    return await client.replace_status(res.POD_DISRUPTION_BUDGETS, {**created, "status": status})


async def test_eviction_refused_by_a_pod_disruption_budget(backend: Backend):
    client, ns = backend.client, backend.namespace
    await _running_pod(backend, "guarded", {"app": "db"})
    await _pdb(backend, "db", {"app": "db"}, allowed=0)
    with pytest.raises(TooManyRequestsError) as info:
        await client.evict(ns, "guarded")
    assert is_pdb_refusal(info.value)
    assert info.value.message == "Cannot evict pod as it would violate the pod's disruption budget."
    assert info.value.causes[0].message == "The disruption budget db needs 1 healthy pods and has 1 currently"
    assert (await client.get(res.PODS, "guarded", ns))["metadata"].get("deletionTimestamp") is None


async def test_eviction_waits_for_the_budget_to_be_processed(backend: Backend):
    await _running_pod(backend, "guarded", {"app": "db"})
    await _pdb(backend, "db", {"app": "db"}, allowed=1, observed=False)
    with pytest.raises(TooManyRequestsError) as info:
        await backend.client.evict(backend.namespace, "guarded")
    assert is_pdb_refusal(info.value)
    assert info.value.retry_after == 10


async def test_eviction_allowed_by_the_budget_consumes_it(backend: Backend):
    client, ns = backend.client, backend.namespace
    await _running_pod(backend, "victim", {"app": "web"})
    await _pdb(backend, "web", {"app": "web"}, allowed=1)
    await client.evict(ns, "victim")
    evicted = await client.get(res.PODS, "victim", ns)
    assert evicted["metadata"]["deletionTimestamp"], "a bound pod is deleted gracefully"
    assert evicted["metadata"]["deletionGracePeriodSeconds"] == 30
    budget = await client.get(res.POD_DISRUPTION_BUDGETS, "web", ns)
    assert budget["status"]["disruptionsAllowed"] == 0
    assert list(budget["status"]["disruptedPods"]) == ["victim"]
    assert [c["type"] for c in budget["status"]["conditions"]] == ["DisruptionAllowed"]


async def test_eviction_of_a_pending_pod_ignores_budgets(backend: Backend):
    client, ns = backend.client, backend.namespace
    await client.create(res.PODS, pod("pending", ns, labels={"app": "db"}))
    await _pdb(backend, "db", {"app": "db"}, allowed=0)
    await client.evict(ns, "pending")
    with pytest.raises(NotFoundError):
        await client.get(res.PODS, "pending", ns)


async def test_discovery_finds_builtins_and_crds(backend: Backend):
    discovery = Discovery(backend.client)
    assert await discovery.for_kind("v1", "Pod") == res.PODS
    assert await discovery.for_kind("coordination.k8s.io/v1", "Lease") == res.LEASES
    assert await discovery.for_plural("v1", "nodes") == res.NODES
    found = await discovery.for_object(widget("w", backend.namespace))
    assert found == WIDGETS
    with pytest.raises(ResourceNotFoundError):
        await discovery.for_kind("contract.koordinator.sh/v1alpha1", "Gadget")
    groups = {g["name"] for g in await discovery.groups()}
    assert {"", "apps", "coordination.k8s.io", "contract.koordinator.sh"} <= groups
