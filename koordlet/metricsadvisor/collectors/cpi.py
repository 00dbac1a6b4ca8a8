"""CPICollector (upstream's PerformanceCollector, CPI part): cycles and instructions per container.

Every ``--cpi-collector-interval`` (60 s), with the CPICollector gate, one perf event group
per CPU (cycles leading instructions) is opened on each regular container's cgroup
(``perf_event/<dir>`` on cgroup v1, the unified directory on v2), counted for
``--collect-cpi-timewindow`` (10 s), read once, scaled by time enabled / running and
summed over the CPUs. The two counts are stored as ``container_cpi{pod_uid,
container_id, cpi_resource=cycle|instruction}`` and exported as ``koordlet_container_cpi``
(``cpi_field=cycles|instructions``); CPI itself (cycles / instructions) is left to the
reader, as upstream.

Upstream sleeps through the window inside the tick. Here a round is two ticks of the
collector's own schedule: the first opens and enables the counters and asks for the next
tick one window later, the second reads and closes them and asks for the next round
after the rest of the interval. The shared collection worker is never held for the
window, so the other collectors keep their one-second pace.

Where the counters cannot be opened for this process (no PMU in a VM, perf events not
permitted, a kernel without them), or a cgroup v1 host has no ``perf_event`` hierarchy
to count containers in, the collector says why once and collects nothing. Every round
makes ``koordlet_container_cpi`` hold exactly the containers it counted: a round with
nothing to count (no pods, or no counter opened) empties it.

A window holds containers x CPUs x 2 descriptors. The agent raises its soft
RLIMIT_NOFILE to the hard limit at start (as Go programs do); should a round still run
out of descriptors (EMFILE, or ENFILE for the whole system), it stops opening counters
there, says once how many containers it left out, and gives back the last counters it
opened until :data:`FD_RESERVE` descriptors are free again, so that the rest of the agent
(HTTP, cgroup reads) can still open files during the window.
The event pair is a parameter: tests run the same path with software events.
"""

from __future__ import annotations

import errno
import logging
import math
import os
import resource
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from koordlet.metriccache import Key, Rows, kinds
from koordlet.metrics import sync_gauge
from koordlet.metricsadvisor.framework import CollectContext, CollectorBase
from koordlet.system import perf
from koordlet.system.topology import NodeCPUInfo, read_cpu_topology

log = logging.getLogger(__name__)

#: the events' roles, in the order of the event pair: (cpi_resource, cpi_field)
_ROLES = ((kinds.CPI_CYCLE, "cycles"), (kinds.CPI_INSTRUCTION, "instructions"))
#: descriptors given back to the agent when a round runs out of them
FD_RESERVE = 64
#: the errors that say the process (EMFILE) or the system (ENFILE) has no descriptor left
_OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE)


class Counters(Protocol):
    """What the collector needs of a cgroup's counter group (perf.CgroupCounters)."""

    def reset(self) -> None: ...
    def enable(self) -> None: ...
    def disable(self) -> None: ...
    def read(self) -> dict[str, float]: ...
    def close(self) -> None: ...


CountersFactory = Callable[[Path, list[int], tuple[perf.Event, ...]], Counters]


@dataclass
class _Counting:
    """One container whose counters run in the current window."""

    pod_uid: str
    pod_name: str
    pod_namespace: str
    container_id: str
    container_name: str
    counters: Counters


