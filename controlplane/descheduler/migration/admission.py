"""Whether a pod may get a PodMigrationJob now: the Filter extension point of
MigrationController, shared by the controller and ``koord-descheduler explain``.

In order: the pod has no job yet (Pending, Running, or created and not yet seen); with
ReservationFirst its ``schedulerName`` is one of ``schedulerNames`` (only those schedulers
place Reservations); it passes the eviction gates (:mod:`.gates`); it is within the migration
limits counting every Pending job (:mod:`.arbitration`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from controlplane.descheduler.migration.arbitration import Limits
from controlplane.descheduler.migration.args import MODE_RESERVATION_FIRST, MigrationControllerArgs
from controlplane.descheduler.migration.gates import GateContext, refusal

__all__ = ["DEFAULT_SCHEDULER", "Admission"]

Obj = Mapping[str, Any]
DEFAULT_SCHEDULER = "default-scheduler"


@dataclass
class Admission:
    args: MigrationControllerArgs
    gates: GateContext
    limits: Limits
    #: the pod's jobs that are not over
    jobs_of_pod: Callable[[Obj], Sequence[Obj]]

    def reason(self, pod: Obj) -> str | None:
        """Why the pod may not get a job now (None: it may)."""
        if self.jobs_of_pod(pod):
            return "pod already has a PodMigrationJob"
        if self.args.default_job_mode == MODE_RESERVATION_FIRST:
            scheduler = (pod.get("spec") or {}).get("schedulerName") or DEFAULT_SCHEDULER
            if scheduler not in self.args.scheduler_names:
                return f"pod's scheduler {scheduler} cannot place Reservations (schedulerNames)"
        why = refusal(pod, self.args, self.gates)
        if why is not None:
            return why
        return self.limits.refusal(pod, admitted_only=False)
