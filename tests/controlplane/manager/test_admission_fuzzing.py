"""Fuzzing: 100k random and malformed AdmissionReviews; every answer is a valid AdmissionReview.

Most reviews go through the in-process entry point (:meth:`AdmissionDispatcher.review`,
what the server calls for every request); a share is POSTed to the real aiohttp server
over TLS, which must stay up and keep answering. Every webhook is enabled and the cluster
holds a profile that matches every pod (with a strategic-merge patch), a quota tree, node
strategies and ConfigMaps, so the generated objects reach every handler.

Checked for every reply: JSON; ``apiVersion`` one of the two review versions (the one sent
when it was readable); ``kind: AdmissionReview``; a ``response`` with a string ``uid`` (the
one sent when readable), a boolean ``allowed`` and a ``status.code`` of 200, 400 or 403 --
never an internal error; a patch only on allowed answers, as base64 JSON that applies
cleanly to the object that was sent.

Deep reviews: objects, arrays and both alternating, nested 50 to 5000 levels deep as the
object, the old object, a ``spec`` field or an annotation value, on every served path --
answered with a 400 error review past the nesting limit (the decoder's own 1024-level
limit beyond that), never a 500 from a RecursionError; a grid of depths around the
limits for every path, and hypothesis-drawn ones in process and over TLS.
"""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import random
import socket
import ssl
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controlplane.manager.certs import ServingTLS, generate_bundle
from controlplane.manager.server import webhook_app
from controlplane.manager.webhooks.review import MAX_NESTING_DEPTH
from controlplane.reactor.serving import start_site
from tests.controlplane.manager.builders import (
    Admission,
    config_map,
    namespace,
    node,
    priority_class,
    profile,
    quota,
)

#: The bulk: hypothesis draws a seed per example and a fast generator expands it into a batch of
#: reviews (a hypothesis-built review costs ~4 ms; expanding a seed ~0.1 ms per review). A failure
#: reports the seed, which reproduces the batch exactly.
BULK_EXAMPLES = 200
BULK_BATCH = 500
#: Fully hypothesis-generated (shrinkable) reviews, one per example.
STRUCTURED_EXAMPLES = 1000
#: Over TLS through the real aiohttp server: seeded batches and structured examples.
TLS_BULK_EXAMPLES = 25
TLS_BULK_BATCH = 200
TLS_STRUCTURED_EXAMPLES = 200
#: Deeply nested reviews: hypothesis-drawn in process, and over TLS.
DEEP_EXAMPLES = 300
TLS_DEEP_EXAMPLES = 60
VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")

CLUSTER = [
    namespace("default", team="a"),
    priority_class("koord-batch", 5000),
    profile(
        "everything",
        namespaceSelector={"matchLabels": {"team": "a"}},
        qosClass="BE",
        priorityClassName="koord-batch",
        labelKeysMapping={"app": "app-copy"},
        labelSuffixes={"app": "-x"},
        patch={"spec": {"containers": [{"name": "main", "env": [{"name": "FUZZ", "value": "1"}]}]}},
        probability="50%",
    ),
    quota(
        "parent",
        max={"cpu": "10", "memory": "10Gi"},
        min={"cpu": "5"},
        labels={"quota.scheduling.koordinator.sh/is-parent": "true"},
    ),
    quota(
        "leaf",
        max={"cpu": "10", "memory": "10Gi"},
        min={"cpu": "1"},
        labels={"quota.scheduling.koordinator.sh/parent": "parent"},
    ),
    node("n1", {"pool": "a"}),
    config_map(
        "slo-controller-config",
        "koordinator-system",
        {
            "resource-threshold-config": json.dumps(
                {"nodeStrategies": [{"name": "a", "nodeSelector": {"matchLabels": {"pool": "a"}}}]}
            )
        },
    ),
    config_map(
        "pod-enhanced-validator-config",
        "koordinator-system",
        {"enable": "true", "rules": '[{"name":"r","requiredLabels":["team"]}]'},
    ),
]
ALL_GATES = "AllAlpha=true"


def fuzz_admission() -> Admission:
    return Admission(CLUSTER, feature_gates=ALL_GATES, draw=7)


# ---- strategies --------------------------------------------------------------------------------------

text = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)
keys = (
    st.sampled_from(
        [
            "app",
            "team",
            "koordinator.sh/qosClass",
            "koordinator.sh/priority",
            "koordinator.sh/priority-class",
            "quota.scheduling.koordinator.sh/name",
            "quota.scheduling.koordinator.sh/parent",
            "quota.scheduling.koordinator.sh/is-parent",
            "quota.scheduling.koordinator.sh/tree-id",
            "quota.scheduling.koordinator.sh/shared-weight",
            "quota.scheduling.koordinator.sh/namespaces",
            "node.koordinator.sh/extended-resource-spec",
            "node.koordinator.sh/resource-amplification-ratio",
            "node.koordinator.sh/raw-allocatable",
            "scheduling.koordinator.sh/reserve-pod",
        ]
    )
    | text
)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | text
)
json_values = st.recursive(
    json_scalars, lambda c: st.lists(c, max_size=3) | st.dictionaries(text, c, max_size=3), max_leaves=8
)
quantities = st.sampled_from(
    ["0", "1", "500m", "1.5", "2Gi", "1e3", "-1", "0.1m", "99999999999999999999Ei", "abc", "", "1Ki"]
) | st.integers(-5, 10**6)
label_values = (
    st.sampled_from(
        [
            "BE",
            "LS",
            "LSR",
            "LSE",
            "SYSTEM",
            "koord-batch",
            "koord-prod",
            "true",
            "false",
            "1000",
            "0x10",
            "parent",
            "leaf",
            "a",
            "{}",
            "[]",
            '{"cpu":1.5}',
            '{"cpu":"1"}',
        ]
    )
    | text
)
resource_names = st.sampled_from(
    [
        "cpu",
        "memory",
        "kubernetes.io/batch-cpu",
        "kubernetes.io/batch-memory",
        "koordinator.sh/gpu",
        "koordinator.sh/gpu-core",
        "koordinator.sh/gpu-memory",
        "koordinator.sh/gpu-memory-ratio",
        "koordinator.sh/gpu.shared",
    ]
)
resource_lists = st.dictionaries(resource_names, quantities, max_size=4)
maybe_broken = st.one_of(st.just(None), json_values)


@st.composite
def metadata(draw: st.DrawFn) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": draw(st.sampled_from(["p", "leaf", "parent", "new-quota", "slo-controller-config"]))
    }
    if draw(st.booleans()):
        meta["namespace"] = draw(st.sampled_from(["default", "koordinator-system", "other", ""]))
    if draw(st.booleans()):
        meta["labels"] = draw(st.dictionaries(keys, label_values, max_size=4))
    if draw(st.booleans()):
        meta["annotations"] = draw(st.dictionaries(keys, label_values, max_size=3))
    if draw(st.integers(0, 9)) == 0:
        meta[draw(st.sampled_from(["labels", "annotations", "name"]))] = draw(json_values)
    return meta


@st.composite
def containers(draw: st.DrawFn) -> dict[str, Any]:
    container: dict[str, Any] = {"name": draw(st.sampled_from(["main", "side", ""]))}
    resources: dict[str, Any] = {}
    for which in ("requests", "limits"):
        if draw(st.booleans()):
            resources[which] = draw(resource_lists)
    wants_resources: bool = bool(resources) or draw(st.booleans())
    if wants_resources:
        container["resources"] = resources
    if draw(st.integers(0, 9)) == 0:
        container["resources"] = draw(json_values)
    return container


