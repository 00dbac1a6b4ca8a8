"""What the koordlet does with each feature gate it accepts.

Every koordlet gate is either read by the agent's code (the collector, strategy or hook it
switches) or listed in :data:`NOT_BUILT` with what is missing; enabling one of those is
reported at start instead of being silently ignored.
``tests/koordlet/test_gates.py`` checks the split against the code.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from koordinator.api.features import FeatureGates, report_unhonoured_gates

__all__ = ["NOT_BUILT", "report_gates"]

#: koordlet gates whose behaviour this release does not have -> what is missing
NOT_BUILT: Mapping[str, str] = {
    "AuditEvents": "audit events are kept in memory only; no audit log is written",
    "AuditEventsHTTPHandler": "there is no HTTP endpoint for audit events",
    "Libpfm4": "there is no libpfm4 path for perf events",
    "HugePageReport": "huge pages are not reported in the NodeResourceTopology",
    "PodResourcesProxy": "there is no kubelet pod-resources proxy",
    "HamiCoreVGPUMonitor": "HAMi-core vGPU usage is not monitored",
    "RDMADeviceInject": "RDMA devices are not injected into containers",
    "CoreSched": "containers get no core-scheduling cookies",
    "TerwayQoS": "Terway's network QoS is not configured",
}


def report_gates(gates: FeatureGates, log: logging.Logger) -> None:
    """Log every enabled gate the koordlet cannot honour."""
    report_unhonoured_gates(gates, "koordlet", NOT_BUILT, log)
