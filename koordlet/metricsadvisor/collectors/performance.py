"""PSICollector (upstream's PerformanceCollector, PSI part): pressure of containers and pods.

Every ``--psi-collector-interval`` (10 s), with the PSICollector gate, the ``cpu``,
``memory`` and ``io`` pressure files of each container and pod cgroup are read (v2: in the
cgroup; v1: under cpuacct, where only Anolis kernels provide them — the collector checks
kubepods once and stays idle when they are absent). Only ``avg10`` is stored, for ``some``
and ``full``, as upstream, with whether the cpu file has a ``full`` line.

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

from koordlet.metriccache import Rows, kinds
from koordlet.metrics import RENDER_SLICE, sync_gauge
from koordlet.metricsadvisor.framework import CollectContext, CollectorBase
from koordlet.statesinformer.podmeta import PodMeta
from koordlet.system.cgroup.stats import PRESSURES, CgroupSample, Stat
from koordlet.system.psi import PSI

_RESOURCE = {Stat.CPU_PRESSURE: "cpu", Stat.MEMORY_PRESSURE: "mem", Stat.IO_PRESSURE: "io"}
_STATS = frozenset(PRESSURES)
_SeriesList = list[tuple[tuple[str, ...], float]]


def _psi_series(out: _SeriesList, prefix: tuple[str, ...], sample: CgroupSample) -> None:
    """Upstream's PSI records of one cgroup: (resource, precision, degree, full supported)."""
    for stat, resource in _RESOURCE.items():
        psi: PSI | None = sample.pressure.get(stat)
        if psi is None:
            continue
        if psi.full10 is None:
            out += [
                ((*prefix, resource, "avg10", "some", "false"), psi.some10 / 100),
                ((*prefix, resource, "avg60", "some", "false"), psi.some60 / 100),
                ((*prefix, resource, "avg300", "some", "false"), psi.some300 / 100),
            ]
        else:
            out += [
                ((*prefix, resource, "avg10", "some", "true"), psi.some10 / 100),
                ((*prefix, resource, "avg60", "some", "true"), psi.some60 / 100),
                ((*prefix, resource, "avg300", "some", "true"), psi.some300 / 100),
                ((*prefix, resource, "avg10", "full", "true"), psi.full10 / 100),
                ((*prefix, resource, "avg60", "full", "true"), (psi.full60 or 0) / 100),
                ((*prefix, resource, "avg300", "full", "true"), (psi.full300 or 0) / 100),
            ]


class PSICollector(CollectorBase):
    NAME = "PSICollector"

    def __init__(self, ctx: CollectContext) -> None:
        super().__init__(ctx, ctx.config.psi_collector_interval)
        self._supported: bool | None = None
        self._key_cache: dict[str, dict[tuple[Stat, str], tuple[str, ...]]] = {}
        #: the last round (pods, one sample per container then pod, as collected), and
        #: the round the gauges hold
        self._published: tuple[list[PodMeta], list[CgroupSample]] | None = None
        self._exported: tuple[list[PodMeta], list[CgroupSample]] | None = None
        self._exporting = False
        ctx.metrics.on_scrape(self._export)

    def enabled(self) -> bool:
        return self.ctx.gates.enabled("PSICollector")

    def supported(self) -> bool:
        if self._supported is None:
            self._supported, _ = self.ctx.cgroups.supported("cpu.pressure")
            if self.ctx.cgroups.version == 1:
                kubepods = self.ctx.cgroups.directory("cpuacct", self.ctx.cgroups.layout.root)
                self._supported = (kubepods / "cpu.pressure").is_file()
        return self._supported

    def _keys(self, ident: str) -> dict[tuple[Stat, str], tuple[str, ...]]:
        """The series keys of one pod or container (id, resource, "10", degree), built once."""
        keys = self._key_cache.get(ident)
        if keys is None:
            keys = self._key_cache[ident] = {
                (stat, degree): (ident, resource, "10", degree)
                for stat, resource in _RESOURCE.items()
                for degree in ("some", "full")
            }
        return keys

    def collect(self, now: float) -> None:
        if not self.supported():
            self.started = True  # nothing to wait for
            return
        owners: list[tuple[bool, str]] = []
        dirs: list[str] = []
        pods = self.ctx.states.get_all_pods()
        for pod in pods:
            for container in pod.containers:
                dirs.append(container.cgroup_dir)
                owners.append((False, container.container_id))
            dirs.append(pod.cgroup_dir)
            owners.append((True, pod.uid))
        if len(self._key_cache) > len(owners):  # pods or containers went away
            alive = {ident for _, ident in owners}
            for ident in [ident for ident in self._key_cache if ident not in alive]:
                del self._key_cache[ident]
        rows = Rows(now)
        # (container, pod) writers, indexed by is_pod
        psi = (rows.writer(kinds.CONTAINER_PSI), rows.writer(kinds.POD_PSI))
        full_supported = (
            rows.writer(kinds.CONTAINER_PSI_CPU_FULL_SUPPORTED),
            rows.writer(kinds.POD_PSI_CPU_FULL_SUPPORTED),
        )
        samples = self.ctx.reader.read(dirs, _STATS)
        for (is_pod, ident), sample in zip(owners, samples, strict=True):
            if sample.vanished:
                continue
            put = psi[is_pod]
            keys = self._keys(ident)
            for stat, pressure in sample.pressure.items():
                put((keys[stat, "some"], pressure.some10 / 100))  # avg10, as a percentage
                if pressure.full10 is not None:
                    put((keys[stat, "full"], pressure.full10 / 100))
            cpu = sample.pressure.get(Stat.CPU_PRESSURE)
            if cpu is not None:
                full_supported[is_pod](((ident,), 1.0 if cpu.full_supported else 0.0))
        self.ctx.cache.append_rows(rows)
        self._published = (pods, samples)
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
            samples = iter(published[1])
            next_slice = RENDER_SLICE
            for pod in published[0]:  # the order collect() read them in
                owner = (pod.uid, pod.name, pod.namespace)
                for container in pod.containers:
                    sample = next(samples)
                    if not container.init and not sample.vanished:
                        _psi_series(
                            containers, (node, container.container_id, container.name, *owner), sample
                        )
                sample = next(samples)
                if not sample.vanished:
                    _psi_series(pods, (node, *owner), sample)
                if len(containers) + len(pods) >= next_slice:
                    next_slice += RENDER_SLICE
                    yield
            yield from sync_gauge(self.ctx.metrics.container_psi, containers)
            yield from sync_gauge(self.ctx.metrics.pod_psi, pods)
            self._exported = published
        finally:
            self._exporting = False
