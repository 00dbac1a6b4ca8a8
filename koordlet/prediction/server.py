"""PeakPredictServer: trains the usage models and answers percentile questions about them.

Upstream's ``peakPredictServer``. Every ``trainingInterval`` it reads the p90 of the last
training interval's samples (``pod_cpu_usage``/``pod_memory_usage`` per pod,
``node_cpu_usage``/``node_memory_usage``) and adds one sample to each model:

* one model per pod (its UID), for every pod with both usages in the window;
* the node (``__node__``), when both node usages are there;
* each priority class (``__node-koord-prod__`` ... ``__node-__`` for pods of none), the sum
  of its pods' usages, 0 when it has no pod;
* the system (``__node-sys__``): node usage minus all pods' usage, floored at 0.

A model is two decaying histograms (:mod:`koordlet.prediction.histogram`): CPU in cores,
max 1024, first bucket 0.025, growth 1.05, half-life 12 h; memory in bytes, max 2^41, first
bucket 5 MiB, growth 1.05, half-life 24 h; epsilon 0.0001. A prediction gives p60, p90,
p95, p98 and max (CPU milli-cores, truncated; memory bytes).

Models not trained for ``modelExpirationDuration`` are dropped with their checkpoint (every
minute). Every minute, up to ``modelCheckpointMaxPerStep`` models whose last checkpoint is
older than ``modelCheckpointInterval`` (the oldest first) are written to disk; on start the
checkpoints are read back before the first training, and those of UIDs not on this node
(pods gone while the koordlet was down) or that cannot be read are removed, with a log line.
Garbage collection and checkpoints wait for the first training.

Clocks: expiry and the checkpoint interval are timed on the monotonic clock, as upstream's
``clock.Since`` is (Go's monotonic reading), so a step of the wall clock (NTP, an operator)
neither expires every model nor stops the checkpoints. The wall clock gives the metric
cache's query windows (its samples carry wall times), the checkpoints' ``LastUpdated`` (a
restored one becomes a monotonic time as ``now - (wall now - LastUpdated)``, a future one
counting as now) and, read once, the anchor of the samples' times: a sample is stamped with
that anchor plus the monotonic time since, so a later wall step moves no sample (see
``PeakPredictServer.sample_time``); a restored history that starts in the future is skipped.

Everything runs on the agent's event loop; file writes go to a worker thread.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from koordinator.api.extension.priority import PriorityClass, get_pod_priority_class_with_default
from koordinator.kube.timeutil import format_time, parse_time
from koordlet.metriccache import MetricKind, kinds
from koordlet.prediction.checkpoint import FileCheckpointer, ModelCheckpoint
from koordlet.prediction.config import PredictionConfig
from koordlet.prediction.histogram import (
    CheckpointError,
    DecayingHistogram,
    ExponentialOptions,
    format_go_time,
)

log = logging.getLogger(__name__)

NODE_UID = "__node__"
SYSTEM_ITEM = "sys"
#: upstream's ``KnownPriorityClasses``
KNOWN_PRIORITY_CLASSES = (
    PriorityClass.PROD,
    PriorityClass.MID,
    PriorityClass.BATCH,
    PriorityClass.FREE,
    PriorityClass.NONE,
)
PERCENTILES = {"p60": 0.6, "p90": 0.9, "p95": 0.95, "p98": 0.98, "max": 1.0}
#: the minimal weight of a sample, and the lightest bucket that is not empty
MIN_SAMPLE_WEIGHT = 0.1
EPSILON = 0.001 * MIN_SAMPLE_WEIGHT
BUCKET_GROWTH = 1.05
CPU_OPTIONS = ExponentialOptions(1024.0, 0.025, BUCKET_GROWTH, EPSILON)
MEMORY_OPTIONS = ExponentialOptions(float(1 << 41), float(5 << 20), BUCKET_GROWTH, EPSILON)
GC_INTERVAL_SECONDS = 60.0
CHECKPOINT_STEP_SECONDS = 60.0
#: how many training intervals beyond one half-life a restored history may start ahead of
#: now (two processes' clocks differ a little) before it is taken for a clock that ran ahead
FUTURE_HISTORY_SLACK_TRAININGS = 5


def node_item_uid(item: str) -> str:
    """The UID of a node-level model (a priority class, or ``sys``)."""
    return f"__node-{item}__"


SYSTEM_UID = node_item_uid(SYSTEM_ITEM)


class Aggregate(Protocol):
    def count(self) -> int: ...
    def value(self, aggregation: str) -> float: ...


class UsageQuerier(Protocol):
    def __call__(self, kind: MetricKind, start: float, end: float, **labels: str) -> Aggregate: ...


class Usage(NamedTuple):
    """A CPU (milli-cores) and memory (bytes) pair."""

    cpu_milli: int
    memory: int


@dataclass
class Model:
    cpu: DecayingHistogram
    memory: DecayingHistogram
    #: when the model last got a sample and was last written to disk, on the server's
    #: monotonic clock (-inf: never)
    last_updated: float = -math.inf
    last_checkpointed: float = -math.inf

    def prediction(self) -> dict[str, Usage]:
        return {
            name: Usage(int(self.cpu.percentile(p) * 1000), int(self.memory.percentile(p)))
            for name, p in PERCENTILES.items()
        }


@dataclass
class _ItemUsage:
    cpu: float = 0.0
    memory: float = 0.0


@dataclass
class PeakPredictServer:
    config: PredictionConfig
    query: UsageQuerier
    #: the pods on the node (pod objects), as the states informer has them
    list_pods: Callable[[], Sequence[Mapping[str, Any]]]
    #: the wall clock (Unix seconds): query windows, checkpoints' ``LastUpdated``, the
    #: samples' anchor
    clock: Callable[[], float] = time.time
    #: the monotonic clock (seconds) of expiry, checkpoint intervals and sample times; None:
    #: :func:`time.monotonic` with the real wall clock, and with an injected wall clock that
    #: clock itself (a simulation whose one clock only moves forward)
    monotonic: Callable[[], float] | None = None
    checkpointer: FileCheckpointer | None = None
    models: dict[str, Model] = field(default_factory=dict)
    #: True once a training has run (garbage collection and checkpoints wait for it)
    has_synced: bool = False
    #: (wall, monotonic) readings at the first sample time asked for; None before
    _anchor: tuple[float, float] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.checkpointer is None:
            self.checkpointer = FileCheckpointer(self.config.checkpoint_dir)
        if self.monotonic is None:
            self.monotonic = time.monotonic if self.clock is time.time else self.clock

    @property
    def _files(self) -> FileCheckpointer:
        assert self.checkpointer is not None
        return self.checkpointer

    def _monotonic_now(self) -> float:
        assert self.monotonic is not None
        return self.monotonic()

    def sample_time(self, monotonic_now: float | None = None) -> float:
        """The Unix time a sample taken now is stamped with: the wall clock read at the first
        call (the restore, or the first training) plus the monotonic time elapsed since.

        Upstream (and the Vertical Pod Autoscaler's histogram it uses) stamps every sample
        with the wall clock, and a sample weighs ``2 ** ((t - reference) / half_life)``: one
        taken while the clock ran days ahead outweighs all the others until real time
        catches up, and one over 100 half-lives ahead moves the reference there, so that
        later samples weigh about 0 and the model stops learning. Here a wall step after
        start moves no sample, and the samples' times stay monotonic. What is left of the
        weakness is the start: a clock wrong then stays wrong by the same amount for every
        sample of the process (harmless between them: the decay only sees differences, as
        it is for the time a suspended host's monotonic clock does not count); a history
        restored from a checkpoint that starts in the future is skipped
        (:meth:`apply_restored`)."""
        mono = self._monotonic_now() if monotonic_now is None else monotonic_now
        if self._anchor is None:
            self._anchor = (self.clock(), mono)
        wall, at = self._anchor
        return wall + (mono - at)

    def _new_model(self) -> Model:
        return Model(
            DecayingHistogram(CPU_OPTIONS, self.config.cpu_half_life_seconds),
            DecayingHistogram(MEMORY_OPTIONS, self.config.memory_half_life_seconds),
        )

    # --- answers -------------------------------------------------------------------------

    def get_prediction(self, uid: str) -> dict[str, Usage] | None:
        """p60/p90/p95/p98/max of a model, or None when there is no model of ``uid``."""
        model = self.models.get(uid)
        return model.prediction() if model is not None else None

    # --- training ------------------------------------------------------------------------

    def _last(self, kind: MetricKind, now: float, **labels: str) -> float | None:
        result = self.query(kind, now - self.config.training_interval_seconds, now, **labels)
        return result.value("p90") if result.count() else None

    def _update(self, uid: str, cpu: float, memory: float, monotonic_now: float, stamp: float) -> None:
        model = self.models.get(uid)
        if model is None:
            model = self.models[uid] = self._new_model()
        model.last_updated = monotonic_now
        model.cpu.add_sample(cpu, 1.0, stamp)
        model.memory.add_sample(memory, 1.0, stamp)

    def train(self) -> None:
        """One training step over the metric cache's last training interval."""
        now = self.clock()  # the query window: the metric cache's samples carry wall times
        monotonic_now = self._monotonic_now()
        stamp = self.sample_time(monotonic_now)
        items: dict[str, _ItemUsage] = {}
        all_pods = _ItemUsage()
        pods_seen = False
        for pod in self.list_pods():
            uid = str((pod.get("metadata") or {}).get("uid") or "")
            if not uid:
                continue
            cpu = self._last(kinds.POD_CPU_USAGE, now, pod_uid=uid)
            memory = self._last(kinds.POD_MEMORY_USAGE, now, pod_uid=uid)
            if cpu is None or memory is None:
                log.debug("prediction: no usage of pod %s in the last training interval", uid)
                # what is known of it still stays out of the system's sample: a pod's first
                # collection has its memory but no CPU rate yet, and upstream, leaving the
                # whole pod out, teaches the system model a spike of the pod's memory at
                # every start (p98 keeps it while the model has few samples)
                if memory is not None:
                    all_pods.memory += memory
                    pods_seen = True
                continue
            self._update(uid, cpu, memory, monotonic_now, stamp)
            item = items.setdefault(str(get_pod_priority_class_with_default(pod)), _ItemUsage())
            item.cpu += cpu
            item.memory += memory
            all_pods.cpu += cpu
            all_pods.memory += memory
            pods_seen = True
        node_cpu = self._last(kinds.NODE_CPU_USAGE, now)
        node_memory = self._last(kinds.NODE_MEMORY_USAGE, now)
        if node_cpu is None or node_memory is None:
            log.warning("prediction: no node CPU or memory usage in the last training interval")
        else:
            self._update(NODE_UID, node_cpu, node_memory, monotonic_now, stamp)
        for priority in KNOWN_PRIORITY_CLASSES:
            item = items.get(str(priority), _ItemUsage())
            self._update(node_item_uid(str(priority)), item.cpu, item.memory, monotonic_now, stamp)
        # as upstream: without node usage the system's sample is computed from 0
        sys_cpu, sys_memory = node_cpu or 0.0, node_memory or 0.0
        if pods_seen:
            sys_cpu = max(sys_cpu - all_pods.cpu, 0.0)
            sys_memory = max(sys_memory - all_pods.memory, 0.0)
        self._update(SYSTEM_UID, sys_cpu, sys_memory, monotonic_now, stamp)
        self.has_synced = True

    # --- model expiry --------------------------------------------------------------------

    def expire(self) -> list[str]:
        """Drop the models not trained for the expiration duration (monotonic); their UIDs."""
        if not self.has_synced:
            return []
        now = self._monotonic_now()
        expired = [
            uid
            for uid, model in self.models.items()
            if now - model.last_updated > self.config.model_expiration_seconds
        ]
        for uid in expired:
            del self.models[uid]
            log.info("prediction: model %s expired", uid)
        return expired

    def remove_checkpoints(self, uids: Sequence[str]) -> None:
        for uid in uids:
            try:
                self._files.remove(uid)
            except (OSError, ValueError) as exc:
                log.warning("prediction: cannot remove the checkpoint of %s: %s", uid, exc)

    def gc(self) -> None:
        self.remove_checkpoints(self.expire())

    # --- checkpoints ---------------------------------------------------------------------

    def due_checkpoints(self) -> list[ModelCheckpoint]:
        """This step's checkpoints (the models longest without one, at most the step's
        maximum, each older than the checkpoint interval on the monotonic clock); marks them
        checkpointed. ``LastUpdated`` is the wall time, as upstream writes it."""
        if not self.has_synced:
            return []
        now = self._monotonic_now()
        last_updated = format_time(self.clock())
        oldest_first = sorted(self.models.items(), key=lambda item: item[1].last_checkpointed)
        batch = []
        for uid, model in oldest_first[: self.config.checkpoint_max_per_step]:
            if now - model.last_checkpointed < self.config.checkpoint_interval_seconds:
                break
            batch.append(ModelCheckpoint(uid, model.cpu.save(), model.memory.save(), last_updated))
            model.last_checkpointed = now
        return batch

    def write_checkpoints(self, batch: Sequence[ModelCheckpoint]) -> None:
        for checkpoint in batch:
            try:
                self._files.save(checkpoint)
            except (OSError, ValueError) as exc:
                log.warning("prediction: cannot save the checkpoint of %s: %s", checkpoint.uid, exc)

    def checkpoint(self) -> None:
        self.write_checkpoints(self.due_checkpoints())

    def known_uids(self) -> set[str]:
        uids = {NODE_UID, SYSTEM_UID}
        uids.update(node_item_uid(str(p)) for p in KNOWN_PRIORITY_CLASSES)
        for pod in self.list_pods():
            uid = (pod.get("metadata") or {}).get("uid")
            if uid:
                uids.add(str(uid))
        return uids

    def _future_history(self, model: Model, stamp: float) -> str | None:
        """Why ``model``'s restored history cannot be trained on from ``stamp`` (the sample
        time of now): it starts in the future; None when it does not.

        A history's reference is its first sample's time rounded to the half-life, so it
        lies up to half a half-life after that sample; past one half-life (room for a
        half-life flag halved since the checkpoint) and a few training intervals, the
        samples were stamped by a clock running ahead. New samples would weigh
        ``2 ** -(ahead / half_life)`` of those: outweighed until real time catches up, and
        below the histogram's epsilon (no weight at all) from about 13 half-lives. A future
        sample after the first does not show in a checkpoint (its weight cannot be told from
        many past ones), and is kept, as upstream keeps it."""
        slack = FUTURE_HISTORY_SLACK_TRAININGS * self.config.training_interval_seconds
        for name, histogram in (("CPU", model.cpu), ("Memory", model.memory)):
            ahead = histogram.reference - stamp
            if ahead > histogram.half_life + slack:
                return (
                    f"its {name} history starts at {format_go_time(histogram.reference)}, "
                    f"{ahead / 3600:.1f} h ahead of now: written while the clock ran ahead"
                )
        return None

    def apply_restored(self, checkpoints: Sequence[ModelCheckpoint]) -> list[str]:
        """Rebuild the models of ``checkpoints``; the UIDs whose files should go (unknown
        UIDs, unreadable files, histories that start in the future).

        A model's ``LastUpdated`` (wall) becomes a monotonic time: now less its age on the
        wall clock, a future one counting as now. A history that starts in the future (see
        :meth:`_future_history`) is dropped whole rather than reset: an empty model would
        predict a peak of 0, and a pod without a model counts its whole request until its
        next training rebuilds it."""
        known = self.known_uids()
        wall_now, monotonic_now = self.clock(), self._monotonic_now()
        stamp = self.sample_time(monotonic_now)
        unwanted = []
        for checkpoint in checkpoints:
            if checkpoint.error is not None:
                log.warning(
                    "prediction: skipping the checkpoint %s (%s)",
                    self._files.directory / checkpoint.uid,
                    checkpoint.error,
                )
                unwanted.append(checkpoint.uid)
                continue
            if checkpoint.uid not in known:
                log.info("prediction: removing the checkpoint of %s, not on this node", checkpoint.uid)
                unwanted.append(checkpoint.uid)
                continue
            model = self._new_model()
            try:
                if checkpoint.last_updated:
                    age = max(0.0, wall_now - parse_time(checkpoint.last_updated))
                    model.last_updated = monotonic_now - age
                if checkpoint.cpu is not None:
                    model.cpu.load(checkpoint.cpu)
                if checkpoint.memory is not None:
                    model.memory.load(checkpoint.memory)
                future = self._future_history(model, stamp)
                if future is not None:
                    raise CheckpointError(future)
            except (CheckpointError, ValueError) as exc:
                log.warning(
                    "prediction: skipping the checkpoint %s (%s)", self._files.directory / checkpoint.uid, exc
                )
                unwanted.append(checkpoint.uid)
                continue
            self.models[checkpoint.uid] = model
            log.info("prediction: restored the model of %s", checkpoint.uid)
        return unwanted

    def restore(self) -> None:
        """Read the checkpoints back (before the first training)."""
        try:
            checkpoints = self._files.restore()
        except OSError as exc:
            log.warning("prediction: cannot read the checkpoints in %s: %s", self._files.directory, exc)
            return
        self.remove_checkpoints(self.apply_restored(checkpoints))

    # --- loop ----------------------------------------------------------------------------

    async def run(self) -> None:
        """Restore, then train, expire and checkpoint until cancelled."""
        try:
            checkpoints = await asyncio.to_thread(self._files.restore)
        except OSError as exc:
            log.warning("prediction: cannot read the checkpoints in %s: %s", self._files.directory, exc)
            checkpoints = []
        unwanted = self.apply_restored(checkpoints)
        if unwanted:
            await asyncio.to_thread(self.remove_checkpoints, unwanted)
        async with asyncio.TaskGroup() as group:
            group.create_task(self._every(self.config.training_interval_seconds, self._train_step))
            group.create_task(self._every(GC_INTERVAL_SECONDS, self._gc_step))
            group.create_task(self._every(CHECKPOINT_STEP_SECONDS, self._checkpoint_step))

    async def _train_step(self) -> None:
        self.train()

    async def _gc_step(self) -> None:
        expired = self.expire()
        if expired:
            await asyncio.to_thread(self.remove_checkpoints, expired)

    async def _checkpoint_step(self) -> None:
        batch = self.due_checkpoints()
        if batch:
            await asyncio.to_thread(self.write_checkpoints, batch)

    @staticmethod
    async def _every(interval: float, step: Callable[[], Any]) -> None:
        while True:
            try:
                await step()
            except Exception:
                log.exception("prediction: %s failed", getattr(step, "__name__", "step"))
            await asyncio.sleep(interval)
