"""HostApplicationCollector: CPU and memory of the host applications NodeSLO declares.

A host application (``spec.hostApplications``) is a cgroup outside the pods: by default
``host-latency-sensitive/<name>`` for LSE/LSR/LS, ``host-best-effort/<name>`` for BE and
``<name>`` otherwise; with ``cgroupPath`` it is ``<base>/<parentDir>/<relativePath>`` where
the base is the cgroup root, kubepods or one of its QoS directories. Their sums are
subtracted from the system usage.

``koordlet_host_application_resource_usage{host_application_name,resource,priority_class,qos}``
holds each application's CPU (cores) and memory (bytes, without page cache) of the last
round, set as upstream only for applications with both (not on the first round, which
primes the CPU counter); applications no longer declared or read lose their series.
"""

from __future__ import annotations

from koordinator.api.kubeqos import KubeQOSClass
from koordinator.api.types.slo import HostApplicationSpec
from koordlet.metriccache import Sample, kinds
from koordlet.metrics import prune
from koordlet.metricsadvisor.framework import CollectContext, CollectorBase, RateCache, UsagePoint
from koordlet.system.cgroup.layout import KubepodsLayout
from koordlet.system.cgroup.stats import Stat

_STATS = frozenset({Stat.CPU_USAGE, Stat.MEMORY})


def host_application_cgroup_dir(app: HostApplicationSpec, layout: KubepodsLayout) -> str:
    """The application's cgroup directory relative to the controller roots."""
    path = app.cgroup_path
    if path is None:
        if app.qos in ("LSE", "LSR", "LS"):
            return f"host-latency-sensitive/{app.name}"
        if app.qos == "BE":
            return f"host-best-effort/{app.name}"
        return app.name
    base = {
        "": "",
        "CgroupRoot": "",
        "Kubepods": layout.root,
        "KubepodsBurstable": layout.qos_dir(KubeQOSClass.BURSTABLE),
        "KubepodsBesteffort": layout.qos_dir(KubeQOSClass.BEST_EFFORT),
    }.get(path.base, "")
    return "/".join(p.strip("/") for p in (base, path.parent_dir, path.relative_path) if p.strip("/"))


class HostApplicationCollector(CollectorBase):
    NAME = "HostApplicationCollector"

    def __init__(self, ctx: CollectContext) -> None:
        super().__init__(ctx)
        self._cpu = RateCache(ttl=20 * self.interval)

    def collect(self, now: float) -> None:
        slo = self.ctx.states.get_node_slo()
        apps = list(slo.host_applications) if slo is not None else []
        layout = self.ctx.cgroups.layout
        dirs = [host_application_cgroup_dir(app, layout) for app in apps]
        samples: list[Sample] = []
        total_cpu = total_memory = 0.0
        metrics = self.ctx.metrics
        gauge = metrics.host_application_resource_usage
        series: set[tuple[str, ...]] = set()
        for app, sample in zip(apps, self.ctx.reader.read(dirs, _STATS) if dirs else [], strict=True):
            cores = None
            if sample.cpu_usage_ns is not None:
                rate = self._cpu.rate(app.name, now, sample.cpu_usage_ns)
                if rate is not None:
                    cores = rate / 1e9
                    total_cpu += cores
                    samples.append(
                        kinds.HOST_APPLICATION_CPU_USAGE.sample(cores, now, host_app_name=app.name)
                    )
            if cores is not None and sample.memory is not None:
                for resource, value in (("cpu", cores), ("memory", float(sample.memory.usage))):
                    labels = (metrics.node, app.name, resource, str(app.priority), str(app.qos))
                    gauge.labels(*labels).set(value)
                    series.add(labels)
            if sample.memory is not None:
                total_memory += sample.memory.usage
                samples.append(
                    kinds.HOST_APPLICATION_MEMORY_USAGE.sample(
                        float(sample.memory.usage), now, host_app_name=app.name
                    )
                )
                cached = float(sample.memory.usage_with_page_cache)
                kind = kinds.HOST_APPLICATION_MEMORY_USAGE_WITH_PAGE_CACHE
                samples.append(kind.sample(cached, now, host_app_name=app.name))
        prune(gauge, series)
        self.ctx.cache.append(samples)
        self.ctx.shared.update(host_apps=UsagePoint(total_cpu, total_memory, now))
        self._cpu.sweep(now)
        self.started = True
