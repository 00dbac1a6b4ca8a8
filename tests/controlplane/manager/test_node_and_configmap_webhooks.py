"""Node webhooks (resource amplification, label changes) and the slo-controller-config ConfigMap webhook."""

from __future__ import annotations

import json
from typing import Any

import pytest

from controlplane.manager.webhooks.context import WebhookOptions
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


@pytest.mark.parametrize(
    ("ratio", "operation", "cpu"),
    [
        pytest.param('{"cpu":0.5}', "UPDATE", "4", id="ratio-below-1-never-shrinks"),
        pytest.param('{"cpu":1}', "UPDATE", "4", id="ratio-1-is-skipped"),
        pytest.param('{"cpu":2}', "CREATE", "4", id="create-passes-unchanged"),
        pytest.param('{"cpu":2}', "UPDATE", "8", id="update-amplifies"),
    ],
)
async def test_amplification_only_grows_nodes_on_update(ratio, operation, cpu):
    new = amplified_node({RATIO: ratio}, {"cpu": "4", "memory": "8Gi"})
    old = new if operation == "UPDATE" else None
    response = await Admission(feature_gates=NODE_GATES).call(
        "/mutate-node-status", review(new, operation=operation, old=old, sub_resource="status")
    )
    assert apply(new, response)["status"]["allocatable"]["cpu"] == cpu


@pytest.mark.parametrize("ratio", ['{"cpu":1e309}', '{"cpu":Infinity}', '{"cpu":NaN}'])
async def test_a_ratio_go_cannot_read_leaves_the_node_as_it_is(ratio):
    """``1e309`` decodes to ``inf`` in Python (an OverflowError when multiplied into a
    quantity); Go refuses it, and so does the webhook: the node's status update passes
    unchanged instead of every kubelet heartbeat being refused."""
    new = amplified_node({RATIO: ratio}, {"cpu": "4", "memory": "8Gi"})
    response = await Admission(feature_gates=NODE_GATES).call(
        "/mutate-node-status", review(new, operation="UPDATE", old=new, sub_resource="status")
    )
    assert response["allowed"] is True
    assert patch_of(response) == []


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


@pytest.mark.parametrize("ratio", ['{"cpu":"x"}', "{"], ids=["not-a-number", "not-json"])
async def test_unreadable_ratio_leaves_the_status_update_alone(ratio):
    """Upstream refuses the update with 500 (blocking the kubelet's heartbeats); here it passes unchanged."""
    new = amplified_node({RATIO: ratio}, {"cpu": "4", "memory": "8Gi"})
    response = await Admission(feature_gates=NODE_GATES).call(
        "/mutate-node-status", review(new, operation="UPDATE", old=new, sub_resource="status")
    )
    assert response == {"uid": response["uid"], "allowed": True, "status": {"metadata": {}, "code": 200}}


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
            '___{"reason":"ExistNodeConfict","message":{"config":"resource-threshold-config",'
            '"strategies":["ssd","gpu"],"exampleNodes":["n1"]}}___',
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
CM = "koordinator-system/slo-controller-config"


