"""Contract: every patch type and server-side apply behave the same on the fake and a real apiserver."""

from __future__ import annotations

from typing import Any

import pytest

from koordinator.kube import resources as res
from koordinator.kube.client import PatchType
from koordinator.kube.errors import ConflictError, InvalidError, UnsupportedMediaTypeError
from tests.koordinator.kube.builders import config_map, pod, widget
from tests.koordinator.kube.conftest import WIDGETS, Backend


async def test_json_patch(backend: Backend):
    client, ns = backend.client, backend.namespace
    await client.create(
        res.CONFIG_MAPS, config_map("c", ns, {"a": "1", "b": "2"}, labels={"koordinator.sh/qosClass": "LS"})
    )
    ops = [
        {"op": "test", "path": "/data/a", "value": "1"},
        {"op": "replace", "path": "/data/a", "value": "10"},
        {"op": "remove", "path": "/data/b"},
        {"op": "add", "path": "/metadata/labels/koordinator.sh~1qosClass", "value": "BE"},
        {"op": "copy", "from": "/data/a", "path": "/data/c"},
    ]
    patched = await client.patch(res.CONFIG_MAPS, "c", ops, ns, patch_type=PatchType.JSON)
    assert patched["data"] == {"a": "10", "c": "10"}
    assert patched["metadata"]["labels"] == {"koordinator.sh/qosClass": "BE"}


@pytest.mark.parametrize(
    "ops",
    [
        pytest.param([{"op": "test", "path": "/data/a", "value": "nope"}], id="failed-test"),
        pytest.param([{"op": "replace", "path": "/data/missing/x", "value": "1"}], id="missing-path"),
    ],
)
async def test_json_patch_that_cannot_apply_is_invalid(backend: Backend, ops):
    client, ns = backend.client, backend.namespace
    await client.create(res.CONFIG_MAPS, config_map("c", ns, {"a": "1"}))
    with pytest.raises(InvalidError):
        await client.patch(res.CONFIG_MAPS, "c", ops, ns, patch_type=PatchType.JSON)
    assert (await client.get(res.CONFIG_MAPS, "c", ns))["data"] == {"a": "1"}


async def test_merge_patch_sets_and_removes_keys(backend: Backend):
    client, ns = backend.client, backend.namespace
    await client.create(res.CONFIG_MAPS, config_map("c", ns, {"a": "1", "b": "2"}, annotations={"x": "1"}))
    patched = await client.patch(
        res.CONFIG_MAPS, "c", {"data": {"b": None, "c": "3"}, "metadata": {"annotations": {"y": "2"}}}, ns
    )
    assert patched["data"] == {"a": "1", "c": "3"}
    assert patched["metadata"]["annotations"] == {"x": "1", "y": "2"}


async def test_merge_patch_with_stale_resource_version_conflicts(backend: Backend):
    client, ns = backend.client, backend.namespace
    created = await client.create(res.CONFIG_MAPS, config_map("c", ns, {"a": "1"}))
    await client.patch(res.CONFIG_MAPS, "c", {"data": {"a": "2"}}, ns)
    stale = {"metadata": {"resourceVersion": created["metadata"]["resourceVersion"]}, "data": {"a": "3"}}
    with pytest.raises(ConflictError):
        await client.patch(res.CONFIG_MAPS, "c", stale, ns)


async def test_json_patch_setting_the_resource_version_is_conditional(backend: Backend):
    """How the slo-controller makes its spec patches conditional (NodeMetric, NodeSLO)."""
    client, ns = backend.client, backend.namespace
    created = await client.create(res.CONFIG_MAPS, config_map("c", ns, {"a": "1"}))
    version = created["metadata"]["resourceVersion"]

    def ops(value: str) -> list[dict[str, Any]]:
        return [
            {"op": "add", "path": "/data", "value": {"a": value}},
            {"op": "replace", "path": "/metadata/resourceVersion", "value": version},
        ]

    patched = await client.patch(res.CONFIG_MAPS, "c", ops("2"), ns, patch_type=PatchType.JSON)
    assert patched["data"] == {"a": "2"}
    assert patched["metadata"]["resourceVersion"] != version
    with pytest.raises(ConflictError):  # ``version`` is stale now
        await client.patch(res.CONFIG_MAPS, "c", ops("3"), ns, patch_type=PatchType.JSON)
    assert (await client.get(res.CONFIG_MAPS, "c", ns))["data"] == {"a": "2"}


