"""One Recommendation's histograms, how pod usage feeds them, and their checkpoint.

NodeMetric reports usage per pod, not per container. A pod's usage is split between its
containers in proportion to their requests -- CPU by CPU requests, memory by memory
requests -- and evenly when no container requests that resource; a single-container pod's
figures are therefore exact, a multi-container pod's are an estimate. A container without
a request of a resource beside containers with one gets no share of it (its usage cannot
be told apart from theirs), so no samples and no recommendation: a share of 0 would
recommend the smallest bucket and starve it. Each container name of the target has one
CPU histogram (cores) and one memory histogram (bytes), fed with every pod's share at the
NodeMetric's ``status.updateTime``; a container the target's pods no longer have is
dropped (:meth:`RecommendationState.retain`), so a removed or renamed container's last
figures do not stay in the status.

A state belongs to one Recommendation object and one target: :attr:`RecommendationState.uid`
and :attr:`RecommendationState.target` (the canonical JSON of ``spec.target``, also in the
checkpoint) tell the controller when a recreated object or an edited target must start
afresh instead of inheriting another workload's history.

Every NodeMetric report is sampled once: :attr:`RecommendationState.sampled` remembers the
``updateTime`` last taken from each node, and is checkpointed with the histograms, so a
controller that restarts neither loses history nor samples a report twice.

The checkpoint is a ConfigMap in the Recommendation's namespace (:func:`checkpoint_name`),
owned by the Recommendation so that deleting it deletes the checkpoint; its
``data["checkpoint"]`` is the JSON of :meth:`RecommendationState.to_checkpoint`.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from controlplane.manager.controllers.recommendation.histogram import (
    CPU_BUCKETS,
    MEMORY_BUCKETS,
    DecayingHistogram,
    HistogramError,
)
from koordinator.api.quantity import QuantityError, parse_quantity

__all__ = [
    "CHECKPOINT_KEY",
    "CHECKPOINT_VERSION",
    "ContainerHistograms",
    "RecommendationState",
    "checkpoint_name",
    "container_shares",
    "target_fingerprint",
]

CHECKPOINT_KEY = "checkpoint"
CHECKPOINT_VERSION = 1
_SUFFIX = "-recommendation"
_NAME_LIMIT = 253

Obj = dict[str, Any]


def checkpoint_name(recommendation: str) -> str:
    """The checkpoint ConfigMap's name: ``<name>-recommendation``, shortened with a hash when too long."""
    name = recommendation + _SUFFIX
    if len(name) <= _NAME_LIMIT:
        return name
    digest = hashlib.sha256(recommendation.encode()).hexdigest()[:10]
    return f"{recommendation[: _NAME_LIMIT - len(_SUFFIX) - 11]}-{digest}{_SUFFIX}"


def target_fingerprint(recommendation: Mapping[str, Any]) -> str:
    """The canonical JSON of a Recommendation's ``spec.target``: equal for the same target."""
    target = (recommendation.get("spec") or {}).get("target") or {}
    return json.dumps(target, sort_keys=True, separators=(",", ":"))


def _request(container: Mapping[str, Any], resource: str) -> float:
    raw = ((container.get("resources") or {}).get("requests") or {}).get(resource)
    if raw is None:
        return 0.0
    try:
        value = parse_quantity(str(raw))
    except QuantityError:
        return 0.0
    return value.milli_value() / 1000.0 if resource == "cpu" else float(value.value())


def container_shares(pod: Mapping[str, Any], resource: str) -> dict[str, float]:
    """Each regular container's share of the pod's ``resource`` usage (sums to 1; {} without containers)."""
    containers = [c for c in (pod.get("spec") or {}).get("containers") or () if c.get("name")]
    if not containers:
        return {}
    requests = {str(c["name"]): _request(c, resource) for c in containers}
    total = sum(requests.values())
    if total <= 0:
        return {name: 1.0 / len(requests) for name in requests}
    return {name: value / total for name, value in requests.items()}


def _usage(metric: Mapping[str, Any], resource: str) -> float | None:
    raw = (((metric.get("podUsage") or {}).get("resources")) or {}).get(resource)
    if raw is None:
        return None
    try:
        value = parse_quantity(str(raw))
    except QuantityError:
        return None
    return value.milli_value() / 1000.0 if resource == "cpu" else float(value.value())


@dataclass
class ContainerHistograms:
    cpu: DecayingHistogram
    memory: DecayingHistogram