def overlapping(key: str, list_field: str = "nodeStrategies") -> dict[str, str]:
    return slo_config(
        **{
            key: {
                list_field: [
                    {"name": "a", "nodeSelector": {"matchLabels": {"pool": "x"}}},
                    {
                        "name": "b",
                        "nodeSelector": {
                            "matchExpressions": [{"key": "pool", "operator": "In", "values": ["x", "y"]}]
                        },
                    },
                ]
            }
        }
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        pytest.param(THRESHOLDS, None, id="valid"),
        pytest.param(
            {"colocation-config": "{not json"},
            '___{"reason":"ParseConfigFail","message":"Failed to parse colocation config in configmap '
            f'{CM}, err: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"}}___',
            id="bad-json",
        ),
        pytest.param(
            {"system-config": "[1]"},
            '___{"reason":"ParseConfigFail","message":"Failed to parse System config in configmap '
            f'{CM}, err: cannot unmarshal list into a system-config object"}}___',
            id="not-an-object",
        ),
        pytest.param(
            slo_config(
                **{"resource-threshold-config": {"clusterStrategy": {"cpuSuppressThresholdPercent": 150}}}
            ),
            # Upstream keys the range errors by Go struct path with go-playground's English;
            # the reason and format are upstream's, the keys and texts ours.
            '___{"reason":"ConfigParamInvalid","message":{'
            '"resource-threshold-config.clusterStrategy.cpuSuppressThresholdPercent":"Invalid value: 150: '
            "resource-threshold-config.clusterStrategy.cpuSuppressThresholdPercent in body should be less "
            'than or equal to 100"}}___',
            id="out-of-range",
        ),
        pytest.param(
            slo_config(**{"cpu-burst-config": {"nodeStrategies": [{"name": "x", "policy": "auto"}]}}),
            '___{"reason":"ConfigParamInvalid","message":"nodeConfigs NodeSelector must not empty error! '
            'configType: cpu-burst-config,nodeConfig name:x"}___',
            id="missing-node-selector",
        ),
        pytest.param(
            slo_config(
                **{
                    "colocation-config": {
                        "nodeConfigs": [
                            {"name": "x", "nodeSelector": {"matchLabels": {}, "matchExpressions": []}}
                        ]
                    }
                }
            ),
            '___{"reason":"ConfigParamInvalid","message":"nodeConfigs NodeSelector must not empty error! '
            'configType: colocation-config,nodeConfig name:x"}___',
            id="empty-node-selector",
        ),
        pytest.param(
            slo_config(
                **{
                    "system-config": {
                        "nodeStrategies": [{"name": "a", "nodeSelector": {"matchLabels": {"a b": "x"}}}]
                    }
                }
            ),
            '___{"reason":"ConfigParamInvalid","message":"failed to parse node selector '
            '{\\"matchLabels\\":{\\"a b\\":\\"x\\"}},configType: system-config,nodeConfig name:a, '
            "err: invalid label key 'a b': name part must be a qualified name\"}___",
            id="malformed-node-selector",
        ),
        pytest.param(
            overlapping("system-config"),
            '___{"reason":"NodeStrategiesOverlap","message":{"config":"system-config","strategies":["a","b"]}}___',
            id="overlapping-selectors",
        ),
        pytest.param(
            slo_config(**{"cpu-burst-config": {"nodeStrategies": [{"name": "x", "nodeSelector": None}]}}),
            '___{"reason":"ConfigParamInvalid","message":"nodeConfigs NodeSelector must not empty error! '
            'configType: cpu-burst-config,nodeConfig name:x"}___',
            id="null-node-selector",
        ),
        # keys differing from a field's name only in case name the field, as in Go: the
        # entries are checked as the controller will read them
        pytest.param(
            slo_config(**{"cpu-burst-config": {"NodeStrategies": [{"Name": "x", "Policy": "auto"}]}}),
            '___{"reason":"ConfigParamInvalid","message":"nodeConfigs NodeSelector must not empty error! '
            'configType: cpu-burst-config,nodeConfig name:x"}___',
            id="case-variant-entry-without-selector",
        ),
        pytest.param(
            slo_config(
                **{
                    "system-config": {
                        "NodeStrategies": [
                            {"Name": "a", "NodeSelector": {"MatchLabels": {"pool": "x"}}},
                            {
                                "name": "b",
                                "nodeSelector": {
                                    "matchExpressions": [{"Key": "pool", "Operator": "In", "Values": ["x"]}]
                                },
                            },
                        ]
                    }
                }
            ),
            '___{"reason":"NodeStrategiesOverlap","message":{"config":"system-config","strategies":["a","b"]}}___',
            id="case-variant-overlapping-selectors",
        ),
        pytest.param(
            slo_config(
                **{"resource-threshold-config": {"ClusterStrategy": {"CPUSuppressThresholdPercent": 150}}}
            ),
            '___{"reason":"ConfigParamInvalid","message":{'
            '"resource-threshold-config.clusterStrategy.cpuSuppressThresholdPercent":"Invalid value: 150: '
            "resource-threshold-config.clusterStrategy.cpuSuppressThresholdPercent in body should be less "
            'than or equal to 100"}}___',
            id="case-variant-out-of-range",
        ),
        pytest.param(
            {**overlapping("colocation-config", "nodeConfigs"), **overlapping("resource-threshold-config")},
            '___{"reason":"NodeStrategiesOverlap","message":{"config":"colocation-config","strategies":["a","b"]}}___',
            id="first-key-in-upstream-order",
        ),
        pytest.param(
            {**overlapping("system-config"), "cpu-burst-config": "{"},
            '___{"reason":"NodeStrategiesOverlap","message":{"config":"system-config","strategies":["a","b"]}}___',
            id="system-config-before-cpu-burst-config",
        ),
        pytest.param(
            THRESHOLDS,
            '___{"reason":"ExistNodeConfict","message":{"config":"resource-threshold-config",'
            '"strategies":["ssd","gpu"],"exampleNodes":["both"]}}___',
            id="existing-node-matched-twice",
        ),
    ],
)
async def test_slo_controller_config_validation(data, message, request):
    nodes = (
        [node("zz", {"disk": "ssd", "accel": "gpu"}), node("both", {"disk": "ssd", "accel": "gpu"})]
        if request.node.callspec.id == "existing-node-matched-twice"
        else []
    )
    cm = config_map("slo-controller-config", "koordinator-system", data)
    response = await Admission(nodes, feature_gates=CM_GATES).call(
        "/validate-configmap", review(cm, api_version="admission.k8s.io/v1beta1")
    )
    assert response["allowed"] is (message is None)
    if message:
        assert response["status"] == {"metadata": {}, "message": message, "code": 400}


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


@pytest.mark.parametrize(
    ("names", "message"),
    [
        pytest.param(
            [None],
            '___{"reason":"ConfigParamInvalid",'
            '"message":"nodeConfig Name need! configType:cpu-burst-config"}___',
            id="missing",
        ),
        pytest.param(
            ["a", "a"],
            # "confilict" and the trailing space are upstream's.
            '___{"reason":"ConfigParamInvalid","message":"nodeConfig Name confilict, '
            'configType:cpu-burst-config,nodeConfig Name:a! "}___',
            id="duplicate",
        ),
        pytest.param(["a", "b"], None, id="unique"),
    ],
)
async def test_names_are_checked_with_the_flag(names, message):
    strategies = [
        {"nodeSelector": {"matchLabels": {"pool": str(i)}}, **({"name": name} if name else {})}
        for i, name in enumerate(names)
    ]
    data = slo_config(**{"cpu-burst-config": {"nodeStrategies": strategies}})
    admission = Admission(feature_gates=CM_GATES, options=WebhookOptions(node_strategy_name_need_check=True))
    response = await admission.call(
        "/validate-configmap", review(config_map("slo-controller-config", "koordinator-system", data))
    )
    assert response["allowed"] is (message is None)
    if message:
        assert response["status"] == {"metadata": {}, "message": message, "code": 400}
