"""The persisted copy of the last good slo-controller-config values, against the fake apiserver.

The leader copies every key's last good value into ``slo-controller-config-last-good``
(owned by the ConfigMap, written only when a good value changes), deletes the copy with
the ConfigMap, ignores a copy written for another ConfigMap, and leaves the NodeSLO
section of a broken key without any known good value as it is.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from controlplane.manager.controllers.sloconfig import LAST_GOOD_ANNOTATION, MANAGED_BY_LABEL
from koordinator.api.sloconfig.config import CONFIG_KEYS
from koordinator.kube import resources as res
from tests.controlplane.manager.controllers.harness import SLOHarness, seed, started_fake
from tests.controlplane.manager.controllers.objects import CONFIG_NAME, CONFIG_NAMESPACE, config_map, node
from tests.polling import eventually
from testsupport.fake import FakeApiServer, Fault

NOW = "2026-01-01T00:00:00Z"
COPY = f"{CONFIG_NAME}-last-good"
THRESHOLD_45 = {"clusterStrategy": {"enable": True, "cpuSuppressThresholdPercent": 45}}
BROKEN = '{"clusterStrategy": {"cpuSuppressThresholdPercent": 45'

Obj = dict[str, Any]


@pytest.fixture
async def fake() -> AsyncIterator[FakeApiServer]:
    server = await started_fake()
    try:
        yield server
    finally:
        await server.stop()


async def leader(fake: FakeApiServer, client: Any) -> SLOHarness:
    """A fresh ControllerSet with the nodeslo controller, as a replica that has just won the lease."""
    harness = SLOHarness(fake, client, NOW, ["nodeslo"])
    await harness.start()
    return harness


def get(fake: FakeApiServer, resource: res.Resource, name: str, namespace: str | None = None) -> Obj | None:
    found = [
        o
        for o in fake.list_objects(resource, namespace)
        if o["metadata"]["name"] == name and o["metadata"].get("namespace") == namespace
    ]
    return found[0] if found else None


def the_copy(fake: FakeApiServer) -> Obj | None:
    return get(fake, res.CONFIG_MAPS, COPY, CONFIG_NAMESPACE)


def threshold(fake: FakeApiServer) -> Any:
    slo = get(fake, res.NODE_SLOS, "a")
    return (
        (slo or {}).get("spec", {}).get("resourceUsedThresholdWithBE", {}).get("cpuSuppressThresholdPercent")
    )


def set_key(fake: FakeApiServer, key: str, text: str) -> None:
    cm = fake.get(res.CONFIG_MAPS, CONFIG_NAME, CONFIG_NAMESPACE)
    cm.setdefault("data", {})[key] = text
    fake.update(res.CONFIG_MAPS, cm)


def warnings(fake: FakeApiServer) -> list[str]:
    return [
        e["message"]
        for e in fake.list_objects(res.EVENTS, CONFIG_NAMESPACE)
        if e["type"] == "Warning" and e["involvedObject"]["name"] == CONFIG_NAME
    ]


async def test_the_last_good_values_are_copied_to_a_configmap_owned_by_the_config(fake):
    seed(fake, [node("a"), config_map(resource_threshold_config=THRESHOLD_45)])
    cm = fake.get(res.CONFIG_MAPS, CONFIG_NAME, CONFIG_NAMESPACE)
    good = cm["data"]["resource-threshold-config"]
    async with fake.client() as client:
        harness = await leader(fake, client)
        try:
            await eventually(lambda: the_copy(fake) is not None)
            copy = the_copy(fake)
            assert copy is not None
            assert copy["metadata"]["labels"] == {MANAGED_BY_LABEL: "koord-manager"}
            assert copy["metadata"]["annotations"] == {LAST_GOOD_ANNOTATION: CONFIG_NAME}
            assert copy["metadata"]["ownerReferences"] == [
                {"apiVersion": "v1", "kind": "ConfigMap", "name": CONFIG_NAME, "uid": cm["metadata"]["uid"]}
            ]
            assert copy["data"] == {**dict.fromkeys(CONFIG_KEYS, ""), "resource-threshold-config": good}
            version = copy["metadata"]["resourceVersion"]

            # a broken key changes no good value: the copy is not written
            set_key(fake, "resource-threshold-config", BROKEN)
            await eventually(lambda: any("kept the last good value" in m for m in warnings(fake)))
            # a good change of another key is copied, the broken key's last good value stays
            burst = json.dumps({"clusterStrategy": {"policy": "auto"}})
            set_key(fake, "cpu-burst-config", burst)
            await eventually(lambda: (the_copy(fake) or {}).get("data", {}).get("cpu-burst-config") == burst)
            copy = the_copy(fake)
            assert copy is not None
            assert copy["data"]["resource-threshold-config"] == good
            assert int(copy["metadata"]["resourceVersion"]) > int(version)
            assert threshold(fake) == 45
        finally:
            await harness.stop()


async def test_deleting_the_configmap_means_the_defaults_and_removes_the_copy(fake):
    seed(fake, [node("a"), config_map(resource_threshold_config=THRESHOLD_45)])
    async with fake.client() as client:
        harness = await leader(fake, client)
        try:
            await eventually(lambda: the_copy(fake) is not None and threshold(fake) == 45)
            fake.delete(res.CONFIG_MAPS, CONFIG_NAME, CONFIG_NAMESPACE)
            await eventually(lambda: threshold(fake) == 65)
            await eventually(lambda: the_copy(fake) is None)
        finally:
            await harness.stop()


async def test_a_copy_written_for_another_configmap_is_ignored_and_the_section_left_as_it_is(fake):
    """The ConfigMap was deleted and created again (broken) while no manager ran: the copy of the old one
    must not be used, and the thresholds every NodeSLO runs with are not reset to the defaults."""
    slo = {
        "apiVersion": "slo.koordinator.sh/v1alpha1",
        "kind": "NodeSLO",
        "metadata": {"name": "a"},
        "spec": {"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": 45}},
    }
    broken = config_map()
    broken["data"]["resource-threshold-config"] = BROKEN
    seed(fake, [node("a"), broken, slo])
    stale = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": COPY,
            "namespace": CONFIG_NAMESPACE,
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "ConfigMap", "name": CONFIG_NAME, "uid": "gone"}
            ],
        },
        "data": {
            "resource-threshold-config": json.dumps({"clusterStrategy": {"cpuSuppressThresholdPercent": 30}})
        },
    }
    fake.create(res.CONFIG_MAPS, stale)
    uid = fake.get(res.CONFIG_MAPS, CONFIG_NAME, CONFIG_NAMESPACE)["metadata"]["uid"]
    async with fake.client() as client:
        harness = await leader(fake, client)
        try:
            await eventually(
                lambda: (
                    (the_copy(fake) or {}).get("metadata", {}).get("ownerReferences", [{}])[0].get("uid")
                    == uid
                )
            )
            await harness.settle("nodeslo")
            assert threshold(fake) == 45
            spec = (get(fake, res.NODE_SLOS, "a") or {})["spec"]
            assert spec["cpuBurstStrategy"]["policy"] == "none", "the other sections are written"
            copy = the_copy(fake)
            assert copy is not None
            assert "resource-threshold-config" not in copy["data"], "no good value of it is known"
            assert any(
                m.endswith(
                    "no good value of resource-threshold-config known: spec.resourceUsedThresholdWithBE of "
                    "every NodeSLO is left as it is until it is fixed, not reset to the defaults"
                )
                for m in warnings(fake)
            )
            # fixed: the new value reaches the NodeSLO
            set_key(fake, "resource-threshold-config", json.dumps({"clusterStrategy": {"enable": True}}))
            await eventually(lambda: threshold(fake) == 65)
        finally:
            await harness.stop()


async def test_a_term_that_ends_stops_writing_the_copy(fake):
    """The copy's writer belongs to the term: once the controllers stopped, it is gone too, even
    while it was retrying a refused write, and no write of the copy is sent after the stop."""
    seed(fake, [node("a"), config_map(resource_threshold_config=THRESHOLD_45)])
    refused = fake.inject(Fault(status=500, times=10_000, method="POST", path="/configmaps$"))

    def copy_writes() -> int:
        return sum(1 for r in fake.requests if r.method == "POST" and r.path.endswith("/configmaps"))

    async with fake.client() as client:
        harness = await leader(fake, client)
        try:
            await eventually(lambda: refused.hits >= 1)
        finally:
            await harness.stop()
        writers = [t for t in asyncio.all_tasks() if t.get_name().startswith("persist ")]
        assert writers == []
        stopped_at = copy_writes()
        await asyncio.sleep(2.5)  # longer than the writer's retry pauses so far (0.5 s, 1 s)
        assert copy_writes() == stopped_at
        assert the_copy(fake) is None