@st.composite
def objects(draw: st.DrawFn) -> Any:
    kind = draw(
        st.sampled_from(["Pod", "Pod", "Pod", "ElasticQuota", "Node", "ConfigMap", "Reservation", "junk"])
    )
    if kind == "junk":
        return draw(json_values)
    obj: dict[str, Any] = {"kind": kind, "metadata": draw(metadata())}
    if kind == "Pod":
        spec: dict[str, Any] = {"containers": draw(st.lists(containers(), max_size=3))}
        if draw(st.booleans()):
            spec["initContainers"] = draw(st.lists(containers(), max_size=2))
        if draw(st.booleans()):
            spec["priority"] = draw(st.integers(-1, 10000) | st.sampled_from([2**31, "9000", 1.5]))
        if draw(st.booleans()):
            spec["overhead"] = draw(resource_lists)
        obj["spec"] = spec
    elif kind == "ElasticQuota":
        obj["spec"] = {"min": draw(resource_lists), "max": draw(resource_lists)}
        if draw(st.booleans()):
            obj["status"] = {"used": draw(resource_lists)}
    elif kind == "Node":
        obj["status"] = {"allocatable": draw(resource_lists)}
    elif kind == "ConfigMap":
        obj["data"] = draw(
            st.dictionaries(
                st.sampled_from(
                    [
                        "colocation-config",
                        "resource-threshold-config",
                        "system-config",
                        "cpu-burst-config",
                        "x",
                    ]
                ),
                st.sampled_from(
                    ["{}", "{", '{"enable":true}', '{"nodeStrategies":[{"nodeSelector":{}}]}', "[]", "null"]
                )
                | json_values.map(lambda v: json.dumps(v)),
                max_size=3,
            )
        )
    else:
        obj["spec"] = {
            "template": draw(
                st.one_of(st.none(), st.just({"spec": {"containers": [{"name": "c"}]}}), json_values)
            )
        }
    if draw(st.integers(0, 14)) == 0:
        obj[draw(st.sampled_from(["spec", "metadata", "status", "data"]))] = draw(json_values)
    return obj


@st.composite
def reviews(draw: st.DrawFn) -> tuple[bytes, Any]:
    """(body, the object sent or None)."""
    shape = draw(st.integers(0, 19))
    if shape == 0:
        return draw(st.binary(max_size=64)), None
    if shape == 1:
        return orjson.dumps(draw(json_values)), None
    obj = draw(objects())
    old = draw(st.one_of(st.none(), objects()))
    request: dict[str, Any] = {
        "uid": draw(st.uuids().map(str) | st.just("")),
        "operation": draw(st.sampled_from(["CREATE", "CREATE", "UPDATE", "DELETE", "CONNECT"])),
        "resource": {
            "group": "",
            "version": "v1",
            "resource": draw(
                st.sampled_from(["pods", "elasticquotas", "nodes", "configmaps", "reservations", "x"])
            ),
        },
        "subResource": draw(st.sampled_from(["", "", "status", "binding"])),
        "namespace": draw(st.sampled_from(["default", "koordinator-system", "other", ""])),
        "name": draw(st.sampled_from(["p", "leaf", "slo-controller-config", ""])),
        "userInfo": {"username": draw(st.sampled_from(["koord-scheduler", "someone", ""]))},
        "dryRun": draw(st.booleans()),
    }
    if obj is not None:
        request["object"] = obj
    if old is not None:
        request["oldObject"] = old
    review: dict[str, Any] = {
        "apiVersion": draw(st.sampled_from(VERSIONS)),
        "kind": "AdmissionReview",
        "request": request,
    }
    if shape == 2:
        # corrupt one field of an otherwise well-formed review
        target = draw(st.sampled_from(["apiVersion", "kind", "request"]))
        review[target] = draw(json_values)
    elif shape == 3:
        request[draw(st.sampled_from(list(request)))] = draw(json_values)
    return orjson.dumps(review), obj if isinstance(obj, dict) else None


# ---- deep reviews --------------------------------------------------------------------------------------

DEEP_KINDS = ("object", "array", "mixed")
#: Where the deep value goes, and how many levels sit above it (``object`` is level 1).
DEEP_PLACES = {"object": 0, "oldObject": 0, "spec": 1, "annotation": 3}


def deep_json(depth: int, kind: str) -> bytes:
    """``depth`` levels of objects, arrays or both alternating, as JSON text (built without recursion)."""
    openers: list[bytes] = []
    closers: list[bytes] = []
    for level in range(depth):
        if kind == "object" or (kind == "mixed" and level % 2 == 0):
            openers.append(b'{"k":')
            closers.append(b"}")
        else:
            openers.append(b"[")
            closers.append(b"]")
    return b"".join(openers) + b'"leaf"' + b"".join(reversed(closers))


