"""NodeStorageInfoCollector: the node's disks, partitions, LVM and mount points.

With the BlkIOReconcile gate (the blkio strategy maps volumes to disks with it), every
``--collect-node-storage-info-interval`` (1 s) the storage layout is read
(``koordlet.system.localstorage``) and stored in the key-value store as
``node_local_storage_info``; ``koordlet_collect_node_local_storage_info_status`` counts
successes and failures. A failed round keeps the last good layout.
"""

from __future__ import annotations

import logging

from koordlet.metriccache import kinds
from koordlet.metricsadvisor.framework import CollectContext, CollectorBase
from koordlet.system.localstorage import (
    CommandRunner,
    LocalStorageError,
    read_local_storage_info,
    run_command,
)

log = logging.getLogger(__name__)


class NodeStorageInfoCollector(CollectorBase):
    NAME = "NodeStorageInfoCollector"

    def __init__(self, ctx: CollectContext, run: CommandRunner = run_command) -> None:
        super().__init__(ctx, ctx.config.collect_node_storage_info_interval)
        self._run = run
        self._last_error = ""

    def enabled(self) -> bool:
        return self.ctx.gates.enabled("BlkIOReconcile")

    def collect(self, now: float) -> None:
        metrics = self.ctx.metrics
        try:
            info = read_local_storage_info(self._run)
        except LocalStorageError as err:
            if str(err) != self._last_error:  # the same failure each second is said once
                self._last_error = str(err)
                log.warning("cannot read the node's local storage: %s", err)
            metrics.collect_node_local_storage_info_status.labels(metrics.node, "failed").inc()
            return
        self._last_error = ""
        self.ctx.kv.set(kinds.NODE_LOCAL_STORAGE_INFO, info)
        metrics.collect_node_local_storage_info_status.labels(metrics.node, "succeeded").inc()
        self.started = True
