"""SchedulingGates (PreEnqueue): a pod with ``spec.schedulingGates`` is not tried until its
gates are all removed (the pod update that removes the last one releases it).

The pod is held as upstream does, in the unschedulable set marked gated
(``scheduler_pending_pods{queue="gated"}``), with the message upstream's plug-in gives.
"""

from __future__ import annotations

from controlplane.scheduler.podinfo import PodInfo

NAME = "SchedulingGates"


class SchedulingGates:
    NAME = NAME

    def pre_enqueue(self, pod: PodInfo) -> str | None:
        if not pod.scheduling_gates:
            return None
        return f"waiting for scheduling gates: [{' '.join(pod.scheduling_gates)}]"
