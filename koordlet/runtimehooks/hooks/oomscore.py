"""OOMScoreAdj: the OOM-killer's preference for a container's processes.

The value comes from ``koordinator.sh/oom-score-adj-spec`` (``{"<container>": n}``), else
``koordinator.sh/oom-score-adj`` for every container of the pod; it must be within
[-1000, 1000]. It is written to ``/proc/<pid>/oom_score_adj`` of every process in the
container's cgroup (``cgroup.procs``), skipping processes that already have it.

With the agent's metrics, ``koordlet_container_oom_score_adj`` holds the value of every
container with a process that has it or is planned to get it, refreshed on every pass as
upstream records it; the all-pods level removes the series of containers that are gone
(and all of them while the hook is disabled), where upstream lets them expire.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from koordinator.api.extension.annotations import AnnotationError
from koordinator.api.extension.constants import oom_score_adj
from koordlet.executor import FileUpdate, Update
from koordlet.metrics import KoordletMetrics, prune
from koordlet.runtimehooks.framework import HookBase
from koordlet.runtimehooks.protocol import ContainerContext, NodeFacts
from koordlet.statesinformer.podmeta import PodMeta
from koordlet.system.cgroup.registry import CGROUP_PROCS
from koordlet.system.errors import HostError
from koordlet.system.proc import parse_id_list

log = logging.getLogger(__name__)

NAME = "OOMScoreAdj"
LOW, HIGH = -1000, 1000


class OOMScoreAdj(HookBase):
    NAME = NAME
    GATE = NAME

    def __init__(self, metrics: KoordletMetrics | None = None) -> None:
        #: where ``container_oom_score_adj`` is recorded, or None
        self.metrics = metrics

    def container(self, ctx: ContainerContext) -> None:
        try:
            value = oom_score_adj(ctx.pod.annotations, ctx.container.name)
        except (AnnotationError, ValueError) as err:
            log.warning("pod %s: OOM score annotation ignored: %s", ctx.pod.key, err)
            return
        if value is None:
            return
        if not LOW <= value <= HIGH:
            log.warning("pod %s: OOM score adjustment %d outside [%d, %d]", ctx.pod.key, value, LOW, HIGH)
            return
        cgroups = ctx.node.cgroups
        try:
            pids = parse_id_list(cgroups.read_text(CGROUP_PROCS, ctx.container.cgroup_dir))
        except HostError:
            return
        holding = 0  # processes that have the value or are planned to get it
        for pid in pids:
            path = ctx.node.proc_root / str(pid) / "oom_score_adj"
            try:
                current = int(path.read_text().strip())
            except (OSError, ValueError):
                continue  # the process exited
            holding += 1
            if current != value:  # not cached: the PID may be another process's next time
                ctx.response.extra.append(FileUpdate(path, str(value), LOW, HIGH, NAME, cached=False))
        if holding and self.metrics is not None:
            pod = ctx.pod
            labels = (self.metrics.node, pod.name, pod.namespace, pod.uid, ctx.container.name)
            self.metrics.container_oom_score_adj.labels(*labels).set(value)

    def all_pods(self, pods: Sequence[PodMeta], node: NodeFacts) -> list[Update]:
        """Remove the gauge series of containers gone (of all, while disabled)."""
        if self.metrics is not None:
            keep: set[tuple[str, ...]] = set()
            if self.enabled(node)[0]:
                metrics_node = self.metrics.node
                keep = {
                    (metrics_node, pod.name, pod.namespace, pod.uid, container.name)
                    for pod in pods
                    for container in pod.containers
                }
            prune(self.metrics.container_oom_score_adj, keep)
        return []
