"""/mutate-pod: ClusterColocationProfiles, batch/mid resources, annotations, GPU specs -- exact patches."""

from __future__ import annotations

from typing import Any

import pytest

from koordinator.api.extension.resources import ANNOTATION_EXTENDED_RESOURCE_SPEC
from tests.controlplane.manager.builders import (
    Admission,
    apply,
    make_pod,
    namespace,
    patch_of,
    priority_class,
    profile,
    quota,
    review,
)

MUTATE = "/mutate-pod"
BATCH_PROFILE = profile(
    "colocation",
    namespaceSelector={"matchLabels": {"koordinator.sh/enable-colocation": "true"}},
    selector={"matchLabels": {"app": "spark"}},
    qosClass="BE",
    priorityClassName="koord-batch",
    koordinatorPriority=1000,
    schedulerName="koord-scheduler",
    labels={"koordinator.sh/mutated": "true"},
)
CLUSTER = [
    namespace("spark", **{"koordinator.sh/enable-colocation": "true"}),
    namespace("plain"),
    priority_class("koord-batch", 5000),
    priority_class("koord-mid", 7000, preemption_policy="Never"),
    priority_class("koord-prod", 9000),
]


async def test_batch_profile_gives_exact_patch_and_object():
    pod = (
        make_pod("spark-exec")
        .namespace("spark")
        .labels(app="spark")
        .container("main", requests={"cpu": "500m", "memory": "1Gi"}, limits={"cpu": "2", "memory": "2Gi"})
        .build()
    )
    response = await Admission([*CLUSTER, BATCH_PROFILE]).call(MUTATE, review(pod))
    spec_annotation = (
        '{"containers":{"main":{"limits":{"kubernetes.io/batch-cpu":"2k","kubernetes.io/batch-memory":"2Gi"},'
        '"requests":{"kubernetes.io/batch-cpu":"500","kubernetes.io/batch-memory":"1Gi"}}}}'
    )
    assert response["allowed"] is True
    assert response["status"] == {"metadata": {}, "code": 200}
    assert patch_of(response) == [
        {"op": "add", "path": "/metadata/labels/koordinator.sh~1mutated", "value": "true"},
        {"op": "add", "path": "/metadata/labels/koordinator.sh~1qosClass", "value": "BE"},
        {"op": "add", "path": "/metadata/labels/koordinator.sh~1priority", "value": "1000"},
        {
            "op": "add",
            "path": "/metadata/annotations",
            "value": {ANNOTATION_EXTENDED_RESOURCE_SPEC: spec_annotation},
        },
        {"op": "remove", "path": "/spec/containers/0/resources/requests/cpu"},
        {"op": "remove", "path": "/spec/containers/0/resources/requests/memory"},
        {
            "op": "add",
            "path": "/spec/containers/0/resources/requests/kubernetes.io~1batch-cpu",
            "value": "500",
        },
        {
            "op": "add",
            "path": "/spec/containers/0/resources/requests/kubernetes.io~1batch-memory",
            "value": "1Gi",
        },
        {"op": "remove", "path": "/spec/containers/0/resources/limits/cpu"},
        {"op": "remove", "path": "/spec/containers/0/resources/limits/memory"},
        {"op": "add", "path": "/spec/containers/0/resources/limits/kubernetes.io~1batch-cpu", "value": "2k"},
        {
            "op": "add",
            "path": "/spec/containers/0/resources/limits/kubernetes.io~1batch-memory",
            "value": "2Gi",
        },
        {"op": "add", "path": "/spec/schedulerName", "value": "koord-scheduler"},
        {"op": "add", "path": "/spec/priorityClassName", "value": "koord-batch"},
        {"op": "add", "path": "/spec/priority", "value": 5000},
        {"op": "add", "path": "/spec/preemptionPolicy", "value": "PreemptLowerPriority"},
    ]
    mutated = apply(pod, response)
    assert mutated["metadata"]["labels"] == {
        "app": "spark",
        "koordinator.sh/mutated": "true",
        "koordinator.sh/qosClass": "BE",
        "koordinator.sh/priority": "1000",
    }
    assert mutated["spec"]["containers"][0]["resources"] == {
        "requests": {"kubernetes.io/batch-cpu": "500", "kubernetes.io/batch-memory": "1Gi"},
        "limits": {"kubernetes.io/batch-cpu": "2k", "kubernetes.io/batch-memory": "2Gi"},
    }


