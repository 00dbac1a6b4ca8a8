"""What a pod is expected to use before the koordlet reports it (upstream's default
estimator, ``estimator/default_estimator.go``).

For each resource the plug-in compares (translated to ``batch-cpu``/``batch-memory`` for a
batch pod, ``mid-*`` for a mid one): the larger of the pod's request and limit, scaled by
the resource's factor (percent) and rounded as Go's ``math.Round``, capped at the limit;
a pod asking for none gets 250 milli-cores of CPU and 200 MiB of memory (batch
resources alike) and nothing of the others. A pod may carry its own factors and
estimation windows when ``allowCustomizeEstimation`` is on.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

from controlplane.scheduler.kernel.twin import go_round
from controlplane.scheduler.plugins.loadaware.args import LoadAwareArgs
from controlplane.scheduler.podinfo import PodInfo
from koordinator.api.extension.annotations import AnnotationError
from koordinator.api.extension.priority import priority_class_by_name
from koordinator.api.extension.resources import BATCH_CPU, BATCH_MEMORY, translate_resource_name
from koordinator.api.extension.scheduling import (
    ANNOTATION_LOAD_ESTIMATED_SECONDS_AFTER_INITIALIZED,
    ANNOTATION_LOAD_ESTIMATED_SECONDS_AFTER_POD_SCHEDULED,
    get_estimated_scaling_factors,
    get_int_annotation,
)
from koordinator.kube.timeutil import parse_time

DEFAULT_MILLI_CPU = 250
DEFAULT_MEMORY = 200 * 1024 * 1024
_DEFAULTS = {
    "cpu": DEFAULT_MILLI_CPU,
    BATCH_CPU: DEFAULT_MILLI_CPU,
    "memory": DEFAULT_MEMORY,
    BATCH_MEMORY: DEFAULT_MEMORY,
}

Estimate = tuple[int, ...]


def estimate_resource(request: int, limit: int, real_name: str, factor: int) -> int:
    """Upstream's ``estimatedUsedByResource`` for one resource (values as the pod record
    keeps them: CPU in milli-cores, the rest in units)."""
    quantity = limit if limit > request else request
    if quantity == 0:
        return _DEFAULTS.get(real_name, 0)
    used = go_round(float(quantity) * float(factor) / 100)
    return limit if 0 < limit < used else used


@functools.lru_cache(maxsize=4096)
def _estimate(
    resources: tuple[str, ...],
    factors: tuple[int, ...],
    priority_class: str,
    requests: tuple[tuple[str, int], ...],
    limits: tuple[tuple[str, int], ...],
) -> Estimate:
    priority = priority_class_by_name(priority_class)
    want, cap = dict(requests), dict(limits)
    out = []
    for name, factor in zip(resources, factors, strict=True):
        real = translate_resource_name(priority, name)
        out.append(estimate_resource(want.get(real, 0), cap.get(real, 0), real, factor))
    return tuple(out)


def custom_factors(pod: PodInfo) -> Mapping[str, int]:
    """The pod's ``load-estimated-scaling-factors`` (empty when absent or malformed)."""
    try:
        return get_estimated_scaling_factors(pod.annotations)
    except AnnotationError:
        return {}


def estimate_pod(pod: PodInfo, args: LoadAwareArgs) -> Estimate:
    """The pod's estimated usage of each of ``args.resources``, in that order."""
    resources = args.resources
    factors = args.estimated_scaling_factors
    if args.allow_customize_estimation and pod.annotations:
        custom = custom_factors(pod)
        if custom:
            factors = {**factors, **custom}
    return _estimate(
        resources,
        tuple(factors.get(name, 0) for name in resources),
        pod.priority_class,
        tuple(pod.requests.items()),
        tuple(pod.limits.items()),
    )


@functools.lru_cache(maxsize=8192)
def _time(text: str) -> float | None:
    try:
        return parse_time(text) if text else None
    except ValueError:
        return None


def scheduled_time(pod: PodInfo) -> float | None:
    """When the pod's PodScheduled condition turned true (None: not reported yet)."""
    return _time(pod.scheduled_at)


def _window(pod: PodInfo, args: LoadAwareArgs, key: str, default: int | None) -> int | None:
    """The pod's own estimation window with ``allowCustomizeEstimation`` (0 turns it off),
    else the args' (also for a missing, malformed or negative annotation, as upstream)."""
    if args.allow_customize_estimation and key in pod.annotations:
        try:
            value = get_int_annotation(pod.annotations, key)
        except AnnotationError:
            return default
        return value if value is not None and value >= 0 else default
    return default


def estimated_deadline(pod: PodInfo, args: LoadAwareArgs, assumed_at: float) -> float | None:
    """Until when the pod stays estimated whatever its reported usage (upstream's
    ``shouldEstimatePodDeadline``): once the pod is initialized, its initialization time
    plus ``estimatedSecondsAfterInitialized`` when that is set (the seconds after scheduling,
    possibly long to wait for init containers, no longer count); else its scheduling time
    (its assume time until PodScheduled says) plus ``estimatedSecondsAfterPodScheduled``;
    None when neither applies."""
    after_initialized = _window(
        pod,
        args,
        ANNOTATION_LOAD_ESTIMATED_SECONDS_AFTER_INITIALIZED,
        args.estimated_seconds_after_initialized,
    )
    if after_initialized is not None and after_initialized > 0:
        initialized = _time(pod.initialized_at)
        if initialized is not None:
            return initialized + after_initialized
    after_scheduled = _window(
        pod,
        args,
        ANNOTATION_LOAD_ESTIMATED_SECONDS_AFTER_POD_SCHEDULED,
        args.estimated_seconds_after_pod_scheduled,
    )
    if after_scheduled is not None and after_scheduled > 0:
        return (scheduled_time(pod) or assumed_at) + after_scheduled
    return None