async def test_status_merge_patch_with_stale_resource_version_conflicts(backend: Backend):
    """How the noderesource controller makes its node status patches conditional."""
    client, ns = backend.client, backend.namespace
    created = await client.create(WIDGETS, widget("w", ns))
    version = created["metadata"]["resourceVersion"]
    patch = {"metadata": {"resourceVersion": version}, "status": {"ready": True}}
    patched = await client.patch(WIDGETS, "w", patch, ns, subresource="status")
    assert patched["status"]["ready"] is True
    stale = {"metadata": {"resourceVersion": version}, "status": {"ready": False}}
    with pytest.raises(ConflictError):
        await client.patch(WIDGETS, "w", stale, ns, subresource="status")
    assert (await client.get(WIDGETS, "w", ns))["status"]["ready"] is True


async def test_merge_patch_replaces_lists(backend: Backend):
    client, ns = backend.client, backend.namespace
    await client.create(WIDGETS, widget("w", ns, tags=["a", "b"], ports=[{"name": "http", "port": 80}]))
    patched = await client.patch(WIDGETS, "w", {"spec": {"ports": [{"name": "grpc", "port": 9000}]}}, ns)
    assert patched["spec"]["ports"] == [{"name": "grpc", "port": 9000}]


def _deployment(name: str, namespace: str) -> dict[str, Any]:
    template_spec = {
        "containers": [
            {
                "name": "main",
                "image": "registry.example/app:1.0",
                "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
            },
            {"name": "side", "image": "registry.example/side:1.0"},
        ],
        "tolerations": [{"key": "a", "operator": "Exists"}],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app": "x"},
            "finalizers": ["example.com/one"],
        },
        "spec": {
            "selector": {"matchLabels": {"app": "x"}},
            "template": {"metadata": {"labels": {"app": "x"}}, "spec": template_spec},
        },
    }


