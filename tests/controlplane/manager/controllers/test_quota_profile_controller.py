"""The quotaprofile controller: a root ElasticQuota per ElasticQuotaProfile, sized by its nodes.

Expected strings (tree ids, scaled quantities, annotation JSON) were produced by upstream's
Go code (``hash/fnv``, ``resource.Quantity``, ``quotav1.Add``, ``MultiplyQuantity``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from controlplane.manager.controllers.quotaprofile_sizing import resource_keys, resource_ratio
from koordinator.kube import resources as res
from tests.controlplane.manager.controllers.harness import SLOHarness, running, seed
from tests.controlplane.manager.controllers.objects import node
from tests.polling import eventually

NOW = "2026-01-01T00:00:00Z"
Q = "quota.scheduling.koordinator.sh/"
MAX = "4611686018427387"
#: fnv64a("team-a/gpu-pool") and fnv64a("team-b/plain"), decimal
GPU_POOL_TREE = "8771519780722960176"
PLAIN_TREE = "8481139928739812720"

Obj = dict[str, Any]


def ready(obj: Obj, status: str = "True", *, cordoned: bool = False) -> Obj:
    # conditions first: the fake apiserver writes a Node's status before its spec, and the
    # informer's managedFields cut (which expects Go's field order) would take a status
    # ending in an array for the end of the metadata
    obj["status"] = {"conditions": [{"type": "Ready", "status": status}], **obj["status"]}
    if cordoned:
        obj["spec"] = {"unschedulable": True}
    return obj


def gpu_nodes() -> list[Obj]:
    return [
        ready(
            node("n1", allocatable=("15", "60Gi"), labels={"pool": "gpu"}, extended={"nvidia.com/gpu": "8"})
        ),
        ready(node("n2", allocatable=("15", "60Gi"), labels={"pool": "gpu"}), cordoned=True),
        ready(node("n3", allocatable=("7500m", "30Gi"), labels={"pool": "gpu"}), "False"),
        ready(node("n4", allocatable=("64", "256Gi"), labels={"pool": "cpu"})),
    ]


def profile(
    name: str = "gpu-pool",
    namespace: str = "team-a",
    *,
    quota_name: str = "gpu-pool-root",
    ratio: str | None = None,
    selector: Obj | None = None,
    quota_labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> Obj:
    spec: Obj = {"quotaName": quota_name, "nodeSelector": selector or {"matchLabels": {"pool": "gpu"}}}
    if ratio is not None:
        spec["resourceRatio"] = ratio
    if quota_labels:
        spec["quotaLabels"] = quota_labels
    meta: Obj = {"name": name, "namespace": namespace}
    if annotations:
        meta["annotations"] = annotations
    return {
        "apiVersion": "quota.koordinator.sh/v1alpha1",
        "kind": "ElasticQuotaProfile",
        "metadata": meta,
        "spec": spec,
    }


def quota_of(harness: SLOHarness, name: str, namespace: str = "team-a") -> Obj | None:
    found = [
        q for q in harness.fake.list_objects(res.ELASTIC_QUOTAS, namespace) if q["metadata"]["name"] == name
    ]
    return found[0] if found else None


async def quota_when(harness: SLOHarness, name: str, check: Any, namespace: str = "team-a") -> Obj:
    await eventually(lambda: (q := quota_of(harness, name, namespace)) is not None and check(q))
    quota = quota_of(harness, name, namespace)
    assert quota is not None
    return quota


async def test_a_profile_creates_its_root_quota_from_the_matching_nodes_scaled_by_the_ratio():
    objects = [*gpu_nodes(), profile(ratio="0.9", quota_labels={"team": "a", Q + "is-root": "false"})]
    async with running(objects, NOW, ["quotaprofile"]) as harness:
        quota = await quota_when(harness, "gpu-pool-root", lambda q: True)
        assert quota["spec"] == {
            "min": {"cpu": "33750m", "memory": "135Gi"},
            "max": {"cpu": MAX, "memory": MAX},
        }
        assert quota["metadata"]["labels"] == {
            Q + "profile": "gpu-pool",
            "team": "a",
            Q + "tree-id": GPU_POOL_TREE,
            Q + "is-root": "true",
        }
        assert quota["metadata"]["annotations"] == {
            Q + "total-resource": '{"cpu":"33750m","memory":"135Gi","nvidia.com/gpu":"7","pods":"297"}',
            Q + "unschedulable-resource": '{"cpu":"20250m","memory":"81Gi","pods":"198"}',
        }
        labelled = harness.fake.get(res.ELASTIC_QUOTA_PROFILES, "gpu-pool", "team-a")
        assert labelled["metadata"]["labels"] == {Q + "tree-id": GPU_POOL_TREE}


@pytest.mark.parametrize(
    ("ratio", "cpu", "memory"),
    [
        pytest.param(None, "37500m", "150Gi", id="no-ratio"),
        pytest.param("1.5", "37500m", "150Gi", id="above-one-counts-as-one"),
        pytest.param("0", "37500m", "150Gi", id="zero-counts-as-one"),
        pytest.param("0.5", "18750m", "75Gi", id="half"),
    ],
)
async def test_the_ratio_applies_only_within_zero_to_one(ratio, cpu, memory):
    async with running([*gpu_nodes(), profile(ratio=ratio)], NOW, ["quotaprofile"]) as harness:
        quota = await quota_when(harness, "gpu-pool-root", lambda q: True)
        assert quota["spec"]["min"] == {"cpu": cpu, "memory": memory}


async def test_resource_keys_choose_the_quota_dimensions_and_missing_ones_are_zero():
    keys = {Q + "resource-keys": json.dumps(["cpu", "nvidia.com/gpu", "example.com/fpga"])}
    async with running([*gpu_nodes(), profile(annotations=keys)], NOW, ["quotaprofile"]) as harness:
        quota = await quota_when(harness, "gpu-pool-root", lambda q: True)
        assert quota["spec"] == {
            "min": {"cpu": "37500m", "example.com/fpga": "0", "nvidia.com/gpu": "8"},
            "max": {"cpu": MAX, "example.com/fpga": MAX, "nvidia.com/gpu": MAX},
        }


async def test_an_existing_quota_keeps_foreign_labels_and_annotations_and_is_not_rewritten_when_equal():
    existing = {
        "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
        "kind": "ElasticQuota",
        "metadata": {
            "name": "plain-root",
            "namespace": "team-b",
            "labels": {"owner": "ops", Q + "tree-id": "stale"},
            "annotations": {Q + "shared-weight": '{"cpu":"1"}'},
        },
        "spec": {"min": {"cpu": "1"}, "max": {"cpu": "2"}},
    }
    plain = profile("plain", "team-b", quota_name="plain-root", selector={"matchLabels": {"pool": "cpu"}})
    async with running([*gpu_nodes(), existing, plain], NOW, ["quotaprofile"]) as harness:
        quota = await quota_when(
            harness, "plain-root", lambda q: q["metadata"]["labels"].get(Q + "tree-id") != "stale", "team-b"
        )
        assert quota["metadata"]["labels"] == {
            "owner": "ops",
            Q + "tree-id": PLAIN_TREE,
            Q + "profile": "plain",
            Q + "is-root": "true",
        }
        assert quota["metadata"]["annotations"] == {
            Q + "shared-weight": '{"cpu":"1"}',
            Q + "total-resource": '{"cpu":"64","memory":"256Gi","pods":"110"}',
            Q + "unschedulable-resource": "{}",
        }
        assert quota["spec"] == {"min": {"cpu": "64", "memory": "256Gi"}, "max": {"cpu": MAX, "memory": MAX}}
        version = quota["metadata"]["resourceVersion"]
        reconciled = harness.reconciles("quotaprofile")
        harness.clock.advance(10)
        await harness.settle("quotaprofile", at_least=reconciled + 1)
        again = quota_of(harness, "plain-root", "team-b")
        assert again is not None
        assert again["metadata"]["resourceVersion"] == version


async def test_node_changes_reach_the_quota_at_the_next_periodic_reconcile():
    async with running([*gpu_nodes(), profile()], NOW, ["quotaprofile"]) as harness:
        await quota_when(harness, "gpu-pool-root", lambda q: True)
        seed(harness.fake, [ready(node("n5", allocatable=("2500m", "10Gi"), labels={"pool": "gpu"}))])

        def grown() -> bool:
            harness.clock.advance(10)  # the periodic reconcile, not a watch, brings node changes
            quota = quota_of(harness, "gpu-pool-root")
            return quota is not None and quota["spec"]["min"]["cpu"] == "40"

        await eventually(grown)
        quota = quota_of(harness, "gpu-pool-root")
        assert quota is not None
        assert quota["spec"]["min"] == {"cpu": "40", "memory": "160Gi"}


async def test_a_refused_create_is_told_on_the_profile():
    async with running([*gpu_nodes(), profile(quota_name="Not_A_Name")], NOW, ["quotaprofile"]) as harness:

        def refusals() -> list[Obj]:
            return [
                e
                for e in harness.fake.list_objects(res.EVENTS, "team-a")
                if e["reason"] == "CreateQuotaFailed"
            ]

        await eventually(lambda: refusals() != [])
        event = refusals()[0]
        assert event["type"] == "Warning"
        assert event["involvedObject"]["kind"] == "ElasticQuotaProfile"
        assert event["involvedObject"]["name"] == "gpu-pool"
        assert event["source"]["component"] == "quotaprofile-controller"
        assert event["message"].startswith("failed to create quota, err: ")
        assert "Not_A_Name" in event["message"]


@pytest.mark.parametrize(
    ("annotation", "keys"),
    [
        pytest.param(None, ["cpu", "memory"], id="absent"),
        pytest.param('["nvidia.com/gpu"]', ["nvidia.com/gpu"], id="list"),
        pytest.param("null", [], id="null-is-none"),
        pytest.param("[1]", ["cpu", "memory"], id="not-strings"),
        pytest.param("{oops", ["cpu", "memory"], id="not-json"),
    ],
)
def test_resource_keys_annotation(annotation, keys):
    annotations = {Q + "resource-keys": annotation} if annotation is not None else None
    assert resource_keys(profile(annotations=annotations)) == keys


@pytest.mark.parametrize(
    ("raw", "ratio"),
    [
        pytest.param(None, None, id="unset"),
        pytest.param("0.25", 0.25, id="valid"),
        pytest.param("1", 1.0, id="one"),
        pytest.param("abc", 1.0, id="unparsable"),
        pytest.param("-0.5", 1.0, id="negative"),
    ],
)
def test_resource_ratio(raw, ratio):
    assert resource_ratio(profile(ratio=raw)) == ratio
