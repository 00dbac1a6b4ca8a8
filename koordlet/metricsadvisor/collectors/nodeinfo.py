"""NodeInfoCollector: CPU topology, CPU basic information and NUMA memory, every minute.

Stored in the key-value store as ``node_cpu_info`` (processors with logical core and
socket ids, NUMA node and L3 id; model, vendor, hyper-threading, turbo, the resctrl L3
mask) and ``node_numa_info`` (each NUMA node's MemTotal and free memory), read by the
NodeResourceTopology reporter and the cpuset logic.
"""

from __future__ import annotations

import logging

from koordlet.metriccache import kinds
from koordlet.metricsadvisor.framework import CollectContext, CollectorBase
from koordlet.system import proc
from koordlet.system.resctrl import Resctrl
from koordlet.system.topology import NodeCPUInfo, NUMANodeInfo, read_cpu_basic_info, read_cpu_topology

log = logging.getLogger(__name__)


class NodeInfoCollector(CollectorBase):
    NAME = "NodeInfoCollector"

    def __init__(self, ctx: CollectContext) -> None:
        super().__init__(ctx, ctx.config.collect_node_cpu_info_interval)

    def collect(self, now: float) -> None:
        metrics = self.ctx.metrics
        try:
            topology = read_cpu_topology(self.ctx.paths)
            basic = read_cpu_basic_info(self.ctx.paths, topology)
            info = Resctrl(self.ctx.paths).detect()
            self.ctx.kv.set(kinds.NODE_CPU_INFO, NodeCPUInfo(topology, basic, info.cbm_mask))
            metrics.collect_node_cpu_info_status.labels(metrics.node, "succeeded").inc()
        except OSError:
            log.exception("cannot read the CPU topology")
            metrics.collect_node_cpu_info_status.labels(metrics.node, "failed").inc()
            return
        try:
            numa = [
                NUMANodeInfo(node, m.total_bytes, m.kib("MemFree") * 1024)
                for node, m in proc.read_numa_meminfo(self.ctx.paths).items()
            ]
            self.ctx.kv.set(kinds.NODE_NUMA_INFO, numa)
            metrics.collect_node_numa_info_status.labels(metrics.node, "succeeded").inc()
        except OSError:
            log.exception("cannot read NUMA memory information")
            metrics.collect_node_numa_info_status.labels(metrics.node, "failed").inc()
        self.started = True