@pytest.mark.parametrize(
    ("pod_namespace", "labels", "mutated"),
    [
        pytest.param("spark", {"app": "spark"}, True, id="namespace-and-pod-match"),
        pytest.param("plain", {"app": "spark"}, False, id="namespace-does-not-match"),
        pytest.param("spark", {"app": "web"}, False, id="pod-does-not-match"),
        pytest.param("missing", {"app": "spark"}, False, id="unknown-namespace-has-no-labels"),
    ],
)
async def test_selectors_decide_whether_a_profile_applies(pod_namespace, labels, mutated):
    pod = make_pod().namespace(pod_namespace).label_map(labels).build()
    response = await Admission([*CLUSTER, BATCH_PROFILE]).call(MUTATE, review(pod))
    assert response["allowed"] is True
    labels_after = apply(pod, response)["metadata"]["labels"]
    assert ("koordinator.sh/qosClass" in labels_after) is mutated


async def test_pod_without_namespace_is_matched_in_the_request_namespace_and_keeps_none():
    pod = make_pod().namespace(None).labels(app="spark").build()
    response = await Admission([*CLUSTER, BATCH_PROFILE]).call(MUTATE, review(pod, namespace="spark"))
    mutated = apply(pod, response)
    assert mutated["metadata"]["labels"]["koordinator.sh/qosClass"] == "BE"
    assert "namespace" not in mutated["metadata"]


async def test_profiles_apply_in_name_order_and_later_ones_win():
    profiles = [
        profile("b-second", qosClass="LS", labels={"order": "b"}),
        profile("a-first", qosClass="BE", labels={"order": "a", "only-a": "x"}),
    ]
    pod = make_pod().build()
    mutated = apply(pod, await Admission(profiles).call(MUTATE, review(pod)))
    assert mutated["metadata"]["labels"] == {"order": "b", "only-a": "x", "koordinator.sh/qosClass": "LS"}


async def test_mappings_and_suffixes_in_upstream_order():
    spec = {
        "labels": {"team": "data"},
        "annotations": {"note": "n"},
        # chained mapping: applied in sorted order of the source key (Go's order was random)
        "labelKeysMapping": {"a": "b", "team": "a", "missing": "copied-empty"},
        "annotationKeysMapping": {"note": "note-copy"},
        "labelSuffixes": {"team": "-batch", "absent": "-x"},
    }
    pod = make_pod().build()
    mutated = apply(pod, await Admission([profile("p", **spec)]).call(MUTATE, review(pod)))
    # "a" is copied first (still missing -> ""), then "missing", then "team"; the suffix comes last.
    assert mutated["metadata"]["labels"] == {"team": "data-batch", "b": "", "copied-empty": "", "a": "data"}
    assert mutated["metadata"]["annotations"] == {"note": "n", "note-copy": "n"}


@pytest.mark.parametrize(
    ("probability", "draw", "applied", "drawn"),
    [
        pytest.param(None, 99, True, False, id="unset-is-100-percent-no-draw"),
        pytest.param(100, 99, True, False, id="100-never-draws"),
        pytest.param(0, 0, False, False, id="0-never-applies"),
        pytest.param(50, 50, True, True, id="draw-equal-to-percent-applies"),
        pytest.param(50, 51, False, True, id="draw-above-percent-skips"),
        pytest.param("30%", 30, True, True, id="percent-string"),
        pytest.param("30%", 31, False, True, id="percent-string-skips"),
    ],
)
async def test_probability_rule(probability, draw, applied, drawn):
    spec: dict[str, Any] = {"qosClass": "BE"}
    if probability is not None:
        spec["probability"] = probability
    admission = Admission([profile("p", **spec)], draw=draw)
    pod = make_pod().build()
    labels = apply(pod, await admission.call(MUTATE, review(pod)))["metadata"].get("labels", {})
    assert (labels.get("koordinator.sh/qosClass") == "BE") is applied
    assert admission.draws == ([100] if drawn else [])


