"""``/validate-pod``: the pod validating webhook (``vpod``), CREATE and UPDATE.

Steps in upstream order; the first step that finds problems refuses the pod with status
code 400 and the aggregated field errors (``admission.Errored(400, ...)``):

1. ``ClusterReservation`` -- ``scheduling.koordinator.sh/reserve-pod`` may not be set
   (it marks the scheduler's internal reserve pods);
2. ``ClusterColocationProfile`` -- the QoS/priority protocol: on UPDATE the raw QoS class,
   the raw priority class and the ``koordinator.sh/priority`` label are immutable (the last
   one unless ``ColocationProfileSkipValidatingPriority``); a pod requesting batch
   resources must be labelled ``BE``; ``BE`` may not be combined with priority none or
   koord-prod, ``LSR`` only with koord-prod; ``LSR``/``LSE`` pods must request a whole
   number of CPUs;
3. ``QuotaMetaChecker`` -- ElasticQuota rules for pods (see ``elasticquota.pod_check``);
4. ``EvaluateQuota`` -- the pod charged to its quota's admission limit (gate
   ``EnableQuotaAdmission``, see ``pod.evaluate_quota``);
5. ``DeviceResource`` -- GPU request shapes (gate ``ValidatePodDeviceResource``);
6. ``EnhancedValidation`` -- required labels from ``pod-enhanced-validator-config``
   (gate ``EnablePodEnhancedValidator``).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from controlplane.manager.webhooks import metrics
from controlplane.manager.webhooks.context import PluginStep, WebhookContext
from controlplane.manager.webhooks.elasticquota import pod_check
from controlplane.manager.webhooks.fielderrors import aggregate
from controlplane.manager.webhooks.objects import POD, ObjectError, check
from controlplane.manager.webhooks.pod import device_resource, enhanced_validator, evaluate_quota
from controlplane.manager.webhooks.pod.mutating import object_namespace
from controlplane.manager.webhooks.review import AdmissionRequest, AdmissionResponse, allowed, errored
from koordinator.api import resourcelist
from koordinator.api.extension.annotations import annotations_of, labels_of
from koordinator.api.extension.priority import (
    LABEL_POD_PRIORITY,
    PriorityClass,
    get_pod_priority_class_raw,
)
from koordinator.api.extension.qos import LABEL_POD_QOS, QoSClass, get_pod_qos_class_raw
from koordinator.api.extension.reservation import ANNOTATION_RESERVE_POD
from koordinator.api.extension.resources import BATCH_CPU, BATCH_MEMORY
from koordinator.api.quantity import Quantity
from koordinator.api.schema.errors import FieldError

__all__ = [
    "PodValidatingHandler",
    "validate_colocation",
    "validate_forbidden_annotations",
]

Obj = dict[str, Any]
FORBIDDEN_ANNOTATIONS = (ANNOTATION_RESERVE_POD,)
#: (QoS class, priority classes it may not be combined with)
FORBIDDEN_COMBINATIONS = (
    (QoSClass.BE, (PriorityClass.NONE, PriorityClass.PROD)),
    (QoSClass.LSR, (PriorityClass.NONE, PriorityClass.MID, PriorityClass.BATCH, PriorityClass.FREE)),
)
_REQUESTS_PATH = "pod.spec.containers[*].resources.requests"
#: a step: its problems, or an awaitable of them
Step = Callable[[], Sequence[FieldError | str] | Awaitable[Sequence[FieldError | str]]]


def validate_forbidden_annotations(pod: Obj) -> list[FieldError]:
    annotations = annotations_of(pod)
    return [
        FieldError.forbidden(f"annotations.{key}", "cannot set in annotations")
        for key in FORBIDDEN_ANNOTATIONS
        if key in annotations
    ]


def _immutable(path: str, new: str, old: str) -> list[FieldError]:
    return [] if new == old else [FieldError.invalid(path, new, "field is immutable")]


def validate_colocation(pod: Obj, old: Obj | None, *, check_priority_label: bool = True) -> list[FieldError]:
    errors: list[FieldError] = []
    qos = get_pod_qos_class_raw(pod)
    priority = get_pod_priority_class_raw(pod)
    if old is not None:
        errors += _immutable(f"labels.{LABEL_POD_QOS}", qos.value, get_pod_qos_class_raw(old).value)
        errors += _immutable("spec.priority", priority.value, get_pod_priority_class_raw(old).value)
        if check_priority_label:
            errors += _immutable(
                f"labels.{LABEL_POD_PRIORITY}",
                labels_of(pod).get(LABEL_POD_PRIORITY, ""),
                labels_of(old).get(LABEL_POD_PRIORITY, ""),
            )
    requests = resourcelist.pod_requests(pod)
    zero = Quantity()
    uses_batch = requests.get(BATCH_CPU, zero).sign() != 0 or requests.get(BATCH_MEMORY, zero).sign() != 0
    if uses_batch and qos is not QoSClass.BE:
        errors.append(
            FieldError.required(
                f"labels.{LABEL_POD_QOS}",
                "must specify koordinator QoS BE with koordinator colocation resources",
            )
        )
    for forbidden_qos, classes in FORBIDDEN_COMBINATIONS:
        if qos is forbidden_qos and priority in classes:
            errors.append(
                FieldError.forbidden(
                    "Pod",
                    f"{LABEL_POD_QOS}={qos.value} and priorityClass={priority.value} "
                    "cannot be used in combination",
                )
            )
    if qos in (QoSClass.LSR, QoSClass.LSE):
        cpu = requests.get("cpu", zero)
        if cpu.is_zero():
            errors.append(FieldError.required(_REQUESTS_PATH, "LSR Pod must declare the requested CPUs"))
        elif cpu.milli_value() % 1000 != 0:
            errors.append(
                FieldError.invalid(_REQUESTS_PATH, str(cpu), "the requested CPUs of LSR Pod must be integer")
            )
    return errors


class PodValidatingHandler:
    def __init__(self, ctx: WebhookContext) -> None:
        self.ctx = ctx

    def _step(self, request: AdmissionRequest, plugin: str) -> PluginStep:
        return PluginStep(self.ctx, metrics.VALIDATING, metrics.POD, request.operation, plugin)

    async def handle(self, request: AdmissionRequest) -> AdmissionResponse:
        if request.sub_resource or request.resource_name != "pods":
            return allowed()
        if request.operation not in ("CREATE", "UPDATE"):
            return allowed()
        try:
            pod = check(request.object, POD, "pod")
            old = check(request.old_object, POD, "old pod") if request.operation == "UPDATE" else None
        except ObjectError as exc:
            return errored(400, str(exc))
        namespace = object_namespace(pod, request)
        steps: list[tuple[str, Step]] = [
            ("ClusterReservation", lambda: validate_forbidden_annotations(pod)),
            (
                "ClusterColocationProfile",
                lambda: validate_colocation(
                    pod,
                    old,
                    check_priority_label=not self.ctx.enabled("ColocationProfileSkipValidatingPriority"),
                ),
            ),
            (pod_check.NAME, lambda: pod_check.validate_pod_quota(self.ctx, pod, old, namespace)),
        ]
        if self.ctx.enabled("EnableQuotaAdmission"):
            steps.append(
                (
                    evaluate_quota.NAME,
                    lambda: evaluate_quota.evaluate_quota(self.ctx, request, pod, old, namespace),
                )
            )
        if self.ctx.enabled("ValidatePodDeviceResource"):
            steps.append((device_resource.NAME, lambda: device_resource.validate_device_resources(pod)))
        if self.ctx.enabled("EnablePodEnhancedValidator"):
            steps.append(
                (
                    enhanced_validator.NAME,
                    lambda: enhanced_validator.validate_required_labels(self.ctx, pod, namespace),
                )
            )
        for plugin, run in steps:
            with self._step(request, plugin) as step:
                problems = run()
                if inspect.isawaitable(problems):
                    problems = await problems
                if problems:
                    step.reject()
                    return errored(400, aggregate(problems))
        return allowed()
