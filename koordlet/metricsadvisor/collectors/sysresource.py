"""SystemResourceCollector: what the node uses outside pods and host applications.

``sys = max(node - Σ pods - Σ host applications, 0)`` for CPU and memory, computed only
when every input is fresher than ``--collect-sys-metric-outdated-interval`` (10 s). Per
NUMA node, memory is the node's NUMA usage minus the pods' NUMA usage and CPU is the
system CPU shared out by the NUMA nodes' share of node CPU.
"""

from __future__ import annotations

from koordlet.metriccache import Sample, kinds
from koordlet.metricsadvisor.framework import CollectorBase


class SystemResourceCollector(CollectorBase):
    NAME = "SystemResourceCollector"

    def collect(self, now: float) -> None:
        shared = self.ctx.shared.snapshot()
        outdated = now - self.ctx.config.collect_sys_metric_outdated_interval
        node, pods, apps = shared.node, shared.pods, shared.host_apps
        if node is None or pods is None or node.timestamp < outdated or pods.timestamp < outdated:
            return  # waits for the node and pod collectors, as upstream
        app_cpu = app_memory = 0.0
        if apps is not None and apps.timestamp >= outdated:
            app_cpu, app_memory = apps.cpu, apps.memory
        cpu = max(node.cpu - pods.cpu - app_cpu, 0.0)
        memory = max(node.memory - pods.memory - app_memory, 0.0)
        samples: list[Sample] = [
            kinds.SYS_CPU_USAGE.sample(cpu, now),
            kinds.SYS_MEMORY_USAGE.sample(memory, now),
        ]
        numa = {n: p for n, p in shared.node_numa.items() if p.timestamp >= outdated}
        total_numa_cpu = sum(p.cpu for p in numa.values())
        for node_id, point in sorted(numa.items()):
            label = str(node_id)
            numa_memory = max(point.memory - shared.pods_numa_memory.get(node_id, 0.0), 0.0)
            numa_cpu = cpu * point.cpu / total_numa_cpu if total_numa_cpu > 0 else 0.0
            samples.append(kinds.SYS_NUMA_CPU_USAGE.sample(numa_cpu, now, numa_node_id=label))
            samples.append(kinds.SYS_NUMA_MEMORY_USAGE.sample(numa_memory, now, numa_node_id=label))
        self.ctx.cache.append(samples)
        self.started = True
