"""The ProdReclaimable predictor: how much of the Prod pods' requests they do not use.

Built fresh for each NodeMetric report (upstream's ``PredictorFactory.New(
ProdReclaimablePredictor, node)``), fed every pod that has usage in the report, then asked
for its result (``prodReclaimableMetric``) and its peak (``prodPeakMetric``). It is the
minimum of two predictors; only pods of priority ``koord-prod`` or none count, and pods that
are terminating or finished are left out. With ``margin = (100 + safetyMarginPercent) / 100``
and ``allocatable`` = the node's ``status.allocatable`` with its
``node.koordinator.sh/raw-allocatable`` annotation's values over it:

pod predictor (per-pod models)::

    for each pod created more than coldStartDuration ago, with a model:
        peak_pod    = (p95 CPU x margin, p98 memory x margin)
        reclaimable += max(request_pod - peak_pod, 0)
        peaks       += peak_pod
    for the others (in cold start, or without a model yet):
        unpredicted += request_pod
    result = min(max(allocatable - peaks, 0), reclaimable)
    peak   = peaks + unpredicted

priority predictor (node-level models)::

    peak   = (p95 CPU, p98 memory) of sys + koord-prod + none, x margin
    result = min(max(allocatable - peak, 0), max(sum of requests - peak, 0))

A pod added twice counts once; a terminating or finished pod counts nowhere, even in its
cold start. The result is the per-resource minimum of the two results; the peak is the
per-resource maximum of the two peaks (the larger use that the smaller reclaimable
implies). There is no result (``None``) while a predictor lacks what it needs: the node
or its allocatable CPU and memory, or the node-level models (before the first training).
CPU is in milli-cores, memory in bytes; ``x margin`` truncates as upstream's
``MultiplyMilliQuant`` and ``MultiplyQuant`` do.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from koordinator.api import resourcelist
from koordinator.api.extension.annotations import AnnotationError, get_resource_list
from koordinator.api.extension.node import ANNOTATION_NODE_RAW_ALLOCATABLE
from koordinator.api.extension.priority import PriorityClass, get_pod_priority_class_with_default
from koordinator.api.quantity import Quantity, QuantityError
from koordinator.kube.timeutil import parse_time
from koordlet.metrics import BYTE, CORE, KoordletMetrics
from koordlet.prediction.server import SYSTEM_UID, Usage, node_item_uid

log = logging.getLogger(__name__)

#: the priority classes whose unused requests are reclaimable for mid pods
RECLAIMABLE_PRIORITIES = (PriorityClass.PROD, PriorityClass.NONE)
ZERO = Usage(0, 0)


class PredictionSource(Protocol):
    def get_prediction(self, uid: str) -> Mapping[str, Usage] | None: ...


def _add(a: Usage, b: Usage) -> Usage:
    return Usage(a.cpu_milli + b.cpu_milli, a.memory + b.memory)


def _non_negative_sub(a: Usage, b: Usage) -> Usage:
    return Usage(max(a.cpu_milli - b.cpu_milli, 0), max(a.memory - b.memory, 0))


def _min(a: Usage, b: Usage) -> Usage:
    return Usage(min(a.cpu_milli, b.cpu_milli), min(a.memory, b.memory))


def _max(a: Usage, b: Usage) -> Usage:
    return Usage(max(a.cpu_milli, b.cpu_milli), max(a.memory, b.memory))


def _with_margin(value: Usage, ratio: float) -> Usage:
    return Usage(int(value.cpu_milli * ratio), int(value.memory * ratio))


def is_reclaimable(pod: Mapping[str, Any]) -> bool:
    return get_pod_priority_class_with_default(pod) in RECLAIMABLE_PRIORITIES


def _is_gone(pod: Mapping[str, Any]) -> bool:
    """Terminating, or finished: such a pod will not use what it asked for."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return True
    return str((pod.get("status") or {}).get("phase") or "") in ("Succeeded", "Failed")


def pod_request(pod: Mapping[str, Any]) -> Usage:
    requests = resourcelist.pod_requests(pod)
    cpu = requests.get("cpu")
    memory = requests.get("memory")
    return Usage(cpu.milli_value() if cpu else 0, memory.value() if memory else 0)


