"""The QoS strategies this koordlet runs, in one explicit table."""

from __future__ import annotations

from collections.abc import Callable

from koordlet.qosmanager.framework import Strategy
from koordlet.qosmanager.strategies.blkio import BlkIOReconcile
from koordlet.qosmanager.strategies.cgroup_reconcile import CgroupReconcile
from koordlet.qosmanager.strategies.cpu_burst import CPUBurst
from koordlet.qosmanager.strategies.cpu_evict import CPUEvict
from koordlet.qosmanager.strategies.cpu_suppress import CPUSuppress
from koordlet.qosmanager.strategies.memory_evict import MemoryEvict
from koordlet.qosmanager.strategies.resctrl import MountResctrl, ResctrlReconcile
from koordlet.qosmanager.strategies.system_config import SystemConfig


def strategies(
    interval: float = 1.0,
    memory_evict_cooldown: float = 4.0,
    cpu_evict_cooldown: float = 20.0,
    *,
    mount_resctrl: MountResctrl | None = None,
) -> list[Strategy]:
    """Every strategy, configured with upstream's intervals and cooldowns; ``mount_resctrl``
    is given by the agent alone (``koordlet plan`` and tests never mount anything)."""
    factories: list[Callable[[], Strategy]] = [
        lambda: CPUSuppress(interval),
        lambda: CPUBurst(interval),
        lambda: CPUEvict(interval, cpu_evict_cooldown),
        lambda: MemoryEvict(interval, memory_evict_cooldown),
        lambda: ResctrlReconcile(interval, mount=mount_resctrl),
        lambda: BlkIOReconcile(interval),
        lambda: CgroupReconcile(interval),
        lambda: SystemConfig(interval),
    ]
    return [make() for make in factories]
