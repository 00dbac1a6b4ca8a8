"""The QoS strategies this koordlet runs, in one explicit table."""

from __future__ import annotations

from collections.abc import Callable

from koordlet.qosmanager.framework import Strategy
from koordlet.qosmanager.strategies.cpu_suppress import CPUSuppress
from koordlet.qosmanager.strategies.memory_evict import MemoryEvict


def strategies(interval: float = 1.0, memory_evict_cooldown: float = 4.0) -> list[Strategy]:
    """Every strategy, configured with upstream's intervals and cooldowns."""
    factories: list[Callable[[], Strategy]] = [
        lambda: CPUSuppress(interval),
        lambda: MemoryEvict(interval, memory_evict_cooldown),
    ]
    return [make() for make in factories]
