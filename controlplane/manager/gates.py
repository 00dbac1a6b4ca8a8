"""What koord-manager does with each control-plane feature gate it accepts.

koord-manager, koord-scheduler and koord-descheduler share one gate registry, as upstream,
so the manager accepts every control-plane gate. Each one falls in exactly one group
(``tests/controlplane/manager/test_manager_gates.py`` checks it against the code):

* read by the manager's code: the gate changes what the manager does;
* :data:`NOT_BUILT`: a manager gate whose behaviour this release lacks -- enabling it is
  reported at start with what is missing, never silently ignored;
* :data:`OTHER_COMPONENTS`: a gate another component reads; setting it away from its
  default is reported at start as having no effect on the manager.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from koordinator.api.features import FeatureGates, report_unhonoured_gates

__all__ = ["NOT_BUILT", "OTHER_COMPONENTS", "report_gates"]

SCHEDULER = "koord-scheduler"
DESCHEDULER = "koord-descheduler"

#: manager gates whose behaviour this release does not have -> what is missing
NOT_BUILT: Mapping[str, str] = {}

#: gates of the shared registry that another component reads -> that component
OTHER_COMPONENTS: Mapping[str, str] = {
    # the ElasticQuota scheduling plug-in
    "ElasticQuotaIgnorePodOverhead": SCHEDULER,
    "ElasticQuotaIgnoreTerminatingPod": SCHEDULER,
    "ElasticQuotaImmediateIgnoreTerminatingPod": SCHEDULER,
    "DevicePluginAdaption": SCHEDULER,
    # informer transformers of the scheduler (ReplaceResourcesTransformer is read here too:
    # quota admission rewrites pods with it under ElasticQuotaEvaluationTransformPod)
    "PriorityTransformer": SCHEDULER,
    "PreemptionPolicyTransformer": SCHEDULER,
    # reservation, gang and framework gates
    "LazyReservationRestore": SCHEDULER,
    "OmitNodeLabelsForReservation": SCHEDULER,
    "SkipReservationFitsNode": SCHEDULER,
    "CleanExpiredReservationAllocated": SCHEDULER,
    "GangPendingPodsConditionPatch": SCHEDULER,
    "EnableInlineBatchSchedule": SCHEDULER,
    "EnableBatchScheduleNodeSnapshot": SCHEDULER,
    "ResizePod": SCHEDULER,
    "DynamicSchedulerCheck": SCHEDULER,
    "CrossSchedulerNomination": SCHEDULER,
    "SkipFilterWithNominatedPods": SCHEDULER,
    "SyncBarrier": SCHEDULER,
    "DisablePVCReservation": DESCHEDULER,
}


def report_gates(gates: FeatureGates, log: logging.Logger) -> None:
    """Log every enabled gate the manager cannot honour and every other component's gate that was set."""
    report_unhonoured_gates(gates, "koord-manager", NOT_BUILT, log, OTHER_COMPONENTS)
