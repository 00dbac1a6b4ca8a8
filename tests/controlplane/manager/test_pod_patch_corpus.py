"""/mutate-pod answers stay byte for byte what they were: a recorded corpus, replayed.

``data/pod-mutating-corpus.jsonl.gz`` holds pod AdmissionReviews (CREATE mostly, with
some UPDATE, DELETE, malformed and sub-resource requests) and the exact AdmissionReview
each one was answered with when the corpus was recorded, over three clusters:

* ``fuzz``: the fuzzing cluster, every gate on (``MultiQuotaTree`` included) and a profile
  with a strategic-merge patch;
* ``rich``: batch, mid and prod profiles, a profile that skips the resource update, a
  patch that rewrites containers and affinity, multi-tree quotas with node selectors;
* ``bench``: the M1 benchmark's cluster and reviews.

The pods are drawn to reach every step of the handler: labels that select profiles,
quota labels, node affinity with and without terms, cpu/memory, batch and GPU resources
in init and regular containers, overhead, stale and unreadable extended-resource-spec
annotations. Each answer must be equal byte for byte (the base64 patch included), and
the object of the request must be left as it was sent.

Re-record only on purpose (a deliberate change of behaviour), with
``python -m tests.controlplane.manager.test_pod_patch_corpus``.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import gzip
import random
from pathlib import Path
from typing import Any

import orjson

from controlplane.manager.webhooks.review import decode_review, encode_review
from tests.controlplane.manager.builders import (
    Admission,
    namespace,
    priority_class,
    profile,
    quota,
)
from tests.controlplane.manager.test_admission_fuzzing import CLUSTER as FUZZ_CLUSTER
from tests.controlplane.manager.test_admission_fuzzing import (
    POOL_KEYS,
    POOL_QUANTITIES,
    POOL_VALUES,
    random_json,
)

CORPUS = Path(__file__).parent / "data" / "pod-mutating-corpus.jsonl.gz"
MUTATE = "/mutate-pod"
TREE_LABEL = "quota.scheduling.koordinator.sh/tree-id"
SKIP = "config.koordinator.sh/skip-update-resources"


def _tree_profile(name: str, tree: str, selector: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "quota.koordinator.sh/v1alpha1",
        "kind": "ElasticQuotaProfile",
        "metadata": {"name": name, "namespace": "koordinator-system", "labels": {TREE_LABEL: tree}},
        "spec": {"quotaName": f"{tree}-root", "nodeSelector": selector},
    }


RICH_CLUSTER = [
    namespace("spark", colocation="on"),
    namespace("mid", colocation="mid"),
    namespace("team-a"),
    namespace("default"),
    priority_class("koord-batch", 5000),
    priority_class("koord-mid", 7000, preemption_policy="Never"),
    priority_class("koord-prod", 9000, preemption_policy=None),
    priority_class("koord-free", 3000),
    profile(
        "a-batch",
        namespaceSelector={"matchLabels": {"colocation": "on"}},
        selector={"matchLabels": {"app": "spark"}},
        qosClass="BE",
        priorityClassName="koord-batch",
        koordinatorPriority=1000,
        schedulerName="koord-scheduler",
        labels={"koordinator.sh/mutated": "true"},
        annotations={"example.com/profile": "a-batch"},
    ),
    profile(
        "b-mid",
        namespaceSelector={"matchLabels": {"colocation": "mid"}},
        selector={"matchExpressions": [{"key": "app", "operator": "Exists"}]},
        qosClass="LS",
        priorityClassName="koord-mid",
        labelKeysMapping={"app": "app-copy"},
        annotationKeysMapping={"team": "team-copy"},
        labelSuffixes={"app": "-mid"},
    ),
    profile(
        "c-patch",
        selector={"matchLabels": {"patch": "yes"}},
        priorityClassName="koord-batch",
        patch={
            "metadata": {"labels": {"patched": "true"}},
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "resources": {"limits": {"cpu": "3"}},
                        "env": [{"name": "P", "value": "1"}],
                    }
                ],
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchExpressions": [{"key": "pool", "operator": "Exists"}]}
                            ]
                        }
                    }
                },
                "tolerations": [{"key": "batch", "operator": "Exists"}],
            },
        },
    ),
    profile(
        "d-skip",
        object_annotations={SKIP: ""},
        selector={"matchLabels": {"skip": "yes"}},
        qosClass="BE",
        priorityClassName="koord-batch",
    ),
    profile(
        "e-prod",
        selector={"matchLabels": {"tier": "prod"}},
        priorityClassName="koord-prod",
        koordinatorPriority=9100,
    ),
    profile("f-broken-selector", selector={"matchLabels": {"bad key!": "x"}}),
    profile(
        "g-missing-class", selector={"matchLabels": {"tier": "ghost"}}, priorityClassName="koord-missing"
    ),
    quota("team-a", namespace="team-a", labels={TREE_LABEL: "tree-1"}),
    quota("tree-2-quota", namespace="default", labels={TREE_LABEL: "tree-2"}),
    _tree_profile(
        "tree-1-profile",
        "tree-1",
        {
            "matchLabels": {"pool": "a"},
            "matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}],
        },
    ),
    _tree_profile("tree-2-profile", "tree-2", {"matchLabels": {"pool": "b"}}),
]


def _bench_cluster() -> list[dict[str, Any]]:
    from benchmarks.webhook_admission import cluster_objects

    return cluster_objects()


def admissions() -> dict[str, Admission]:
    return {
        "fuzz": Admission(FUZZ_CLUSTER, feature_gates="AllAlpha=true", draw=7),
        "rich": Admission(RICH_CLUSTER, feature_gates="MultiQuotaTree=true", draw=30),
        "bench": Admission(_bench_cluster()),
    }


# ---- the generator (used to record; the test replays what was recorded) ----------------------------

LABEL_CHOICES: list[tuple[str, list[str]]] = [
    ("app", ["spark", "web", ""]),
    ("team", ["a", "b"]),
    ("patch", ["yes"]),
    ("skip", ["yes"]),
    ("tier", ["prod", "prod", "ghost"]),
    ("koordinator.sh/qosClass", ["LS", "BE"]),
    ("koordinator.sh/priority-class", ["koord-batch", "koord-mid", "koord-prod"]),
    ("quota.scheduling.koordinator.sh/name", ["team-a", "tree-2-quota", "missing"]),
]
RESOURCES = [
    "cpu",
    "memory",
    "kubernetes.io/batch-cpu",
    "kubernetes.io/batch-memory",
    "kubernetes.io/mid-cpu",
    "koordinator.sh/gpu",
    "koordinator.sh/gpu-core",
    "koordinator.sh/gpu-memory-ratio",
    "koordinator.sh/gpu.shared",
    "ephemeral-storage",
]
QUANTITIES: list[Any] = [
    "100m",
    "500m",
    "1500m",
    "1",
    "2",
    "4",
    "1Gi",
    "512Mi",
    "3Gi",
    "50",
    "100",
    "200",
    2,
    1.5,
]
SPEC_ANNOTATIONS = [
    "{}",
    "{",
    '{"containers":{}}',
    '{"containers":{"main":{"limits":{"kubernetes.io/batch-cpu":"2k"},"requests":{"kubernetes.io/batch-cpu":"500"}}}}',
]


def _resources(rng: random.Random) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for which in ("requests", "limits"):
        roll = rng.random()
        if roll < 0.65:
            out[which] = {rng.choice(RESOURCES): rng.choice(QUANTITIES) for _ in range(rng.randrange(1, 4))}
        elif roll < 0.7:
            out[which] = None
    return out


def _container(rng: random.Random, name: str) -> dict[str, Any]:
    container: dict[str, Any] = {"name": name, "image": "registry.example/app:1.0"}
    if rng.random() < 0.5:
        container["env"] = [{"name": f"E{k}", "value": str(k)} for k in range(rng.randrange(1, 4))]
    if rng.random() < 0.3:
        container["ports"] = [{"containerPort": 8080, "protocol": "TCP"}]
    roll = rng.random()
    if roll < 0.85:
        container["resources"] = _resources(rng)
    elif roll < 0.9:
        container["resources"] = None
    return container


def _affinity(rng: random.Random) -> dict[str, Any]:
    roll = rng.random()
    if roll < 0.3:
        return {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}
    terms: list[Any] = [
        {"matchExpressions": [{"key": "disk", "operator": "Exists"}]} for _ in range(rng.randrange(0, 3))
    ]
    if rng.random() < 0.3 and terms:
        terms[0] = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}


def random_pod(rng: random.Random) -> dict[str, Any]:
    meta: dict[str, Any] = {"generateName": "pod-"}
    if rng.random() < 0.8:
        meta["namespace"] = rng.choice(["spark", "mid", "team-a", "default", "other"])
    if rng.random() < 0.9:
        labels = {}
        for key, values in LABEL_CHOICES:
            if rng.random() < 0.3:
                labels[key] = rng.choice(values)
        if rng.random() < 0.2:
            labels[rng.choice(POOL_KEYS)] = rng.choice(POOL_VALUES)
        meta["labels"] = labels if labels or rng.random() < 0.5 else None
    if rng.random() < 0.5:
        annotations: dict[str, Any] = {"prometheus.io/scrape": "true"}
        if rng.random() < 0.4:
            annotations["node.koordinator.sh/extended-resource-spec"] = rng.choice(SPEC_ANNOTATIONS)
        if rng.random() < 0.2:
            annotations["team"] = "a"
        meta["annotations"] = annotations
    if rng.random() < 0.2:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "driver", "uid": "u-1"}]
    names = ["main", "side", "third"]
    spec: dict[str, Any] = {"containers": [_container(rng, names[i]) for i in range(rng.randrange(0, 3))]}
    if rng.random() < 0.3:
        spec["initContainers"] = [_container(rng, f"init-{i}") for i in range(rng.randrange(1, 3))]
    if rng.random() < 0.3:
        spec["priority"] = rng.choice([0, 3500, 5500, 7500, 9500])
    if rng.random() < 0.2:
        spec["priorityClassName"] = rng.choice(["koord-batch", "koord-mid", "other"])
    if rng.random() < 0.15:
        spec["overhead"] = {rng.choice(["cpu", "memory"]): rng.choice(QUANTITIES)}
    if rng.random() < 0.35:
        spec["affinity"] = _affinity(rng)
    if rng.random() < 0.2:
        spec["tolerations"] = [{"key": "k", "operator": "Exists"}]
    if rng.random() < 0.1:
        spec["volumes"] = [{"name": "v", "emptyDir": {}}]
    if rng.random() < 0.05:
        spec[rng.choice(["schedulerName", "preemptionPolicy"])] = rng.choice(["x", None])
    pod: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
    if rng.random() < 0.03:
        pod[rng.choice(["metadata", "spec"])] = rng.choice([None, random_json(rng)])
    if rng.random() < 0.02 and isinstance(pod.get("spec"), dict):
        pod["spec"]["containers"] = [None]
    if rng.random() < 0.03 and isinstance(pod.get("spec"), dict) and pod["spec"].get("containers"):
        resources = pod["spec"]["containers"][0].get("resources")
        if isinstance(resources, dict):
            resources["requests"] = {"cpu": rng.choice(POOL_QUANTITIES)}
    return pod


def random_review(rng: random.Random, index: int) -> bytes:
    pod = random_pod(rng)
    operation = rng.choices(["CREATE", "UPDATE", "DELETE"], weights=[92, 5, 3])[0]
    request: dict[str, Any] = {
        "uid": f"corpus-{index:05d}",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": rng.choice(["spark", "mid", "team-a", "default", "other", ""]),
        "operation": operation,
        "userInfo": {"username": "someone"},
        "object": pod,
    }
    if rng.random() < 0.02:
        request["subResource"] = "status"
    if operation == "UPDATE":
        request["oldObject"] = copy.deepcopy(pod)
    review = {
        "apiVersion": rng.choice(["admission.k8s.io/v1", "admission.k8s.io/v1", "admission.k8s.io/v1beta1"]),
        "kind": "AdmissionReview",
        "request": request,
    }
    return orjson.dumps(review)


def generate(per_cluster: int = 900, seed: int = 20261126) -> list[dict[str, Any]]:
    """(cluster, body, answer) entries, answered by the current code."""
    from benchmarks.webhook_admission import review_body

    rng = random.Random(seed)
    by_name = admissions()
    entries = []

    async def answer_all() -> None:
        for name, admission in by_name.items():
            if name == "bench":
                bodies = [review_body(index) for index in range(50)]
            else:
                bodies = [random_review(rng, index) for index in range(per_cluster)]
            for body in bodies:
                answer = await admission.dispatcher.review(MUTATE, body)
                entries.append({"cluster": name, "body": body.decode(), "answer": answer.decode()})

    asyncio.run(answer_all())
    return entries


def load() -> list[dict[str, Any]]:
    with gzip.open(CORPUS, "rb") as stream:
        return [orjson.loads(line) for line in stream if line.strip()]


# ---- the test ---------------------------------------------------------------------------------------


def test_corpus_covers_every_outcome():
    entries = load()
    answers = [orjson.loads(entry["answer"])["response"] for entry in entries]
    assert sum("patch" in answer for answer in answers) >= 750
    codes = {answer["status"]["code"] for answer in answers}
    assert {200, 400, 500} <= codes
    assert any(answer.get("warnings") for answer in answers)
    touched = {
        "/".join(op["path"].split("/")[1:3])
        for answer in answers
        if "patch" in answer
        for op in orjson.loads(base64.b64decode(answer["patch"]))
    }
    assert {
        "metadata/labels",
        "metadata/annotations",
        "spec/containers",
        "spec/initContainers",
        "spec/affinity",
        "spec/overhead",
        "spec/priority",
        "spec/tolerations",
    } <= touched


async def test_answers_are_byte_identical_to_the_recorded_ones():
    by_name = admissions()
    mismatches = []
    for index, entry in enumerate(load()):
        body = entry["body"].encode()
        dispatcher = by_name[entry["cluster"]].dispatcher
        answer = await dispatcher.review(MUTATE, body)
        if answer.decode() != entry["answer"]:
            mismatches.append((index, entry["cluster"], entry["answer"], answer.decode()))
        # the handler writes into its own copy, never into the request it was given
        request = decode_review(body)
        sent = orjson.dumps(request.object)
        again = encode_review(request.api_version, request.uid, await dispatcher.respond(MUTATE, request))
        assert again == answer
        assert orjson.dumps(request.object) == sent, index
    assert not mismatches, mismatches[:3]


if __name__ == "__main__":
    records = generate()
    CORPUS.parent.mkdir(parents=True, exist_ok=True)
    with gzip.GzipFile(CORPUS, "wb", mtime=0) as out:
        for record in records:
            out.write(orjson.dumps(record) + b"\n")
    print(f"wrote {len(records)} entries to {CORPUS}")