@pytest.mark.parametrize(
    ("probability", "message"),
    [
        pytest.param(
            "half",
            "invalid value for IntOrString: invalid type: string is not a percentage",
            id="not-a-percentage",
        ),
        pytest.param(
            "a%",
            'invalid value for IntOrString: invalid value "a%": strconv.Atoi: parsing "a": invalid syntax',
            id="not-a-number",
        ),
        pytest.param(
            "%",
            'invalid value for IntOrString: invalid value "%": strconv.Atoi: parsing "": invalid syntax',
            id="no-digits",
        ),
        pytest.param(
            "99999999999999999999%",
            'invalid value for IntOrString: invalid value "99999999999999999999%": '
            'strconv.Atoi: parsing "99999999999999999999": value out of range',
            id="out-of-range",
        ),
    ],
)
async def test_bad_probability_is_an_internal_error(probability, message):
    pod = make_pod().build()
    response = await Admission([profile("p", probability=probability)]).call(MUTATE, review(pod))
    assert response["allowed"] is False
    assert response["status"] == {"metadata": {}, "message": message, "code": 500}


async def test_signed_percent_parses_as_go_does():
    """strconv.Atoi takes a sign: "+50%" is 50 and applies on a draw of 50."""
    admission = Admission([profile("p", qosClass="BE", probability="+50%")], draw=50)
    pod = make_pod().build()
    labels = apply(pod, await admission.call(MUTATE, review(pod)))["metadata"].get("labels", {})
    assert labels.get("koordinator.sh/qosClass") == "BE"


async def test_missing_priority_class_is_refused_with_upstream_message():
    pod = make_pod().build()
    response = await Admission([profile("p", priorityClassName="koord-batch")]).call(MUTATE, review(pod))
    assert response["allowed"] is False
    assert response["status"] == {
        "metadata": {},
        "message": 'priorityclasses.scheduling.k8s.io "koord-batch" not found',
        "code": 500,
    }


async def test_priority_class_sets_priority_and_preemption_policy():
    pod = make_pod().spec(preemptionPolicy="PreemptLowerPriority").build()
    admission = Admission([*CLUSTER, profile("p", priorityClassName="koord-mid")])
    mutated = apply(pod, await admission.call(MUTATE, review(pod)))
    assert mutated["spec"]["priorityClassName"] == "koord-mid"
    assert mutated["spec"]["priority"] == 7000
    assert mutated["spec"]["preemptionPolicy"] == "Never"


async def test_mid_pods_get_mid_resources_with_requests_from_limits_and_overhead():
    pod = (
        make_pod()
        .container("init", init=True, limits={"cpu": "1500m", "memory": "512Mi"})
        .container("main", requests={"cpu": "250m"}, limits={"cpu": "1", "memory": "1Gi"})
        .spec(overhead={"cpu": "100m", "memory": "64Mi"})
        .build()
    )
    admission = Admission([*CLUSTER, profile("p", priorityClassName="koord-mid")])
    mutated = apply(pod, await admission.call(MUTATE, review(pod)))
    assert mutated["spec"]["initContainers"][0]["resources"] == {
        "limits": {"kubernetes.io/mid-cpu": "1500", "kubernetes.io/mid-memory": "512Mi"},
        "requests": {"kubernetes.io/mid-cpu": "1500", "kubernetes.io/mid-memory": "512Mi"},
    }
    assert mutated["spec"]["containers"][0]["resources"] == {
        "requests": {"kubernetes.io/mid-cpu": "250", "kubernetes.io/mid-memory": "1Gi"},
        "limits": {"kubernetes.io/mid-cpu": "1k", "kubernetes.io/mid-memory": "1Gi"},
    }
    assert mutated["spec"]["overhead"] == {"kubernetes.io/mid-cpu": "100", "kubernetes.io/mid-memory": "64Mi"}
    # mid resources are not batch resources: no extended-resource-spec annotation
    assert ANNOTATION_EXTENDED_RESOURCE_SPEC not in mutated["metadata"].get("annotations", {})


@pytest.mark.parametrize(
    ("profiles", "gate"),
    [
        pytest.param(
            [
                profile(
                    "p",
                    object_annotations={"config.koordinator.sh/skip-update-resources": ""},
                    priorityClassName="koord-batch",
                )
            ],
            "",
            id="skip-annotation-on-a-matched-profile",
        ),
        pytest.param(
            [profile("p", priorityClassName="koord-batch")],
            "ColocationProfileSkipMutatingResources=true",
            id="gate",
        ),
    ],
)
async def test_resource_replacement_can_be_skipped(profiles, gate):
    pod = make_pod().container("main", requests={"cpu": "1"}).build()
    admission = Admission([*CLUSTER, *profiles], feature_gates=gate)
    mutated = apply(pod, await admission.call(MUTATE, review(pod)))
    assert mutated["spec"]["containers"][-1]["resources"] == {"requests": {"cpu": "1"}}
    assert mutated["spec"]["priority"] == 5000