async def test_strategic_merge_merges_lists_by_key(backend: Backend):
    client, ns = backend.client, backend.namespace
    await client.create(res.DEPLOYMENTS, _deployment("d", ns))
    patch = {
        "metadata": {"finalizers": ["example.com/two"], "labels": {"extra": "y"}},
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.example/app:2.0",
                            "env": [{"name": "B", "value": "20"}, {"name": "A", "$patch": "delete"}],
                        },
                    ],
                    "tolerations": [{"key": "b", "operator": "Exists"}],
                }
            }
        },
    }
    patched = await client.patch(res.DEPLOYMENTS, "d", patch, ns, patch_type=PatchType.STRATEGIC)
    template = patched["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in template["containers"]}
    assert list(containers) == ["main", "side"]
    assert containers["main"]["image"] == "registry.example/app:2.0"
    assert containers["main"]["env"] == [{"name": "B", "value": "20"}]
    assert containers["side"]["image"] == "registry.example/side:1.0"
    assert template["tolerations"] == [{"key": "b", "operator": "Exists"}], "tolerations are an atomic list"
    # new primitive items go before the server-only ones, as the apiserver orders them
    assert patched["metadata"]["finalizers"] == ["example.com/two", "example.com/one"]
    assert patched["metadata"]["labels"] == {"app": "x", "extra": "y"}
    assert patched["metadata"]["generation"] == 2


async def test_strategic_merge_changes_a_pod_image_by_container_name(backend: Backend):
    client, ns = backend.client, backend.namespace
    body = pod("p", ns)
    body["spec"]["containers"].append({"name": "side", "image": "registry.example/side:1.0"})
    await client.create(res.PODS, body)
    patch = {"spec": {"containers": [{"name": "side", "image": "registry.example/side:2.0"}]}}
    patched = await client.patch(res.PODS, "p", patch, ns, patch_type=PatchType.STRATEGIC)
    assert [(c["name"], c["image"]) for c in patched["spec"]["containers"]] == [
        ("main", "registry.example/app:1.0"),
        ("side", "registry.example/side:2.0"),
    ]


async def test_strategic_merge_on_status_conditions(backend: Backend):
    client, ns = backend.client, backend.namespace
    await client.create(res.PODS, pod("p", ns))
    await client.bind(ns, "p", "node-1")
    patch = {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    patched = await client.patch(
        res.PODS, "p", patch, ns, patch_type=PatchType.STRATEGIC, subresource="status"
    )
    assert {c["type"] for c in patched["status"]["conditions"]} == {"Ready", "PodScheduled"}
    assert patched["status"]["phase"] == "Running"


async def test_strategic_merge_is_refused_for_custom_resources(backend: Backend):
    client, ns = backend.client, backend.namespace
    await client.create(WIDGETS, widget("w", ns, size=1))
    with pytest.raises(UnsupportedMediaTypeError) as info:
        await client.patch(WIDGETS, "w", {"spec": {"size": 2}}, ns, patch_type=PatchType.STRATEGIC)
    assert info.value.code == 415


def _fields(obj: dict[str, Any], manager: str) -> tuple[str, dict[str, Any]]:
    entry = next(m for m in obj["metadata"]["managedFields"] if m["manager"] == manager)
    return entry["operation"], entry["fieldsV1"]


async def test_server_side_apply_creates_and_tracks_ownership(backend: Backend):
    client, ns = backend.client, backend.namespace
    body = widget("w", ns, size=1, color="red", ports=[{"name": "http", "port": 80}], tags=["x"])
    body["metadata"]["labels"] = {"a": "1"}
    created = await client.apply(WIDGETS, body, field_manager="alice")
    assert created["spec"] == {
        "size": 1,
        "color": "red",
        "ports": [{"name": "http", "port": 80}],
        "tags": ["x"],
    }
    operation, fields = _fields(created, "alice")
    assert operation == "Apply"
    assert fields == {
        "f:metadata": {"f:labels": {"f:a": {}}},
        "f:spec": {
            "f:color": {},
            "f:ports": {'k:{"name":"http"}': {".": {}, "f:name": {}, "f:port": {}}},
            "f:size": {},
            "f:tags": {},
        },
    }


async def test_server_side_apply_conflicts_and_force(backend: Backend):
    client, ns = backend.client, backend.namespace
    await client.apply(WIDGETS, widget("w", ns, size=1, color="red"), field_manager="alice")
    with pytest.raises(ConflictError) as info:
        await client.apply(WIDGETS, widget("w", ns, size=2), field_manager="bob")
    assert info.value.message == 'Apply failed with 1 conflict: conflict with "alice": .spec.size'
    assert [(c.reason, c.field, c.message) for c in info.value.causes] == [
        ("FieldManagerConflict", ".spec.size", 'conflict with "alice"')
    ]
    shared = await client.apply(WIDGETS, widget("w", ns, size=1), field_manager="bob")
    assert _fields(shared, "bob")[1] == {"f:spec": {"f:size": {}}}
    forced = await client.apply(WIDGETS, widget("w", ns, size=3), field_manager="bob", force=True)
    assert forced["spec"]["size"] == 3
    assert _fields(forced, "alice")[1] == {"f:spec": {"f:color": {}}}


async def test_server_side_apply_removes_fields_no_longer_applied(backend: Backend):
    client, ns = backend.client, backend.namespace
    first = widget(
        "w", ns, size=1, color="red", ports=[{"name": "http", "port": 80}, {"name": "https", "port": 443}]
    )
    first["metadata"]["labels"] = {"a": "1"}
    await client.apply(WIDGETS, first, field_manager="alice")
    await client.apply(WIDGETS, widget("w", ns, tags=["t"]), field_manager="bob")
    second = await client.apply(
        WIDGETS, widget("w", ns, size=1, ports=[{"name": "http", "port": 80}]), field_manager="alice"
    )
    assert second["spec"] == {"size": 1, "ports": [{"name": "http", "port": 80}], "tags": ["t"]}
    assert "labels" not in second["metadata"]


async def test_apply_conflicts_with_an_update_manager(backend: Backend):
    client, ns = backend.client, backend.namespace
    await client.apply(WIDGETS, widget("w", ns, size=1, color="red"), field_manager="alice")
    await client.patch(WIDGETS, "w", {"spec": {"color": "blue"}}, ns, field_manager="carol")
    with pytest.raises(ConflictError) as info:
        await client.apply(WIDGETS, widget("w", ns, size=1, color="green"), field_manager="alice")
    assert info.value.message == (
        'Apply failed with 1 conflict: conflict with "carol" '
        "using contract.koordinator.sh/v1alpha1: .spec.color"
    )


async def test_apply_needs_a_field_manager(backend: Backend):
    client, ns = backend.client, backend.namespace
    await client.create(WIDGETS, widget("w", ns, size=1))
    with pytest.raises(InvalidError) as info:
        await client._call(
            "PATCH",
            WIDGETS.path(ns, "w"),
            body=widget("w", ns, size=1),
            content_type=str(PatchType.APPLY),
            idempotent=True,
        )
    assert [c.field for c in info.value.causes] == ["fieldManager"]


async def test_apply_to_a_built_in_kind(backend: Backend):
    client, ns = backend.client, backend.namespace
    body = pod("p", ns, labels={"app": "x"})
    created = await client.apply(res.PODS, body, field_manager="deployer")
    assert created["status"]["phase"] == "Pending"
    operation, fields = _fields(created, "deployer")
    assert operation == "Apply"
    assert fields["f:spec"]["f:containers"] == {'k:{"name":"main"}': {".": {}, "f:image": {}, "f:name": {}}}
    body["metadata"]["labels"] = {"app": "y"}
    assert (await client.apply(res.PODS, body, field_manager="deployer"))["metadata"]["labels"] == {
        "app": "y"
    }
