"""The per-pod eviction gates that never change their answer while the pod stays as it is
(upstream's DefaultEvictor checks plus Koordinator's own): a pod refused here gets no
PodMigrationJob, and a waiting job for it fails with ``ForbiddenMigratePod``.

In order: DaemonSet, mirror, static and terminating pods; pods without owners (unless
``evictAllBarePods``, or ``evictFailedBarePods`` for Failed ones); system-critical pods
(priority >= 2000000000, unless ``evictSystemCriticalPods``) and pods at or over
``priorityThreshold`` (its ``value``, or the value of the PriorityClass it names: a class
that does not exist refuses every pod); pods with local storage (emptyDir or hostPath, unless
``evictLocalStoragePods``); pods with a PVC under ``ignorePvcPods``; with ``nodeFit``, pods
that fit no other node; pods outside ``labelSelector``. The
``descheduler.alpha.kubernetes.io/evict`` annotation overrides all of these. Then, always:
``namespaces`` include/exclude, the ``scheduling.koordinator.sh/eviction-cost`` of MaxInt32
(never evict), and the expected-replicas rule (a workload of 1 replica, or one whose
replicas equal its migrating or unavailable limit, is never migrated; off with
``skipCheckExpectedReplicas``). Each gate can be skipped by name (``skipEvictionGates``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from controlplane.descheduler.migration.args import MigrationControllerArgs
from controlplane.descheduler.migration.workloads import Workload, controller_of, max_unavailable
from koordinator.api.selectors import label_selector_matches

__all__ = ["GateContext", "refusal"]

Obj = Mapping[str, Any]

ANNOTATION_EVICT = "descheduler.alpha.kubernetes.io/evict"
ANNOTATION_EVICTION_COST = "scheduling.koordinator.sh/eviction-cost"
ANNOTATION_MIRROR = "kubernetes.io/config.mirror"
ANNOTATION_CONFIG_SOURCE = "kubernetes.io/config.source"
SYSTEM_CRITICAL_PRIORITY = 2_000_000_000
MAX_INT32 = 2**31 - 1


@dataclass(frozen=True)
class GateContext:
    """What the gates read of the cluster."""

    #: why the pod fits no other node (None: it fits one)
    misfit: Callable[[Obj], str | None]
    #: the workload's expected replicas
    expected_replicas: Callable[[Workload], int]
    #: a PriorityClass's value (None: no such class), for ``priorityThreshold.name``
    priority_of_class: Callable[[str], int | None] = lambda name: None


def _constraint(pod: Obj, args: MigrationControllerArgs, ctx: GateContext) -> str | None:
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    spec = pod.get("spec") or {}
    owners = [r for r in meta.get("ownerReferences") or () if isinstance(r, Mapping)]
    if any(r.get("kind") == "DaemonSet" for r in owners):
        return "pod is a DaemonSet pod"
    if ANNOTATION_MIRROR in annotations:
        return "pod is a mirror pod"
    if annotations.get(ANNOTATION_CONFIG_SOURCE, "api") != "api":
        return "pod is a static pod"
    if meta.get("deletionTimestamp"):
        return "pod is terminating"
    if not owners and args.gate("BarePods") and not args.evict_all_bare_pods:
        if not args.evict_failed_bare_pods:
            return "pod does not have any ownerRefs"
        if (pod.get("status") or {}).get("phase") != "Failed":
            return "pod does not have any ownerRefs and is not in failed phase"
    priority = spec.get("priority")
    priority = priority if isinstance(priority, int) else None
    if not args.evict_system_critical_pods:
        if args.gate("SystemCritical") and priority is not None and priority >= SYSTEM_CRITICAL_PRIORITY:
            return "pod has system critical priority"
        threshold = args.priority_threshold
        if threshold is None and args.priority_threshold_name:
            threshold = ctx.priority_of_class(args.priority_threshold_name)
            if threshold is None and args.gate("PriorityThreshold"):
                return f"priority class {args.priority_threshold_name} of priorityThreshold not found"
        if (
            args.gate("PriorityThreshold")
            and threshold is not None
            and priority is not None
            and priority >= threshold
        ):
            return "pod has higher priority than specified priority class threshold"
    volumes = [v for v in spec.get("volumes") or () if isinstance(v, Mapping)]
    if (
        args.gate("LocalStorage")
        and not args.evict_local_storage_pods
        and any("emptyDir" in v or "hostPath" in v for v in volumes)
    ):
        return "pod has local storage and descheduler is not configured with evictLocalStoragePods"
    if args.gate("PVC") and args.ignore_pvc_pods and any("persistentVolumeClaim" in v for v in volumes):
        return "pod has a PVC and descheduler is configured to ignore PVC pods"
    if args.gate("NodeFit") and args.node_fit and ctx.misfit(pod) is not None:
        return (
            "pod does not fit on any other node because of nodeSelector(s), Taint(s), "
            "or nodes marked as unschedulable"
        )
    if (
        args.gate("LabelSelector")
        and args.label_selector is not None
        and not label_selector_matches(args.label_selector, meta.get("labels") or {})
    ):
        return "pod labels do not match the labelSelector filter in the policy parameter"
    return None


def expected_replicas_refusal(pod: Obj, args: MigrationControllerArgs, ctx: GateContext) -> str | None:
    if args.skip_check_expected_replicas or not args.gate("ExpectedReplicas"):
        return None
    workload = controller_of(pod)
    if workload is None:
        return None
    replicas = ctx.expected_replicas(workload)
    if replicas == 1:
        return f"workload {workload.kind} {workload.key} expects 1 replica"
    if replicas == max_unavailable(replicas, args.max_migrating_per_workload):
        return f"workload {workload.kind} {workload.key} expects as many replicas as it may migrate at once"
    if replicas == max_unavailable(replicas, args.max_unavailable_per_workload):
        return f"workload {workload.kind} {workload.key} expects as many replicas as may be unavailable"
    return None


def refusal(pod: Obj, args: MigrationControllerArgs, ctx: GateContext) -> str | None:
    """Why the pod may never be migrated as it is (None: it may)."""
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    if ANNOTATION_EVICT not in annotations:
        why = _constraint(pod, args, ctx)
        if why is not None:
            return why
    namespace = meta.get("namespace") or ""
    if args.gate("Namespaces"):
        if args.include_namespaces and namespace not in args.include_namespaces:
            return f"namespace {namespace} is not included"
        if namespace in args.exclude_namespaces:
            return f"namespace {namespace} is excluded"
    if args.gate("EvictionCost") and str(annotations.get(ANNOTATION_EVICTION_COST, "")).strip() == str(
        MAX_INT32
    ):
        return "pod has the maximum eviction cost"
    return expected_replicas_refusal(pod, args, ctx)