def deep_review(depth: int, kind: str, place: str, operation: str, uid: str, api_version: str) -> bytes:
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "annotations": {"a": "b"}, "labels": {"app": "x"}},
        "spec": {"containers": [{"name": "main", "resources": {"requests": {"cpu": "1"}}}]},
    }
    request: dict[str, Any] = {
        "uid": uid,
        "operation": operation,
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": "default",
        "name": "p",
        "object": pod,
    }
    if operation in ("UPDATE", "DELETE"):
        request["oldObject"] = dict(pod)
    if place == "object":
        request["object"] = "DEEP"
    elif place == "oldObject":
        request["oldObject"] = "DEEP"
    elif place == "spec":
        request["object"] = {**pod, "spec": {**pod["spec"], "affinity": "DEEP"}}
    else:
        request["object"] = {**pod, "metadata": {**pod["metadata"], "annotations": {"deep": "DEEP"}}}
    body = orjson.dumps({"apiVersion": api_version, "kind": "AdmissionReview", "request": request})
    return body.replace(b'"DEEP"', deep_json(depth, kind))


@st.composite
def deep_reviews(draw: st.DrawFn) -> tuple[bytes, Any, int]:
    """(body, the object sent when it decodes, the nesting of the deepest request field)."""
    place = draw(st.sampled_from(sorted(DEEP_PLACES)))
    kind = draw(st.sampled_from(DEEP_KINDS if place not in ("object", "oldObject") else ("object", "mixed")))
    depth = draw(st.integers(50, 5000) | st.sampled_from([99, 100, 101, 1021, 1022, 1023]))
    body = deep_review(
        depth,
        kind,
        place,
        draw(st.sampled_from(["CREATE", "UPDATE", "DELETE"])),
        draw(st.uuids().map(str)),
        draw(st.sampled_from(VERSIONS)),
    )
    return body, sent_object(body), depth + DEEP_PLACES[place]


def sent_object(body: bytes) -> Any:
    try:
        review = orjson.loads(body)
    except orjson.JSONDecodeError:  # past the decoder's own limit
        return None
    obj = review["request"].get("object")
    return obj if isinstance(obj, dict) else None


def check_deep_reply(body: bytes, sent: Any, nesting: int, reply: bytes) -> None:
    check_reply(body, sent, reply)
    status = orjson.loads(reply)["response"]["status"]
    if nesting > MAX_NESTING_DEPTH:
        assert status["code"] == 400, status
        assert (
            status["message"] == f"object nesting exceeds {MAX_NESTING_DEPTH} levels"
            or "depth limit exceeded" in status["message"]
        ), status


# ---- checks -----------------------------------------------------------------------------------------


def check_reply(body: bytes, sent: Any, reply: bytes) -> None:
    answer = orjson.loads(reply)
    assert isinstance(answer, dict)
    assert answer["kind"] == "AdmissionReview"
    assert answer["apiVersion"] in VERSIONS
    response = answer["response"]
    assert isinstance(response["uid"], str)
    assert isinstance(response["allowed"], bool)
    status = response["status"]
    assert status["code"] in (200, 400, 403), status
    assert "internal error" not in status.get("message", "")
    try:
        review = orjson.loads(body)
    except orjson.JSONDecodeError:
        review = None
    request = review.get("request") if isinstance(review, dict) else None
    if (
        isinstance(review, dict)
        and review.get("apiVersion") in VERSIONS
        and review.get("kind") == "AdmissionReview"
    ):
        assert answer["apiVersion"] == review["apiVersion"]
        if isinstance(request, dict) and isinstance(request.get("uid"), str):
            assert response["uid"] == request["uid"]
    if "patch" in response:
        assert response["allowed"] is True
        assert response["patchType"] == "JSONPatch"
        operations = orjson.loads(base64.b64decode(response["patch"]))
        assert isinstance(operations, list)
        assert operations
        assert isinstance(sent, dict)
        jsonpatch.apply_patch(sent, operations)


def fuzz_settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
        ],
    )


# ---- the fast generator for the bulk ------------------------------------------------------------------

