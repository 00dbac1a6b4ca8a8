"""PSICollector (upstream's PerformanceCollector, PSI part): pressure of containers and pods.

Every ``--psi-collector-interval`` (10 s), with the PSICollector gate, the ``cpu``,
``memory`` and ``io`` pressure files of each container and pod cgroup are read (v2: in the
cgroup; v1: under cpuacct, where only Anolis kernels provide them — the collector checks
kubepods once and stays idle when they are absent). Only ``avg10`` is stored, for ``some``
and ``full``, as upstream, with whether the cpu file has a ``full`` line.
"""

from __future__ import annotations

from koordlet.metriccache import Sample, kinds
from koordlet.metricsadvisor.framework import CollectContext, CollectorBase
from koordlet.system.cgroup.stats import PRESSURES, Stat

_RESOURCE = {Stat.CPU_PRESSURE: "cpu", Stat.MEMORY_PRESSURE: "mem", Stat.IO_PRESSURE: "io"}
_STATS = frozenset(PRESSURES)


class PSICollector(CollectorBase):
    NAME = "PSICollector"

    def __init__(self, ctx: CollectContext) -> None:
        super().__init__(ctx, ctx.config.psi_collector_interval)
        self._supported: bool | None = None

    def enabled(self) -> bool:
        return self.ctx.gates.enabled("PSICollector")

    def supported(self) -> bool:
        if self._supported is None:
            self._supported, _ = self.ctx.cgroups.supported("cpu.pressure")
            if self.ctx.cgroups.version == 1:
                kubepods = self.ctx.cgroups.directory("cpuacct", self.ctx.cgroups.layout.root)
                self._supported = (kubepods / "cpu.pressure").is_file()
        return self._supported

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
        samples: list[Sample] = []
        append = samples.append
        for (is_pod, ident), sample in zip(owners, self.ctx.reader.read(dirs, _STATS), strict=True):
            if sample.vanished:
                continue
            for stat, psi in sample.pressure.items():
                resource = _RESOURCE[stat]
                for degree, value in (("some", psi.some_avg10), ("full", psi.full_avg10)):
                    if value is None:
                        continue
                    if is_pod:
                        append(
                            kinds.POD_PSI.sample(
                                value,
                                now,
                                pod_uid=ident,
                                psi_resource=resource,
                                psi_precision="10",
                                psi_degree=degree,
                            )
                        )
                    else:
                        append(
                            kinds.CONTAINER_PSI.sample(
                                value,
                                now,
                                container_id=ident,
                                psi_resource=resource,
                                psi_precision="10",
                                psi_degree=degree,
                            )
                        )
            cpu = sample.pressure.get(Stat.CPU_PRESSURE)
            if cpu is not None:
                full = 1.0 if cpu.full_supported else 0.0
                if is_pod:
                    append(kinds.POD_PSI_CPU_FULL_SUPPORTED.sample(full, now, pod_uid=ident))
                else:
                    append(kinds.CONTAINER_PSI_CPU_FULL_SUPPORTED.sample(full, now, container_id=ident))
        self.ctx.cache.append(samples)
        self.started = True
