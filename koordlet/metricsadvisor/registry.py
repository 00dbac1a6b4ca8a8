"""The collectors this koordlet runs, in one explicit table (no import-time registration)."""

from __future__ import annotations

from koordlet.metricsadvisor.collectors.beresource import BEResourceCollector
from koordlet.metricsadvisor.collectors.coldmemoryresource import ColdPageCollector
from koordlet.metricsadvisor.collectors.cpi import CPICollector
from koordlet.metricsadvisor.collectors.gpu import GPUDeviceCollector
from koordlet.metricsadvisor.collectors.hostapplication import HostApplicationCollector
from koordlet.metricsadvisor.collectors.nodeinfo import NodeInfoCollector
from koordlet.metricsadvisor.collectors.noderesource import NodeResourceCollector
from koordlet.metricsadvisor.collectors.nodestorageinfo import NodeStorageInfoCollector
from koordlet.metricsadvisor.collectors.performance import PSICollector
from koordlet.metricsadvisor.collectors.podresource import PodResourceCollector
from koordlet.metricsadvisor.collectors.pressureprobe import PressureProbe
from koordlet.metricsadvisor.collectors.resctrl import ResctrlCollector
from koordlet.metricsadvisor.collectors.sysresource import SystemResourceCollector
from koordlet.metricsadvisor.framework import CollectorFactory

COLLECTORS: list[tuple[str, CollectorFactory]] = [
    (NodeInfoCollector.NAME, NodeInfoCollector),
    (NodeResourceCollector.NAME, NodeResourceCollector),
    (PodResourceCollector.NAME, PodResourceCollector),
    (HostApplicationCollector.NAME, HostApplicationCollector),
    (SystemResourceCollector.NAME, SystemResourceCollector),
    (BEResourceCollector.NAME, BEResourceCollector),
    (PSICollector.NAME, PSICollector),
    (GPUDeviceCollector.NAME, GPUDeviceCollector),
    (NodeStorageInfoCollector.NAME, NodeStorageInfoCollector),
    (CPICollector.NAME, CPICollector),
    (ResctrlCollector.NAME, ResctrlCollector),
    (ColdPageCollector.NAME, ColdPageCollector),
    # last: in a batch with the usage collectors, it sees their fresh collection
    (PressureProbe.NAME, PressureProbe),
]
