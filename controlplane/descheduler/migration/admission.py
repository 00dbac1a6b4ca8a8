"""Whether a pod may get a PodMigrationJob now: the Filter extension point of
MigrationController, shared by the controller and ``koord-descheduler explain``.

In order: the pod has no job yet (Pending, Running, or created and not yet seen); with
ReservationFirst its ``schedulerName`` is one of ``schedulerNames`` (only those schedulers
place Reservations); it passes the eviction gates (:mod:`.gates`); it is within the migration
limits counting every Pending job (:mod:`.arbitration`).

:func:`build_admission` wires gates, limits and object limiters over a :class:`MigrationView`
of the cluster: the controller's informers, or ``koord-descheduler explain``'s files.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from controlplane.descheduler.migration.arbitration import Limits, ObjectLimiters
from controlplane.descheduler.migration.args import MODE_RESERVATION_FIRST, MigrationControllerArgs
from controlplane.descheduler.migration.gates import GateContext, refusal
from controlplane.descheduler.migration.workloads import Workload, max_unavailable
from controlplane.descheduler.nodefit import fits_any
from koordinator.api.selectors import LabelSelector, SelectorError
from koordinator.kube.clock import Clock

__all__ = ["DEFAULT_SCHEDULER", "Admission", "MigrationView", "build_admission"]

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


@dataclass(frozen=True)
class MigrationView:
    """What admission reads of the cluster."""

    #: every job (those created and not yet seen included)
    jobs: Callable[[], Iterable[Obj]]
    #: the pod's jobs that are not over
    jobs_of_pod: Callable[[Obj], Sequence[Obj]]
    pod_of_job: Callable[[Obj], Obj | None]
    workload_pods: Callable[[Workload], Sequence[Obj]]
    expected_replicas: Callable[[Workload], int]
    nodes: Callable[[], Iterable[Obj]]
    pods_on_node: Callable[[str], Sequence[Obj]]
    #: a PriorityClass by name (None: unknown)
    priority_class: Callable[[str], Obj | None]


def build_admission(args: MigrationControllerArgs, view: MigrationView, clock: Clock) -> Admission:
    """Admission over ``view``; ValueError when ``args.nodeSelector`` is not a selector."""
    try:
        fit_nodes = LabelSelector.parse(args.node_selector) if args.node_selector else None
    except SelectorError as err:
        raise ValueError(f"MigrationControllerArgs.nodeSelector: {err}") from None

    def misfit(pod: Obj) -> str | None:
        nodes = [
            n
            for n in view.nodes()
            if fit_nodes is None or fit_nodes.matches((n.get("metadata") or {}).get("labels") or {})
        ]
        return None if fits_any(pod, nodes, view.pods_on_node) is not None else "fits no other node"

    def priority_of_class(name: str) -> int | None:
        value = (view.priority_class(name) or {}).get("value")
        return value if isinstance(value, int) else None

    limiters = ObjectLimiters(
        args.object_limiters,
        view.expected_replicas,
        lambda replicas: max_unavailable(replicas, args.max_migrating_per_workload),
        clock,
    )
    limits = Limits(args, view.jobs, view.pod_of_job, view.workload_pods, view.expected_replicas, limiters)
    gates = GateContext(misfit, view.expected_replicas, priority_of_class)
    return Admission(args, gates, limits, view.jobs_of_pod)
