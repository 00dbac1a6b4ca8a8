"""OOMScoreAdj: the OOM-killer's preference for a container's processes.

The value comes from ``koordinator.sh/oom-score-adj-spec`` (``{"<container>": n}``), else
``koordinator.sh/oom-score-adj`` for every container of the pod; it must be within
[-1000, 1000]. It is written to ``/proc/<pid>/oom_score_adj`` of every process in the
container's cgroup (``cgroup.procs``), skipping processes that already have it.
"""

from __future__ import annotations

import logging

from koordinator.api.extension.annotations import AnnotationError
from koordinator.api.extension.constants import oom_score_adj
from koordlet.executor import FileUpdate
from koordlet.runtimehooks.framework import HookBase
from koordlet.runtimehooks.protocol import ContainerContext, NodeFacts
from koordlet.system.cgroup.registry import CGROUP_PROCS
from koordlet.system.errors import HostError
from koordlet.system.proc import parse_id_list

log = logging.getLogger(__name__)

NAME = "OOMScoreAdj"
LOW, HIGH = -1000, 1000


class OOMScoreAdj(HookBase):
    NAME = NAME

    def enabled(self, node: NodeFacts) -> tuple[bool, str]:
        if not node.gates.enabled(NAME):
            return False, f"feature gate {NAME} is off"
        return True, ""

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
        for pid in pids:
            path = ctx.node.proc_root / str(pid) / "oom_score_adj"
            try:
                if int(path.read_text().strip()) == value:
                    continue
            except (OSError, ValueError):
                continue  # the process exited
            ctx.response.extra.append(FileUpdate(path, str(value), LOW, HIGH, NAME))