async def test_prod_and_unmatched_pods_keep_their_resources():
    prod = make_pod().priority(9100).container("main", requests={"cpu": "1"}).build()
    response = await Admission([profile("p", labels={"x": "y"})]).call(MUTATE, review(prod))
    assert apply(prod, response)["spec"]["containers"][-1]["resources"] == {"requests": {"cpu": "1"}}
    batch_without_profile = make_pod().priority(5100).container("main", requests={"cpu": "1"}).build()
    assert patch_of(await Admission().call(MUTATE, review(batch_without_profile))) == []


async def test_strategic_merge_patch_of_the_profile():
    pod = (
        make_pod()
        .container("main", env=[{"name": "A", "value": "1"}])
        .spec(tolerations=[{"key": "old", "operator": "Exists"}])
        .build()
    )
    patch = {
        "spec": {
            "containers": [{"name": "main", "env": [{"name": "B", "value": "2"}]}],
            "tolerations": [{"key": "batch", "operator": "Exists"}],
            "nodeSelector": {"pool": "batch"},
        },
        "metadata": {"labels": {"from-patch": "yes"}},
    }
    mutated = apply(pod, await Admission([profile("p", patch=patch)]).call(MUTATE, review(pod)))
    container = mutated["spec"]["containers"][0]
    # the apiserver's merge order: patched items first unless a kept item preceded them
    assert container["env"] == [{"name": "B", "value": "2"}, {"name": "A", "value": "1"}]
    assert container["image"] == "registry.example/app:1.0"
    assert mutated["spec"]["tolerations"] == [{"key": "batch", "operator": "Exists"}]
    assert mutated["spec"]["nodeSelector"] == {"pool": "batch"}
    assert mutated["metadata"]["labels"] == {"from-patch": "yes"}


async def test_profile_patch_that_breaks_the_pod_is_refused():
    pod = make_pod().build()
    response = await Admission([profile("p", patch={"spec": {"priority": "high"}})]).call(MUTATE, review(pod))
    assert response["allowed"] is False
    assert response["status"]["code"] == 500
    assert "spec.priority: cannot decode string as an int32" in response["status"]["message"]


async def test_invalid_selector_does_not_match_and_warns():
    """Fixed upstream quirk: a selector that cannot be evaluated used to match every pod."""
    broken = profile(
        "broken", selector={"matchExpressions": [{"key": "app", "operator": "Bogus"}]}, qosClass="BE"
    )
    pod = make_pod().labels(app="web").build()
    response = await Admission([broken]).call(MUTATE, review(pod))
    assert patch_of(response) == []
    assert response["warnings"] == [
        "ClusterColocationProfile broken ignored: invalid selector: "
        "app: 'Bogus' is not a valid selector operator"
    ]


async def test_extended_resource_spec_written_only_when_it_differs():
    pod = (
        make_pod()
        .qos("BE")
        .container(
            "main", requests={"kubernetes.io/batch-cpu": "1000"}, limits={"kubernetes.io/batch-cpu": "1000"}
        )
        .build()
    )
    first = await Admission().call(MUTATE, review(pod))
    annotated = apply(pod, first)
    assert annotated["metadata"]["annotations"] == {
        ANNOTATION_EXTENDED_RESOURCE_SPEC: '{"containers":{"main":{"limits":{"kubernetes.io/batch-cpu":"1k"},'
        '"requests":{"kubernetes.io/batch-cpu":"1k"}}}}'
    }
    assert patch_of(await Admission().call(MUTATE, review(annotated))) == []


async def test_stale_extended_resource_spec_is_replaced():
    stale = make_pod().annotations({ANNOTATION_EXTENDED_RESOURCE_SPEC: "{not json"}).build()
    response = await Admission().call(MUTATE, review(stale))
    assert patch_of(response) == [
        {
            "op": "replace",
            "path": "/metadata/annotations/node.koordinator.sh~1extended-resource-spec",
            "value": "{}",
        }
    ]
    assert response["warnings"][0].startswith(
        "replacing unreadable node.koordinator.sh/extended-resource-spec"
    )


