"""Node webhooks (resource amplification, label changes) and the slo-controller-config ConfigMap webhook."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.controlplane.manager.builders import Admission, apply, config_map, node, patch_of, review

RATIO = "node.koordinator.sh/resource-amplification-ratio"
RAW = "node.koordinator.sh/raw-allocatable"
NODE_GATES = "NodeMutatingWebhook=true,NodeValidatingWebhook=true"


def amplified_node(annotations: dict[str, str], allocatable: dict[str, str]) -> dict[str, Any]:
    obj = node("n1", allocatable=allocatable)
    obj["metadata"]["annotations"] = annotations
    return obj


async def test_amplification_stores_raw_allocatable_and_multiplies():
    new = amplified_node({RATIO: '{"cpu":1.5}'}, {"cpu": "4", "memory": "8Gi", "pods": "110"})
    response = await Admission(feature_gates=NODE_GATES).call(
        "/mutate-node-status", review(new, operation="UPDATE", old=new, sub_resource="status")
    )
    assert patch_of(response) == [
        {
            "op": "add",
            "path": "/metadata/annotations/node.koordinator.sh~1raw-allocatable",
            "value": '{"cpu":"4","memory":"8Gi"}',
        },
        {"op": "replace", "path": "/status/allocatable/cpu", "value": "6"},
    ]


async def test_amplification_keeps_raw_until_the_kubelet_changes_allocatable():
    annotations = {RATIO: '{"cpu":2}', RAW: '{"cpu":"4","memory":"8Gi"}'}
    old = amplified_node(annotations, {"cpu": "8", "memory": "8Gi"})
    same = amplified_node(annotations, {"cpu": "8", "memory": "8Gi"})
    admission = Admission(feature_gates=NODE_GATES)
    unchanged = await admission.call(
        "/mutate-node-status", review(same, operation="UPDATE", old=old, sub_resource="status")
    )
    assert patch_of(unchanged) == []
    kubelet = amplified_node(annotations, {"cpu": "5", "memory": "8Gi"})
    refreshed = apply(
        kubelet,
        await admission.call(
            "/mutate-node-status", review(kubelet, operation="UPDATE", old=old, sub_resource="status")
        ),
    )
    assert refreshed["metadata"]["annotations"][RAW] == '{"cpu":"5","memory":"8Gi"}'
    assert refreshed["status"]["allocatable"]["cpu"] == "10"


async def test_without_ratio_raw_allocatable_is_removed():
    stale = amplified_node({RAW: '{"cpu":"4"}'}, {"cpu": "4"})
    response = await Admission(feature_gates=NODE_GATES).call(
        "/mutate-node-status", review(stale, operation="UPDATE", old=stale, sub_resource="status")
    )
    assert patch_of(response) == [
        {"op": "remove", "path": "/metadata/annotations/node.koordinator.sh~1raw-allocatable"}
    ]


def slo_config(**entries: Any) -> dict[str, str]:
    return {key: json.dumps(value) for key, value in entries.items()}


THRESHOLDS = slo_config(
    **{
        "resource-threshold-config": {
            "clusterStrategy": {"enable": False},
            "nodeStrategies": [
                {"name": "ssd", "nodeSelector": {"matchLabels": {"disk": "ssd"}}, "enable": True},
                {"name": "gpu", "nodeSelector": {"matchLabels": {"accel": "gpu"}}, "enable": True},
            ],
        }
    }
)


@pytest.mark.parametrize(
    ("operation", "old_labels", "new_labels", "message"),
    [
        pytest.param(
            "UPDATE",
            {"disk": "ssd"},
            {"disk": "ssd", "accel": "gpu"},
            "node n1 would match more than one resource-threshold-config nodeStrategies: ssd, gpu",
            id="update-into-two-strategies",
        ),
        pytest.param("UPDATE", {}, {"disk": "ssd"}, None, id="update-into-one"),
        pytest.param("CREATE", None, {"disk": "ssd", "accel": "gpu"}, None, id="create-is-only-logged"),
    ],
)
async def test_node_labels_against_slo_config(operation, old_labels, new_labels, message):
    cluster = [config_map("slo-controller-config", "koordinator-system", THRESHOLDS)]
    old = node("n1", old_labels) if old_labels is not None else None
    response = await Admission(cluster, feature_gates=NODE_GATES).call(
        "/validate-node", review(node("n1", new_labels), operation=operation, old=old)
    )
    assert response["allowed"] is (message is None)
    if message:
        assert response["status"] == {"metadata": {}, "message": message, "code": 400}


CM_GATES = "ConfigMapValidatingWebhook=true"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        pytest.param(THRESHOLDS, None, id="valid"),
        pytest.param({"colocation-config": "{not json"}, "colocation-config: Invalid value", id="bad-json"),
        pytest.param(
            slo_config(
                **{"resource-threshold-config": {"clusterStrategy": {"cpuSuppressThresholdPercent": 150}}}
            ),
            "resource-threshold-config.clusterStrategy.cpuSuppressThresholdPercent",
            id="out-of-range",
        ),
        pytest.param(
            slo_config(**{"cpu-burst-config": {"nodeStrategies": [{"name": "x", "policy": "auto"}]}}),
            "cpu-burst-config.nodeStrategies[0].nodeSelector: Required value",
            id="missing-node-selector",
        ),
        pytest.param(
            slo_config(
                **{
                    "system-config": {
                        "nodeStrategies": [
                            {"name": "a", "nodeSelector": {"matchLabels": {"pool": "x"}}},
                            {
                                "name": "b",
                                "nodeSelector": {
                                    "matchExpressions": [
                                        {"key": "pool", "operator": "In", "values": ["x", "y"]}
                                    ]
                                },
                            },
                        ]
                    }
                }
            ),
            "system-config: nodeStrategies a and b have overlapping nodeSelectors",
            id="overlapping-selectors",
        ),
        pytest.param(
            THRESHOLDS,
            "resource-threshold-config: node both is selected by more than one nodeStrategies: ssd, gpu",
            id="existing-node-matched-twice",
        ),
    ],
)
async def test_slo_controller_config_validation(data, message, request):
    nodes = (
        [node("both", {"disk": "ssd", "accel": "gpu"})]
        if request.node.callspec.id == "existing-node-matched-twice"
        else []
    )
    cm = config_map("slo-controller-config", "koordinator-system", data)
    response = await Admission(nodes, feature_gates=CM_GATES).call(
        "/validate-configmap", review(cm, api_version="admission.k8s.io/v1beta1")
    )
    assert response["allowed"] is (message is None)
    if message:
        assert response["status"]["code"] == 400
        assert message in response["status"]["message"]


async def test_unchanged_keys_and_other_configmaps_are_not_checked():
    broken = {"colocation-config": "{not json"}
    old = config_map("slo-controller-config", "koordinator-system", broken)
    new = config_map("slo-controller-config", "koordinator-system", {**broken, "system-config": "{}"})
    admission = Admission(feature_gates=CM_GATES)
    assert (await admission.call("/validate-configmap", review(new, operation="UPDATE", old=old)))[
        "allowed"
    ] is True
    other = config_map("something-else", "koordinator-system", broken)
    assert (await admission.call("/validate-configmap", review(other)))["allowed"] is True


async def test_names_are_required_with_the_flag():
    from controlplane.manager.webhooks.context import WebhookOptions

    data = slo_config(
        **{"cpu-burst-config": {"nodeStrategies": [{"nodeSelector": {"matchLabels": {"a": "b"}}}]}}
    )
    admission = Admission(feature_gates=CM_GATES, options=WebhookOptions(node_strategy_name_need_check=True))
    response = await admission.call(
        "/validate-configmap", review(config_map("slo-controller-config", "koordinator-system", data))
    )
    assert "cpu-burst-config.nodeStrategies[0].name: Required value" in response["status"]["message"]
