"""PSICollector (upstream's PerformanceCollector, PSI part): pressure of containers and pods.

Every ``--psi-collector-interval`` (10 s), with the PSICollector gate, the ``cpu``,
``memory`` and ``io`` pressure files of each container and pod cgroup are read (v2: in the
cgroup; v1: under cpuacct, where only Anolis kernels provide them — the collector checks
kubepods once and stays idle when they are absent). Only ``avg10`` is stored, for ``some``
and ``full``, as upstream, with whether the cpu file has a ``full`` line.

Each round is read with no value object per file (``StatsReader.read_values``) and
handled a statistic at a time over the whole column of cgroups.
The last round is also exported as ``koordlet_container_psi`` (regular containers) and
``koordlet_pod_psi``: ``avg10``, ``avg60`` and ``avg300`` of ``some``, and of ``full`` where
the file has that line (``cpu_full_supported`` says whether it has, per resource, as
upstream labels it). Upstream resets both vectors each round; here the gauges are
brought to the last round's series when the registry is scraped (a refresher), so a
collection tick does no per-series gauge work, and series of pods and containers gone
(or not read) in the last round are removed then.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from koordlet.metriccache import Key, MetricKind, Rows, kinds
from koordlet.metrics import RENDER_SLICE, sync_gauge
from koordlet.metricsadvisor.framework import CollectContext, CollectorBase, PodCgroups
from koordlet.statesinformer.podmeta import PodMeta
from koordlet.system.cgroup import columns as cgroup_columns
from koordlet.system.cgroup.columns import Column
from koordlet.system.cgroup.stats import PRESSURES, StatValues

_RESOURCES = tuple(zip(PRESSURES, ("cpu", "mem", "io"), strict=True))
_STATS = frozenset(PRESSURES)
_SeriesList = list[tuple[tuple[str, ...], float]]
#: positions in a pressure cell (PSI's field order)
_SOME10, _SOME60, _SOME300, _FULL10, _FULL60, _FULL300 = 0, 1, 2, 4, 5, 6


def _psi_series(out: _SeriesList, prefix: tuple[str, ...], cells: list[Any]) -> None:
    """Upstream's PSI records of one cgroup, from its cpu, memory and io pressure cells:
    (resource, precision, degree, full supported)."""
    for (_, resource), psi in zip(_RESOURCES, cells, strict=True):
        if psi is None:
            continue
        if psi[_FULL10] is None:
            out += [
                ((*prefix, resource, "avg10", "some", "false"), psi[_SOME10] / 100),
                ((*prefix, resource, "avg60", "some", "false"), psi[_SOME60] / 100),
                ((*prefix, resource, "avg300", "some", "false"), psi[_SOME300] / 100),
            ]
        else:
            out += [
                ((*prefix, resource, "avg10", "some", "true"), psi[_SOME10] / 100),
                ((*prefix, resource, "avg60", "some", "true"), psi[_SOME60] / 100),
                ((*prefix, resource, "avg300", "some", "true"), psi[_SOME300] / 100),
                ((*prefix, resource, "avg10", "full", "true"), psi[_FULL10] / 100),
                ((*prefix, resource, "avg60", "full", "true"), (psi[_FULL60] or 0) / 100),
                ((*prefix, resource, "avg300", "full", "true"), (psi[_FULL300] or 0) / 100),
            ]


class PSICollector(CollectorBase):
    NAME = "PSICollector"

    def __init__(self, ctx: CollectContext) -> None:
        super().__init__(ctx, ctx.config.psi_collector_interval)
        self._supported: bool | None = None
        self._targets: PodCgroups | None = None
        #: (is pod, resource, degree) -> keys (id, resource, "10", degree) in read order
        self._keys: dict[tuple[bool, str, str], list[Key]] = {}
        #: is pod -> keys (id,) of ``cpu_full_supported``
        self._id_keys: tuple[list[Key], list[Key]] = ([], [])
        #: the last round (pods, their cells: containers in pod order, then pods), and
        #: the round the gauges hold
        self._published: tuple[list[PodMeta], StatValues] | None = None
        self._exported: tuple[list[PodMeta], StatValues] | None = None
        self._exporting = False
        ctx.metrics.on_scrape(self._export)

    def enabled(self) -> bool:
        return self.ctx.gates.enabled("PSICollector")

    def supported(self) -> bool:
        if self._supported is None:
            self._supported, _ = self.ctx.cgroups.supported("cpu.pressure")
        return self._supported

    def collect(self, now: float) -> None:
        if not self.supported():
            self.started = True  # nothing to wait for
            return
        pods = self.ctx.states.get_all_pods()
        targets = PodCgroups.of(pods, self._targets)
        if targets is not self._targets:
            self._targets = targets
            split = tuple(zip((False, True), targets.split(), strict=True))
            self._keys = {
                (is_pod, resource, degree): [(ident, resource, "10", degree) for ident in ids]
                for is_pod, ids in split
                for _, resource in _RESOURCES
                for degree in ("some", "full")
            }
            self._id_keys = ([(ident,) for ident in split[0][1]], [(ident,) for ident in split[1][1]])
        read = self.ctx.reader.read_values(targets.dirs, _STATS)
        rows = Rows(now)
        n, keys = targets.containers, self._keys
        parsed, present, width = read.values, read.present, read.width

        def put(kind: tuple[MetricKind, MetricKind], key: tuple[str, str], column: Column) -> None:
            values, missing = column
            rows.extend_column(kind[0], keys[(False, *key)], values[:n], missing)
            rows.extend_column(kind[1], keys[(True, *key)], values[n:], missing)

        psi = (kinds.CONTAINER_PSI, kinds.POD_PSI)
        for stat, resource in _RESOURCES:  # avg10 only, as a percentage, as upstream
            at = read.offsets[stat]
            put(psi, (resource, "some"), cgroup_columns.strided(parsed, present, at + _SOME10, width, 100.0))
            put(psi, (resource, "full"), cgroup_columns.strided(parsed, present, at + _FULL10, width, 100.0))
        cpu = read.offsets[PRESSURES[0]]
        supported, missing = cgroup_columns.flags(present, cpu + _FULL10, width, cpu + _SOME10)
        rows.extend_column(kinds.CONTAINER_PSI_CPU_FULL_SUPPORTED, self._id_keys[0], supported[:n], missing)
        rows.extend_column(kinds.POD_PSI_CPU_FULL_SUPPORTED, self._id_keys[1], supported[n:], missing)
        self.ctx.cache.append_rows(rows)
        self._published = (pods, read)
        self.started = True

    def _export(self) -> Iterator[None]:
        """Bring ``container_psi`` and ``pod_psi`` to the last round (run by scrapes)."""
        published = self._published
        if published is None or published is self._exported or self._exporting:
            return
        self._exporting = True  # a second scrape meanwhile renders what the gauges hold
        try:
            node = self.ctx.metrics.node
            containers: _SeriesList = []
            pods: _SeriesList = []
            read = published[1]
            at = 0  # containers come first, in pod order; then the pods (PodCgroups' order)
            n = sum(len(pod.containers) for pod in published[0])
            next_slice = RENDER_SLICE
            for index, pod in enumerate(published[0]):
                owner = (pod.uid, pod.name, pod.namespace)
                for container in pod.containers:
                    if not container.init:
                        prefix = (node, container.container_id, container.name, *owner)
                        _psi_series(containers, prefix, [read.pressure(at, stat) for stat, _ in _RESOURCES])
                    at += 1
                _psi_series(pods, (node, *owner), [read.pressure(n + index, stat) for stat, _ in _RESOURCES])
                if len(containers) + len(pods) >= next_slice:
                    next_slice += RENDER_SLICE
                    yield
            yield from sync_gauge(self.ctx.metrics.container_psi, containers)
            yield from sync_gauge(self.ctx.metrics.pod_psi, pods)
            self._exported = published
        finally:
            self._exporting = False