@pytest.mark.parametrize(
    ("requests", "expected"),
    [
        pytest.param(
            {"koordinator.sh/gpu": "50"},
            {
                "koordinator.sh/gpu-core": "50",
                "koordinator.sh/gpu-memory-ratio": "50",
                "koordinator.sh/gpu.shared": "1",
            },
            id="gpu-percent",
        ),
        pytest.param(
            {"koordinator.sh/gpu": "200"},
            {
                "koordinator.sh/gpu-core": "200",
                "koordinator.sh/gpu-memory-ratio": "200",
                "koordinator.sh/gpu.shared": "2",
            },
            id="two-gpus",
        ),
        pytest.param(
            {"koordinator.sh/gpu-core": "300", "koordinator.sh/gpu-memory-ratio": "300"},
            {
                "koordinator.sh/gpu-core": "300",
                "koordinator.sh/gpu-memory-ratio": "300",
                "koordinator.sh/gpu.shared": "3",
            },
            id="ratio-spans-three",
        ),
        pytest.param(
            # upstream divided the absent memory ratio here and wrote gpu.shared: 0
            {"koordinator.sh/gpu-core": "200", "koordinator.sh/gpu-memory": "8Gi"},
            {
                "koordinator.sh/gpu-core": "200",
                "koordinator.sh/gpu-memory": "8Gi",
                "koordinator.sh/gpu.shared": "2",
            },
            id="core-spans-two-upstream-bug-fixed",
        ),
        pytest.param(
            {"koordinator.sh/gpu-memory-ratio": "150"},
            {"koordinator.sh/gpu-memory-ratio": "150", "koordinator.sh/gpu.shared": "1"},
            id="not-a-multiple-of-100",
        ),
    ],
)
async def test_device_resource_spec(requests, expected):
    pod = make_pod().container("main", requests=requests).build()
    mutated = apply(pod, await Admission().call(MUTATE, review(pod)))
    assert mutated["spec"]["containers"][0]["resources"]["requests"] == expected
    assert (
        mutated["spec"]["containers"][0]["resources"]["limits"]["koordinator.sh/gpu.shared"]
        == (expected["koordinator.sh/gpu.shared"])
    )


async def test_device_resource_spec_gate_turns_it_off():
    pod = make_pod().container("main", requests={"koordinator.sh/gpu": "50"}).build()
    response = await Admission(feature_gates="DisableDeviceResourceSpec=true").call(MUTATE, review(pod))
    assert patch_of(response) == []


async def test_multi_quota_tree_adds_node_affinity():
    objects = [
        quota("team-a", namespace="team-a", labels={"quota.scheduling.koordinator.sh/tree-id": "tree-1"}),
        {
            "apiVersion": "quota.koordinator.sh/v1alpha1",
            "kind": "ElasticQuotaProfile",
            "metadata": {
                "name": "tree-1-profile",
                "namespace": "koordinator-system",
                "labels": {"quota.scheduling.koordinator.sh/tree-id": "tree-1"},
            },
            "spec": {
                "quotaName": "tree-1-root",
                "nodeSelector": {
                    "matchLabels": {"pool": "a"},
                    "matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}],
                },
            },
        },
    ]
    affinity_term = {"matchExpressions": [{"key": "disk", "operator": "Exists"}]}
    pod = (
        make_pod()
        .namespace("team-a")
        .spec(
            affinity={
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [affinity_term]}
                }
            }
        )
        .build()
    )
    admission = Admission(objects, feature_gates="MultiQuotaTree=true")
    mutated = apply(pod, await admission.call(MUTATE, review(pod)))
    terms = mutated["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert terms == [
        {
            "matchExpressions": [
                {"key": "disk", "operator": "Exists"},
                {"key": "pool", "operator": "In", "values": ["a"]},
                {"key": "zone", "operator": "In", "values": ["z1"]},
            ]
        }
    ]