def node_allocatable(node: Mapping[str, Any] | None) -> Usage | None:
    """``status.allocatable`` CPU and memory, the ``raw-allocatable`` annotation's values over
    them (a malformed annotation is logged and ignored); None without both."""
    if node is None:
        return None
    try:
        values = resourcelist.parse((node.get("status") or {}).get("allocatable"))
    except resourcelist.ResourceListError as exc:
        log.warning("prediction: the node's allocatable cannot be read: %s", exc)
        return None
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    try:
        raw = get_resource_list(annotations, ANNOTATION_NODE_RAW_ALLOCATABLE)
    except (AnnotationError, QuantityError) as exc:
        log.warning("prediction: ignoring the node's %s annotation: %s", ANNOTATION_NODE_RAW_ALLOCATABLE, exc)
        raw = None
    values.update(raw or {})
    cpu, memory = values.get("cpu"), values.get("memory")
    if not isinstance(cpu, Quantity) or not isinstance(memory, Quantity):
        return None
    return Usage(cpu.milli_value(), memory.value())


def _peak_of(prediction: Mapping[str, Usage]) -> Usage:
    """p95 CPU and p98 memory."""
    return Usage(prediction["p95"].cpu_milli, prediction["p98"].memory)


class PodReclaimablePredictor:
    name = "podReclaimablePredictor"

    def __init__(
        self,
        source: PredictionSource,
        allocatable: Usage | None,
        *,
        cold_start_seconds: float,
        safety_margin_percent: int,
        now: float,
    ) -> None:
        self.source = source
        self.allocatable = allocatable
        self.cold_start_seconds = cold_start_seconds
        self.ratio = (100 + safety_margin_percent) / 100
        self.now = now
        self.reclaimable = ZERO
        self.peaks = ZERO
        self.unpredicted = ZERO
        self._seen: set[str] = set()

    def add_pod(self, pod: Mapping[str, Any]) -> None:
        if not is_reclaimable(pod):
            return
        metadata = pod.get("metadata") or {}
        uid = str(metadata.get("uid") or "")
        if not uid or uid in self._seen:
            return
        self._seen.add(uid)
        if _is_gone(pod):
            return
        request = pod_request(pod)
        created = metadata.get("creationTimestamp")
        try:
            age = self.now - parse_time(created) if created else None
        except ValueError:
            age = None
        prediction = self.source.get_prediction(uid)
        # in cold start (or of unknown age), or not trained yet: its whole request may be used
        if age is None or age <= self.cold_start_seconds or prediction is None:
            self.unpredicted = _add(self.unpredicted, request)
            return
        peak = _with_margin(_peak_of(prediction), self.ratio)
        self.peaks = _add(self.peaks, peak)
        self.reclaimable = _add(self.reclaimable, _non_negative_sub(request, peak))

    def result(self) -> Usage | None:
        if self.allocatable is None:
            return None
        return _min(_non_negative_sub(self.allocatable, self.peaks), self.reclaimable)

    def peak(self) -> Usage | None:
        return _add(self.peaks, self.unpredicted)


class PriorityReclaimablePredictor:
    name = "priorityReclaimablePredictor"

    def __init__(
        self, source: PredictionSource, allocatable: Usage | None, *, safety_margin_percent: int
    ) -> None:
        self.source = source
        self.allocatable = allocatable
        self.ratio = (100 + safety_margin_percent) / 100
        self.requests = ZERO
        self._seen: set[str] = set()

    def add_pod(self, pod: Mapping[str, Any]) -> None:
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        if not is_reclaimable(pod) or not uid or uid in self._seen:
            return
        self._seen.add(uid)
        if _is_gone(pod):
            return
        self.requests = _add(self.requests, pod_request(pod))

    def peak(self) -> Usage | None:
        total = ZERO
        for uid in (SYSTEM_UID, *(node_item_uid(str(p)) for p in RECLAIMABLE_PRIORITIES)):
            prediction = self.source.get_prediction(uid)
            if prediction is None:
                log.debug("prediction: no model of %s yet", uid)
                return None
            total = _add(total, _peak_of(prediction))
        return _with_margin(total, self.ratio)

    def result(self) -> Usage | None:
        peak = self.peak()
        if peak is None or self.allocatable is None:
            return None
        return _min(_non_negative_sub(self.allocatable, peak), _non_negative_sub(self.requests, peak))