POOL_KEYS = [
    "app",
    "team",
    "koordinator.sh/qosClass",
    "koordinator.sh/priority",
    "koordinator.sh/priority-class",
    "quota.scheduling.koordinator.sh/name",
    "quota.scheduling.koordinator.sh/parent",
    "quota.scheduling.koordinator.sh/is-parent",
    "quota.scheduling.koordinator.sh/tree-id",
    "quota.scheduling.koordinator.sh/shared-weight",
    "quota.scheduling.koordinator.sh/namespaces",
    "quota.scheduling.koordinator.sh/preemptible",
    "node.koordinator.sh/extended-resource-spec",
    "node.koordinator.sh/resource-amplification-ratio",
    "node.koordinator.sh/raw-allocatable",
    "scheduling.koordinator.sh/reserve-pod",
    "a/b~c",
]
POOL_VALUES = [
    "BE",
    "LS",
    "LSR",
    "LSE",
    "SYSTEM",
    "koord-batch",
    "koord-mid",
    "koord-prod",
    "koord-free",
    "true",
    "false",
    "1000",
    "0x10",
    "-5",
    "parent",
    "leaf",
    "default",
    "",
    "{}",
    "[]",
    "{",
    '{"cpu":1.5}',
    '{"cpu":"1","memory":"1Gi"}',
    '["default"]',
    '{"containers":{}}',
    "\u2028",
    "é",
]
POOL_QUANTITIES: list[Any] = [
    "0",
    "1",
    "2",
    "500m",
    "1500m",
    "1.5",
    "2Gi",
    "512Mi",
    "1e3",
    "-1",
    "0.1m",
    "100",
    "200",
    "150",
    "99999999999999999999Ei",
    "abc",
    "",
    "1Ki",
    1,
    0.5,
    -3,
    True,
    None,
    [],
    {},
]
POOL_RESOURCES = [
    "cpu",
    "memory",
    "kubernetes.io/batch-cpu",
    "kubernetes.io/batch-memory",
    "kubernetes.io/mid-cpu",
    "koordinator.sh/gpu",
    "koordinator.sh/gpu-core",
    "koordinator.sh/gpu-memory",
    "koordinator.sh/gpu-memory-ratio",
    "koordinator.sh/gpu.shared",
    "pods",
]
PLURALS = {
    "Pod": "pods",
    "ElasticQuota": "elasticquotas",
    "Node": "nodes",
    "ConfigMap": "configmaps",
    "Reservation": "reservations",
}
CONFIG_TEXTS = [
    "{}",
    "{",
    "null",
    "[]",
    '{"enable":true}',
    '{"clusterStrategy":{"cpuSuppressThresholdPercent":150}}',
    '{"nodeStrategies":[{"nodeSelector":{}}]}',
    '{"nodeStrategies":[{"name":"a","nodeSelector":{"matchLabels":{"pool":"a"}}},'
    '{"name":"b","nodeSelector":{"matchExpressions":[{"key":"pool","operator":"In","values":["a","b"]}]}}]}',
]