async def test_batch_values_do_not_depend_on_earlier_requests():
    """Quantities equal in value (``2Ki`` and ``2048``) once shared a cache entry, and a pod got
    the spelling of whichever came first; the canonical text of its own value is written."""
    admission = Admission([*CLUSTER, BATCH_PROFILE])
    first = make_pod("a").namespace("spark").labels(app="spark").container("main", requests={"memory": "2Ki"})
    await admission.call(MUTATE, review(first.build()))
    pod = (
        make_pod("b")
        .namespace("spark")
        .labels(app="spark")
        .container("main", requests={"cpu": "2048m", "memory": "2048"})
        .build()
    )
    requests = apply(pod, await admission.call(MUTATE, review(pod)))["spec"]["containers"][0]["resources"][
        "requests"
    ]
    assert requests == {"kubernetes.io/batch-cpu": "2048", "kubernetes.io/batch-memory": "2048"}


async def test_multi_quota_tree_takes_a_namespaces_quota_only_from_that_namespace():
    """Without the quota-name label, upstream gets the quota named like the pod's namespace in
    that namespace: one of that name elsewhere is not the pod's, and adds no affinity."""
    profile = {
        "apiVersion": "quota.koordinator.sh/v1alpha1",
        "kind": "ElasticQuotaProfile",
        "metadata": {
            "name": "prof",
            "namespace": "koordinator-system",
            "labels": {"quota.scheduling.koordinator.sh/tree-id": "t1"},
        },
        "spec": {"quotaName": "team-a", "nodeSelector": {"matchLabels": {"pool": "t1"}}},
    }
    elsewhere = quota(
        "team-a", namespace="koordinator-system", labels={"quota.scheduling.koordinator.sh/tree-id": "t1"}
    )
    admission = Admission([elsewhere, profile], feature_gates="MultiQuotaTree=true")
    pod = make_pod("p").namespace("team-a").build()
    assert patch_of(await admission.call(MUTATE, review(pod))) == []
    # the label names it wherever it lives
    labelled = (
        make_pod("q").namespace("team-a").labels(**{"quota.scheduling.koordinator.sh/name": "team-a"}).build()
    )
    mutated = apply(labelled, await admission.call(MUTATE, review(labelled)))
    assert mutated["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["t1"]}]}]
    }


@pytest.mark.parametrize(
    ("operation", "resource_kind", "sub_resource"),
    [
        pytest.param("UPDATE", "Pod", "", id="update-is-a-no-op"),
        pytest.param("CREATE", "Pod", "status", id="subresource"),
    ],
)
async def test_requests_the_pod_webhook_leaves_alone(operation, resource_kind, sub_resource):
    pod = make_pod().labels(app="spark").namespace("spark").build()
    body = review(
        pod, operation=operation, old=pod if operation == "UPDATE" else None, sub_resource=sub_resource
    )
    response = await Admission([*CLUSTER, BATCH_PROFILE]).call(MUTATE, body)
    assert response == {
        "uid": body["request"]["uid"],
        "allowed": True,
        "status": {"metadata": {}, "code": 200},
    }


async def test_pod_that_does_not_decode_is_refused_with_400():
    pod = make_pod().build()
    pod["metadata"]["labels"] = {"app": 7}
    response = await Admission().call(MUTATE, review(pod))
    assert response["allowed"] is False
    assert response["status"] == {
        "metadata": {},
        "message": "cannot decode pod: metadata.labels[app]: cannot decode number as a string",
        "code": 400,
    }


async def test_reservation_profiles_set_template_fields():
    reservation = {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "Reservation",
        "metadata": {"name": "r1", "labels": {"app": "spark"}},
        "spec": {"template": {"spec": {"containers": [{"name": "c"}]}}, "owners": [{"labelSelector": {}}]},
    }
    profiles = [
        profile(
            "p",
            namespaceSelector={"matchLabels": {"never": "matches"}},
            selector={"matchLabels": {"app": "spark"}},
            qosClass="BE",
            priorityClassName="koord-batch",
            schedulerName="koord-scheduler",
        )
    ]
    admission = Admission([*CLUSTER, *profiles], feature_gates="ReservationMutatingWebhook=true")
    mutated = apply(reservation, await admission.call("/mutate-reservation", review(reservation)))
    assert mutated["metadata"]["labels"]["koordinator.sh/qosClass"] == "BE"
    assert mutated["spec"]["template"]["spec"] == {
        "containers": [{"name": "c"}],
        "schedulerName": "koord-scheduler",
        "priorityClassName": "koord-batch",
        "priority": 5000,
        "preemptionPolicy": "PreemptLowerPriority",
    }
