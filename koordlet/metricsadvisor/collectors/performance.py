"""PSICollector (upstream's PerformanceCollector, PSI part): pressure of containers and pods.

Every ``--psi-collector-interval`` (10 s), with the PSICollector gate, the ``cpu``,
``memory`` and ``io`` pressure files of each container and pod cgroup are read (v2: in the
cgroup; v1: under cpuacct, where only Anolis kernels provide them — the collector checks
kubepods once and stays idle when they are absent). Only ``avg10`` is stored, for ``some``
and ``full``, as upstream, with whether the cpu file has a ``full`` line.
"""

from __future__ import annotations

from koordlet.metriccache import Rows, kinds
from koordlet.metricsadvisor.framework import CollectContext, CollectorBase
from koordlet.system.cgroup.stats import PRESSURES, Stat

_RESOURCE = {Stat.CPU_PRESSURE: "cpu", Stat.MEMORY_PRESSURE: "mem", Stat.IO_PRESSURE: "io"}
_STATS = frozenset(PRESSURES)


class PSICollector(CollectorBase):
    NAME = "PSICollector"

    def __init__(self, ctx: CollectContext) -> None:
        super().__init__(ctx, ctx.config.psi_collector_interval)
        self._supported: bool | None = None
        self._key_cache: dict[str, dict[tuple[Stat, str], tuple[str, ...]]] = {}

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
        for pod in self.ctx.states.get_all_pods():
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
        for (is_pod, ident), sample in zip(owners, self.ctx.reader.read(dirs, _STATS), strict=True):
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
        self.started = True
