"""slo-controller-config values nested hundreds to a hundred thousand levels deep.

The config handler must take the normal invalid-key path at every depth (a Warning Event,
the last good value kept), never escape with a RecursionError; the configmap validating
webhook must refuse such a value with a clear ParseConfigFail message, never a 500.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from controlplane.manager.controllers.sloconfig import SLOConfigCache
from koordinator.api.sloconfig.config import MAX_JSON_DEPTH, resource_threshold_strategy_for_node
from tests.controlplane.manager.builders import Admission, config_map, review

KEY = "resource-threshold-config"
GOOD = json.dumps({"clusterStrategy": {"enable": True, "cpuSuppressThresholdPercent": 45}})
DEPTHS = [MAX_JSON_DEPTH + 1, 500, 1000, 5000, 100_000]
CM_GATES = "ConfigMapValidatingWebhook=true"


def nested_objects(depth: int) -> str:
    """``clusterStrategy`` with an unknown field nesting objects: ``depth`` levels in all."""
    inner = depth - 1
    return '{"clusterStrategy":' + '{"a":' * inner + "1" + "}" * inner + "}"


def nested_arrays(depth: int) -> str:
    """``nodeStrategies`` holding arrays of arrays: ``depth`` levels in all."""
    inner = depth - 1
    return '{"nodeStrategies":' + "[" * inner + "]" * inner + "}"


def nested_selector(depth: int) -> str:
    """A node strategy whose ``nodeSelector`` nests objects: ``depth`` levels in all."""
    inner = depth - 3
    deep = '{"x":' * inner + "1" + "}" * inner
    return '{"nodeStrategies":[{"name":"a","nodeSelector":' + deep + "}]}"


SHAPES = [
    pytest.param(nested_objects, id="objects"),
    pytest.param(nested_arrays, id="arrays"),
    pytest.param(nested_selector, id="node-selector"),
]


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    async def record(
        self, obj: Any, event_type: str, reason: str, message: str, *, kind: str = "Pod"
    ) -> None:
        self.events.append((event_type, reason, message))


def configmap(value: str) -> dict[str, Any]:
    return {"metadata": {"name": "slo-controller-config", "uid": "u1"}, "data": {KEY: value}}


def test_the_limit_is_what_the_values_reach():
    """MAX_JSON_DEPTH itself is accepted; one more level is the first refused."""
    cache = SLOConfigCache("koordinator-system", "slo-controller-config")
    cache.mark_synced()
    cache.apply(configmap(nested_objects(MAX_JSON_DEPTH)))
    assert not cache.errors
    cache.apply(configmap(nested_objects(MAX_JSON_DEPTH + 1)))
    assert list(cache.errors) == [KEY]


@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize("shape", SHAPES)
async def test_a_deeply_nested_value_is_an_invalid_key_with_a_warning_and_the_last_good_value_kept(
    shape: Any, depth: int
) -> None:
    recorder = Recorder()
    cache = SLOConfigCache("koordinator-system", "slo-controller-config", recorder=recorder)  # type: ignore[arg-type]
    cache.apply(configmap(GOOD))
    cache.mark_synced()
    cache.apply(configmap(shape(depth)))
    await asyncio.sleep(0)
    assert list(cache.errors) == [KEY]
    assert resource_threshold_strategy_for_node(cache.config, None).cpu_suppress_threshold_percent == 45
    assert len(recorder.events) == 1
    event_type, reason, message = recorder.events[0]
    assert (event_type, reason) == ("Warning", "SLOCfgUnmarshalFailed")
    assert message.startswith(
        "failed to unmarshal ThresholdCfg, err: resource-threshold-config: Invalid value: "
    )
    assert f"invalid JSON: nested deeper than {MAX_JSON_DEPTH} levels" in message
    assert message.endswith("; kept the last good value of resource-threshold-config")
    assert len(message) < 2048, "the Event quotes an excerpt of the value, not all of it"


@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize("shape", SHAPES)
async def test_the_configmap_webhook_refuses_a_deeply_nested_value(shape: Any, depth: int) -> None:
    cm = config_map("slo-controller-config", "koordinator-system", {KEY: shape(depth)})
    response = await Admission(feature_gates=CM_GATES).call("/validate-configmap", review(cm))
    assert response["allowed"] is False
    assert response["status"] == {
        "metadata": {},
        "code": 400,
        "message": '___{"reason":"ParseConfigFail","message":"Failed to parse resourceThreshold config in '
        "configmap koordinator-system/slo-controller-config, err: nested deeper than "
        f'{MAX_JSON_DEPTH} levels"}}___',
    }
