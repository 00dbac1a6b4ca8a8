"""A failover while a slo-controller-config key is broken must not reset the NodeSLOs to defaults.

Leader A runs with ``cpuSuppressThresholdPercent: 45``; the key is then broken and A keeps
45. A stops and a new leader B -- a fresh ControllerSet with fresh informers, exactly what
a replica that wins the lease runs -- takes over. Before the last good values were
persisted, B knew nothing of 45: it fell back to the defaults and rewrote every NodeSLO to
65 while A's log still said the last good value was kept. B must find A's copy and keep
45; and with no copy at all it must leave the thresholds as they are.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from koordinator.kube import resources as res
from tests.controlplane.manager.controllers.harness import SLOHarness, seed, started_fake
from tests.controlplane.manager.controllers.objects import CONFIG_NAME, CONFIG_NAMESPACE, config_map, node
from tests.polling import eventually
from testsupport.fake import FakeApiServer

NOW = "2026-01-01T00:00:00Z"
KEY = "resource-threshold-config"
COPY = f"{CONFIG_NAME}-last-good"
GOOD = {"clusterStrategy": {"enable": True, "cpuSuppressThresholdPercent": 45}}
BROKEN = '{"clusterStrategy": {"enable": true, "cpuSuppressThresholdPercent": 45'
NODES = ("a", "b", "c")

Obj = dict[str, Any]


@pytest.fixture
async def fake() -> AsyncIterator[FakeApiServer]:
    server = await started_fake()
    try:
        seed(server, [*(node(name) for name in NODES), config_map(resource_threshold_config=GOOD)])
        yield server
    finally:
        await server.stop()


def thresholds(fake: FakeApiServer) -> dict[str, Any]:
    return {
        slo["metadata"]["name"]: slo.get("spec", {})
        .get("resourceUsedThresholdWithBE", {})
        .get("cpuSuppressThresholdPercent")
        for slo in fake.list_objects(res.NODE_SLOS)
    }


def the_copy(fake: FakeApiServer) -> Obj | None:
    found = [o for o in fake.list_objects(res.CONFIG_MAPS, CONFIG_NAMESPACE) if o["metadata"]["name"] == COPY]
    return found[0] if found else None


def warnings(fake: FakeApiServer) -> list[str]:
    return [e["message"] for e in fake.list_objects(res.EVENTS, CONFIG_NAMESPACE) if e["type"] == "Warning"]


def break_the_key(fake: FakeApiServer) -> None:
    cm = fake.get(res.CONFIG_MAPS, CONFIG_NAME, CONFIG_NAMESPACE)
    cm["data"][KEY] = BROKEN
    fake.update(res.CONFIG_MAPS, cm)


async def leader_a_keeps_45_with_the_key_broken(fake: FakeApiServer, client: Any, *, persisted: bool) -> None:
    """Leader A applies 45, the key breaks, A keeps 45 (and, when ``persisted``, has copied it)."""
    a = SLOHarness(fake, client, NOW, ["nodeslo"])
    await a.start()
    try:
        await eventually(lambda: thresholds(fake) == dict.fromkeys(NODES, 45))
        if persisted:
            good = json.dumps(GOOD)
            await eventually(lambda: (the_copy(fake) or {}).get("data", {}).get(KEY) == good)
        break_the_key(fake)
        await eventually(lambda: any("failed to unmarshal ThresholdCfg" in m for m in warnings(fake)))
        await a.settle("nodeslo")
        assert thresholds(fake) == dict.fromkeys(NODES, 45)
    finally:
        await a.stop()


async def new_leader_settles(fake: FakeApiServer, client: Any) -> SLOHarness:
    b = SLOHarness(fake, client, NOW, ["nodeslo"])
    await b.start()
    await b.settle("nodeslo", at_least=len(NODES))
    return b


async def test_the_new_leader_keeps_the_persisted_last_good_value(fake):
    async with fake.client() as client:
        await leader_a_keeps_45_with_the_key_broken(fake, client, persisted=True)
        assert any(m.endswith(f"kept the last good value of {KEY}") for m in warnings(fake))
        b = await new_leader_settles(fake, client)
        try:
            assert thresholds(fake) == dict.fromkeys(NODES, 45), "the new leader reset the thresholds"
            assert any(
                m.endswith(
                    f"kept the last good value of {KEY}, read from ConfigMap {CONFIG_NAMESPACE}/{COPY}"
                )
                for m in warnings(fake)
            )
            # the new leader is really at work: a good change of another key reaches the NodeSLOs
            cm = fake.get(res.CONFIG_MAPS, CONFIG_NAME, CONFIG_NAMESPACE)
            cm["data"]["cpu-burst-config"] = json.dumps({"clusterStrategy": {"policy": "auto"}})
            fake.update(res.CONFIG_MAPS, cm)
            await eventually(
                lambda: all(
                    slo["spec"]["cpuBurstStrategy"]["policy"] == "auto"
                    for slo in fake.list_objects(res.NODE_SLOS)
                )
            )
            assert thresholds(fake) == dict.fromkeys(NODES, 45)
        finally:
            await b.stop()


async def test_without_any_copy_the_new_leader_leaves_the_thresholds_as_they_are(fake):
    """No copy (written by no one: a manager of an older version led, or it was deleted by hand)."""
    async with fake.client() as client:
        await leader_a_keeps_45_with_the_key_broken(fake, client, persisted=False)
        if the_copy(fake) is not None:
            fake.delete(res.CONFIG_MAPS, COPY, CONFIG_NAMESPACE)
        b = await new_leader_settles(fake, client)
        try:
            assert thresholds(fake) == dict.fromkeys(NODES, 45), "the new leader reset the thresholds"
            assert any(
                m.endswith("not reset to the defaults") and f"no good value of {KEY}" in m
                for m in warnings(fake)
            )
        finally:
            await b.stop()