class CPICollector(CollectorBase):
    NAME = "CPICollector"

    def __init__(
        self,
        ctx: CollectContext,
        events: tuple[perf.Event, perf.Event] = (perf.CYCLES, perf.INSTRUCTIONS),
        open_counters: CountersFactory = perf.CgroupCounters,
        supported: Callable[[perf.Event], tuple[bool, str]] | None = None,
    ) -> None:
        super().__init__(ctx, ctx.config.cpi_collector_interval)
        self.period = ctx.config.cpi_collector_interval
        self.window = min(ctx.config.collect_cpi_timewindow, self.period)
        self.events = events
        self._open_counters = open_counters
        self._supported = supported or (lambda event: perf.supported(event, ctx.paths.proc_root))
        #: why the collector collects nothing (None while it can collect)
        self.unsupported_reason: str | None = None
        self._checked = False
        self._counting: list[_Counting] | None = None

    def enabled(self) -> bool:
        return self.ctx.gates.enabled("CPICollector")

    def _check_support(self) -> bool:
        if not self._checked:
            self._checked = True
            for event in self.events:
                ok, why = self._supported(event)
                if not ok:
                    self.unsupported_reason = why
                    break
            else:
                self.unsupported_reason = self._no_perf_event_hierarchy()
            if self.unsupported_reason is not None:
                log.warning("CPICollector collects nothing on this node: %s", self.unsupported_reason)
        return self.unsupported_reason is None

    def _no_perf_event_hierarchy(self) -> str | None:
        """Why containers cannot be counted here (None when they can): cgroup events need
        the container's ``perf_event`` cgroup, which cgroup v2 always has (implicitly) and
        cgroup v1 only where the perf_event controller is mounted."""
        cgroups = self.ctx.cgroups
        if cgroups.version != 1:
            return None
        root = cgroups.controller_root("perf_event")
        if root.is_dir():
            return None
        return f"no perf_event cgroup hierarchy at {root} (cgroup v1 without the perf_event controller)"

    def collect(self, now: float) -> None:
        if not self._check_support():
            self.started = True  # nothing to wait for
            return
        if self._counting is None:
            self._start_window()
        else:
            self._finish_window(now)

    def _cpus(self) -> list[int]:
        info = self.ctx.kv.get(kinds.NODE_CPU_INFO)
        if isinstance(info, NodeCPUInfo) and info.topology.processors:
            return info.topology.cpus()
        return read_cpu_topology(self.ctx.paths).cpus()

    def _start_window(self) -> None:
        cpus = self._cpus()
        targets = [
            (pod, container)
            for pod in self.ctx.states.get_all_pods()
            for container in pod.containers
            if not container.init and container.container_id
        ]
        counting: list[_Counting] = []
        for index, (pod, container) in enumerate(targets):
            directory = self.ctx.cgroups.directory("perf_event", container.cgroup_dir)
            try:
                counters = self._open_counters(directory, cpus, self.events)
            except OSError as err:
                if err.errno in _OUT_OF_DESCRIPTORS:
                    self._out_of_descriptors(err, counting, len(targets) - index, len(cpus))
                    break
                if err.errno in (errno.ENOENT, errno.ENOTDIR):
                    log.debug("container %s has no perf_event cgroup (gone?)", container.container_id)
                else:
                    log.warning("cannot count %s in %s: %s", container.name, directory, err)
                continue
            try:
                counters.reset()
                counters.enable()
            except OSError as err:
                counters.close()
                log.warning("cannot start counting %s: %s", container.name, err)
                continue
            counting.append(
                _Counting(pod.uid, pod.name, pod.namespace, container.container_id, container.name, counters)
            )
        if counting:
            self._counting = counting
            self.interval = self.window  # the next tick closes the window
        else:
            self._export([])  # nothing counted: no container keeps a series from earlier rounds
            self.started = True  # no container to count this round
            self.interval = self.period

    def _out_of_descriptors(self, err: OSError, counting: list[_Counting], left: int, cpus: int) -> None:
        """A round ran out of file descriptors: give back the last counters opened until
        FD_RESERVE descriptors are free, and say so (once a round)."""
        per_container = max(cpus * len(self.events), 1)
        release = min(math.ceil(FD_RESERVE / per_container), len(counting))
        for item in counting[len(counting) - release :]:
            item.counters.close()
        del counting[len(counting) - release :]
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        log.warning(
            "CPICollector ran out of file descriptors (%s; open files limit %s, %d per container): "
            "%d containers left out of this round, %d counted",
            os.strerror(err.errno or errno.EMFILE),
            "unlimited" if soft == resource.RLIM_INFINITY else soft,
            per_container,
            left + release,
            len(counting),
        )

    def _finish_window(self, now: float) -> None:
        counting, self._counting = self._counting or [], None
        self.interval = max(self.period - self.window, 0.0)
        keys: list[Key] = []
        values: list[float | None] = []
        series: list[tuple[tuple[str, ...], float]] = []
        node = self.ctx.metrics.node
        try:
            for item in counting:
                try:
                    item.counters.disable()
                    totals = item.counters.read()
                except OSError as err:
                    log.warning("cannot read the counters of %s: %s", item.container_name, err)
                    continue
                for event, (resource, field) in zip(self.events, _ROLES, strict=True):
                    value = totals[event.name]
                    keys.append((item.pod_uid, item.container_id, resource))
                    values.append(value)
                    labels = (node, item.container_id, item.container_name, item.pod_uid)
                    series.append(((*labels, item.pod_name, item.pod_namespace, field), value))
        finally:
            for item in counting:
                item.counters.close()
        rows = Rows(now)
        rows.extend(kinds.CONTAINER_CPI, keys, values)
        self.ctx.cache.append_rows(rows)
        self._export(series)
        self.started = True

    def _export(self, series: list[tuple[tuple[str, ...], float]]) -> None:
        """Make ``koordlet_container_cpi`` hold exactly this round's ``series``."""
        for _ in sync_gauge(self.ctx.metrics.container_cpi, series):
            pass

    def close(self) -> None:
        """Close the counters of a window still open when the agent stops."""
        for item in self._counting or []:
            item.counters.close()
        self._counting = None