def random_json(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.randrange(10 if depth < 3 else 6)
    if roll == 0:
        return None
    if roll == 1:
        return rng.random() < 0.5
    if roll == 2:
        return rng.randint(-(2**40), 2**40)
    if roll == 3:
        return rng.uniform(-1e6, 1e6)
    if roll in (4, 5):
        return rng.choice(POOL_VALUES)
    if roll in (6, 7):
        return [random_json(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {
        rng.choice([*POOL_KEYS, "spec", "metadata", "x"]): random_json(rng, depth + 1)
        for _ in range(rng.randrange(4))
    }


def random_map(rng: random.Random, pool: list[str], values: list[Any], size: int = 4) -> dict[str, Any]:
    return {rng.choice(pool): rng.choice(values) for _ in range(rng.randrange(size))}


def random_container(rng: random.Random) -> dict[str, Any]:
    container: dict[str, Any] = {"name": rng.choice(["main", "side", ""])}
    resources = {
        which: random_map(rng, POOL_RESOURCES, POOL_QUANTITIES)
        for which in ("requests", "limits")
        if rng.random() < 0.7
    }
    if resources:
        container["resources"] = resources
    return container


def random_object(rng: random.Random, kind: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": rng.choice(["p", "leaf", "parent", "new", "slo-controller-config"])}
    if rng.random() < 0.7:
        meta["namespace"] = rng.choice(["default", "koordinator-system", "other", ""])
    if rng.random() < 0.8:
        meta["labels"] = random_map(rng, POOL_KEYS, POOL_VALUES)
    if rng.random() < 0.5:
        meta["annotations"] = random_map(rng, POOL_KEYS, POOL_VALUES, 3)
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": kind, "metadata": meta}
    if kind == "Pod":
        spec: dict[str, Any] = {"containers": [random_container(rng) for _ in range(rng.randrange(4))]}
        if rng.random() < 0.3:
            spec["initContainers"] = [random_container(rng) for _ in range(rng.randrange(3))]
        if rng.random() < 0.5:
            spec["priority"] = rng.choice([0, 3500, 5500, 7500, 9500, -1, 2**31, 1.5, "9000"])
        if rng.random() < 0.2:
            spec["overhead"] = random_map(rng, POOL_RESOURCES, POOL_QUANTITIES)
        obj["spec"] = spec
    elif kind == "ElasticQuota":
        obj["spec"] = {
            "min": random_map(rng, POOL_RESOURCES, POOL_QUANTITIES),
            "max": random_map(rng, POOL_RESOURCES, POOL_QUANTITIES),
        }
        if rng.random() < 0.3:
            obj["status"] = {"used": random_map(rng, POOL_RESOURCES, POOL_QUANTITIES)}
    elif kind == "Node":
        obj["status"] = {"allocatable": random_map(rng, POOL_RESOURCES, POOL_QUANTITIES)}
        if rng.random() < 0.5:
            obj["status"]["allocatable"] = {
                "cpu": rng.choice(["4", "3500m"]),
                "memory": rng.choice(["8Gi", "1e9"]),
            }
            meta.setdefault("annotations", {})[rng.choice(POOL_KEYS[13:15])] = rng.choice(
                ['{"cpu":1.5}', '{"cpu":2,"memory":1.25}', '{"cpu":"x"}', '{"cpu":"4"}']
            )
    elif kind == "ConfigMap":
        keys = [
            "colocation-config",
            "resource-threshold-config",
            "resource-qos-config",
            "system-config",
            "cpu-burst-config",
        ]
        obj["data"] = random_map(rng, keys, CONFIG_TEXTS, 3)
    else:
        obj["spec"] = {
            "template": rng.choice([None, {"spec": {"containers": [{"name": "c"}]}}, random_json(rng)])
        }
    for field in ("metadata", "spec", "status", "data"):
        if rng.random() < 0.03:
            obj[field] = None  # Go decodes null into the zero value
    return obj


def corrupt(rng: random.Random, node: Any) -> Any:
    """Replace or drop one random descendant (or the node itself) with a random JSON value."""
    if not isinstance(node, dict | list) or not node or rng.random() < 0.25:
        return random_json(rng)
    if isinstance(node, dict):
        key = rng.choice(list(node))
        if rng.random() < 0.3:
            del node[key]
        else:
            node[key] = corrupt(rng, node[key])
    else:
        index = rng.randrange(len(node))
        node[index] = corrupt(rng, node[index])
    return node


def fast_review(rng: random.Random) -> tuple[bytes, Any]:
    shape = rng.randrange(20)
    if shape == 0:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(64))), None
    kind = rng.choice(["Pod", "Pod", "Pod", "ElasticQuota", "Node", "ConfigMap", "Reservation"])
    obj = random_object(rng, kind)
    request: dict[str, Any] = {
        "uid": f"fuzz-{rng.getrandbits(32):08x}",
        "operation": rng.choice(["CREATE", "CREATE", "UPDATE", "DELETE", "CONNECT"]),
        "resource": {"group": "", "version": "v1", "resource": PLURALS[kind] if rng.random() < 0.9 else "x"},
        "subResource": "status"
        if kind == "Node" and rng.random() < 0.5
        else rng.choice(["", "", "", "status", "binding"]),
        "namespace": rng.choice(["default", "koordinator-system", "other", ""]),
        "name": (obj.get("metadata") or {}).get("name", ""),
        "userInfo": {"username": rng.choice(["koord-scheduler", "someone", ""])},
        "dryRun": rng.random() < 0.3,
        "object": obj,
    }
    if request["operation"] in ("UPDATE", "DELETE"):
        request["oldObject"] = random_object(rng, kind)
    review: dict[str, Any] = {
        "apiVersion": rng.choice(VERSIONS),
        "kind": "AdmissionReview",
        "request": request,
    }
    if shape in (1, 2, 3, 4):
        review = corrupt(rng, review)
    body = orjson.dumps(review)
    if shape == 5:
        body = body[: rng.randrange(len(body))]
    sent = (
        review.get("request", {}).get("object")
        if isinstance(review, dict) and isinstance(review.get("request"), dict)
        else None
    )
    return body, sent if isinstance(sent, dict) else None


def test_fast_generator_reaches_every_answer():
    """The bulk generator produces allowed, patched and refused answers on every path."""
    admission = fuzz_admission()
    rng = random.Random(20260101)
    outcomes: dict[str, set[str]] = {path: set() for path in admission.dispatcher.paths}
    loop = asyncio.new_event_loop()
    try:
        for _ in range(4000):
            path = rng.choice(admission.dispatcher.paths)
            body, _sent = fast_review(rng)
            response = orjson.loads(loop.run_until_complete(admission.dispatcher.review(path, body)))[
                "response"
            ]
            kind = (
                "patched"
                if "patch" in response
                else "allowed"
                if response["allowed"]
                else f"refused-{response['status']['code']}"
            )
            outcomes[path].add(kind)
    finally:
        loop.close()
    for path, seen in outcomes.items():
        assert "allowed" in seen, path
        assert "refused-400" in seen, path
    assert "patched" in outcomes["/mutate-pod"]
    assert "patched" in outcomes["/mutate-scheduling-sigs-k8s-io-v1alpha1-elasticquota"]
    assert "patched" in outcomes["/mutate-node-status"]


@pytest.fixture(scope="module", autouse=True)
def cel_recursion_limit() -> Iterator[None]:
    """The CEL engine behind the slo-controller-config checks sets the recursion limit to 2500 on first
    use; set it first, so hypothesis does not see the limit change under it (and warn)."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(max(before, 2500))
    yield
    sys.setrecursionlimit(before)


@pytest.fixture(scope="module")
def admission() -> Admission:
    return fuzz_admission()


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    event_loop = asyncio.new_event_loop()
    yield event_loop
    event_loop.close()


def test_fuzzed_reviews_in_process_bulk(admission, loop):
    paths = admission.dispatcher.paths
    total = [0]

    @fuzz_settings(BULK_EXAMPLES)
    @given(st.integers(0, 2**64 - 1))
    def bulk(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(BULK_BATCH):
            path = rng.choice(paths)
            body, sent = fast_review(rng)
            check_reply(body, sent, loop.run_until_complete(admission.dispatcher.review(path, body)))
            total[0] += 1

    bulk()
    assert total[0] >= BULK_EXAMPLES * BULK_BATCH


def test_fuzzed_reviews_in_process_structured(admission, loop):
    total = [0]

    @fuzz_settings(STRUCTURED_EXAMPLES)
    @given(st.sampled_from(admission.dispatcher.paths), reviews())
    def structured(path: str, generated: tuple[bytes, Any]) -> None:
        body, sent = generated
        check_reply(body, sent, loop.run_until_complete(admission.dispatcher.review(path, body)))
        total[0] += 1

    structured()
    assert total[0] >= STRUCTURED_EXAMPLES


def test_deep_reviews_on_every_path_grid(admission, loop):
    """Every path, every place and kind, depths around the nesting limit and the decoder's.

    Under Python's default recursion limit (1000), which the server runs with until the CEL
    engine raises it (hypothesis raises it too while it runs a test, so this grid does not use
    hypothesis).
    """
    count = 0
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    try:
        for path in admission.dispatcher.paths:
            for place, above in DEEP_PLACES.items():
                kinds = DEEP_KINDS if place not in ("object", "oldObject") else ("object", "mixed")
                for kind in kinds:
                    for depth in (50, 98, 99, 100, 101, 300, 500, 1000, 1022, 1023, 5000):
                        for operation in ("CREATE", "UPDATE"):
                            uid, version = f"deep-{count}", VERSIONS[count % 2]
                            body = deep_review(depth, kind, place, operation, uid, version)
                            reply = loop.run_until_complete(admission.dispatcher.review(path, body))
                            check_deep_reply(body, sent_object(body), depth + above, reply)
                            count += 1
    finally:
        sys.setrecursionlimit(before)
    assert count == len(admission.dispatcher.paths) * 10 * 11 * 2


def test_deep_reviews_in_process(admission, loop):
    total = [0]

    @fuzz_settings(DEEP_EXAMPLES)
    @given(st.sampled_from(admission.dispatcher.paths), deep_reviews())
    def deep(path: str, generated: tuple[bytes, Any, int]) -> None:
        body, sent, nesting = generated
        check_deep_reply(
            body, sent, nesting, loop.run_until_complete(admission.dispatcher.review(path, body))
        )
        total[0] += 1

    deep()
    assert total[0] >= DEEP_EXAMPLES


class ServerThread:
    """The real aiohttp webhook app over TLS, on its own event loop in a thread."""

    def __init__(self, tmp: Path) -> None:
        self.admission = fuzz_admission()
        self.bundle = generate_bundle("localhost")
        (tmp / "cert.pem").write_bytes(self.bundle.cert)
        (tmp / "key.pem").write_bytes(self.bundle.key)
        self.tls = ServingTLS()
        self.tls.load(tmp / "cert.pem", tmp / "key.pem", self.bundle)
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    async def _ready(self) -> str:
        return ""

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        app = webhook_app(self.admission.dispatcher, self._ready)
        self.site = self.loop.run_until_complete(start_site(app, "127.0.0.1", 0, self.tls.context))
        self.port = self.site.port
        self._started.set()
        self.loop.run_forever()

    def __enter__(self) -> ServerThread:
        self._thread.start()
        assert self._started.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.site.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()

    def connection(self) -> http.client.HTTPSConnection:
        context = ssl.create_default_context(cadata=self.bundle.ca_cert.decode())
        connection = http.client.HTTPSConnection("localhost", self.port, context=context, timeout=30)
        connection.connect()
        assert connection.sock is not None
        connection.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return connection


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerThread]:
    with ServerThread(tmp_path) as running:
        yield running


def post(
    server: ServerThread, connection: http.client.HTTPSConnection, path: str, body: bytes, sent: Any
) -> None:
    connection.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    reply = response.read()
    assert response.status == 200, reply
    check_reply(body, sent, reply)


def test_fuzzed_reviews_over_tls_bulk(server):
    paths = server.admission.dispatcher.paths
    connection = server.connection()
    total = [0]

    @fuzz_settings(TLS_BULK_EXAMPLES)
    @given(st.integers(0, 2**64 - 1))
    def bulk(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(TLS_BULK_BATCH):
            post(server, connection, rng.choice(paths), *fast_review(rng))
            total[0] += 1

    try:
        bulk()
    finally:
        connection.close()
    assert total[0] >= TLS_BULK_EXAMPLES * TLS_BULK_BATCH
    assert_still_serving(server)


def test_fuzzed_reviews_over_tls_structured(server):
    connection = server.connection()
    total = [0]

    @fuzz_settings(TLS_STRUCTURED_EXAMPLES)
    @given(st.sampled_from(server.admission.dispatcher.paths), reviews())
    def structured(path: str, generated: tuple[bytes, Any]) -> None:
        post(server, connection, path, *generated)
        total[0] += 1

    try:
        structured()
    finally:
        connection.close()
    assert total[0] >= TLS_STRUCTURED_EXAMPLES
    assert_still_serving(server)


def test_deep_reviews_over_tls(server):
    connection = server.connection()
    total = [0]

    @fuzz_settings(TLS_DEEP_EXAMPLES)
    @given(st.sampled_from(server.admission.dispatcher.paths), deep_reviews())
    def deep(path: str, generated: tuple[bytes, Any, int]) -> None:
        body, sent, nesting = generated
        connection.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        reply = response.read()
        assert response.status == 200, reply
        check_deep_reply(body, sent, nesting, reply)
        total[0] += 1

    try:
        deep()
    finally:
        connection.close()
    assert total[0] >= TLS_DEEP_EXAMPLES
    assert_still_serving(server)


def assert_still_serving(server: ServerThread) -> None:
    fresh = server.connection()
    fresh.request("GET", "/healthz")
    assert fresh.getresponse().read() == b"ok"
    fresh.close()