class ProdReclaimablePredictor:
    """The minimum of the pod and the priority predictor (upstream's ``minPredictor``).

    With ``metrics``, each answer is also recorded: ``koordlet_node_predicted_resource_
    reclaimable`` and ``..._peak`` per predictor (``podReclaimablePredictor``,
    ``priorityReclaimablePredictor``, ``minPredictor``; CPU in cores, memory in bytes), and
    ``koordlet_node_priority_resource_reclaimable`` of ``koord-prod`` (0 without a result,
    as upstream records a failed prediction), and ``koordlet_node_resource_priority_
    reclaimable_status`` of ``koord-prod``: 1 with a result, 0 without (a cold start, a
    model not trained yet, no allocatable), which tells a failed prediction from nothing
    to reclaim. Upstream registers that gauge and never sets it."""

    name = "minPredictor"

    def __init__(
        self,
        pod: PodReclaimablePredictor,
        priority: PriorityReclaimablePredictor,
        metrics: KoordletMetrics | None = None,
    ) -> None:
        self.predictors = (pod, priority)
        self.metrics = metrics

    def add_pod(self, pod: Mapping[str, Any]) -> None:
        for predictor in self.predictors:
            predictor.add_pod(pod)

    def result(self) -> Usage | None:
        pod, priority = (self._recorded(p.name, p.result(), peak=False) for p in self.predictors)
        out = _min(pod, priority) if pod is not None and priority is not None else None
        self._recorded(self.name, out, peak=False)
        if self.metrics is not None:
            node, prod = self.metrics.node, str(PriorityClass.PROD)
            gauge = self.metrics.node_priority_resource_reclaimable
            value = out or ZERO
            gauge.labels(node, prod, "cpu", CORE).set(value.cpu_milli / 1000)
            gauge.labels(node, prod, "memory", BYTE).set(value.memory)
            status = self.metrics.node_resource_priority_reclaimable_status
            status.labels(node, prod).set(int(out is not None))
        return out

    def peak(self) -> Usage | None:
        pod, priority = (self._recorded(p.name, p.peak(), peak=True) for p in self.predictors)
        out = _max(pod, priority) if pod is not None and priority is not None else None
        return self._recorded(self.name, out, peak=True)

    def _recorded(self, predictor: str, value: Usage | None, *, peak: bool) -> Usage | None:
        if self.metrics is not None and value is not None:
            gauge = (
                self.metrics.node_predicted_resource_peak
                if peak
                else self.metrics.node_predicted_resource_reclaimable
            )
            gauge.labels(self.metrics.node, predictor, "cpu", CORE).set(value.cpu_milli / 1000)
            gauge.labels(self.metrics.node, predictor, "memory", BYTE).set(value.memory)
        return value


def prod_reclaimable_factory(
    source: PredictionSource,
    get_node: Callable[[], Mapping[str, Any] | None],
    *,
    cold_start_seconds: float,
    safety_margin_percent: int,
    clock: Callable[[], float] = time.time,
    metrics: KoordletMetrics | None = None,
) -> Callable[[], ProdReclaimablePredictor]:
    """A factory of fresh predictors over the node as it is when each is made (recording
    their answers in ``metrics`` when given)."""

    def new() -> ProdReclaimablePredictor:
        allocatable = node_allocatable(get_node())
        return ProdReclaimablePredictor(
            PodReclaimablePredictor(
                source,
                allocatable,
                cold_start_seconds=cold_start_seconds,
                safety_margin_percent=safety_margin_percent,
                now=clock(),
            ),
            PriorityReclaimablePredictor(source, allocatable, safety_margin_percent=safety_margin_percent),
            metrics,
        )

    return new
