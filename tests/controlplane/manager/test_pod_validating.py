"""/validate-pod and /validate-pod-binding: the QoS/priority protocol, immutability, quotas, devices."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.manager.webhooks.context import WebhookOptions
from tests.controlplane.manager.builders import Admission, config_map, make_pod, quota, review

VALIDATE = "/validate-pod"

REQUESTS = "pod.spec.containers[*].resources.requests"
BE_QOS_MESSAGE = "must specify koordinator QoS BE with koordinator colocation resources"


def combination(qos: str, priority: str) -> str:
    return (
        f"Pod: Forbidden: koordinator.sh/qosClass={qos} and priorityClass={priority} "
        + "cannot be used in combination"
    )


def refused(message: str) -> dict[str, Any]:
    return {"metadata": {}, "message": message, "code": 400}


@pytest.mark.parametrize(
    ("qos", "priority", "message"),
    [
        pytest.param(
            "BE",
            None,
            combination("BE", ""),
            id="BE-none",
        ),
        pytest.param(
            "BE",
            9100,
            combination("BE", "koord-prod"),
            id="BE-prod",
        ),
        pytest.param("BE", 7100, None, id="BE-mid"),
        pytest.param("BE", 5100, None, id="BE-batch"),
        pytest.param("BE", 3100, None, id="BE-free"),
        pytest.param("LSR", 9100, None, id="LSR-prod"),
        pytest.param(
            "LSR",
            None,
            combination("LSR", ""),
            id="LSR-none",
        ),
        pytest.param(
            "LSR",
            7100,
            combination("LSR", "koord-mid"),
            id="LSR-mid",
        ),
        pytest.param(
            "LSR",
            5100,
            combination("LSR", "koord-batch"),
            id="LSR-batch",
        ),
        pytest.param(
            "LSR",
            3100,
            combination("LSR", "koord-free"),
            id="LSR-free",
        ),
        pytest.param("LS", None, None, id="LS-none"),
        pytest.param("LS", 5100, None, id="LS-batch"),
        pytest.param("LSE", 5100, None, id="LSE-batch"),
        pytest.param("SYSTEM", None, None, id="SYSTEM-none"),
        pytest.param(None, 5100, None, id="no-qos"),
    ],
)
async def test_qos_and_priority_matrix(qos, priority, message):
    builder = make_pod().container("main", requests={"cpu": "2"})
    if qos:
        builder.qos(qos)
    if priority is not None:
        builder.priority(priority)
    response = await Admission().call(VALIDATE, review(builder.build()))
    if message is None:
        assert response["allowed"] is True
    else:
        assert response["allowed"] is False
        assert response["status"] == refused(message)


async def test_priority_class_label_wins_over_spec_priority():
    pod = (
        make_pod().qos("BE").priority(9100).labels(**{"koordinator.sh/priority-class": "koord-batch"}).build()
    )
    assert (await Admission().call(VALIDATE, review(pod)))["allowed"] is True


@pytest.mark.parametrize(
    ("qos", "resources", "message"),
    [
        pytest.param(
            "LS",
            {"kubernetes.io/batch-cpu": "1000"},
            f"labels.koordinator.sh/qosClass: Required value: {BE_QOS_MESSAGE}",
            id="batch-cpu-needs-BE",
        ),
        pytest.param(
            None,
            {"kubernetes.io/batch-memory": "1Gi"},
            f"labels.koordinator.sh/qosClass: Required value: {BE_QOS_MESSAGE}",
            id="batch-memory-needs-BE",
        ),
        pytest.param("BE", {"kubernetes.io/batch-cpu": "1000"}, None, id="BE-with-batch"),
        pytest.param("BE", {"kubernetes.io/batch-cpu": "0"}, None, id="zero-batch-is-no-batch"),
    ],
)
async def test_batch_resources_need_be(qos, resources, message):
    builder = make_pod().priority(5100).container("main", requests=resources)
    if qos:
        builder.qos(qos)
    response = await Admission().call(VALIDATE, review(builder.build()))
    assert response["allowed"] is (message is None)
    if message:
        assert response["status"]["message"] == message


@pytest.mark.parametrize(
    ("qos", "cpu", "message"),
    [
        pytest.param("LSR", "2", None, id="LSR-integer"),
        pytest.param("LSE", "2000m", None, id="LSE-integer-in-milli"),
        pytest.param(
            "LSR",
            "1500m",
            f'{REQUESTS}: Invalid value: "1500m": the requested CPUs of LSR Pod must be integer',
            id="LSR-fraction",
        ),
        pytest.param(
            "LSR",
            None,
            f"{REQUESTS}: Required value: LSR Pod must declare the requested CPUs",
            id="LSR-no-cpu",
        ),
        pytest.param(
            "LSE",
            "0",
            f"{REQUESTS}: Required value: LSR Pod must declare the requested CPUs",
            id="LSE-zero",
        ),
    ],
)
async def test_lsr_and_lse_need_whole_cpus(qos, cpu, message):
    requests = {"cpu": cpu} if cpu is not None else {"memory": "1Gi"}
    pod = make_pod().qos(qos).priority(9100).container("main", requests=requests).build()
    response = await Admission().call(VALIDATE, review(pod))
    assert response["allowed"] is (message is None)
    if message:
        assert response["status"]["message"] == message


@pytest.mark.parametrize(
    ("old_labels", "new_labels", "old_priority", "new_priority", "message"),
    [
        pytest.param(
            {"koordinator.sh/qosClass": "LS"},
            {"koordinator.sh/qosClass": "BE"},
            5100,
            5100,
            'labels.koordinator.sh/qosClass: Invalid value: "BE": field is immutable',
            id="qos",
        ),
        pytest.param(
            {},
            {},
            5100,
            7100,
            'spec.priority: Invalid value: "koord-mid": field is immutable',
            id="priority-class",
        ),
        pytest.param(
            {"koordinator.sh/priority": "1"},
            {"koordinator.sh/priority": "2"},
            None,
            None,
            'labels.koordinator.sh/priority: Invalid value: "2": field is immutable',
            id="sub-priority",
        ),
        pytest.param(
            {"koordinator.sh/qosClass": "LS", "x": "1"},
            {"koordinator.sh/qosClass": "LS", "x": "2"},
            5100,
            5100,
            None,
            id="other-labels-may-change",
        ),
    ],
)
async def test_immutability_on_update(old_labels, new_labels, old_priority, new_priority, message):
    old = make_pod().label_map(old_labels)
    new = make_pod().label_map(new_labels)
    if old_priority is not None:
        old.priority(old_priority)
    if new_priority is not None:
        new.priority(new_priority)
    response = await Admission().call(VALIDATE, review(new.build(), operation="UPDATE", old=old.build()))
    assert response["allowed"] is (message is None)
    if message:
        assert response["status"] == refused(message)


async def test_sub_priority_immutability_can_be_switched_off():
    old = make_pod().labels(**{"koordinator.sh/priority": "1"}).build()
    new = make_pod().labels(**{"koordinator.sh/priority": "2"}).build()
    admission = Admission(feature_gates="ColocationProfileSkipValidatingPriority=true")
    assert (await admission.call(VALIDATE, review(new, operation="UPDATE", old=old)))["allowed"] is True


async def test_several_problems_are_aggregated():
    old = make_pod().qos("LS").priority(5100).build()
    new = make_pod().qos("BE").priority(9100).build()
    response = await Admission().call(VALIDATE, review(new, operation="UPDATE", old=old))
    assert response["status"]["message"] == (
        '[labels.koordinator.sh/qosClass: Invalid value: "BE": field is immutable, '
        'spec.priority: Invalid value: "koord-prod": field is immutable, '
        + combination("BE", "koord-prod")
        + "]"
    )


async def test_reserve_pod_annotation_is_forbidden_first():
    pod = make_pod().qos("BE").annotations({"scheduling.koordinator.sh/reserve-pod": "true"}).build()
    response = await Admission().call(VALIDATE, review(pod))
    assert response["status"] == refused(
        "annotations.scheduling.koordinator.sh/reserve-pod: Forbidden: cannot set in annotations"
    )


QUOTAS = [
    quota(
        "parent",
        max={"cpu": "10"},
        min={"cpu": "5"},
        labels={"quota.scheduling.koordinator.sh/is-parent": "true"},
    ),
    quota(
        "team-a",
        namespace="team-a",
        max={"cpu": "10"},
        min={"cpu": "2"},
        labels={"quota.scheduling.koordinator.sh/parent": "parent"},
    ),
]


@pytest.mark.parametrize(
    ("pod_namespace", "labels", "gate", "message"),
    [
        pytest.param("team-a", {}, "", None, id="namespace-quota-is-a-leaf"),
        pytest.param(
            "other",
            {"quota.scheduling.koordinator.sh/name": "parent"},
            "",
            "pod can not be linked to a parentQuotaGroup,quota:parent, pod:pod-1",
            id="parent-quota-refused",
        ),
        pytest.param(
            "other",
            {"quota.scheduling.koordinator.sh/name": "parent"},
            "SupportParentQuotaSubmitPod=true",
            None,
            id="parent-quota-allowed-by-gate",
        ),
        pytest.param(
            "other",
            {"quota.scheduling.koordinator.sh/name": "unknown"},
            "",
            None,
            id="unknown-quota-falls-back-to-default",
        ),
    ],
)
async def test_pods_in_quotas(pod_namespace, labels, gate, message):
    pod = make_pod().namespace(pod_namespace).label_map(labels).build()
    response = await Admission(QUOTAS, feature_gates=gate).call(VALIDATE, review(pod))
    assert response["allowed"] is (message is None)
    if message:
        assert response["status"] == refused(message)


@pytest.mark.parametrize(
    ("gate", "message"),
    [
        pytest.param(
            "", "pod can not be linked to a parentQuotaGroup,quota:team-p, pod:pod-1", id="by-namespace"
        ),
        pytest.param("DisableDefaultQuota=true", None, id="label-only-with-DisableDefaultQuota"),
    ],
)
async def test_a_pods_namespace_names_its_quota_unless_default_quota_is_disabled(gate, message):
    quotas = [quota("team-p", namespace="team-p", max={"cpu": "10"}, labels={IS_PARENT_LABEL: "true"})]
    pod = make_pod().namespace("team-p").build()
    response = await Admission(quotas, feature_gates=gate).call(VALIDATE, review(pod))
    assert response["allowed"] is (message is None)
    if message:
        assert response["status"] == refused(message)


IS_PARENT_LABEL = "quota.scheduling.koordinator.sh/is-parent"
PREEMPTIBLE = "quota.scheduling.koordinator.sh/preemptible"
IN_PARENT = {"quota.scheduling.koordinator.sh/name": "parent"}


@pytest.mark.parametrize(
    ("old_labels", "new_labels", "gate", "message"),
    [
        pytest.param(
            {PREEMPTIBLE: "true"},
            {PREEMPTIBLE: "false"},
            "",
            "Preemptible label is forbidden modify now.",
            id="changed",
        ),
        pytest.param(
            {}, {PREEMPTIBLE: "false"}, "", "Preemptible label is forbidden modify now.", id="added"
        ),
        pytest.param(
            {PREEMPTIBLE: "true", **IN_PARENT},
            {PREEMPTIBLE: "false", **IN_PARENT},
            "",
            "Preemptible label is forbidden modify now.",
            id="reported-alone-before-the-parent-quota",
        ),
        pytest.param(
            {PREEMPTIBLE: "true", **IN_PARENT},
            {PREEMPTIBLE: "false", **IN_PARENT},
            "SupportParentQuotaSubmitPod=true",
            "Preemptible label is forbidden modify now.",
            id="checked-whatever-the-gate",
        ),
        pytest.param({PREEMPTIBLE: "true"}, {PREEMPTIBLE: "true"}, "", None, id="unchanged"),
    ],
)
async def test_preemptible_label_is_immutable(old_labels, new_labels, gate, message):
    old = make_pod().namespace("other").label_map(old_labels).build()
    new = make_pod().namespace("other").label_map(new_labels).build()
    response = await Admission(QUOTAS, feature_gates=gate).call(
        VALIDATE, review(new, operation="UPDATE", old=old)
    )
    assert response["allowed"] is (message is None)
    if message:
        assert response["status"] == refused(message)


GPU_SHARED = "koordinator.sh/gpu.shared"
GPU_CORE = "koordinator.sh/gpu-core"
GPU_RATIO = "koordinator.sh/gpu-memory-ratio"


@pytest.mark.parametrize(
    ("requests", "message"),
    [
        pytest.param({"koordinator.sh/gpu": "50"}, None, id="half-gpu"),
        pytest.param({"koordinator.sh/gpu": "200"}, None, id="two-gpus"),
        pytest.param(
            {"koordinator.sh/gpu": "150"},
            f'{REQUESTS}: Invalid value: "150": the requested GPU must be percentage of 100',
            id="gpu-150",
        ),
        pytest.param(
            {"koordinator.sh/gpu": "0"},
            f'{REQUESTS}: Invalid value: "0": the requested GPU must be greater than zero',
            id="gpu-zero",
        ),
        pytest.param(
            {"koordinator.sh/gpu": "150", GPU_SHARED: "1", GPU_RATIO: "101"},
            f"{REQUESTS}: Forbidden: Forbidden declare GPU and GPU share at same time",
            id="gpu-and-shared-reported-alone",
        ),
        pytest.param({GPU_SHARED: "2", GPU_CORE: "100", GPU_RATIO: "200"}, None, id="shared-ok"),
        pytest.param(
            {GPU_SHARED: "0", GPU_RATIO: "100"},
            f'{REQUESTS}: Invalid value: "0": the requested GPU must be greater than zero',
            id="shared-zero",
        ),
        pytest.param(
            {GPU_SHARED: "2", GPU_CORE: "100"},
            f"{REQUESTS}: Forbidden: GPU memory and GPU memory ratio all is zero",
            id="shared-without-memory",
        ),
        pytest.param(
            {GPU_SHARED: "2", GPU_CORE: "100", GPU_RATIO: "0"},
            f"{REQUESTS}: Forbidden: GPU memory and GPU memory ratio all is zero",
            id="shared-with-zero-memory-ratio",
        ),
        pytest.param(
            {GPU_SHARED: "1", "koordinator.sh/gpu-memory": "8Gi", GPU_RATIO: "100"},
            f"{REQUESTS}: Forbidden: declare GPU memory and GPU memory ratio at same time",
            id="shared-with-both-memories",
        ),
        pytest.param(
            {GPU_SHARED: "2", GPU_CORE: "101", GPU_RATIO: "200"},
            f'{REQUESTS}: Invalid value: "101": the requested gpuCore must multiple of shared',
            id="core-not-multiple",
        ),
        pytest.param(
            {GPU_SHARED: "2", GPU_CORE: "101", GPU_RATIO: "201"},
            f'[{REQUESTS}: Invalid value: "101": the requested gpuCore must multiple of shared, '
            f'{REQUESTS}: Invalid value: "201": the requested gpuMemoryRatio must multiple of shared]',
            id="core-and-ratio-not-multiple",
        ),
        pytest.param(
            {GPU_SHARED: "2", "huawei.com/npu-core": "8"},
            None,
            id="npu-core-skips-memory-checks",
        ),
    ],
)
async def test_device_resources(requests, message):
    pod = make_pod().container("main", requests=requests).build()
    response = await Admission(feature_gates="ValidatePodDeviceResource=true").call(VALIDATE, review(pod))
    assert response["allowed"] is (message is None)
    if message:
        assert response["status"]["message"] == message


async def test_enhanced_validator_requires_labels_outside_whitelisted_namespaces():
    rules = '[{"name":"team","requiredLabels":["team","owner"],"namespaceWhitelist":["kube-system"]}]'
    objects = [
        config_map("pod-enhanced-validator-config", "koordinator-system", {"enable": "True", "rules": rules})
    ]
    admission = Admission(objects, feature_gates="EnablePodEnhancedValidator=true")
    missing = await admission.call(VALIDATE, review(make_pod().labels(team="a").build()))
    assert missing["status"] == refused("required label 'owner' is missing")
    both = await admission.call(VALIDATE, review(make_pod().build()))
    assert both["status"] == refused("required labels are missing: [team owner]")
    whitelisted = await admission.call(VALIDATE, review(make_pod().namespace("kube-system").build()))
    assert whitelisted["allowed"] is True


BINDING_OPTIONS = WebhookOptions(
    binding_admission_user_names=("koord-scheduler",), binding_admission_namespaces=("*",)
)


def binding_review(username: str, namespace: str = "default") -> dict[str, Any]:
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "pod-1", "namespace": namespace},
        "target": {"kind": "Node", "name": "n1"},
    }
    return review(binding, kind="Pod", sub_resource="binding", username=username)


@pytest.mark.parametrize(
    ("username", "namespace", "pod_labels", "allowed", "decision"),
    [
        pytest.param(
            "system:serviceaccount:koordinator-system:koord-scheduler",
            "default",
            {},
            True,
            "allowed",
            id="allowed-user",
        ),
        pytest.param("system:kube-scheduler", "kube-system", {}, True, "excluded", id="excluded-namespace"),
        pytest.param(
            "system:kube-scheduler",
            "default",
            {"koordinator.sh/binding-admission-bypass": "true"},
            True,
            "bypass_label",
            id="bypass-label",
        ),
        pytest.param("system:kube-scheduler", "default", {}, False, "denied", id="denied"),
    ],
)
async def test_binding_admission(username, namespace, pod_labels, allowed, decision):
    pod = make_pod().namespace(namespace).label_map(pod_labels).build()
    admission = Admission([pod], feature_gates="BindingAdmissionWebhook=true", options=BINDING_OPTIONS)
    response = await admission.call("/validate-pod-binding", binding_review(username, namespace))
    assert response["allowed"] is allowed
    if not allowed:
        assert response["status"] == {
            "metadata": {},
            "message": "binding denied: username is not in the allowed list",
            "reason": "Forbidden",
            "code": 403,
        }
    counted = admission.ctx.metrics.registry.get_sample_value(
        "koord_manager_webhook_binding_admission_decisions_total", {"decision": decision}
    )
    assert counted == 1


async def test_binding_admission_is_off_without_its_gate():
    admission = Admission([make_pod().build()], options=BINDING_OPTIONS)
    response = await admission.call("/validate-pod-binding", binding_review("someone-else"))
    assert response["allowed"] is True


async def test_validation_records_the_duration_metric_per_plugin():
    admission = Admission()
    await admission.call(VALIDATE, review(make_pod().qos("BE").build()))
    registry = admission.ctx.metrics.registry
    labels = {"webhook_type": "validate", "object_type": "pod", "operation": "CREATE"}
    rejected = registry.get_sample_value(
        "koord_manager_webhook_webhook_duration_milliseconds_count",
        {**labels, "plugin_name": "ClusterColocationProfile", "status": "rejected"},
    )
    allowed = registry.get_sample_value(
        "koord_manager_webhook_webhook_duration_milliseconds_count",
        {**labels, "plugin_name": "ClusterReservation", "status": "allowed"},
    )
    assert (rejected, allowed) == (1.0, 1.0)
