"""BEResourceCollector: the CPU the best-effort tier may use, asks for and uses (milli-cores).

* real-limit: the smaller of the smallest cpuset among the BE QoS cgroup and its container
  cgroups (CPUs x 1000) and the BE QoS cgroup's CFS quota (quota x 1000 / period; none when
  unlimited);
* request: the ``kubernetes.io/batch-cpu`` requests of pods labelled
  ``koordinator.sh/qosClass=BE`` (containers and init containers; the quantity is already
  in milli-cores);
* usage: the CPU rate of the BE QoS cgroup.

The cpusets are read every tick as one FileCache batch on kept descriptors (compiled again
when the BE cgroups found under the QoS cgroup change), and each distinct cpuset text is
parsed once.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from koordinator.api.cpuset import CPUSetError, parse_cpuset
from koordinator.api.extension.qos import QoSClass, get_pod_qos_class_raw
from koordinator.api.extension.resources import BATCH_CPU
from koordinator.api.kubeqos import KubeQOSClass
from koordinator.api.quantity import Quantity, QuantityError
from koordlet.metriccache import Sample, kinds
from koordlet.metricsadvisor.framework import CollectContext, CollectorBase, RateCache
from koordlet.system.cgroup import io
from koordlet.system.cgroup.registry import CPU_CFS_PERIOD, CPU_CFS_QUOTA, CPUSET_CPUS, Subsystem
from koordlet.system.cgroup.stats import Stat
from koordlet.system.errors import HostError


def batch_cpu_request_milli(pod: Mapping[str, Any]) -> int:
    """Σ batch-cpu requests of a pod's containers and sidecars (init containers that keep
    running, ``restartPolicy: Always``), the quantity's value; the other init containers
    have finished before the containers start."""
    spec = pod.get("spec") or {}
    total = 0
    for field in ("containers", "initContainers"):
        for container in spec.get(field) or ():
            if field == "initContainers" and container.get("restartPolicy") != "Always":
                continue
            raw = ((container.get("resources") or {}).get("requests") or {}).get(BATCH_CPU)
            if raw is None:
                continue
            try:
                total += Quantity.parse(str(raw)).value()
            except QuantityError:
                continue
    return total


class BEResourceCollector(CollectorBase):
    NAME = "BEResourceCollector"

    def __init__(self, ctx: CollectContext) -> None:
        super().__init__(ctx)
        self._usage = RateCache(ttl=20 * self.interval)
        self._files = io.new_file_cache()
        #: the cgroups whose cpusets the batch reads, and the batch
        self._cpuset_dirs: list[str] = []
        self._cpusets: io.Batch | None = None
        #: CPUs of each cpuset text seen (0: empty, or it does not parse)
        self._cpu_counts: dict[bytes, int] = {}

    def _smallest_cpuset(self, be_dir: str) -> int | None:
        """The fewest CPUs in a non-empty cpuset of the BE QoS cgroup and its containers."""
        cgroups = self.ctx.cgroups
        dirs = [be_dir, *cgroups.at_depth(Subsystem.CPUSET, be_dir, 2)]
        if self._cpusets is None or dirs != self._cpuset_dirs:
            paths = [os.fsencode(cgroups.path(CPUSET_CPUS, rel)) for rel in dirs]
            self._files.retain(paths)  # containers gone: close theirs
            self._cpusets = self._files.batch([(path, io.KIND_RAW, None) for path in paths])
            self._cpuset_dirs = dirs
        counts = self._cpu_counts
        if len(counts) > 256:  # CPU sharing churned through many cpusets: start over
            counts.clear()
        smallest: int | None = None
        for cell in self._cpusets.read():
            if not isinstance(cell, bytes):
                continue  # a container gone since the listing, or unreadable: skipped
            count = counts.get(cell)
            if count is None:
                try:
                    count = len(parse_cpuset(cell.decode(errors="replace").strip()))
                except CPUSetError:
                    count = 0  # skipped, as an empty one
                counts[cell] = count
            if count and (smallest is None or count < smallest):
                smallest = count
        return smallest

    def real_limit_milli(self) -> float | None:
        cgroups = self.ctx.cgroups
        be_dir = cgroups.layout.qos_dir(KubeQOSClass.BEST_EFFORT)
        limits: list[float] = []
        smallest = self._smallest_cpuset(be_dir)
        if smallest is not None:
            limits.append(smallest * 1000.0)
        try:
            quota = int(cgroups.read(CPU_CFS_QUOTA, be_dir))
            period = int(cgroups.read(CPU_CFS_PERIOD, be_dir))
        except HostError:
            quota, period = -1, 0
        if quota > 0 and period > 0:
            limits.append(quota * 1000.0 / period)
        return min(limits) if limits else None

    def collect(self, now: float) -> None:
        samples: list[Sample] = []
        limit = self.real_limit_milli()
        if limit is not None:
            samples.append(
                kinds.NODE_BE.sample(limit, now, be_resource="cpu", be_allocation=kinds.BE_REAL_LIMIT)
            )
        request = sum(
            batch_cpu_request_milli(p.pod)
            for p in self.ctx.states.get_all_pods()
            if get_pod_qos_class_raw(p.pod) is QoSClass.BE
        )
        samples.append(
            kinds.NODE_BE.sample(float(request), now, be_resource="cpu", be_allocation=kinds.BE_REQUEST)
        )
        be_dir = self.ctx.cgroups.layout.qos_dir(KubeQOSClass.BEST_EFFORT)
        sample = self.ctx.reader.read([be_dir], frozenset({Stat.CPU_USAGE}))[0]
        if sample.cpu_usage_ns is not None:
            rate = self._usage.rate("be", now, sample.cpu_usage_ns)
            if rate is not None:
                milli = rate / 1e6
                samples.append(
                    kinds.NODE_BE.sample(milli, now, be_resource="cpu", be_allocation=kinds.BE_USAGE)
                )
                self.ctx.metrics.be_suppress_be_used_cpu_cores.labels(self.ctx.metrics.node).set(milli / 1000)
        self.ctx.cache.append(samples)
        self.started = True  # a node without a BE cgroup yet has nothing more to wait for

    def close(self) -> None:
        self._files.close()
        self._cpusets, self._cpuset_dirs = None, []