@dataclass
class RecommendationState:
    half_life: float
    containers: dict[str, ContainerHistograms] = field(default_factory=dict)
    #: node -> the NodeMetric ``status.updateTime`` last sampled from it
    sampled: dict[str, str] = field(default_factory=dict)
    #: the Recommendation object this state is of (not checkpointed: the ConfigMap's owner says it)
    uid: str = ""
    #: :func:`target_fingerprint` of the target the samples are of ("" in a checkpoint from
    #: before it was recorded: taken as the current target)
    target: str = ""

    def _histograms(self, container: str) -> ContainerHistograms:
        found = self.containers.get(container)
        if found is None:
            found = ContainerHistograms(
                DecayingHistogram(CPU_BUCKETS, self.half_life),
                DecayingHistogram(MEMORY_BUCKETS, self.half_life),
            )
            self.containers[container] = found
        return found

    def add_pod(self, pod: Mapping[str, Any], metric: Mapping[str, Any], at: float) -> int:
        """Feed one pod's reported usage, split to its containers; returns the samples added."""
        added = 0
        for resource in ("cpu", "memory"):
            usage = _usage(metric, resource)
            if usage is None:
                continue
            for container, share in container_shares(pod, resource).items():
                if share <= 0:
                    continue  # no request beside containers with one: its usage is theirs too
                histograms = self._histograms(container)
                histogram = histograms.cpu if resource == "cpu" else histograms.memory
                histogram.add(usage * share, 1.0, at)
                added += 1
        return added

    def retain(self, names: set[str]) -> bool:
        """Drop the histograms of containers not in ``names``; whether any were dropped."""
        gone = [name for name in self.containers if name not in names]
        for name in gone:
            del self.containers[name]
        return bool(gone)

    def recommended_names(self, min_samples: int) -> list[str]:
        """The containers with at least ``min_samples`` samples of both resources, by name."""
        return [
            name
            for name, h in sorted(self.containers.items())
            if min(h.cpu.samples, h.memory.samples) >= min_samples
        ]

    def recommend(
        self, cpu_percentile: float, memory_percentile: float, margin: float, min_samples: int
    ) -> list[Obj]:
        """``containerStatuses`` for the containers with enough samples of both resources, by name."""
        statuses = []
        for name in self.recommended_names(min_samples):
            histograms = self.containers[name]
            cpu = histograms.cpu.percentile(cpu_percentile) * (1 + margin)
            memory = histograms.memory.percentile(memory_percentile) * (1 + margin)
            statuses.append(
                {
                    "containerName": name,
                    "resources": {"cpu": f"{math.ceil(cpu * 1000 - 1e-6)}m", "memory": _mebibytes(memory)},
                }
            )
        return statuses

    def to_checkpoint(self) -> str:
        return json.dumps(
            {
                "version": CHECKPOINT_VERSION,
                "halfLifeSeconds": self.half_life,
                "target": self.target,
                "sampled": dict(sorted(self.sampled.items())),
                "containers": {
                    name: {"cpu": h.cpu.to_checkpoint(), "memory": h.memory.to_checkpoint()}
                    for name, h in sorted(self.containers.items())
                },
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_checkpoint(cls, text: str, half_life: float) -> RecommendationState:
        """Restore a checkpoint; raises :class:`HistogramError` for one that cannot be used.

        A checkpoint written with another half-life is still restored (weights are relative
        to a reference time, so only future decay changes)."""
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise HistogramError(f"checkpoint is not JSON: {exc}") from None
        if not isinstance(data, dict) or data.get("version") != CHECKPOINT_VERSION:
            raise HistogramError(
                f"unknown checkpoint version {data.get('version') if isinstance(data, dict) else None!r}"
            )
        sampled = data.get("sampled") or {}
        containers = data.get("containers") or {}
        if not isinstance(sampled, dict) or not isinstance(containers, dict):
            raise HistogramError("checkpoint sampled/containers are not objects")
        target = data.get("target") or ""
        if not isinstance(target, str):
            raise HistogramError("checkpoint target is not a string")
        state = cls(half_life, sampled={str(k): str(v) for k, v in sampled.items()}, target=target)
        for name, entry in containers.items():
            if not isinstance(entry, dict):
                raise HistogramError(f"checkpoint container {name!r} is not an object")
            state.containers[str(name)] = ContainerHistograms(
                DecayingHistogram.from_checkpoint(entry.get("cpu") or {}, CPU_BUCKETS, half_life),
                DecayingHistogram.from_checkpoint(entry.get("memory") or {}, MEMORY_BUCKETS, half_life),
            )
        return state


def _mebibytes(value: float) -> str:
    """Bytes rounded up to whole MiB, as a quantity."""
    return f"{math.ceil(value / 2**20 - 1e-9)}Mi"
